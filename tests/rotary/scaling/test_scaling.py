"""RoPE scalings: parity with HF ``ROPE_INIT_FUNCTIONS`` over a grid, properties, validation
and the dict form."""

from __future__ import annotations

import functools
import itertools
import json
import math

import pytest
import torch

from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.rope import RotaryEmbedding, apply_rotary, rope_cos_sin
from posenc.rotary.scaling import (
    DynamicNTK,
    Linear,
    Llama3,
    LongRoPE,
    NTKAware,
    Proportional,
    Scaling,
    YaRN,
    scaling_from_dict,
    scaling_to_dict,
)

# (head_dim, partial_rotary_factor): full rotary at 64 and 128, partial rotary 96 * 0.5.
DIMS = [(64, 1.0), (128, 1.0), (96, 0.5)]
BASES = [1e4, 5e5]
FACTORS = [1.0, 2.0, 8.0, 32.0]
ORIGINALS = [2048, 4096]


@functools.cache
def _hf_config():
    transformers = pytest.importorskip("transformers")
    return transformers.LlamaConfig(hidden_size=128, num_attention_heads=2, head_dim=64)


def hf_init(
    rope_type: str,
    head_dim: int,
    params: dict,
    *,
    partial: float = 1.0,
    max_position_embeddings: int = 4096,
    seq_len: int | None = None,
) -> tuple[torch.Tensor, float]:
    """``ROPE_INIT_FUNCTIONS[rope_type]`` of a tiny LlamaConfig with these RoPE parameters.

    One config is built (about 45 ms) and its RoPE fields are set per case, which keeps the
    grid fast; every field the init functions read is set each time.
    """
    pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rope_parameters = {"rope_type": rope_type, **params}
    if partial != 1.0:
        rope_parameters["partial_rotary_factor"] = partial
    config = _hf_config()
    config.head_dim = head_dim
    config.max_position_embeddings = max_position_embeddings
    config.rope_parameters = rope_parameters
    return ROPE_INIT_FUNCTIONS[rope_type](config, seq_len=seq_len)


def assert_matches_hf(
    ours: Scaling,
    rotary_dim: int,
    base: float,
    hf: tuple[torch.Tensor, float],
    *,
    blend_factor: float | None = None,
    **kw,
) -> None:
    """Whole-tensor parity: inv_freq to 1e-6 relative, ``A`` exactly.

    ``blend_factor`` (YaRN, Llama-3): HF forms the blend weight ``r`` of ``θ/s`` and ``θ``
    (YaRN's ramp, Llama-3's smooth factor) in float32, and an error ``δr ≈ 1e-7`` moves a
    blended frequency by ``θ_i (1 - 1/s) δr``: up to ``s · 2^-24`` of its value (measured
    2.2e-6 at s = 32). Entries strictly inside the blend are therefore held to 1e-6 of
    ``θ_i (1 - 1/s)`` on top of 1e-6 of their value; all others to 1e-6 relative.
    """
    inv_freq, attention_factor = hf
    got = ours.inv_freq(rotary_dim, base, **kw)
    assert got.dtype == torch.float64 and got.device.type == "cpu"
    if blend_factor is None:
        torch.testing.assert_close(
            got.float(), inv_freq, rtol=1e-6, atol=0, msg=lambda m: f"{ours!r}: {m}"
        )
    else:
        theta = rope_inv_freq(rotary_dim, base)
        blended = (got < theta * (1 - 1e-9)) & (got > theta / blend_factor * (1 + 1e-9))
        slack = torch.where(blended, theta * (1 - 1 / blend_factor), 0.0)
        error = (got - inv_freq.double()).abs()
        bound = 1e-6 * (inv_freq.double().abs() + slack)
        assert (error <= bound).all(), f"{ours!r}: error/bound {(error / bound).max()}"
    # A is Python float arithmetic on both sides, in the same order: exactly equal.
    assert ours.attention_factor == attention_factor, ours


# ----------------------------------------------------------------- parity with HF, by type
# Head dims and bases are test parameters; the remaining axes loop inside each test (one
# pytest item per combination costs more than the comparison itself).


@pytest.mark.parametrize(("head_dim", "partial"), DIMS)
@pytest.mark.parametrize("base", BASES)
def test_linear_matches_hf(head_dim: int, partial: float, base: float) -> None:
    for factor in FACTORS:
        hf = hf_init("linear", head_dim, {"factor": factor, "rope_theta": base}, partial=partial)
        assert_matches_hf(Linear(factor), int(head_dim * partial), base, hf)


