"""Every scaling: properties (factor one is plain RoPE, scores depend on relative position
only) and validation (``ValueError`` naming the field)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.functional import apply_rotary, rope_cos_sin
from posenc.rotary.rope import RotaryEmbedding
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
from tests.rotary.scaling.cases import every_scaling, factor_one_scalings
from tests.rotary.scaling.hf_reference import BASES


@pytest.mark.parametrize("rotary_dim", [8, 64])
@pytest.mark.parametrize("base", BASES)
def test_factor_one_equals_plain_rope(rotary_dim: int, base: float) -> None:
    plain = rope_inv_freq(rotary_dim, base)
    for scaling in factor_one_scalings(rotary_dim):
        # seq_len within max_position_embeddings: DynamicNTK "hf" with s = 1 still rescales
        # beyond it (b' = b (L/L_max)^(d/(d-2)), HF's formula), so that is not plain RoPE.
        for seq_len in (None, 100, 4096):
            torch.testing.assert_close(scaling.inv_freq(rotary_dim, base, seq_len=seq_len), plain)
        assert scaling.attention_factor == 1.0, scaling


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_scores_depend_only_on_relative_position_under_every_scaling(layout: str) -> None:
    rotary_dim = 16
    q = torch.randn(1, 1, 1, rotary_dim, dtype=torch.float64)
    k = torch.randn(1, 1, 1, rotary_dim, dtype=torch.float64)

    def score(scaling: Scaling, seq_len: int | None, m: int, n: int) -> torch.Tensor:
        inv_freq = scaling.inv_freq(rotary_dim, 500.0, seq_len=seq_len)
        rotated = []
        for x, position in ((q, m), (k, n)):
            cos, sin = rope_cos_sin(
                torch.tensor([position]),
                inv_freq,
                layout=layout,
                dtype=torch.float64,
                attention_factor=scaling.attention_factor,
            )
            rotated.append(apply_rotary(x, cos, sin, layout=layout))
        return (rotated[0] * rotated[1]).sum()

    for scaling, seq_len in every_scaling(rotary_dim):
        for m, n, shift in ((7, 3, 50), (3, 7, 1000), (90, 0, 12345)):
            torch.testing.assert_close(
                score(scaling, seq_len, m, n), score(scaling, seq_len, m + shift, n + shift)
            )


@pytest.mark.parametrize("scaling", [s for s, _ in every_scaling(16)], ids=repr)
def test_module_scores_depend_only_on_relative_position(scaling: Scaling) -> None:
    rope = RotaryEmbedding(16, base=500.0, scaling=scaling)
    q, k = (
        torch.randn(2, 3, 5, 16, dtype=torch.float64),
        torch.randn(2, 3, 5, 16, dtype=torch.float64),
    )
    # Positions stay below every switch point so a length-dependent state stays put.
    pos = torch.tensor([0, 1, 2, 3, 4])
    q1, k1 = rope(q, k, pos, pos)
    q2, k2 = rope(q, k, pos + 3, pos + 3)
    torch.testing.assert_close(q1 @ k1.transpose(-1, -2), q2 @ k2.transpose(-1, -2))
    assert rope.attention_factor == scaling.attention_factor


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda: Linear(0.0), "factor"),
        (lambda: Linear(-2.0), "factor"),
        (lambda: Linear(float("nan")), "factor"),
        (lambda: NTKAware(0.5), "factor"),
        (lambda: DynamicNTK(0.5, 4096), "factor"),
        (lambda: DynamicNTK(2.0, 0), "max_position_embeddings"),
        (lambda: DynamicNTK(2.0, 4096, mode="vllm"), "mode"),  # type: ignore[arg-type]
        (lambda: DynamicNTK(2.0, 4096, mode="fixed"), "target_length"),
        (lambda: DynamicNTK(2.0, 4096, mode="fixed", target_length=0), "target_length"),
        (lambda: DynamicNTK(2.0, 4096, target_length=8192), "target_length"),
        (lambda: YaRN(0.5, 4096), "factor"),
        (lambda: YaRN(2.0, 0), "original_max_position_embeddings"),
        (lambda: YaRN(2.0, 4096, beta_fast=0.0), "beta_fast"),
        (lambda: YaRN(2.0, 4096, beta_slow=0.0), "beta_slow"),
        (lambda: YaRN(2.0, 4096, beta_fast=1.0, beta_slow=32.0), "beta_fast"),
        (lambda: YaRN(2.0, 4096, mscale=-1.0), "mscale"),
        (lambda: YaRN(2.0, 4096, mscale_all_dim=float("inf")), "mscale_all_dim"),
        (lambda: YaRN(2.0, 4096, attention_factor_override=0.0), "attention_factor_override"),
        (lambda: YaRN(2.0, 4096, truncate=1), "truncate"),  # type: ignore[arg-type]
        (lambda: LongRoPE((1.0,), (1.0, 2.0), 4096, factor=2.0), "long_factor"),
        (lambda: LongRoPE((), (), 4096, factor=2.0), "short_factor"),
        (lambda: LongRoPE((1.0, -1.0), (1.0, 1.0), 4096, factor=2.0), "short_factor"),
        (lambda: LongRoPE((1.0,), (1.0,), 4096), "factor"),
        (lambda: LongRoPE((1.0,), (1.0,), 1, factor=2.0), "original_max_position_embeddings"),
        (lambda: LongRoPE((1.0,), (1.0,), 4096, factor=0.5), "factor"),
        (
            lambda: LongRoPE((1.0,), (1.0,), 4096, max_position_embeddings=1024),
            "max_position_embeddings",
        ),
        (lambda: Llama3(0.0, 1.0, 4.0, 8192), "factor"),
        (lambda: Llama3(8.0, 0.0, 4.0, 8192), "low_freq_factor"),
        (lambda: Llama3(8.0, 4.0, 1.0, 8192), "low_freq_factor"),
        (lambda: Llama3(8.0, 1.0, 4.0, 0), "original_max_position_embeddings"),
        (lambda: Proportional(0.0), "partial_rotary_factor"),
        (lambda: Proportional(1.5), "partial_rotary_factor"),
        (lambda: Proportional(0.5, 0.0), "factor"),
    ],
)
def test_constructors_reject(build, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        build()


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: LongRoPE((1.0,) * 4, (1.0,) * 4, 64, factor=2.0).inv_freq(16, 1e4), "rotary_dim"),
        (lambda: NTKAware(2.0).inv_freq(2, 1e4), "rotary_dim"),
        (lambda: DynamicNTK(2.0, 16).inv_freq(2, 1e4, seq_len=32), "rotary_dim"),
        (lambda: Linear(2.0).inv_freq(7, 1e4), "rotary_dim"),
        (lambda: Linear(2.0).inv_freq(8, -1.0), "base"),
        (lambda: YaRN(2.0, 64).inv_freq(8, 1.0), "base"),
        (lambda: DynamicNTK(2.0, 16).inv_freq(8, 1e4, seq_len=0), "seq_len"),
        (lambda: RotaryEmbedding(16, rotary_dim=8, scaling=Proportional(0.5)), "rotary_dim"),
        (lambda: RotaryEmbedding(16, scaling={"type": "linear"}), "scaling"),  # type: ignore[arg-type]
        (
            lambda: RotaryEmbedding(16, scaling=LongRoPE((1.0,), (1.0,), 64, factor=2.0)),
            "rotary_dim",
        ),
    ],
)
def test_calls_reject(call, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        call()


def test_every_type_is_covered_by_the_grid() -> None:
    covered = {type(s).type_name for s, _ in every_scaling(8)}
    names = {"linear", "ntk", "dynamic", "yarn", "longrope", "llama3", "proportional"}
    assert covered == names
    for combo in itertools.product([Linear(2.0)], [None]):
        assert isinstance(combo[0], Scaling)
    assert math.isclose(YaRN(4.0, 4096).attention_factor, 0.1 * math.log(4.0) + 1.0)


# Every test here runs on the pure-torch rotation and on the fast kernels.
pytestmark = pytest.mark.usefixtures("every_rotary_impl")
