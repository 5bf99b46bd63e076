"""Scalings of every family, for the tests that run over all of them."""

from __future__ import annotations

import torch

from posenc.rotary.scaling import (
    DynamicNTK,
    Linear,
    Llama3,
    LongRoPE,
    NTKAware,
    Proportional,
    Scaling,
    YaRN,
)


def factor_one_scalings(rotary_dim: int) -> list[Scaling]:
    ones = (1.0,) * (rotary_dim // 2)
    return [
        Linear(1.0),
        NTKAware(1.0),
        DynamicNTK(1.0, 4096),
        DynamicNTK(1.0, 4096, mode="fixed", target_length=1024),
        YaRN(1.0, 4096),
        YaRN(1.0, 4096, mscale=1.0, mscale_all_dim=0.5),
        YaRN(1.0, 4096, truncate=False),
        LongRoPE(ones, ones, 4096, factor=1.0),
        Llama3(1.0, 1.0, 4.0, 8192),
        Llama3(1.0, 1.0, 1.0, 8192),
        Proportional(1.0, 1.0),
    ]


def every_scaling(rotary_dim: int) -> list[tuple[Scaling, int | None]]:
    generator = torch.Generator().manual_seed(0)
    short = (1 + torch.rand(rotary_dim // 2, generator=generator)).tolist()
    long = (1 + 9 * torch.rand(rotary_dim // 2, generator=generator)).tolist()
    return [
        (Linear(4.0), None),
        (NTKAware(4.0), None),
        (DynamicNTK(4.0, 64), 200),
        (DynamicNTK(4.0, 64, mode="fixed", target_length=256), None),
        (YaRN(8.0, 64), None),
        (YaRN(8.0, 64, mscale=0.707, mscale_all_dim=1.0, truncate=False), None),
        (LongRoPE(short, long, 64, factor=8.0), 10),
        (LongRoPE(short, long, 64, factor=8.0), 100),
        (Llama3(8.0, 1.0, 4.0, 64), None),
        (Proportional(0.5, 2.0), None),
    ]