@pytest.mark.parametrize(("head_dim", "partial"), DIMS)
@pytest.mark.parametrize("base", BASES)
def test_yarn_matches_hf(head_dim: int, partial: float, base: float) -> None:
    betas = [(32.0, 1.0), (16.0, 2.0)]
    for factor, original, (beta_fast, beta_slow), truncate in itertools.product(
        FACTORS, ORIGINALS, betas, [True, False]
    ):
        params = {
            "factor": factor,
            "original_max_position_embeddings": original,
            "beta_fast": beta_fast,
            "beta_slow": beta_slow,
            "truncate": truncate,
            "rope_theta": base,
        }
        hf = hf_init("yarn", head_dim, params, partial=partial, max_position_embeddings=original)
        ours = YaRN(factor, original, beta_fast=beta_fast, beta_slow=beta_slow, truncate=truncate)
        assert_matches_hf(ours, int(head_dim * partial), base, hf, blend_factor=factor)


@pytest.mark.parametrize("factor", [1.0, 4.0, 40.0])
def test_yarn_attention_factor_matches_hf(factor: float) -> None:
    combos = [  # (mscale, mscale_all_dim, attention_factor override)
        (None, None, None),
        (1.0, 1.0, None),  # DeepSeek-V3: A = 1
        (0.707, 0.707, None),  # DeepSeek-V2
        (1.0, 0.5, None),
        (1.0, 0.0, None),  # 0 means unset: back to 0.1 ln s + 1
        (None, 1.0, None),
        (None, None, 0.5),  # HF key attention_factor
        (1.0, 1.0, 1.25),  # the override wins
    ]
    for mscale, mscale_all_dim, override in combos:
        params: dict = {"factor": factor, "original_max_position_embeddings": 4096}
        for key, value in (
            ("mscale", mscale),
            ("mscale_all_dim", mscale_all_dim),
            ("attention_factor", override),
        ):
            if value is not None:
                params[key] = value
        hf = hf_init("yarn", 64, {**params, "rope_theta": 1e4})
        ours = YaRN(
            factor,
            4096,
            mscale=mscale,
            mscale_all_dim=mscale_all_dim,
            attention_factor_override=override,
        )
        assert_matches_hf(ours, 64, 1e4, hf, blend_factor=factor)


def test_yarn_equal_betas_hit_the_singular_ramp_guard_like_hf() -> None:
    # beta_fast == beta_slow with truncate=False gives lo == hi: HF adds 0.001 to hi.
    params = {"factor": 8.0, "original_max_position_embeddings": 4096, "truncate": False}
    hf = hf_init("yarn", 64, {**params, "beta_fast": 4.0, "beta_slow": 4.0, "rope_theta": 1e4})
    ours = YaRN(8.0, 4096, beta_fast=4.0, beta_slow=4.0, truncate=False)
    low, high = ours.correction_range(64, 1e4)
    assert low == high
    assert_matches_hf(ours, 64, 1e4, hf, blend_factor=8.0)


