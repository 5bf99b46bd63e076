"""What an encoding holds, over every registered encoding and the models: built on the ``meta``
device, materialized with ``to_empty`` and initialized (``reset_parameters``) or loaded
(``load_state_dict``) it equals a normal build; a dtype cast rounds parameters only, never a
constant (RoPE's frequencies and phases stay exact, computed from float64).

The convention (:mod:`posenc.encoding.base`): parameters are ``nn.Parameter`` drawn by
``reset_parameters()``, which draws what the constructor draws; constants are no buffers.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.testing import assert_close

from posenc.attention import Attention, hooks_of
from posenc.models import DecoderLM, EncoderClassifier, ModelConfig
from posenc.registry import encoding_spec
from tests.cases import ALL_CASES, SEQ, build_case, case_id, case_positions, registered_cases

X = torch.randn(2, SEQ, 32, generator=torch.Generator().manual_seed(5))
TOKENS = torch.randint(0, 50, (2, SEQ), generator=torch.Generator().manual_seed(6))


def output(name: str, encoding: nn.Module) -> Tensor:
    """The encoding at work: its embedding, or a seeded attention layer around it."""
    hooks = hooks_of(encoding)
    positions = case_positions(encoding)
    if hooks.token_embedding:
        return encoding.embed_tokens(TOKENS, positions)  # type: ignore[operator]
    if hooks.additive:
        return encoding.position_embedding(positions)  # type: ignore[operator]
    torch.manual_seed(1)  # the same projections around either encoding
    attn = Attention(32, 4, pos=encoding, causal=not encoding_spec(name).needs_grid)
    with torch.no_grad():
        return attn(X, positions)


def garbage(module: nn.Module) -> nn.Module:
    """What ``to_empty`` leaves is arbitrary memory: make it NaN, so that a tensor nobody
    initializes shows."""
    with torch.no_grad():
        for tensor in itertools.chain(module.parameters(), module.buffers()):
            if tensor.is_floating_point():
                tensor.fill_(float("nan"))
    return module


def on_meta(build: Any) -> nn.Module:
    with torch.device("meta"):
        module = build()
    return garbage(module.to_empty(device="cpu"))


def assert_same_state(got: nn.Module, want: nn.Module) -> None:
    a, b = got.state_dict(), want.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize(("name", "kwargs"), registered_cases())
def test_meta_build_then_reset_parameters_equals_a_normal_build(name: str, kwargs: dict) -> None:
    """torchtune's test_rope_init_meta_device, for every encoding: ``reset_parameters`` after
    ``to_empty`` (or ``load_state_dict``) gives the module a normal build gives, seed for
    seed; nothing else needs restoring."""
    torch.manual_seed(3)
    want = build_case(name, kwargs)
    got = on_meta(lambda: build_case(name, kwargs))
    reset = getattr(got, "reset_parameters", None)
    if list(got.parameters()):
        assert callable(reset), "an encoding with parameters implements reset_parameters"
    if callable(reset):
        torch.manual_seed(3)
        reset()
    assert_same_state(got, want)
    expected = output(name, want)  # (once: DeBERTa binds one attention layer's projections)
    assert_close(output(name, got), expected, rtol=0, atol=0)

    loaded = on_meta(lambda: build_case(name, kwargs))
    loaded.load_state_dict(want.state_dict())
    assert_close(output(name, loaded), expected, rtol=0, atol=0)


SEQUENCE_CASES = [pytest.param(n, kw, id=case_id(n, kw)) for n, kw in ALL_CASES] + [
    pytest.param("fourier", {}, id="fourier"),
    pytest.param("learnable_fourier", {}, id="learnable_fourier"),
]


def config(name: str, kwargs: dict[str, Any]) -> ModelConfig:
    return ModelConfig(
        vocab_size=50, dim=32, depth=2, num_heads=4, max_seq_len=64, pos=name, pos_kwargs=kwargs
    )


@pytest.mark.parametrize(("name", "kwargs"), SEQUENCE_CASES)
def test_meta_built_language_model_equals_a_normal_build(name: str, kwargs: dict) -> None:
    """DecoderLM.reset_parameters draws what the constructor draws, in its order (embedding,
    each layer's encoding, blocks, head), so a seed gives the same model either way."""
    torch.manual_seed(4)
    want = DecoderLM(config(name, kwargs)).eval()
    got = on_meta(lambda: DecoderLM(config(name, kwargs))).eval()
    torch.manual_seed(4)
    got.reset_parameters()  # type: ignore[operator]
    assert_same_state(got, want)
    with torch.no_grad():
        assert_close(got(TOKENS), want(TOKENS), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["deberta", "complex_order"])
def test_meta_built_encoder_equals_a_normal_build(name: str) -> None:
    """The encoder, with a table shared by the layers (DeBERTa) and with an encoding that
    replaces the token embedding (the constructor still draws one)."""
    torch.manual_seed(4)
    want = EncoderClassifier(config(name, {}), num_classes=3).eval()
    got = on_meta(lambda: EncoderClassifier(config(name, {}), num_classes=3)).eval()
    torch.manual_seed(4)
    got.reset_parameters()  # type: ignore[operator]
    assert_same_state(got, want)
    with torch.no_grad():
        assert_close(got(TOKENS), want(TOKENS), rtol=0, atol=0)


@pytest.mark.parametrize(("name", "kwargs"), registered_cases())
def test_dtype_casts_leave_constants_exact(name: str, kwargs: dict) -> None:
    """No encoding keeps a constant in a floating buffer; after ``.to(bfloat16)`` or
    ``.to(float16)`` rotary tables equal the float32 module's (phases from float64),
    learned parameters (RoPE-Mixed's frequencies, LieRE's generators) being the one thing
    rounded, as every weight; a parameter-free encoding comes back from the cast unchanged."""
    encoding = build_case(name, kwargs)
    assert not [b for b in encoding.buffers() if b.is_floating_point()]
    hooks = hooks_of(encoding)
    positions = case_positions(encoding)
    for dtype in (torch.bfloat16, torch.float16):
        fresh = build_case(name, kwargs)
        fresh.load_state_dict(encoding.state_dict())
        cast = build_case(name, kwargs)
        cast.load_state_dict(encoding.state_dict())
        cast = cast.to(dtype)
        with torch.no_grad():  # learned rotary parameters (RoPE-Mixed, LieRE) are rounded
            for rounded, param in zip(cast.parameters(), fresh.parameters(), strict=True):
                param.copy_(rounded.float())
        if hooks.rotary:
            for table_dtype in (torch.float32, dtype):
                want = fresh.rotary_tables(positions, table_dtype)
                got = cast.rotary_tables(positions, table_dtype)
                for a, b in zip(got, want, strict=True):
                    assert torch.equal(a, b)
        if not list(encoding.parameters()):
            back = cast.to(torch.float32)
            assert_close(output(name, back), output(name, fresh), rtol=0, atol=0)


def test_mrope_attention_cast_to_bfloat16_rotates_as_float32() -> None:
    """The issue's example: an M-RoPE attention cast to bf16 rotated q and k wrongly (up to
    5.3 off the float32 model), its frequencies rounded in a buffer."""
    from posenc.positions import grid_positions
    from posenc.rotary import MultiAxisRotary

    rope = MultiAxisRotary.mrope(64, sections=(8, 12, 12))
    positions = grid_positions(2, 3, 4) * 300
    q = torch.randn(1, 4, 24, 64)
    want, _ = MultiAxisRotary.mrope(64, sections=(8, 12, 12))(q, q, positions, positions)
    got, _ = rope.to(torch.bfloat16)(q, q, positions, positions)
    assert torch.equal(got, want)
