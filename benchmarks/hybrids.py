"""What the hybrids' layers cost against one softmax attention layer, side by side.

Run: ``python benchmarks/hybrids.py`` (``--json`` for machine-readable output).

One layer, dim 256, 4 heads (head_dim 64), batch 1, forward without gradients, one thread;
candidates interleaved in rounds (:func:`posenc.bench.compare`), medians of per-round ratios
to ``softmax`` (an :class:`~posenc.attention.Attention` with RoPE, full causal):

- ``softmax_window``: the same layer with ``window=256`` (the banded path);
- ``delta_layer``: a :class:`~posenc.attention.GatedDeltaNet` (projections and norm included);
- ``rule_chunked``: :func:`~posenc.attention.gated_delta_rule` alone (C = 64);
- ``rule_recurrent``: :func:`~posenc.attention.gated_delta_rule_recurrent` alone (at the
  shortest length only: it is a reference, token by token).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import torch
import torch.nn.functional as F

from posenc.attention import (
    Attention,
    GatedDeltaNet,
    gated_delta_rule,
    gated_delta_rule_recurrent,
)
from posenc.bench import compare
from posenc.rotary import RotaryEmbedding


def measure(seq: int, *, rounds: int = 5, recurrent: bool = False) -> dict[str, float]:
    """Ratios to ``softmax`` at ``seq`` tokens (see the module docstring)."""
    torch.manual_seed(0)
    x = torch.randn(1, seq, 256)
    full = Attention(256, 4, pos=RotaryEmbedding(64)).eval()
    windowed = Attention(256, 4, pos=RotaryEmbedding(64), window=256).eval()
    windowed.load_state_dict(full.state_dict())
    delta = GatedDeltaNet(256, 4).eval()
    q, k, v = (torch.randn(1, 4, seq, 64) for _ in range(3))
    k = F.normalize(k, dim=-1)
    log_alpha, beta = -torch.rand(1, 4, seq), torch.rand(1, 4, seq)
    candidates: dict[str, Callable[[], object]] = {
        "softmax": lambda: full(x),
        "softmax_window": lambda: windowed(x),
        "delta_layer": lambda: delta(x),
        "rule_chunked": lambda: gated_delta_rule(q, k, v, log_alpha, beta),
    }
    if recurrent:
        candidates["rule_recurrent"] = lambda: gated_delta_rule_recurrent(q, k, v, log_alpha, beta)
    with torch.no_grad():
        return {t.name: t.ratio for t in compare(candidates, "softmax", rounds=rounds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = {
        seq: measure(seq, rounds=args.rounds, recurrent=seq == min(args.lengths))
        for seq in args.lengths
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for seq, ratios in results.items():
        print(f"{seq} tokens: " + ", ".join(f"{name} {r:.2f}×" for name, r in ratios.items()))


if __name__ == "__main__":
    main()