@pytest.mark.parametrize(("head_dim", "partial"), [(64, 1.0), (96, 1.0), (128, 0.5)])
@pytest.mark.parametrize("base", BASES)
def test_longrope_matches_hf_below_and_above_the_switch(
    head_dim: int, partial: float, base: float
) -> None:
    rotary_dim = int(head_dim * partial)
    generator = torch.Generator().manual_seed(rotary_dim)
    short = (1 + torch.rand(rotary_dim // 2, generator=generator)).tolist()
    long = (1 + 30 * torch.rand(rotary_dim // 2, generator=generator)).tolist()
    for factor, original in itertools.product([None, 1.0, 2.0, 32.0], ORIGINALS):
        max_pos = 32 * original
        params = {
            "short_factor": short,
            "long_factor": long,
            "original_max_position_embeddings": original,
            "rope_theta": base,
        }
        if factor is not None:
            params["factor"] = factor
        ours = LongRoPE(short, long, original, factor=factor, max_position_embeddings=max_pos)
        for length in (None, original, original + 1, 4 * original):
            hf = hf_init(
                "longrope",
                head_dim,
                params,
                partial=partial,
                max_position_embeddings=max_pos,
                seq_len=length,
            )
            assert_matches_hf(ours, rotary_dim, base, hf, seq_len=length)
            expected = long if length is not None and length > original else short
            torch.testing.assert_close(
                ours.inv_freq(rotary_dim, base, seq_len=length),
                rope_inv_freq(rotary_dim, base) / torch.tensor(expected, dtype=torch.float64),
            )


@pytest.mark.parametrize(("head_dim", "partial"), DIMS)
@pytest.mark.parametrize("base", BASES)
def test_llama3_matches_hf(head_dim: int, partial: float, base: float) -> None:
    # (1, 1) and (2, 2): low == high, Llama-4 Scout's empty smoothing band.
    freq_factors = [(1.0, 4.0), (1.0, 1.0), (2.0, 2.0), (0.5, 8.0)]
    for factor, original, (low, high) in itertools.product(FACTORS, [2048, 8192], freq_factors):
        params = {
            "factor": factor,
            "low_freq_factor": low,
            "high_freq_factor": high,
            "original_max_position_embeddings": original,
            "rope_theta": base,
        }
        hf = hf_init("llama3", head_dim, params, partial=partial)
        ours = Llama3(factor, low, high, original)
        assert_matches_hf(ours, int(head_dim * partial), base, hf, blend_factor=factor)


@pytest.mark.parametrize(("head_dim", "partial"), DIMS)
@pytest.mark.parametrize("base", BASES)
def test_dynamic_matches_hf(head_dim: int, partial: float, base: float) -> None:
    # seq_len below, at and above max_position_embeddings = 4096.
    for factor, seq_len in itertools.product(FACTORS, [None, 1024, 4095, 4096, 4097, 12288]):
        params = {"factor": factor, "rope_theta": base}
        hf = hf_init("dynamic", head_dim, params, partial=partial, seq_len=seq_len)
        ours = DynamicNTK(factor, max_position_embeddings=4096)
        assert_matches_hf(ours, int(head_dim * partial), base, hf, seq_len=seq_len)


@pytest.mark.parametrize("head_dim", [64, 128, 96])
@pytest.mark.parametrize("base", BASES)
def test_proportional_matches_hf(head_dim: int, base: float) -> None:
    for partial, factor in itertools.product([0.25, 0.5, 1.0], [1.0, 2.0]):
        params = {"factor": factor, "partial_rotary_factor": partial, "rope_theta": base}
        hf = hf_init("proportional", head_dim, params)
        ours = Proportional(partial, factor)
        assert_matches_hf(ours, head_dim, base, hf)
        got = ours.inv_freq(head_dim, base)
        assert (got[int(partial * head_dim // 2) :] == 0).all()


@pytest.mark.parametrize("dim", [16, 64, 128])
@pytest.mark.parametrize("factor", [1.0, 2.0, 8.0])
def test_ntk_aware_matches_rotary_embedding_torch(dim: int, factor: float) -> None:
    rotary_embedding_torch = pytest.importorskip("rotary_embedding_torch")
    reference = rotary_embedding_torch.RotaryEmbedding(dim, theta_rescale_factor=factor)
    torch.testing.assert_close(
        NTKAware(factor).inv_freq(dim, 1e4).float(), reference.freqs.detach(), rtol=1e-6, atol=0
    )


def test_ntk_aware_keeps_the_highest_and_divides_the_lowest_frequency_by_s() -> None:
    # b' = b s^(d/(d-2)) gives θ'_{d/2-1} = θ_{d/2-1} / s exactly (the NTK-aware design).
    got, plain = NTKAware(8.0).inv_freq(64, 1e4), rope_inv_freq(64, 1e4)
    torch.testing.assert_close(got[[0, -1]], plain[[0, -1]] / torch.tensor([1.0, 8.0]))


# ---------------------------------------------------------------------------- properties


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


def test_factor_one_yarn_is_what_hf_gives() -> None:
    # HF with factor 1: interpolation == extrapolation, so plain frequencies and A = 1.0.
    inv_freq, attention_factor = hf_init(
        "yarn", 64, {"factor": 1.0, "original_max_position_embeddings": 4096, "rope_theta": 1e4}
    )
    torch.testing.assert_close(inv_freq, rope_inv_freq(64, 1e4).float(), rtol=1e-6, atol=0)
    assert attention_factor == 1.0


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


# ---------------------------------------------------------------------------- validation


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


@pytest.mark.parametrize(
    ("d", "name"),
    [
        ({"factor": 2.0}, "type"),
        ({"type": "ntk_by_parts", "factor": 2.0}, "ntk_by_parts"),
        ({"type": "linear"}, "factor"),
        ({"type": "linear", "factor": 2.0, "scale": 3}, "scale"),
        ({"type": "yarn", "factor": 2.0, "attention_factor": 1.0}, "attention_factor"),
        ({"type": "yarn", "factor": 2.0}, "original_max_position_embeddings"),
        ({"type": "default", "factor": 2.0}, "factor"),
        ({"type": "linear", "factor": 0}, "factor"),
        (["linear", 2.0], "mapping"),
    ],
)
def test_scaling_from_dict_rejects(d, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        scaling_from_dict(d)


def test_scaling_from_dict_default_is_plain_rope() -> None:
    assert scaling_from_dict(None) is None
    assert scaling_from_dict({"type": "default"}) is None
    assert scaling_to_dict(None) == {"type": "default"}


@pytest.mark.parametrize("scaling", [s for s, _ in every_scaling(8)], ids=repr)
def test_dict_round_trip(scaling: Scaling) -> None:
    as_dict = scaling_to_dict(scaling)
    assert as_dict["type"] == scaling.type_name
    assert scaling_from_dict(as_dict) == scaling
    assert scaling_from_dict(json.loads(json.dumps(as_dict))) == scaling  # JSON-safe


def test_dict_form_normalises_numbers_and_lists() -> None:
    scaling = scaling_from_dict(
        {
            "type": "longrope",
            "short_factor": [1, 2],
            "long_factor": [3, 4],
            "factor": 2,
            "original_max_position_embeddings": 64,
        }
    )
    assert scaling == LongRoPE((1.0, 2.0), (3.0, 4.0), 64, factor=2.0)
    assert hash(scaling) == hash(LongRoPE((1.0, 2.0), (3.0, 4.0), 64, factor=2.0))
    assert "2 values" in repr(scaling)


def test_every_type_is_covered_by_the_grid() -> None:
    covered = {type(s).type_name for s, _ in every_scaling(8)}
    names = {"linear", "ntk", "dynamic", "yarn", "longrope", "llama3", "proportional"}
    assert covered == names
    for combo in itertools.product([Linear(2.0)], [None]):
        assert isinstance(combo[0], Scaling)
    assert math.isclose(YaRN(4.0, 4096).attention_factor, 0.1 * math.log(4.0) + 1.0)


def test_registry_converts_the_dict_form_once() -> None:
    from posenc.encoding.registry import ModelDims, build_encoding

    dims = ModelDims(dim=64, num_heads=4)
    spec = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}
    rope = build_encoding("rope", dims, {"scaling": spec})
    assert isinstance(rope, RotaryEmbedding) and rope.scaling == YaRN(4.0, 128)
    assert rope.attention_factor == YaRN(4.0, 128).attention_factor
    assert build_encoding("rope", dims, scaling=Linear(2.0)).scaling == Linear(2.0)
    assert build_encoding("rope", dims, scaling=None).scaling is None
    with pytest.raises(ValueError, match="beta"):
        build_encoding("rope", dims, {"scaling": {**spec, "beta": 3}})


# Every test here runs on the pure-torch rotation and on the fast kernels.
pytestmark = pytest.mark.usefixtures("every_rotary_impl")


def test_scaling_types_is_the_table_the_conversion_reads() -> None:
    from posenc.rotary.scaling import Scaling, scaling_from_dict, scaling_types

    types = scaling_types()
    assert {"linear", "dynamic", "yarn", "llama3", "longrope"} <= set(types)
    for name, cls in types.items():
        assert issubclass(cls, Scaling) and cls.type_name == name
    types.clear()  # a copy: the conversion's table is untouched
    assert isinstance(scaling_from_dict({"type": "linear", "factor": 2.0}), Scaling)


def test_yarn_frequencies_ignore_a_default_meta_device() -> None:
    # The frequencies are constants built in float64 on the CPU: a model built under
    # `with torch.device("meta")` must get the same ones (the ramp once took the default
    # device and mixed a meta index into CPU frequencies).
    scaling = YaRN(factor=4.0, original_max_position_embeddings=64)
    expected = scaling.inv_freq(32, 10000.0)
    with torch.device("meta"):
        got = scaling.inv_freq(32, 10000.0)
    assert got.device.type == "cpu"
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
