"""Length-dependent RoPE state: HF's dynamic-NTK grow-and-reset and LongRoPE's switch,
step by step against HF ``LlamaRotaryEmbedding``, with the exact count of rebuilds; the
state objects the scalings make, rule by rule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
from torch import Tensor

from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.rope import RotaryEmbedding
from posenc.rotary.scaling import DynamicNTK, Linear, LongRoPE, Scaling, YaRN
from posenc.rotary.scaling.length import (
    FollowLength,
    GrowAndReset,
    LengthState,
    LengthSwitch,
    sequence_length,
)

HEAD_DIM = 16
MAX_POS = 16  # L_max of DynamicNTK, L0 of LongRoPE


def hf_rotary(rope_parameters: dict):
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = transformers.LlamaConfig(
        hidden_size=2 * HEAD_DIM,
        num_attention_heads=2,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POS,
        rope_parameters=rope_parameters,
    )
    return LlamaRotaryEmbedding(config)


def decode_positions(seq_len: int, prefill: bool) -> torch.Tensor:
    """HF decoding: the whole prompt at prefill, else only the newest position."""
    return torch.arange(seq_len) if prefill else torch.tensor([seq_len - 1])


def step(ours: RotaryEmbedding, hf, seq_len: int, prefill: bool) -> None:
    """One forward on both sides, then compare frequencies, tables and rotated q and k."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    positions = decode_positions(seq_len, prefill)
    q = torch.randn(1, 2, positions.numel(), HEAD_DIM)
    k = torch.randn(1, 2, seq_len, HEAD_DIM)  # the whole cache, as if re-rotated
    hf_cos, hf_sin = hf(q, positions[None])  # (1, seq, head_dim); updates HF's state
    hf_q, _ = apply_rotary_pos_emb(q, q, hf_cos, hf_sin)
    # Ours: q at its positions, k over the whole cache: seq_len = max(q_pos, k_pos) + 1.
    q_rot, _ = ours(q, k, positions, torch.arange(seq_len))

    torch.testing.assert_close(ours.inv_freq().float(), hf.inv_freq, rtol=1e-6, atol=0)
    assert ours.attention_factor == hf.attention_scaling
    cos, sin = ours.cos_sin(positions)  # same seq_len: no further change of state
    torch.testing.assert_close(cos, hf_cos[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(sin, hf_sin[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(q_rot, hf_q, rtol=1e-5, atol=1e-5)


# Lengths that cross L_max = 16 and come back, with prefill (True) or one decode step.
DYNAMIC_SEQUENCE = [
    (8, True),
    (12, True),
    (16, False),
    (17, False),  # grow 1
    (20, False),  # grow 2
    (20, False),
    (25, True),  # grow 3
    (10, True),  # reset 4: shorter than L_max after longer
    (30, True),  # grow 5
    (16, True),  # not < L_max: HF keeps the frequencies of 30
    (12, True),  # reset 6
    (14, False),
]


def test_dynamic_ntk_reproduces_hf_grow_and_reset() -> None:
    hf = hf_rotary({"rope_type": "dynamic", "factor": 4.0, "rope_theta": 10000.0})
    ours = RotaryEmbedding(HEAD_DIM, scaling=DynamicNTK(4.0, MAX_POS))
    assert ours.depends_on_length and ours.max_seq_len_cached == hf.max_seq_len_cached
    expected_rebuilds = [0, 0, 0, 1, 2, 2, 3, 4, 5, 5, 6, 6]
    for (seq_len, prefill), rebuilds in zip(DYNAMIC_SEQUENCE, expected_rebuilds, strict=True):
        step(ours, hf, seq_len, prefill)
        assert ours.max_seq_len_cached == hf.max_seq_len_cached, seq_len
        assert ours.rebuilds == rebuilds, seq_len
    # After the last reset the frequencies are plain RoPE again.
    torch.testing.assert_close(ours.inv_freq(), rope_inv_freq(HEAD_DIM))


def test_dynamic_ntk_rebuilds_only_when_the_length_passes_the_cached_one() -> None:
    ours = RotaryEmbedding(HEAD_DIM, scaling=DynamicNTK(2.0, MAX_POS))
    x = torch.randn(1, 1, 1, HEAD_DIM)
    for position in range(40):  # token by token: grows at 17, 18, ..., 40
        ours.rotate(x, torch.tensor([position]))
    assert (ours.rebuilds, ours.max_seq_len_cached) == (40 - MAX_POS, 40)
    for position in range(MAX_POS, 40):  # never beyond the cache, never below L_max
        ours.rotate(x, torch.tensor([position]))
    assert ours.rebuilds == 40 - MAX_POS
    torch.testing.assert_close(
        ours.inv_freq(), DynamicNTK(2.0, MAX_POS).inv_freq(HEAD_DIM, 1e4, seq_len=40)
    )


def test_longrope_switches_like_hf() -> None:
    generator = torch.Generator().manual_seed(1)
    short = (1 + torch.rand(HEAD_DIM // 2, generator=generator)).tolist()
    long = (1 + 8 * torch.rand(HEAD_DIM // 2, generator=generator)).tolist()
    hf = hf_rotary(
        {
            "rope_type": "longrope",
            "short_factor": short,
            "long_factor": long,
            "factor": 8.0,
            "original_max_position_embeddings": MAX_POS,
            "rope_theta": 10000.0,
        }
    )
    ours = RotaryEmbedding(HEAD_DIM, scaling=LongRoPE(short, long, MAX_POS, factor=8.0))
    sequence = [
        (8, True),
        (16, False),
        (17, False),
        (30, True),
        (12, True),
        (20, True),
        (21, False),
    ]
    expected_rebuilds = [0, 0, 1, 1, 2, 3, 3]  # one per switch between short and long
    for (seq_len, prefill), rebuilds in zip(sequence, expected_rebuilds, strict=True):
        step(ours, hf, seq_len, prefill)
        assert ours.rebuilds == rebuilds, seq_len
        assert ours.max_seq_len_cached is None


def test_fixed_mode_keeps_its_frequencies() -> None:
    scaling = DynamicNTK(4.0, MAX_POS, mode="fixed", target_length=64)
    ours = RotaryEmbedding(HEAD_DIM, scaling=scaling)
    assert not ours.depends_on_length and ours.max_seq_len_cached is None
    expected = DynamicNTK(4.0, MAX_POS).inv_freq(HEAD_DIM, 1e4, seq_len=64)
    x = torch.randn(1, 1, 1, HEAD_DIM)
    for position in (3, 20, 100, 5):
        ours.rotate(x, torch.tensor([position]))
        torch.testing.assert_close(ours.inv_freq(), expected, rtol=0, atol=0)
    assert ours.rebuilds == 0


def test_fixed_mode_matches_hf_at_its_target_length() -> None:
    pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    hf = hf_rotary({"rope_type": "dynamic", "factor": 4.0, "rope_theta": 10000.0})
    inv_freq, _ = ROPE_INIT_FUNCTIONS["dynamic"](hf.config, seq_len=64)
    ours = RotaryEmbedding(
        HEAD_DIM, scaling=DynamicNTK(4.0, MAX_POS, mode="fixed", target_length=64)
    )
    torch.testing.assert_close(ours.inv_freq().float(), inv_freq, rtol=1e-6, atol=0)


def test_static_scalings_never_rebuild() -> None:
    ours = RotaryEmbedding(HEAD_DIM, scaling=YaRN(4.0, MAX_POS))
    x = torch.randn(1, 1, 3, HEAD_DIM)
    for offset in (0, 100, 10_000, 1):
        ours.rotate(x, torch.arange(offset, offset + 3))
    assert (ours.rebuilds, ours.max_seq_len_cached, ours.depends_on_length) == (0, None, False)


def test_state_is_plain_attributes_that_dtype_casts_leave_alone() -> None:
    ours = RotaryEmbedding(HEAD_DIM, scaling=DynamicNTK(4.0, MAX_POS))
    ours.rotate(torch.randn(1, 1, 1, HEAD_DIM), torch.tensor([40]))
    before = ours.inv_freq().clone()
    ours.to(torch.bfloat16)
    assert list(ours.buffers()) == [] and list(ours.parameters()) == []
    assert ours.inv_freq().dtype == torch.float64
    torch.testing.assert_close(ours.inv_freq(), before, rtol=0, atol=0)
    assert ours.state_dict() == {}
    assert "DynamicNTK" in repr(ours)


def test_update_rejects_a_non_positive_length() -> None:
    ours = RotaryEmbedding(HEAD_DIM, scaling=DynamicNTK(4.0, MAX_POS))
    with pytest.raises(ValueError, match="seq_len"):
        ours.update(0)


# Every test here runs on the pure-torch rotation and on the fast kernels.
pytestmark = pytest.mark.usefixtures("every_rotary_impl")


# ---- dynamic YaRN (Peng et al. 2023 §3.3) ------------------------------------------------


@pytest.mark.parametrize("length", [8, 16, 17, 40, 100])
@pytest.mark.parametrize("factor", [1.0, 2.0])
def test_dynamic_yarn_is_static_yarn_at_the_factor_of_the_length(
    length: int, factor: float
) -> None:
    """s = max(factor, L / L0): the frequencies and A of static YaRN at that factor."""
    dynamic = YaRN(factor, MAX_POS, dynamic=True)
    static = YaRN(max(factor, length / MAX_POS), MAX_POS)
    torch.testing.assert_close(
        dynamic.inv_freq(HEAD_DIM, 1e4, seq_len=length), static.inv_freq(HEAD_DIM, 1e4)
    )
    assert dynamic.attention_factor_at(length) == static.attention_factor
    assert dynamic.frequency_length(length) == (length if length > MAX_POS else None)
    assert dynamic.depends_on_length and not static.depends_on_length
    # factor 1 without a length: plain RoPE, A = 1
    torch.testing.assert_close(
        YaRN(1.0, MAX_POS, dynamic=True).inv_freq(HEAD_DIM, 1e4), rope_inv_freq(HEAD_DIM, 1e4)
    )


def test_dynamic_yarn_module_grows_resets_and_scales_its_tables() -> None:
    rope = RotaryEmbedding(HEAD_DIM, scaling=YaRN(1.0, MAX_POS, dynamic=True))
    assert rope.max_seq_len_cached == MAX_POS and rope.attention_factor == 1.0
    rope.update(40)
    assert (rope.rebuilds, rope.max_seq_len_cached) == (1, 40)
    assert rope.attention_factor == YaRN(40 / MAX_POS, MAX_POS).attention_factor > 1.0
    # position 0: cos = A (tables without an update: a call at length 1 would reset, as HF)
    cos, _ = rope.rotary_tables(torch.tensor([0]), torch.float64, update=False)
    assert torch.allclose(cos, torch.full_like(cos, rope.attention_factor))
    rope.update(30)  # shorter, still past L0: kept (grow-only above L0, as HF's dynamic NTK)
    assert rope.rebuilds == 1
    rope.update(10)  # below L0 after growing: back to plain RoPE
    assert (rope.rebuilds, rope.max_seq_len_cached, rope.attention_factor) == (2, MAX_POS, 1.0)


def test_dynamic_yarn_has_no_hf_form_and_a_dict_form() -> None:
    from posenc.integrations.hf import to_rope_parameters
    from posenc.rotary.scaling import scaling_from_dict, scaling_to_dict

    scaling = YaRN(1.0, MAX_POS, dynamic=True)
    assert scaling_from_dict(scaling_to_dict(scaling)) == scaling
    with pytest.raises(ValueError, match="no HF rope_type"):
        to_rope_parameters(RotaryEmbedding(HEAD_DIM, scaling=scaling))
    with pytest.raises(ValueError, match="dynamic must be a bool"):
        YaRN(2.0, MAX_POS, dynamic="yes")  # type: ignore[arg-type]
    # a static YaRN's HF form carries no "dynamic" key (HF would reject it)
    assert "dynamic" not in to_rope_parameters(
        RotaryEmbedding(HEAD_DIM, scaling=YaRN(2.0, MAX_POS))
    )


# ---- the state objects ------------------------------------------------------------------


@dataclass(frozen=True)
class _Stretch(Scaling):
    """A length-dependent scaling with no rule of its own: θ / seq_len."""

    depends_on_length: ClassVar[bool] = True

    def inv_freq(self, rotary_dim: int, base: float, *, seq_len: int | None = None) -> Tensor:
        return rope_inv_freq(rotary_dim, base) / (seq_len or 1)


def test_each_scaling_makes_the_state_of_its_rule() -> None:
    ones = (1.0,) * (HEAD_DIM // 2)
    cases = [
        (Linear(2.0), LengthState),
        (DynamicNTK(4.0, MAX_POS), GrowAndReset),
        (DynamicNTK(4.0, MAX_POS, mode="fixed", target_length=64), LengthState),
        (YaRN(2.0, MAX_POS), LengthState),
        (YaRN(2.0, MAX_POS, dynamic=True), GrowAndReset),
        (LongRoPE(ones, ones, MAX_POS, factor=2.0), LengthSwitch),
        (_Stretch(), FollowLength),
    ]
    for scaling, kind in cases:
        state = scaling.new_state()
        assert type(state) is kind, scaling
        assert (state.length, state.rebuilds) == (None, 0)
    assert type(RotaryEmbedding(HEAD_DIM).length_state) is LengthState


def test_the_rules_step_by_step() -> None:
    grow = GrowAndReset(16)
    steps = [(8, False), (17, True), (17, False), (16, False), (30, True), (10, True), (12, False)]
    for seq_len, changed in steps:
        assert grow.update(seq_len) is changed, seq_len
    assert (grow.length, grow.max_seq_len_cached, grow.rebuilds) == (None, 16, 3)

    switch = LengthSwitch(lambda n: 17 if n > 16 else None)
    assert [switch.update(n) for n in (3, 17, 40, 16, 2)] == [False, True, False, True, False]
    assert (switch.length, switch.max_seq_len_cached, switch.rebuilds) == (None, None, 2)

    follow = FollowLength()
    assert [follow.update(n) for n in (3, 3, 5, 4)] == [True, False, True, True]
    assert (follow.length, follow.rebuilds) == (4, 3)

    static = LengthState()
    assert not static.update(100) and (static.length, static.rebuilds) == (None, 0)
    assert "rebuilds=3" in repr(grow)


def test_each_module_owns_its_state() -> None:
    scaling = DynamicNTK(4.0, MAX_POS)
    first, second = (RotaryEmbedding(HEAD_DIM, scaling=scaling) for _ in range(2))
    first.update(40)
    assert (first.rebuilds, first.max_seq_len_cached) == (1, 40)
    assert (second.rebuilds, second.max_seq_len_cached) == (0, MAX_POS)
    assert first.length_state is not second.length_state
    torch.testing.assert_close(second.inv_freq(), rope_inv_freq(HEAD_DIM))
    assert scaling == DynamicNTK(4.0, MAX_POS)  # the frozen value is untouched


def test_a_scaling_without_a_rule_follows_every_length() -> None:
    rope = RotaryEmbedding(HEAD_DIM, scaling=_Stretch())
    x = torch.randn(1, 1, 3, HEAD_DIM, dtype=torch.float64)
    calls = [(torch.arange(3), 1), (torch.arange(3), 1), (torch.arange(5, 8), 2)]
    for positions, rebuilds in calls:
        rope.rotate(x, positions)
        seq_len = int(positions.max()) + 1
        assert (rope.rebuilds, rope.length_state.length) == (rebuilds, seq_len)
        expected = _Stretch().inv_freq(HEAD_DIM, 1e4, seq_len=seq_len)
        torch.testing.assert_close(rope.inv_freq(), expected, rtol=0, atol=0)
    assert rope.frequency_length(7) is None  # the stateless rule of the base class


def test_sequence_length_is_the_largest_position_plus_one() -> None:
    assert sequence_length(torch.arange(4)) == 4
    assert sequence_length(torch.arange(4), torch.tensor([[9, 2]])) == 10
    assert sequence_length(torch.tensor([2.5])) == 3  # floored, as an integer position
    assert sequence_length(torch.tensor([-3])) == 1  # at least 1
    assert sequence_length(torch.zeros(0, dtype=torch.long)) is None
