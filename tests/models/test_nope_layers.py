"""Llama-4's iRoPE layout in the models: NoPE layers, chunked local attention on the encoded
layers, the query temperature on the NoPE layers (``ModelConfig.nope_layers``,
``chunk_size``, ``query_scale``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from posenc.attention import QueryScale
from posenc.models import DecoderLM, EncoderClassifier, LayerAttention, ModelConfig

VOCAB = 40
LLAMA4 = {"nope_layers": (3,), "chunk_size": 4, "query_scale": QueryScale.llama4(3, 0.5)}


def config(**more: Any) -> ModelConfig:
    base: dict[str, Any] = {"vocab_size": VOCAB, "dim": 32, "depth": 4, "num_heads": 4}
    return ModelConfig(**{**base, **more})


def test_layer_attention_is_llama4s_schedule() -> None:
    cfg = config(depth=8, nope_layers=[7, 3], chunk_size=8192, query_scale=QueryScale.llama4())
    assert cfg.nope_layers == (3, 7)
    rope = LayerAttention(encoded=True, chunk_size=8192)
    nope = LayerAttention(encoded=False, query_scale=QueryScale.llama4())
    assert [cfg.layer_attention(i) for i in range(8)] == [rope] * 3 + [nope] + [rope] * 3 + [nope]
    model = DecoderLM(cfg)
    for index, block in enumerate(model.trunk.blocks):
        attn: Any = block.attn
        assert (attn.pos is None) == (index in (3, 7))
        assert attn.chunk_size == (None if index in (3, 7) else 8192)
        assert attn.query_scale == (QueryScale.llama4() if index in (3, 7) else None)
    # without NoPE layers, the scale goes to every layer (Qwen-1's log-n)
    qwen = config(query_scale=QueryScale.logn(8))
    assert all(qwen.layer_attention(i).query_scale == QueryScale.logn(8) for i in range(4))


@pytest.mark.parametrize("backend", ["sdpa", "chunked"])
@pytest.mark.parametrize("pos", ["rope", "alibi", "shaw"])
def test_decode_with_kv_cache_equals_full_forward(backend: str, pos: str) -> None:
    torch.manual_seed(0)
    model = DecoderLM(config(pos=pos, backend=backend, **LLAMA4)).double().eval()
    tokens = torch.randint(0, VOCAB, (2, 15))
    padding = torch.ones(2, 15, dtype=torch.bool)
    padding[1, :3] = False
    with torch.no_grad():
        full = model(tokens, key_padding_mask=padding)
        cache = model.new_cache()
        steps = [model(tokens[:, :5], key_padding_mask=padding[:, :5], cache=cache)]
        for t in range(5, 15):
            step = model(tokens[:, t : t + 1], key_padding_mask=padding[:, t : t + 1], cache=cache)
            steps.append(step)
    assert_close(torch.cat(steps, dim=1), full, atol=1e-10, rtol=0)


def test_backends_agree() -> None:
    torch.manual_seed(1)
    reference = DecoderLM(config(pos="alibi", backend="sdpa", **LLAMA4)).eval()
    chunked = DecoderLM(config(pos="alibi", backend="chunked", **LLAMA4)).eval()
    chunked.load_state_dict(reference.state_dict())
    tokens = torch.randint(0, VOCAB, (2, 13))
    with torch.no_grad():
        assert_close(chunked(tokens), reference(tokens), atol=1e-5, rtol=1e-5)


def test_all_layers_nope_equals_the_nope_model() -> None:
    torch.manual_seed(2)
    nope = DecoderLM(config(pos="nope"))
    layered = DecoderLM(config(pos="rope", nope_layers=(0, 1, 2, 3)))
    layered.load_state_dict(nope.state_dict())
    tokens = torch.randint(0, VOCAB, (2, 9))
    assert_close(layered(tokens), nope(tokens), atol=0, rtol=0)
    assert layered.encoding is None


def test_the_options_change_what_they_should() -> None:
    """Chunks isolate chunked layers: with every layer chunked, a token's state depends on
    its chunk only; a global NoPE layer lets earlier chunks through."""
    torch.manual_seed(3)
    tokens = torch.randint(0, VOCAB, (1, 12))
    changed = tokens.clone()
    changed[0, 1] = (tokens[0, 1] + 1) % VOCAB  # in chunk 0 of 4 tokens
    local = EncoderClassifier(config(pos="rope", chunk_size=4), num_classes=2)
    a, b = local.encode(tokens), local.encode(changed)
    assert_close(a[:, 4:], b[:, 4:], atol=0, rtol=0)
    assert not torch.allclose(a[:, :4], b[:, :4])
    mixed = DecoderLM(config(pos="rope", **LLAMA4))
    a, b = mixed(tokens), mixed(changed)
    assert not torch.allclose(a[:, 4:], b[:, 4:])  # layer 3 is global
    # a chunk as long as the sequence and a scale of 1 at every position change nothing
    plain = DecoderLM(config(pos="rope"))
    wide = DecoderLM(
        config(pos="rope", nope_layers=(), chunk_size=12, query_scale=QueryScale.llama4(64))
    )
    wide.load_state_dict(plain.state_dict())
    assert_close(wide(tokens), plain(tokens), atol=0, rtol=0)


def test_per_layer_encodings_skip_the_nope_layers_and_reset_as_built() -> None:
    """Shaw builds one table per encoded layer; the first goes to the first encoded layer,
    so ``reset_parameters`` draws what the constructor drew."""
    cfg = config(pos="shaw", nope_layers=(0, 2))
    torch.manual_seed(4)
    built = DecoderLM(cfg)
    assert [b.attn.pos is None for b in built.trunk.blocks] == [True, False, True, False]  # type: ignore[union-attr]
    assert built.encoding is built.trunk.blocks[1].attn.pos  # type: ignore[union-attr]
    torch.manual_seed(4)
    with torch.device("meta"):
        empty = DecoderLM(cfg)
    empty.to_empty(device="cpu")
    empty.reset_parameters()
    for (name, want), got in zip(
        built.state_dict().items(), empty.state_dict().values(), strict=True
    ):
        assert torch.equal(got, want), name


@pytest.mark.parametrize("pos", ["shaw", "t5", "fox", "rope"])
def test_every_layer_nope_resets_as_built(pos: str) -> None:
    """With every layer NoPE the constructor still builds (draws) the encoding for its
    position hooks though no layer takes it; ``reset_parameters`` after a meta build draws it
    again, so the blocks get the constructor's numbers."""
    cfg = config(pos=pos, nope_layers=(0, 1, 2, 3))
    torch.manual_seed(5)
    built = DecoderLM(cfg)
    assert built.encoding is None
    with torch.device("meta"):
        empty = DecoderLM(cfg)
    empty.to_empty(device="cpu")
    torch.manual_seed(5)
    empty.reset_parameters()
    for (name, want), got in zip(
        built.state_dict().items(), empty.state_dict().values(), strict=True
    ):
        assert torch.equal(got, want), name


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"nope_layers": (4,)}, "nope_layers"),
        ({"nope_layers": (-1,)}, "nope_layers"),
        ({"nope_layers": (1, 1)}, "nope_layers"),
        ({"nope_layers": (True,)}, "nope_layers"),
        ({"nope_layers": "3"}, "nope_layers"),
        ({"nope_layers": 3}, "nope_layers"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"chunk_size": 2.0}, "chunk_size"),
        ({"query_scale": 0.1}, "query_scale"),
    ],
)
def test_bad_config_raises(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        config(**kwargs)


def test_an_encoding_outside_attention_refuses_nope_layers() -> None:
    with pytest.raises(ValueError, match="nope_layers"):
        DecoderLM(config(pos="sinusoidal", nope_layers=(1,)))


def test_query_scale_needs_one_position_axis() -> None:
    with pytest.raises(ValueError, match="query_scale"):
        DecoderLM(config(pos="mrope", dim=48, query_scale=QueryScale.logn(8)))


def test_modules_unchanged_without_the_options() -> None:
    model = DecoderLM(config())
    attn: nn.Module = model.trunk.blocks[0].attn  # type: ignore[assignment]
    assert attn.chunk_size is None and attn.query_scale is None
