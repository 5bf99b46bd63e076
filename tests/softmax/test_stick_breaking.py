"""Stick-breaking attention: the formula by loops in float64, backends, the KV cache, model."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor
from torch.testing import assert_close

from posenc.attention import Attention, Backend, KVCache, attend
from posenc.encoding import AttentionWeights
from posenc.models import DecoderLM, EncoderClassifier, ModelConfig
from posenc.softmax.stick_breaking import StickBreaking, stick_breaking_weights

HEADS, HEAD_DIM = 2, 4


def loop_attention(
    q: Tensor, k: Tensor, v: Tensor, r: Tensor | None, *, attend_current: bool
) -> Tensor:
    """``o_i = Σ_{j<i} β_ij ∏_{j<k<i} (1 − β_ik) v_j + (1 − Σ A_ij) r_h``, Python floats;
    the queries are the last ``q_len`` keys (bottom-right aligned)."""
    batch, heads, rows, dim = q.shape
    keys = k.shape[2]
    scale = dim**-0.5
    out = torch.zeros(batch, heads, rows, v.shape[-1], dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            for row in range(rows):
                i = keys - rows + row
                last = i + 1 if attend_current else i
                beta = [
                    1 / (1 + math.exp(-scale * float(q[b, h, row] @ k[b, h, j])))
                    for j in range(last)
                ]
                total = 0.0
                for j in range(last):
                    weight = beta[j] * math.prod(1 - beta[m] for m in range(j + 1, last))
                    out[b, h, row] += weight * v[b, h, j]
                    total += weight
                if r is not None:
                    out[b, h, row] += (1 - total) * r[h]
    return out


@pytest.mark.parametrize("attend_current", [False, True])
@pytest.mark.parametrize("backend", ["sdpa", "chunked"])
def test_attend_equals_the_formula_in_float64(attend_current: bool, backend: str) -> None:
    torch.manual_seed(0)
    sb = StickBreaking(HEADS, HEAD_DIM, attend_current=attend_current, dtype=torch.float64)
    with torch.no_grad():
        sb.remainder_vector.normal_()
    q = torch.randn(2, HEADS, 5, HEAD_DIM, dtype=torch.float64) * 2
    k, v = torch.randn(2, 2, HEADS, 7, HEAD_DIM, dtype=torch.float64).unbind(0)
    chosen = Backend(backend, block_size=2) if backend == "chunked" else Backend(backend)
    out = attend(q, k, v, pos=sb, causal=True, backend=chosen)
    expected = loop_attention(q, k, v, sb.remainder_vector.detach(), attend_current=attend_current)
    assert_close(out, expected, rtol=0, atol=1e-12)


def test_weights_take_shares_of_what_is_left() -> None:
    """β = 1/2 everywhere: the newest key takes 1/2, the next 1/4, …; hidden keys nothing."""
    scores = torch.zeros(1, 1, 1, 4, dtype=torch.float64)
    weights = stick_breaking_weights(scores, None)
    assert_close(
        weights.flatten(), torch.tensor([1 / 16, 1 / 8, 1 / 4, 1 / 2], dtype=torch.float64)
    )
    visible = torch.tensor([True, True, False, True])
    weights = stick_breaking_weights(scores, visible)
    assert_close(weights.flatten(), torch.tensor([1 / 8, 1 / 4, 0, 1 / 2], dtype=torch.float64))


@pytest.mark.parametrize("backend", ["sdpa", "chunked", "auto"])
def test_decoding_equals_the_full_forward(backend: str) -> None:
    torch.manual_seed(0)
    sb = StickBreaking(HEADS, 8, dtype=torch.float64)
    with torch.no_grad():
        sb.remainder_vector.normal_()
    chosen = Backend("chunked", block_size=3) if backend == "chunked" else backend
    attn = Attention(16, HEADS, num_kv_heads=1, pos=sb, backend=chosen, dtype=torch.float64)
    x = torch.randn(2, 10, 16, dtype=torch.float64)
    real = torch.ones(2, 10, dtype=torch.bool)
    real[1, :2] = False  # left padding: hidden keys break nothing
    with torch.no_grad():
        full = attn(x, key_padding_mask=real)
        cache = KVCache()
        steps = [attn(x[:, :4], key_padding_mask=real[:, :4], cache=cache)]
        steps += [
            attn(x[:, i : i + 1], key_padding_mask=real[:, i : i + 1], cache=cache)
            for i in range(4, 10)
        ]
    assert_close(torch.cat(steps, dim=1), full)
    # the padded row's real tokens see what the unpadded sequence gives them
    with torch.no_grad():
        assert_close(full[1, 2:], attn(x[1:, 2:])[0])


def test_gradients_of_sdpa_and_chunked_agree_and_gradcheck() -> None:
    torch.manual_seed(0)
    sb = StickBreaking(HEADS, HEAD_DIM, dtype=torch.float64)
    q, k, v = torch.randn(3, 1, HEADS, 6, HEAD_DIM, dtype=torch.float64).unbind(0)
    grads = []
    for backend in (Backend("sdpa"), Backend("chunked", block_size=2)):
        leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
        sb.zero_grad()
        attend(*leaves, pos=sb, causal=True, backend=backend).pow(2).sum().backward()
        grads.append([x.grad for x in leaves] + [sb.remainder_vector.grad.clone()])
    for a, b in zip(*grads, strict=True):
        assert_close(a, b)

    def out(r: Tensor, q: Tensor) -> Tensor:
        return attend(q, k, v, pos=_Bound(sb, r), causal=True)

    r = torch.randn(HEADS, HEAD_DIM, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(out, (r, q.clone().requires_grad_(True)))


class _Bound(AttentionWeights):
    """``sb`` with its remainder vector replaced (gradcheck of the learnable part)."""

    def __init__(self, sb: StickBreaking, vector: Tensor) -> None:
        super().__init__()
        self.sb, self.vector = sb, vector
        self.attend_current = sb.attend_current
        self.num_heads = sb.num_heads

    def attention_weights(self, scores: Tensor, visible: Tensor | None) -> Tensor:
        return self.sb.attention_weights(scores, visible)

    def remainder_term(self, remaining: Tensor) -> Tensor:
        return remaining.unsqueeze(-1) * self.vector.unsqueeze(-2)


def test_model_decodes_and_backends_and_encoders_refuse() -> None:
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=32, dim=16, depth=2, num_heads=HEADS, pos="stick_breaking")
    model = DecoderLM(config).eval()
    tokens = torch.randint(0, 32, (2, 9))
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        steps = [model(tokens[:, i : i + 1], cache=cache) for i in range(9)]
    assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"^pos: StickBreaking is defined for causal"):
        EncoderClassifier(config, num_classes=2)
    with pytest.raises(ValueError, match=r"^backend 'flex' cannot serve StickBreaking"):
        Attention(16, HEADS, pos=StickBreaking(HEADS, 8), backend="flex")


def test_without_a_remainder_the_first_token_outputs_zero() -> None:
    sb = StickBreaking(HEADS, HEAD_DIM, remainder=False)
    q = torch.randn(1, HEADS, 3, HEAD_DIM)
    out = attend(q, q, q, pos=sb, causal=True)
    assert bool((out[:, :, 0] == 0).all()) and sb.remainder_vector is None


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"num_heads": 0, "head_dim": 4}, "num_heads"),
        ({"num_heads": 2, "head_dim": 0}, "head_dim"),
        ({"num_heads": 2, "head_dim": 4, "attend_current": 1}, "attend_current"),
        ({"num_heads": 2, "head_dim": 4, "remainder": "yes"}, "remainder"),
        ({"num_heads": 2, "head_dim": 4, "dtype": torch.long}, "dtype"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, argument: str) -> None:
    with pytest.raises(ValueError, match=rf"^{argument}\b"):
        StickBreaking(**kwargs)


def test_softmax_wrappers_around_it_are_refused() -> None:
    from posenc.softmax.sinks import LearnedSinks
    from posenc.softmax.softcap import SoftCap

    for wrapped in (SoftCap(StickBreaking(HEADS, 8)), LearnedSinks(HEADS, StickBreaking(HEADS, 8))):
        with pytest.raises(ValueError, match=r"^pos: .* wraps stick-breaking attention"):
            Attention(16, HEADS, pos=wrapped)


@pytest.mark.parametrize("remainder", [True, False])
def test_a_head_count_that_differs_from_the_attention_is_refused_at_construction(
    remainder: bool,
) -> None:
    """As for PoPE, FoX and sinks: at construction, not at the first forward (with a
    remainder) or never (without one, where the weights would broadcast silently)."""
    with pytest.raises(ValueError, match=r"^pos: the encoding has num_heads=4 .* num_heads=2"):
        Attention(16, HEADS, pos=StickBreaking(4, 8, remainder=remainder))
    q = torch.randn(1, HEADS, 3, 8)
    with pytest.raises(ValueError, match=r"^pos: the encoding has num_heads=4"):
        attend(q, q, q, pos=StickBreaking(4, 8, remainder=remainder), causal=True)


def test_a_head_dim_that_differs_from_the_attention_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match=r"^pos: StickBreaking has head_dim=4 .* head_dim is 8"):
        Attention(16, HEADS, pos=StickBreaking(HEADS, 4))
