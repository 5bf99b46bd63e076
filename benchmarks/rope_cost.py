"""What float64 phases cost: posenc's RoPE against the float32-phase formula, side by side.

Run: ``python benchmarks/rope_cost.py`` (add ``--json`` for machine-readable output).

For q and k of shape (batch, heads, seq, head_dim), times in one process, interleaved:
- ``copy``: a preallocated ``copy_`` of q and k (the memory floor of any rotation);
- ``fp32 phases``: HF's recipe, cos/sin from float32 position x float32 inv_freq, then
  :func:`posenc.rotary.apply_rotary`;
- ``posenc``: :class:`posenc.rotary.RotaryEmbedding` (float64 phases, cos/sin rounded once).
The ratio ``posenc / fp32 phases`` is the cost of the exact phases.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from posenc.rotary import RotaryEmbedding, apply_rotary, rope_inv_freq


def _best(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(
    batch: int = 1, heads: int = 16, seq: int = 4096, head_dim: int = 128, repeats: int = 20
) -> dict[str, float]:
    q = torch.randn(batch, heads, seq, head_dim)
    k = torch.randn(batch, heads, seq, head_dim)
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    positions = torch.arange(seq)
    rope = RotaryEmbedding(head_dim)
    inv_freq32 = rope_inv_freq(head_dim).float()

    def copy() -> None:
        q_out.copy_(q)
        k_out.copy_(k)

    def fp32_phases() -> None:
        freqs = positions.float()[:, None] * inv_freq32
        emb = torch.cat([freqs, freqs], dim=-1)
        cos, sin = emb.cos(), emb.sin()
        apply_rotary(q, cos, sin)
        apply_rotary(k, cos, sin)

    def posenc() -> None:
        rope(q, k, positions, positions)

    result = {"copy": 0.0, "fp32 phases": 0.0, "posenc": 0.0}
    for _ in range(3):  # interleave so that drift hits all three alike
        for name, fn in (("copy", copy), ("fp32 phases", fp32_phases), ("posenc", posenc)):
            elapsed = _best(fn, repeats)
            result[name] = elapsed if not result[name] else min(result[name], elapsed)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for seq in (1024, 4096, 16384):
        times = measure(seq=seq)
        rows.append(
            {
                "seq": seq,
                **{k: v * 1e3 for k, v in times.items()},
                "posenc/fp32": times["posenc"] / times["fp32 phases"],
                "posenc/copy": times["posenc"] / times["copy"],
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        f"# torch {torch.__version__}, {platform.machine()}, {torch.get_num_threads()} threads;"
        " q and k (1, 16, seq, 128) float32; best of 20, ms"
    )
    print("| seq | copy | fp32 phases | posenc | posenc / fp32 phases | posenc / copy |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['seq']} | {r['copy']:.2f} | {r['fp32 phases']:.2f} | {r['posenc']:.2f} "
            f"| {r['posenc/fp32']:.2f} | {r['posenc/copy']:.1f} |"
        )


if __name__ == "__main__":
    main()
