"""Bad inputs raise ``ValueError`` naming the argument, at every public boundary: each registered
encoding's own call, ``Attention``, ``attend``, ``DecoderLM``, ``EncoderClassifier`` and the
position builders. Inputs on another device (the ``meta`` device stands for a GPU), of another
dtype or batch, caches of another layer, positions whose differences overflow int64; the
encoding's head width against the attention's; causal-only encodings in a bidirectional model.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor, nn
from torch.testing import assert_close

from posenc._validate import check_int, check_non_negative_int, check_positive_int
from posenc.attention import Attention, KVCache, attend, hooks_of
from posenc.encoding.base import NoPE
from posenc.models import DecoderLM, EncoderClassifier, ModelConfig
from posenc.positions import randomized_positions
from posenc.registry import encoding_spec
from posenc.rotary.fope import fope_inv_freq
from tests.cases import SEQ, build_case, case_positions, registered_cases

META = torch.device("meta")
HUGE = 1 << 62  # positions from here on have differences beyond int64


def raises_naming(argument: str, call: Callable[[], Any]) -> None:
    """``call()`` raises ValueError whose message starts with ``argument`` (or names it
    first, as ``pos: …``)."""
    with pytest.raises(ValueError, match=rf"^{re.escape(argument)}\b") as info:
        call()
    assert "Traceback" not in str(info.value)


def batched(positions: Tensor, rows: int) -> Tensor:
    """``positions`` ``([axes,] seq)`` as ``([axes,] rows, seq)``."""
    return positions.unsqueeze(-2).expand(*positions.shape[:-1], rows, positions.shape[-1])


def encoding_calls(encoding: nn.Module) -> list[tuple[str, str, Callable[[], Any]]]:
    """``(what, argument, call)``: the encoding's public call with one bad input each (on
    another device, of a wrong dtype or batch, out of range), by the hook it implements."""
    hooks = hooks_of(encoding)
    if isinstance(encoding, NoPE):
        return []  # takes nothing
    pos = case_positions(encoding)
    huge = pos + HUGE
    q = torch.randn(2, 4, SEQ, 8)
    call: Any = encoding
    if hooks.token_embedding:
        tokens = torch.randint(0, 50, (2, SEQ))
        return [
            ("device", "positions", lambda: call(tokens, pos.to(META))),
            ("dtype", "tokens", lambda: call(tokens.float(), pos)),
            ("batch", "positions", lambda: call(tokens, batched(pos, 3))),
            ("range", "positions", lambda: call(tokens, huge)),
        ]
    if hooks.additive:
        calls = [
            ("dtype", "positions", lambda: call(pos.bool())),
            ("range", "positions", lambda: call(huge)),
        ]
        if list(encoding.parameters()):  # else any device serves: the output follows
            calls.append(("device", "positions", lambda: call(pos.to(META))))
        return calls
    if hooks.segments:  # a segment method's public call is attend (it rotates per segment)

        def seg(**kw: Any) -> Tensor:
            args = {"q": q, "k": q, "v": q, "pos": encoding, "q_pos": pos, "k_pos": pos}
            args.update(kw)
            qkv = (args.pop("q"), args.pop("k"), args.pop("v"))
            return attend(*qkv, causal=True, **args)

        return [
            ("device", "q_pos", lambda: seg(q_pos=pos.to(META))),
            ("dtype", "q", lambda: seg(q=q.long())),
            ("batch", "q_pos", lambda: seg(q_pos=batched(pos, 3))),
            ("range", "q_pos", lambda: seg(q_pos=huge, k_pos=huge)),
        ]
    if hooks.rotary or hooks.contextual:
        return [
            ("device", "q_pos", lambda: call(q, q, pos.to(META), pos)),
            ("dtype", "q", lambda: call(q.long(), q, pos, pos)),
            ("batch", "q_pos", lambda: call(q, q, batched(pos, 3), pos)),
            ("range", "q_pos", lambda: call(q, q, huge, pos)),
        ]
    if hooks.bias:
        return [
            ("device", "k_pos", lambda: call(pos, pos.to(META))),
            ("dtype", "q_pos", lambda: call(pos.bool(), pos)),
            ("batch", "q_pos", lambda: call(batched(pos, 2), batched(pos, 3))),
            ("range", "q_pos", lambda: call(huge, pos)),
        ]
    if hooks.token_state or hooks.token_transform:  # FoX, PaTH: forward(x) of hidden states
        x = torch.randn(2, SEQ, encoding.dim)
        return [
            ("device", "x", lambda: call(x.to(META))),
            ("dtype", "x", lambda: call(x.long())),
            ("shape", "x", lambda: call(x[..., :-1])),
        ]
    if hooks.token_phases:  # CARoPE: forward(q, k, x) of hidden states
        x = torch.randn(2, SEQ, encoding.dim)
        return [
            ("device", "x", lambda: call(q, q, x.to(META))),
            ("dtype", "x", lambda: call(q, q, x.long())),
            ("shape", "x", lambda: call(q, q, x[..., :-1])),
            ("shape", "k", lambda: call(q, q[:, :, :-1], x)),
        ]
    if hooks.weights:  # stick-breaking: forward(scores, visible)
        logits = torch.randn(2, 4, SEQ, SEQ)
        return [
            ("dtype", "scores", lambda: call(logits.long())),
            ("shape", "scores", lambda: call(logits[0])),
            ("dtype", "visible", lambda: call(logits, logits)),
            ("shape", "visible", lambda: call(logits, torch.ones(3, SEQ, SEQ, dtype=torch.bool))),
        ]
    assert hooks.scores, type(encoding).__name__
    scores = torch.randn(2, 4, SEQ, SEQ)
    if hooks.head_dim is not None:  # CoPE reads q: forward(q, scores)
        return [
            ("device", "scores", lambda: call(q, scores.to(META))),
            ("dtype", "q", lambda: call(q.long(), scores)),
            ("batch", "q", lambda: call(torch.randn(3, 4, SEQ, 8), scores)),
        ]
    return [  # DAPE: forward(scores, q_pos, k_pos)
        ("device", "q_pos", lambda: call(scores, pos.to(META), pos)),
        ("dtype", "scores", lambda: call(scores.long(), pos, pos)),
        ("batch", "q_pos", lambda: call(scores, batched(pos, 3), pos)),
        ("range", "q_pos", lambda: call(scores, huge, huge)),
    ]


@pytest.mark.parametrize(("name", "kwargs"), registered_cases())
def test_every_encoding_names_its_bad_argument(name: str, kwargs: dict) -> None:
    encoding = build_case(name, kwargs)
    for what, argument, call in encoding_calls(encoding):
        try:
            raises_naming(argument, call)
        except BaseException as error:  # which input, in the report
            raise AssertionError(f"{what} → {argument}: {error}") from error
    if hooks_of(encoding).additive and not list(encoding.parameters()):
        # parameter-free: nothing ties the inputs to a device, the output follows them
        assert encoding(case_positions(encoding).to(META)).device == META


@pytest.mark.parametrize(("name", "kwargs"), registered_cases())
def test_encoding_head_dim_must_be_the_attentions(name: str, kwargs: dict) -> None:
    """An encoding that reads q or k channels (rotary, segment methods, contextual terms,
    scores readers) with another head_dim is refused at construction, naming pos and
    head_dim; a smaller one used to rotate part of each head silently."""
    spec = encoding_spec(name)
    encoding = build_case(name, kwargs, head_dim=16)  # the attention's is 32 / 4 = 8
    hooks = hooks_of(encoding)
    causal = not spec.needs_grid
    # rotary, contextual terms, a scores reader reading q; stick-breaking's r_h (value width)
    if hooks.head_dim is not None or hooks.weights is not None:
        with pytest.raises(ValueError, match=r"^pos: .*head_dim=16 .*head_dim is 8"):
            Attention(32, 4, pos=encoding, causal=causal)
    elif not hooks.token_embedding:
        Attention(32, 4, pos=encoding, causal=causal)  # a bias or additive: no head width


def test_model_refuses_a_head_dim_in_pos_kwargs() -> None:
    config = ModelConfig(dim=32, num_heads=4, pos="rope", pos_kwargs={"head_dim": 4})
    with pytest.raises(ValueError, match=r"^pos: RotaryEmbedding has head_dim=4"):
        DecoderLM(config)


@pytest.mark.parametrize(("name", "kwargs"), registered_cases())
def test_causal_only_encodings_are_refused_by_bidirectional_attention(
    name: str, kwargs: dict
) -> None:
    """The flag lives on the encoding (``causal_only``: xPos, CoPE, the segment methods) and
    agrees with the registry; Attention, attend and the encoder check it."""
    spec = encoding_spec(name)
    encoding = build_case(name, kwargs)
    assert bool(getattr(encoding, "causal_only", False)) == spec.causal_only
    if hooks_of(encoding).token_embedding or hooks_of(encoding).additive:
        return  # not an attention's encoding
    if spec.causal_only:
        with pytest.raises(ValueError, match=r"^pos: .* causal attention only"):
            Attention(32, 4, pos=encoding, causal=False)
        q = torch.randn(1, 4, 6, 8)
        with pytest.raises(ValueError, match=r"^pos: .* causal attention only"):
            attend(q, q, q, pos=encoding, causal=False)
        with pytest.raises(ValueError, match=r"^pos: .* causal attention only"):
            EncoderClassifier(ModelConfig(dim=32, num_heads=4, pos=name, pos_kwargs=kwargs), 2)
    else:
        Attention(32, 4, pos=encoding, causal=False)


# ---- modules and functions ------------------------------------------------------------------


def _attention(pos: nn.Module | None = None, **kw: Any) -> Attention:
    torch.manual_seed(0)
    return Attention(32, 4, pos=pos, **kw)


def _filled_cache(attn: Attention, batch: int = 2) -> KVCache:
    cache = KVCache()
    attn(torch.randn(batch, 3, 32), cache=cache)
    return cache


def _rope() -> nn.Module:
    from posenc.rotary import RotaryEmbedding

    return RotaryEmbedding(8)


def _mrope() -> nn.Module:
    from posenc.rotary import MultiAxisRotary

    return MultiAxisRotary.mrope(8, sections=(2, 1, 1))


X = torch.randn(2, 5, 32)
POS = torch.arange(5)
ONES = torch.ones(2, 5, dtype=torch.bool)
DOCS = torch.zeros(2, 5, dtype=torch.long)
Q = torch.randn(2, 4, 5, 8)
LM = ModelConfig(vocab_size=50, dim=32, depth=2, num_heads=4, pos="rope")
TOKENS = torch.randint(0, 50, (2, 5))


def _lm() -> DecoderLM:
    torch.manual_seed(0)
    return DecoderLM(LM)


def _encoder() -> EncoderClassifier:
    torch.manual_seed(0)
    return EncoderClassifier(LM, num_classes=2)


def _other_layers_cache() -> Tensor:
    """A cache filled by an attention of another head count, then given to this one."""
    cache = _filled_cache(_attention(num_kv_heads=2))
    return _attention()(X, cache=cache)


def _other_axes_cache() -> Tensor:
    """A cache of a one-axis RoPE layer, then given to an M-RoPE layer."""
    cache = _filled_cache(_attention(_rope()))
    return _attention(_mrope())(X, cache=cache)


def _shared_cache() -> Tensor:
    """One KVCache object for every layer (``[KVCache()] * depth``)."""
    model = _lm()
    return model(TOKENS, cache=[KVCache()] * 2)


CALLS: list[tuple[str, str, Callable[[], Any]]] = [
    # Attention
    ("attention-x-float64", "x", lambda: _attention()(X.double())),
    ("attention-x-int", "x", lambda: _attention()(X.long())),
    ("attention-x-device", "x", lambda: _attention()(X.to(META))),
    ("attention-positions-device", "positions", lambda: _attention(_rope())(X, POS.to(META))),
    ("attention-positions-batch", "positions", lambda: _attention(_rope())(X, batched(POS, 3))),
    ("attention-positions-dtype", "positions", lambda: _attention(_rope())(X, POS.bool())),
    ("attention-positions-range", "positions", lambda: _attention(_rope())(X, POS + HUGE)),
    (
        "attention-padding-device",
        "key_padding_mask",
        lambda: _attention()(X, key_padding_mask=ONES.to(META)),
    ),
    (
        "attention-padding-batch",
        "key_padding_mask",
        lambda: _attention()(X, key_padding_mask=ONES[:1]),
    ),
    (
        "attention-documents-device",
        "document_ids",
        lambda: _attention()(X, document_ids=DOCS.to(META)),
    ),
    (
        "attention-documents-batch",
        "document_ids",
        lambda: _attention()(X, document_ids=torch.zeros(3, 5, dtype=torch.long)),
    ),
    (
        "attention-mask-device",
        "attn_mask",
        lambda: _attention()(X, attn_mask=torch.ones(5, 5, dtype=torch.bool, device=META)),
    ),
    ("attention-cache-dict", "cache", lambda: _attention()(X, cache={})),  # type: ignore[arg-type]
    (
        "attention-cache-batch",
        "cache",
        lambda: _attention()(X, cache=_filled_cache(_attention(), 3)),
    ),
    ("attention-cache-heads", "cache", _other_layers_cache),
    ("attention-cache-axes", "cache", _other_axes_cache),
    # attend
    ("attend-q-int", "q", lambda: attend(Q.long(), Q, Q, causal=True)),
    ("attend-q_pos-device", "q_pos", lambda: attend(Q, Q, Q, q_pos=POS.to(META), causal=True)),
    ("attend-k_pos-batch", "k_pos", lambda: attend(Q, Q, Q, k_pos=batched(POS, 3), causal=True)),
    (
        "attend-padding-device",
        "key_padding_mask",
        lambda: attend(Q, Q, Q, key_padding_mask=ONES.to(META), causal=True),
    ),
    (
        "attend-documents-batch",
        "document_ids",
        lambda: attend(Q, Q, Q, document_ids=torch.zeros(3, 5, dtype=torch.long), causal=True),
    ),
    (
        "attend-mask-device",
        "attn_mask",
        lambda: attend(
            Q, Q, Q, attn_mask=torch.ones(5, 5, dtype=torch.bool, device=META), causal=True
        ),
    ),
    # DecoderLM
    ("lm-tokens-device", "tokens", lambda: _lm()(TOKENS.to(META))),
    ("lm-tokens-dtype", "tokens", lambda: _lm()(TOKENS.float())),
    ("lm-positions-device", "positions", lambda: _lm()(TOKENS, POS.to(META))),
    ("lm-positions-batch", "positions", lambda: _lm()(TOKENS, batched(POS, 3))),
    (
        "lm-padding-device",
        "key_padding_mask",
        lambda: _lm()(TOKENS, key_padding_mask=ONES.to(META)),
    ),
    (
        "lm-documents-batch",
        "document_ids",
        lambda: _lm()(TOKENS, document_ids=torch.zeros(3, 5, dtype=torch.long)),
    ),
    ("lm-cache-length", "cache", lambda: _lm()(TOKENS, cache=[KVCache()])),
    ("lm-cache-dicts", "cache", lambda: _lm()(TOKENS, cache=[{}, {}])),  # type: ignore[list-item]
    ("lm-cache-shared", "cache", _shared_cache),
    # EncoderClassifier
    ("encoder-tokens-device", "tokens", lambda: _encoder()(TOKENS.to(META))),
    ("encoder-positions-device", "positions", lambda: _encoder()(TOKENS, POS.to(META))),
    ("encoder-positions-dtype", "positions", lambda: _encoder()(TOKENS, POS.bool())),
    (
        "encoder-padding-batch",
        "key_padding_mask",
        lambda: _encoder()(TOKENS, key_padding_mask=ONES[:1]),
    ),
]


@pytest.mark.parametrize(("argument", "call"), [pytest.param(a, c, id=i) for i, a, c in CALLS])
def test_modules_name_their_bad_argument(argument: str, call: Callable[[], Any]) -> None:
    raises_naming(argument, call)


def _ordered_randomized_past_max_length() -> Any:
    model = DecoderLM(
        ModelConfig(
            vocab_size=50,
            dim=32,
            num_heads=4,
            pos="rope",
            pos_kwargs={"randomized": {"max_length": 8, "evaluation": "ordered"}},
        )
    ).eval()
    cache = model.new_cache()
    model(TOKENS[:, :5], cache=cache)
    return model(TOKENS[:, :4], cache=cache)  # decoding on to position 8


def _fractional_grid() -> Any:
    from posenc.positions.multimodal import mrope_position_ids

    return mrope_position_ids(torch.tensor([[0, 1, 1, 1, 1, 0]]), [[1, 4.5, 4]])


def _qwen3_video_without_separator() -> Any:
    from posenc.positions.multimodal import sequence_position_ids

    return sequence_position_ids([("text", 1), ("video", (2, 4, 4))], version="qwen3_vl")


def _zero_grid() -> Any:
    from posenc.rotary import rescaled_grid_positions

    return rescaled_grid_positions(0, 2, reference=(4, 4))


def _prefix_beyond_table() -> Any:
    from posenc.additive.learned_grid import resample_grid_table

    return resample_grid_table(torch.randn(5, 8), (3, 3), prefix_tokens=9)


def _odd_head_dim() -> Any:
    from posenc.integrations.hf import frequencies_from_config

    return frequencies_from_config({"head_dim": 7, "rope_theta": 1e4})


def _document_mask_batches() -> Any:
    from posenc.positions import document_mask

    return document_mask(DOCS, torch.zeros(3, 5, dtype=torch.long))


FUNCTION_CALLS: list[tuple[str, str, Callable[[], Any]]] = [
    ("document-mask-batch", "k_document_ids", _document_mask_batches),
    ("randomized-ordered-past-max_length", "positions", _ordered_randomized_past_max_length),
    ("mrope-fractional-grid", r"image_grid_thw\[0\]", _fractional_grid),
    ("qwen3-video-frames", "frame_separator", _qwen3_video_without_separator),
    ("rescaled-grid-zero-size", r"sizes\[0\]", _zero_grid),
    ("resample-prefix-tokens", "prefix_tokens", _prefix_beyond_table),
    ("hf-odd-head_dim", "head_dim", _odd_head_dim),
]


@pytest.mark.parametrize(
    ("argument", "call"), [pytest.param(a, c, id=i) for i, a, c in FUNCTION_CALLS]
)
def test_functions_name_their_bad_argument(argument: str, call: Callable[[], Any]) -> None:
    with pytest.raises(ValueError, match=rf"^{argument}"):
        call()


# Integer arguments: any integral scalar a user naturally passes (a numpy integer from an array,
# a 0-d tensor from ``x.shape``-like arithmetic on tensors) is read as the int it holds; bool,
# floats (whole or not), strings and tensors of one dimension or more are refused with one
# message that names the argument, its range and the accepted types.

INTEGRAL = [
    pytest.param(3, id="int"),
    pytest.param(np.int64(3), id="np.int64"),
    pytest.param(np.int32(3), id="np.int32"),
    pytest.param(np.uint8(3), id="np.uint8"),
    pytest.param(torch.tensor(3), id="tensor-int64"),
    pytest.param(torch.tensor(3, dtype=torch.int16), id="tensor-int16"),
]
NOT_INTEGRAL = [
    pytest.param(True, id="bool"),
    pytest.param(np.bool_(True), id="np.bool_"),
    pytest.param(torch.tensor(True), id="tensor-bool"),
    pytest.param(3.0, id="float"),
    pytest.param(3.5, id="fraction"),
    pytest.param(np.float64(3.0), id="np.float64"),
    pytest.param(torch.tensor(3.0), id="tensor-float"),
    pytest.param(torch.tensor([3]), id="tensor-1d"),
    pytest.param("3", id="str"),
    pytest.param(None, id="None"),
]


@pytest.mark.parametrize("value", INTEGRAL)
def test_integer_checks_read_any_integral_scalar(value: object) -> None:
    for check in (check_positive_int, check_non_negative_int):
        out = check("count", value)
        assert type(out) is int and out == 3
    assert check_int("count", value, low=3, high=3) == 3


@pytest.mark.parametrize("value", NOT_INTEGRAL)
@pytest.mark.parametrize(
    ("check", "allowed"),
    [
        (check_positive_int, "a positive integer (>= 1)"),
        (check_non_negative_int, "a non-negative integer (>= 0)"),
        (lambda name, v: check_int(name, v, low=2, high=9), "an integer in [2, 9]"),
    ],
)
def test_integer_checks_refuse_other_values_with_one_message(
    value: object, check: Callable[[str, object], int], allowed: str
) -> None:
    expected = f"count must be {allowed}: an int, numpy integer or 0-d integer tensor; got "
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}"):
        check("count", value)


@pytest.mark.parametrize(
    ("value", "check", "message"),
    [
        (0, check_positive_int, "count must be a positive integer (>= 1), got 0"),
        (np.int64(0), check_positive_int, "count must be a positive integer (>= 1), got 0"),
        (torch.tensor(-1), check_non_negative_int, "count must be a non-negative integer (>= 0)"),
        (np.int8(10), lambda n, v: check_int(n, v, low=2, high=9), "count must be an integer in"),
    ],
)
def test_integer_checks_name_the_range_for_an_integer_outside_it(
    value: object, check: Callable[[str, object], int], message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        check("count", value)


def _library_calls() -> list[tuple[str, Callable[[Any], Any]]]:
    """``(what, call(n))``: public calls whose integer argument ``n`` is read through
    ``check_int``; each returns something comparable (tensors, or ints it stored)."""
    from posenc.additive.sinusoidal_nd import sinusoidal_2d
    from posenc.bias.alibi import alibi_slopes
    from posenc.positions import grid_positions
    from posenc.rotary.frequencies import rope_inv_freq
    from posenc.rotary.scaling import YaRN
    from posenc.softmax.query_scale import QueryScale

    def attention(n: Any) -> tuple[int, ...]:
        attn = Attention(8 * n, n, num_kv_heads=n)
        return attn.dim, attn.num_heads, attn.num_kv_heads, attn.head_dim

    def model(n: Any) -> tuple[object, ...]:
        c = ModelConfig(vocab_size=10 * n, dim=8 * n, num_heads=n, depth=n, nope_layers=(n - 1,))
        return c.vocab_size, c.dim, c.num_heads, c.depth, c.nope_layers

    def generator() -> torch.Generator:
        return torch.Generator().manual_seed(0)

    return [
        ("rope_inv_freq", lambda n: rope_inv_freq(2 * n)),
        ("fope_inv_freq.num_frequencies", lambda n: fope_inv_freq(16, num_frequencies=n)),
        ("alibi_slopes", alibi_slopes),
        ("sinusoidal_2d", lambda n: sinusoidal_2d(n, n, 8)),
        ("grid_positions", lambda n: grid_positions(n, n, offset=n)),
        (
            "randomized_positions",
            lambda n: randomized_positions(n, 10 * n, batch=n, generator=generator()),
        ),
        ("Attention", attention),
        ("ModelConfig", model),
        ("QueryScale.shift", lambda n: QueryScale("log_n", length=8 * n, shift=n).shift),
        (
            "YaRN",
            lambda n: (
                YaRN(4.0, original_max_position_embeddings=64 * n).original_max_position_embeddings
            ),
        ),
    ]


@pytest.mark.parametrize("value", [np.int64(3), torch.tensor(3)], ids=["np.int64", "tensor"])
@pytest.mark.parametrize(("what", "call"), _library_calls(), ids=[w for w, _ in _library_calls()])
def test_library_integer_arguments_read_integral_scalars(
    what: str, call: Callable[[Any], Any], value: object
) -> None:
    expected, got = call(3), call(value)
    if isinstance(expected, Tensor):
        assert_close(got, expected, rtol=0, atol=0)
    else:
        assert got == expected
        leaves = got if isinstance(got, tuple) else (got,)
        flat = [x for leaf in leaves for x in (leaf if isinstance(leaf, tuple) else (leaf,))]
        assert all(type(x) is int for x in flat), got


@pytest.mark.parametrize(
    ("argument", "call"),
    [
        (
            "nope_layers",
            lambda: ModelConfig(vocab_size=10, dim=8, num_heads=2, depth=2, nope_layers=(1.0,)),
        ),
        (
            "max_length",
            lambda: randomized_positions(2, 8.0),  # type: ignore[arg-type]
        ),
        (
            "num_frequencies",
            lambda: fope_inv_freq(16, num_frequencies=np.float64(2)),  # type: ignore[arg-type]
        ),
    ],
)
def test_library_integer_arguments_refuse_floats_with_the_shared_message(
    argument: str, call: Callable[[], Any]
) -> None:
    with pytest.raises(ValueError, match=rf"^{argument} must be .*: an int, numpy integer or 0-d"):
        call()
