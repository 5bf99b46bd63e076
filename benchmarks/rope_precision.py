"""RoPE cos/sin precision at long positions: posenc (float64 phases) vs HF's float32 formula.

Run ``python benchmarks/rope_precision.py`` (``--json`` for machine-readable output). For
positions sampled in ``[0, 2^k]`` (the two largest, ``2^k - 1`` and ``2^k``, always included)
it reports, against a float64 reference ``φ = m · base^(-2i/d)`` computed here with Python's
``math.pow`` for the frequencies:

* ``cos/sin err``: ``max over positions and channels of max(|cos - cos φ|, |sin - sin φ|)``;
* ``angle err``: ``max |wrap(atan2(sin, cos) - φ)|`` in radians, wrapped to ``[-π, π]``.

"HF" is ``transformers`` ``LlamaRotaryEmbedding``'s formula: ``cos(fp32(m) · fp32(θ))`` with
``θ = 1 / base ** (arange(0, d, 2) / d)`` in float32 (``tests/rotary/test_rope.py`` checks that
this equals HF's output bitwise). Both produce float32 tables, so ~6e-8 is the floor.
"""

from __future__ import annotations

import argparse
import json
import math
import platform

import torch

from posenc.rotary import rope_cos_sin, rope_inv_freq

__all__ = ["measure"]


def _errors(cos: torch.Tensor, sin: torch.Tensor, angle: torch.Tensor) -> tuple[float, float]:
    cos, sin = cos.double(), sin.double()
    table = max((cos - angle.cos()).abs().max().item(), (sin - angle.sin()).abs().max().item())
    diff = torch.atan2(sin, cos) - angle
    wrapped = torch.atan2(diff.sin(), diff.cos())  # to [-π, π]
    return table, wrapped.abs().max().item()


def measure(
    max_position: int, head_dim: int = 128, base: float = 10000.0, *, samples: int = 4096
) -> dict[str, float | int]:
    """Max cos/sin and angle errors of posenc and of HF's float32 formula up to ``max_position``.

    Returns a dict with ``max_position``, ``head_dim``, ``base`` and, for ``posenc`` and
    ``hf``, ``{name}_cos_sin_error`` and ``{name}_angle_error`` (radians).
    """
    generator = torch.Generator().manual_seed(0)
    positions = torch.cat(
        (
            torch.randint(0, max_position + 1, (samples,), generator=generator),
            torch.tensor([max_position - 1, max_position]),
        )
    )
    half = head_dim // 2
    theta = torch.tensor(
        [math.pow(base, -2 * i / head_dim) for i in range(half)], dtype=torch.float64
    )
    angle = positions.double()[:, None] * theta  # (samples + 2, half), float64 reference

    cos, sin = rope_cos_sin(positions, rope_inv_freq(head_dim, base))
    ours = _errors(cos[..., :half], sin[..., :half], angle)

    hf_inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    hf_phase = positions.float()[:, None] * hf_inv_freq
    hf = _errors(hf_phase.cos(), hf_phase.sin(), angle)
    return {
        "max_position": max_position,
        "head_dim": head_dim,
        "base": base,
        "posenc_cos_sin_error": ours[0],
        "posenc_angle_error": ours[1],
        "hf_cos_sin_error": hf[0],
        "hf_angle_error": hf[1],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--bases", type=float, nargs="+", default=[1e4, 5e5])
    parser.add_argument("--powers", type=int, nargs="+", default=[12, 16, 20, 24])
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--json", action="store_true", help="print JSON lines instead")
    args = parser.parse_args(argv)

    rows = [
        measure(2**k, args.head_dim, base, samples=args.samples)
        for base in args.bases
        for k in args.powers
    ]
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return
    print(f"# torch {torch.__version__}, {platform.machine()}, {platform.python_version()}")
    print(f"# head_dim {args.head_dim}; errors vs float64 reference; angle errors in radians")
    header = ("base", "max pos", "posenc cos/sin", "posenc angle", "HF cos/sin", "HF angle")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        cells = [
            f"{row['base']:g}",
            f"2^{int(math.log2(int(row['max_position'])))}",
            f"{row['posenc_cos_sin_error']:.1e}",
            f"{row['posenc_angle_error']:.1e}",
            f"{row['hf_cos_sin_error']:.1e}",
            f"{row['hf_angle_error']:.1e}",
        ]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
