"""What CARoPE (input-dependent phases, :class:`~posenc.rotary.ContextAwareRoPE`) costs in an
attention layer against RoPE.

Run: ``python benchmarks/carope.py`` (``--json`` for machine-readable output).

One :class:`~posenc.attention.Attention` layer, dim 256, 4 heads (head_dim 64), batch 1,
causal, one thread; candidates interleaved in rounds (:func:`posenc.bench.compare`), medians
of per-round ratios to ``rope`` (the same layer with :class:`~posenc.rotary.RotaryEmbedding`):

- ``carope``: forward without gradients (the phases' float64 cumulative sum over the tokens,
  then q and k rotated by them);
- ``carope_train`` against ``rope_train``: forward and backward.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import torch

from posenc.attention import Attention
from posenc.bench import compare, machine
from posenc.rotary import ContextAwareRoPE, RotaryEmbedding


def measure(seq: int, *, rounds: int = 7) -> dict[str, float]:
    """Ratios to ``rope`` (forward) and to ``rope_train`` (forward and backward) at ``seq``."""
    torch.manual_seed(0)
    x = torch.randn(1, seq, 256)
    rope = Attention(256, 4, pos=RotaryEmbedding(64))
    carope = Attention(256, 4, pos=ContextAwareRoPE(256, 4, 64))

    def step(layer: Attention) -> Callable[[], None]:
        def run() -> None:
            layer(x).sum().backward()
            layer.zero_grad(set_to_none=True)

        return run

    with torch.no_grad():
        forward = compare(
            {"rope": lambda: rope(x), "carope": lambda: carope(x)}, "rope", rounds=rounds
        )
    train = compare(
        {"rope_train": step(rope), "carope_train": step(carope)}, "rope_train", rounds=rounds
    )
    return {t.name: t.ratio for t in (*forward, *train) if t.name.startswith("carope")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = {seq: measure(seq, rounds=args.rounds) for seq in args.lengths}
    if args.json:
        print(json.dumps({"machine": machine(), "ratios": results}, indent=2))
        return
    print(machine())
    for seq, ratios in results.items():
        print(f"{seq} tokens: " + ", ".join(f"{name} {r:.2f}×" for name, r in ratios.items()))


if __name__ == "__main__":
    main()
