from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from posenc.models import DecoderLM, EncoderClassifier, ModelConfig
from posenc.positions import packed_positions
from tests.cases import ALL_CASES, CAUSAL_ONLY, all_cases, case_id

VOCAB = 50


def config(name: str, kwargs: dict[str, Any], **more: Any) -> ModelConfig:
    base: dict[str, Any] = {
        "vocab_size": VOCAB,
        "dim": 32,
        "depth": 2,
        "num_heads": 4,
        "max_seq_len": 64,
        "pos": name,
        "pos_kwargs": kwargs,
    }
    return ModelConfig(**{**base, **more})


def visible(model: nn.Module) -> nn.Module:
    """Give encoding parameters trained-like magnitudes so their effect is measurable."""
    enc = model.encoding
    if enc is not None:
        for p in enc.parameters():
            nn.init.normal_(p, std=0.5)
    return model


@pytest.mark.parametrize(("name", "kwargs"), all_cases())
def test_decode_with_kv_cache_equals_full_forward(name: str, kwargs: dict) -> None:
    """Token-by-token decoding reproduces the full forward's logits (≤1e-5, float32)."""
    model = visible(DecoderLM(config(name, kwargs))).eval()
    tokens = torch.randint(0, VOCAB, (2, 12))
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        prefix = model(tokens[:, :4], cache=cache)
        steps = [model(tokens[:, i : i + 1], cache=cache) for i in range(4, 12)]
    assert_close(torch.cat([prefix, *steps], dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("name", "kwargs"), all_cases())
def test_decode_with_per_row_positions(name: str, kwargs: dict) -> None:
    """Explicit (batch, seq) positions through the cache match the full forward."""
    model = visible(DecoderLM(config(name, kwargs))).eval()
    tokens = torch.randint(0, VOCAB, (2, 8))
    positions = torch.stack([torch.arange(8), torch.arange(3, 11)])
    with torch.no_grad():
        full = model(tokens, positions)
        cache = model.new_cache()
        first = model(tokens[:, :5], positions[:, :5], cache=cache)
        rest = model(tokens[:, 5:], positions[:, 5:], cache=cache)
    assert_close(torch.cat([first, rest], dim=1), full, atol=1e-5, rtol=1e-5)


def test_bidirectional_attention_without_encoding_is_permutation_equivariant() -> None:
    model = EncoderClassifier(config("nope", {}), num_classes=3).double().eval()
    tokens = torch.randint(0, VOCAB, (2, 10))
    perm = torch.randperm(10)
    with torch.no_grad():
        assert_close(model.encode(tokens[:, perm]), model.encode(tokens)[:, perm])
        assert_close(model(tokens[:, perm]), model(tokens))


@pytest.mark.parametrize(("name", "kwargs"), all_cases())
def test_each_encoding_breaks_permutation_equivariance(name: str, kwargs: dict) -> None:
    if name == "nope":
        pytest.skip("NoPE is the equivariant baseline")
    if name in CAUSAL_ONLY:
        with pytest.raises(ValueError, match="causal attention only"):
            EncoderClassifier(config(name, kwargs), num_classes=3)
        return
    model = visible(EncoderClassifier(config(name, kwargs), num_classes=3)).double().eval()
    tokens = torch.randint(0, VOCAB, (2, 10))
    # Not the reversal: symmetric ALiBi (a function of |i - j|) is invariant under it.
    perm = torch.tensor([3, 7, 0, 9, 1, 5, 2, 8, 6, 4])
    with torch.no_grad():
        gap = (model.encode(tokens[:, perm]) - model.encode(tokens)[:, perm]).abs().max()
    assert gap > 1e-3


@pytest.mark.parametrize(("name", "kwargs"), all_cases())
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_forward_tracks_float32(name: str, kwargs: dict, dtype: torch.dtype) -> None:
    model = DecoderLM(config(name, kwargs)).eval()
    tokens = torch.randint(0, VOCAB, (2, 16))
    with torch.no_grad():
        want = model(tokens)
        got = model.to(dtype)(tokens)
    assert got.dtype == dtype
    assert torch.isfinite(got).all()
    # One bf16 rounding per op over a 2-layer model: loose, but a wrong rotation or
    # bias would be off by O(1).
    assert_close(got.float(), want, atol=0.15, rtol=0.05)


def test_t5_table_is_shared_and_rope_is_per_layer_stateless() -> None:
    model = DecoderLM(config("t5", {}))
    tables = {id(block.attn.pos) for block in model.trunk.blocks}
    assert len(tables) == 1
    model = DecoderLM(config("shaw", {}))
    assert len({id(block.attn.pos) for block in model.trunk.blocks}) == 2


def test_learned_table_past_its_length_raises() -> None:
    model = DecoderLM(config("learned", {}, max_seq_len=8))
    with pytest.raises(ValueError, match="positions"):
        model(torch.randint(0, VOCAB, (1, 9)))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"pos": "nonsense"}, "unknown encoding"),
        ({"pos_kwargs": {"thetaa": 3}}, "thetaa"),
        ({"dim": 30}, "divisible"),
        ({"depth": 0}, "depth"),
        ({"vocab_size": -1}, "vocab_size"),
        (
            {"mlp_ratio": 0.01},
            r"mlp_ratio must give at least one hidden unit.*int\(0.01 \* 32\) = 0",
        ),
        ({"mlp_ratio": "2"}, "mlp_ratio must be a finite number"),
        ({"mlp_ratio": float("nan")}, "mlp_ratio must be a finite number"),
        ({"mlp_ratio": -1.0}, "mlp_ratio must give at least one hidden unit"),
        ({"dropout": 1.5}, "dropout"),
        ({"num_kv_heads": 3}, "num_kv_heads"),
        ({"backend": "fast"}, "backend must be one of"),
        ({"pos_kwargs": None}, "pos_kwargs"),
    ],
)
def test_config_errors_name_the_argument(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DecoderLM(ModelConfig(**{"dim": 32, "num_heads": 4, "pos": "rope", **kwargs}))


def test_tokens_must_be_integer_batch() -> None:
    model = DecoderLM(config("rope", {}))
    with pytest.raises(ValueError, match="tokens"):
        model(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="cache"):
        model(torch.zeros(1, 3, dtype=torch.long), cache=[])


@pytest.mark.parametrize("bad", [VOCAB, VOCAB + 7, -1])
def test_token_ids_out_of_range_name_the_range(bad: int) -> None:
    model = DecoderLM(config("rope", {}))
    tokens = torch.tensor([[1, 2, bad]])
    with pytest.raises(
        ValueError, match=rf"tokens must be ids in \[0, vocab_size\) = \[0, {VOCAB}\)"
    ):
        model(tokens)


@pytest.mark.parametrize(("name", "kwargs"), all_cases())
def test_empty_sequence_gives_empty_logits(name: str, kwargs: dict) -> None:
    model = DecoderLM(config(name, kwargs))
    assert model(torch.zeros(2, 0, dtype=torch.long)).shape == (2, 0, VOCAB)
    if name in CAUSAL_ONLY:
        return
    encoder = EncoderClassifier(config(name, kwargs), num_classes=3)
    assert encoder.encode(torch.zeros(2, 0, dtype=torch.long)).shape == (2, 0, 32)


@pytest.mark.parametrize("backend", ["sdpa", "chunked"])
@pytest.mark.parametrize(("name", "kwargs"), all_cases())
def test_packed_documents_equal_separate_sequences(name: str, kwargs: dict, backend: str) -> None:
    model = visible(DecoderLM(config(name, kwargs, backend=backend))).double().eval()
    lengths = [5, 3, 4]
    ids = torch.repeat_interleave(torch.arange(3), torch.tensor(lengths))
    tokens = torch.randint(0, VOCAB, (1, sum(lengths)))
    with torch.no_grad():
        packed = model(tokens, packed_positions(ids), document_ids=ids)
        separate = torch.cat([model(part) for part in tokens.split(lengths, dim=1)], dim=1)
    assert_close(packed, separate, rtol=1e-10, atol=1e-10)


def compile_cases() -> list[Any]:
    """Every case on sdpa and chunked. Compiling costs ~3 s a case, so the default run leaves
    to ``-m slow`` the chunked traces it sees elsewhere: additive encodings (NoPE's attention),
    the families tests/attention/test_module.py compiles on chunked, and second variants."""
    elsewhere = {"sinusoidal", "scaled_sinusoidal", "learned", "complex_order"}
    elsewhere |= {"rope", "xpos", "alibi", "t5", "shaw", "xl"}
    seen: set[str] = set()
    cases = []
    for name, kwargs in ALL_CASES:
        cases.append(pytest.param(name, kwargs, "sdpa", id=f"{case_id(name, kwargs)}-sdpa"))
        slow = name in elsewhere or name in seen
        marks = [pytest.mark.slow] if slow else []
        label = f"{case_id(name, kwargs)}-chunked"
        cases.append(pytest.param(name, kwargs, "chunked", id=label, marks=marks))
        seen.add(name)
    return cases


@pytest.mark.parametrize(("name", "kwargs", "backend"), compile_cases())
def test_model_compiles_fullgraph(name: str, kwargs: dict, backend: str) -> None:
    """The whole model, additive encodings included, traces without graph breaks."""
    torch._dynamo.reset()
    model = DecoderLM(config(name, kwargs, backend=backend)).eval()
    tokens = torch.randint(0, VOCAB, (2, 8))
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        assert_close(compiled(tokens, torch.arange(8)), model(tokens, torch.arange(8)))
