"""HF transformers' ``ROPE_INIT_FUNCTIONS`` as the reference of the scalings' tests, and the
whole-tensor comparison with it."""

from __future__ import annotations

import functools

import pytest
import torch

from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.scaling import Scaling

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
