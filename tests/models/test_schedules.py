"""The frontier's per-layer schedules in the models (:mod:`posenc.models.schedules`): which
layer gets what, decoding equal to the full forward for every schedule, bad configs, and the
first-token attention mass probe against the probabilities written out."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import Attention, DeltaState, GatedDeltaNet, KVCache, QueryScale
from posenc.models import (
    DecoderLM,
    EncoderClassifier,
    LayerAttention,
    ModelConfig,
    first_token_attention_mass,
    hybrid_mixers,
    nope_every,
    rnope_swa,
    swan,
)

VOCAB = 40


def config(**more: Any) -> ModelConfig:
    base: dict[str, Any] = {"vocab_size": VOCAB, "dim": 32, "depth": 4, "num_heads": 4}
    return ModelConfig(**{**base, **more})


def test_each_schedule_gives_each_layer_its_encoding_window_and_mixer() -> None:
    rope, nope = LayerAttention(), LayerAttention(encoded=False)
    smollm3 = config(depth=8, **nope_every(8))
    assert smollm3.nope_layers == (3, 7)
    assert [smollm3.layer_attention(i) for i in range(8)] == ([rope] * 3 + [nope]) * 2
    windowed = LayerAttention(window=16)
    rnope = config(depth=8, **rnope_swa(8, window=16))
    assert [rnope.layer_attention(i) for i in range(8)] == ([windowed] * 3 + [nope]) * 2
    scaled = LayerAttention(encoded=False, query_scale=QueryScale.logn(64))
    swan_gpt = config(**swan(4, window=16, train_len=64))
    assert [swan_gpt.layer_attention(i) for i in range(4)] == [windowed] * 3 + [scaled]
    assert "query_scale" not in swan(4, window=16)
    hybrid = config(mixers=hybrid_mixers(4), window=8, query_scale=QueryScale.logn(8))
    delta = LayerAttention(encoded=False, mixer="delta")
    last = LayerAttention(window=8, query_scale=QueryScale.logn(8))
    assert [hybrid.layer_attention(i) for i in range(4)] == [delta] * 3 + [last]
    assert hybrid_mixers(6, interval=3, mixer="linear") == ("linear", "linear", "softmax") * 2


def test_the_model_builds_what_the_schedule_says() -> None:
    cfg = config(
        depth=8,
        mixers=hybrid_mixers(8, interval=2),
        nope_layers=(7,),
        window=4,
        output_gate=True,
    )
    model = DecoderLM(cfg)
    for index, block in enumerate(model.trunk.blocks):
        attn: Any = block.attn
        plan = cfg.layer_attention(index)
        if plan.mixer == "delta":
            assert isinstance(attn, GatedDeltaNet)
            continue
        assert isinstance(attn, Attention)
        assert (attn.pos is not None, attn.window, attn.gate is not None) == (
            plan.encoded,
            plan.window,
            True,
        )
    assert [type(c) for c in model.new_cache()] == [DeltaState, KVCache] * 4
    # the linear mixer: the linear backend, no encoding, no gate
    linear = DecoderLM(config(mixers=hybrid_mixers(4, mixer="linear"), output_gate=True))
    attn = linear.trunk.blocks[0].attn
    assert isinstance(attn, Attention) and attn.backend.name == "linear"
    assert attn.pos is None and attn.gate is None


SCHEDULES: dict[str, dict[str, Any]] = {
    "smollm3": nope_every(4),
    "rnope_swa": rnope_swa(4, window=3),
    "swan": swan(4, window=3, train_len=4),
    "delta_3to1": {"mixers": hybrid_mixers(4)},
    "linear_3to1": {"mixers": hybrid_mixers(4, mixer="linear")},
    "delta_rnope_gated": {
        "mixers": ("delta", "softmax", "delta", "softmax"),
        "nope_layers": (3,),
        "window": 3,
        "output_gate": True,
    },
    "all_delta": {"mixers": ("delta",) * 4},
}


@pytest.mark.parametrize(
    ("schedule", "pos"),
    [(name, "rope") for name in SCHEDULES] + [("delta_rnope_gated", "alibi")],
)
def test_decoding_with_the_cache_equals_the_full_forward(schedule: str, pos: str) -> None:
    """Prefill 5 tokens then decode one at a time, with left padding in one row: the KV
    caches and the delta rule's states give the full forward's logits."""
    torch.manual_seed(0)
    model = DecoderLM(config(pos=pos, **SCHEDULES[schedule])).double().eval()
    tokens = torch.randint(0, VOCAB, (2, 12))
    padding = torch.ones(2, 12, dtype=torch.bool)
    padding[1, :3] = False
    with torch.no_grad():
        full = model(tokens, key_padding_mask=padding)
        cache = model.new_cache()
        steps = [model(tokens[:, :5], key_padding_mask=padding[:, :5], cache=cache)]
        for t in range(5, 12):
            step = model(tokens[:, t : t + 1], key_padding_mask=padding[:, t : t + 1], cache=cache)
            steps.append(step)
    got = torch.cat(steps, dim=1)
    assert_close(got[padding], full[padding], atol=1e-10, rtol=0)


def test_a_hybrid_trains_and_resets_as_built() -> None:
    cfg = config(pos="rope", mixers=hybrid_mixers(4), output_gate=True, **nope_every(4))
    torch.manual_seed(4)
    built = DecoderLM(cfg)
    logits = built(torch.randint(0, VOCAB, (2, 9)))
    logits.logsumexp(-1).mean().backward()
    assert all(p.grad is not None for p in built.parameters())
    with torch.device("meta"):
        meta = DecoderLM(cfg)
    meta.to_empty(device="cpu")
    torch.manual_seed(4)
    meta.reset_parameters()
    for name, tensor in built.state_dict().items():
        assert torch.equal(meta.state_dict()[name], tensor), name


def test_window_beyond_the_length_changes_nothing_and_a_short_one_does() -> None:
    torch.manual_seed(5)
    plain = DecoderLM(config(**nope_every(4)))
    wide = DecoderLM(config(**rnope_swa(4, window=16)))
    narrow = DecoderLM(config(**rnope_swa(4, window=2)))
    wide.load_state_dict(plain.state_dict())
    narrow.load_state_dict(plain.state_dict())
    tokens = torch.randint(0, VOCAB, (1, 10))
    assert_close(wide(tokens), plain(tokens), atol=0, rtol=0)
    assert not torch.allclose(narrow(tokens), plain(tokens))
    assert_close(narrow(tokens)[:, :2], plain(tokens)[:, :2], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"window": 0}, "window"),
        ({"window": 4, "chunk_size": 4}, "chunk_size"),
        ({"window": 4, "backend": "linear"}, "window"),
        ({"mixers": ("delta",) * 3}, "one mixer per layer"),
        ({"mixers": ("softmax", "mamba", "softmax", "softmax")}, "mamba"),
        ({"mixers": "delta"}, "mixers must be a tuple"),
        ({"mixers": ("linear",) * 4, "backend": "linear"}, "backend 'linear'"),
        ({"mixers": hybrid_mixers(4), "nope_layers": (0,)}, "nope_layers"),
        ({"output_gate": "yes"}, "output_gate"),
    ],
)
def test_bad_config_raises(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        config(**kwargs)


def test_bad_schedule_arguments_raise() -> None:
    with pytest.raises(ValueError, match="interval"):
        nope_every(4, 0)
    with pytest.raises(ValueError, match="window"):
        rnope_swa(4, window=0)
    with pytest.raises(ValueError, match="train_len"):
        swan(4, window=4, train_len=1)
    with pytest.raises(ValueError, match="mixer"):
        hybrid_mixers(4, mixer="softmax")


def test_an_encoder_refuses_delta_layers_and_the_cache_must_match() -> None:
    with pytest.raises(ValueError, match="causal"):
        EncoderClassifier(config(mixers=hybrid_mixers(4)), num_classes=2)
    model = DecoderLM(config(mixers=hybrid_mixers(4)))
    tokens = torch.randint(0, VOCAB, (1, 4))
    with pytest.raises(ValueError, match="DeltaState"):
        model(tokens, cache=[KVCache() for _ in range(4)])
    with pytest.raises(ValueError, match="document"):
        model(tokens, document_ids=torch.tensor([0, 0, 1, 1]))


def first_token_mass_by_hand(model: DecoderLM, tokens: torch.Tensor) -> torch.Tensor:
    """The probabilities written out: each layer's input captured, q and k rotated, softmax
    over the causal scores, mean of p(key 0) over queries ≥ 1."""
    inputs: list[torch.Tensor] = []
    attns: list[Any] = [block.attn for block in model.trunk.blocks]
    handles = [
        attn.register_forward_pre_hook(lambda _m, args: inputs.append(args[0])) for attn in attns
    ]
    with torch.no_grad():
        model(tokens)
    for handle in handles:
        handle.remove()
    masses = []
    seq = tokens.shape[1]
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    for block, x in zip(model.trunk.blocks, inputs, strict=True):
        attn: Any = block.attn
        heads, width = attn.num_heads, attn.head_dim
        q = attn.q_proj(x).view(1, seq, heads, width).transpose(1, 2)
        k = attn.k_proj(x).view(1, seq, heads, width).transpose(1, 2)
        if attn.pos is not None:
            tables = attn.pos.rotary_tables(torch.arange(seq), q.dtype)
            q, k = attn.pos.rotate_qk(q, k, tables, tables)
        scores = (q @ k.transpose(-1, -2) / math.sqrt(width)).masked_fill(~causal, -math.inf)
        masses.append(scores.softmax(-1)[0, :, 1:, 0].mean(-1))
    return torch.stack(masses)


@pytest.mark.parametrize("gated", [False, True])
def test_first_token_mass_equals_the_probabilities_written_out(gated: bool) -> None:
    torch.manual_seed(6)
    model = DecoderLM(config(depth=2, output_gate=gated, nope_layers=(1,))).double()
    model.train()  # the probe evaluates in eval mode and restores the mode
    tokens = torch.randint(0, VOCAB, (1, 10))
    got = first_token_attention_mass(model, tokens)
    assert model.training
    assert got.shape == (2, 4)
    assert_close(got, first_token_mass_by_hand(model, tokens), atol=1e-12, rtol=0)


def test_first_token_mass_skips_recurrent_layers_and_checks_its_input() -> None:
    model = DecoderLM(config(mixers=hybrid_mixers(4)))
    assert first_token_attention_mass(model, torch.randint(0, VOCAB, (2, 6))).shape == (1, 4)
    with pytest.raises(ValueError, match="tokens"):
        first_token_attention_mass(model, torch.randint(0, VOCAB, (2, 1)))
    with pytest.raises(ValueError, match="softmax attention layer"):
        first_token_attention_mass(DecoderLM(config(mixers=("delta",) * 4)), torch.zeros(1, 4))


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["delta_rnope_gated", "swan"])
def test_a_schedule_compiles_fullgraph(schedule: str) -> None:
    torch.manual_seed(7)
    model = DecoderLM(config(**SCHEDULES[schedule]))
    tokens = torch.randint(0, VOCAB, (2, 40))
    compiled = torch.compile(model, fullgraph=True)
    assert_close(compiled(tokens), model(tokens))
