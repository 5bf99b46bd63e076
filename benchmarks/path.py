"""PaTH's blockwise attention against SDPA, FoX and its own block sizes (one thread):
``python benchmarks/path.py [--lengths 512 1024] [--rounds 5]``.

Each candidate is one ``Attention`` layer (dim 256, 4 heads of 64, float32) over one
sequence, forward only or forward + backward; the baseline is the same layer without an
encoding (PyTorch's causal SDPA). Ratios are medians of per-round ratios
(:func:`posenc.bench.compare`).
"""

from __future__ import annotations

import argparse
import json

import torch

from posenc.attention import Attention
from posenc.bench import compare, machine
from posenc.token_state import ForgettingGate, PathTransform

DIM, HEADS = 256, 4


def layers() -> dict[str, Attention]:
    torch.manual_seed(0)
    return {
        "sdpa (no encoding)": Attention(DIM, HEADS),
        "fox (chunked)": Attention(DIM, HEADS, pos=ForgettingGate(DIM, HEADS), backend="chunked"),
        **{
            f"path, block {block}": Attention(
                DIM, HEADS, pos=PathTransform(DIM, HEADS, block_size=block)
            )
            for block in (32, 64, 128)
        },
    }


def run(lengths: list[int], rounds: int) -> list[dict[str, object]]:
    torch.set_num_threads(1)
    rows: list[dict[str, object]] = []
    candidates = layers()
    for seq in lengths:
        x = torch.randn(1, seq, DIM)
        for mode in ("forward", "forward+backward"):

            def call(attn: Attention, mode: str = mode, x: torch.Tensor = x) -> None:
                if mode == "forward":
                    with torch.no_grad():
                        attn(x)
                else:
                    attn(x).sum().backward()

            timings = compare(
                {name: (lambda a=a: call(a)) for name, a in candidates.items()},
                "sdpa (no encoding)",
                rounds=rounds,
            )
            for timing in timings:
                rows.append({"seq": seq, "mode": mode, **timing.as_dict()})
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lengths", type=int, nargs="*", default=[512, 1024, 2048])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = run(args.lengths, args.rounds)
    if args.json:
        print(json.dumps({"machine": machine(), "rows": rows}, indent=2, default=str))
    else:
        print(machine())
        for row in rows:
            print(
                f"{row['seq']:>6} {row['mode']:<17} {row['name']:<20} "
                f"{row['seconds'] * 1e3:9.1f} ms  {row['ratio']:6.2f}x"
            )
