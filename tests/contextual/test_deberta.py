"""DeBERTa disentangled attention: transformers parity, the float64 formula, backends, errors."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from posenc.attention import Attention, Backend, KVCache, attend
from posenc.attention.plans.relative import edge_reach
from posenc.contextual.deberta import (
    DebertaRelative,
    DebertaRelativeEmbedding,
    deberta_index,
    deberta_log_bucket,
    disentangled_logits,
)
from tests.attention.test_backends import run
from tests.attention.test_flash import record_plans

BOTH = ("c2p", "p2c")
TERMS = [BOTH, ("c2p",), ("p2c",)]
# transformers divides by sqrt(head_dim · s) rounded to float32: head dims that make
# head_dim · s a perfect square keep that float32 value exact, so float64 parity is tight.
HEAD_DIM = {3: 12, 2: 8}


def bucket_float64(delta: int, buckets: int, max_relative: int) -> int:
    """The log bucket of one distance in float64 (the paper-side reading, not the code)."""
    mid = buckets // 2
    if abs(delta) <= mid:
        return delta
    steps = math.ceil(math.log(abs(delta) / mid) / math.log((max_relative - 1) / mid) * (mid - 1))
    return int(math.copysign(mid + steps, delta))


def direct_terms(
    q: torch.Tensor,
    k: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    pos: DebertaRelative,
    *,
    paper_p2c: bool = False,
) -> torch.Tensor:
    """``(q_i·K^r[c] + k_j·Q^r[c]) / sqrt(d s)`` pair by pair, float64, ``c = clamp(b(i − j)
    + k)``; ``paper_p2c`` reads p2c at the paper's ``δ(j, i)`` instead."""
    batch, heads, q_len, d = q.shape
    k_len, span = k.shape[2], pos.span
    keys, queries = (t.detach() if t is not None else None for t in pos.position_tables(q.dtype))
    qp = q_pos.expand(batch, q_len) if q_pos.dim() == 1 else q_pos
    kp = k_pos.expand(batch, k_len) if k_pos.dim() == 1 else k_pos

    def row(delta: int) -> int:
        if pos.position_buckets:
            delta = bucket_float64(delta, pos.position_buckets, pos.max_relative_positions)
        return max(0, min(2 * span - 1, delta + span))

    out = torch.zeros(batch, heads, q_len, k_len, dtype=torch.float64)
    for b in range(batch):
        for i in range(q_len):
            for j in range(k_len):
                delta = int(qp[b, i]) - int(kp[b, j])
                for h in range(heads):
                    if keys is not None:
                        out[b, h, i, j] += q[b, h, i] @ keys[h, row(delta)]
                    if queries is not None:
                        p2c_row = row(-delta) if paper_p2c else row(delta)
                        out[b, h, i, j] += k[b, h, j] @ queries[h, p2c_row]
    return out / math.sqrt(d * (1 + len(pos.pos_att_type)))


def randomize(module: nn.Module, std: float = 0.3) -> None:
    """Trained weights are not at their init (LayerNorm included)."""
    for p in module.parameters():
        nn.init.normal_(p, std=std)


def bound(pos: DebertaRelative, heads: int, kv_heads: int | None = None) -> DebertaRelative:
    """Bind fresh float64 content projections for ``share_att_key`` outside an Attention."""
    kv = heads if kv_heads is None else kv_heads
    dtype = pos.embedding.weight.dtype
    q_proj = nn.Linear(pos.dim, heads * pos.head_dim, bias=False, dtype=dtype)
    k_proj = nn.Linear(pos.dim, kv * pos.head_dim, bias=False, dtype=dtype)
    randomize(q_proj)
    randomize(k_proj)
    pos.bind_projections(q_proj, k_proj)
    return pos


def make(terms: tuple[str, ...] = BOTH, **kwargs: Any) -> DebertaRelative:
    settings: dict[str, Any] = {"max_relative_positions": 12, "position_buckets": 6}
    settings.update(kwargs)
    heads, d = settings.pop("num_heads", 2), settings.pop("head_dim", 4)
    pos = DebertaRelative(
        heads, d, settings.pop("dim", 6), pos_att_type=terms, dtype=torch.float64, **settings
    )
    randomize(pos)
    return bound(pos, heads) if pos.share_att_key else pos


# --- transformers parity ----------------------------------------------------------------


def transformers_pair(
    buckets: int,
    share: bool,
    terms: tuple[str, ...],
    *,
    norm: bool = True,
    causal: bool = False,
    backend: Backend | str = "sdpa",
) -> tuple[Any, Any, Attention]:
    """transformers' one-layer DebertaV2Encoder (its table, LayerNorm and relative positions)
    and a posenc Attention holding the same weights. transformers' q/k/v projections have
    biases and posenc's have none: they are zeroed on the transformers side (with
    share_att_key its position projections are those same layers). The output projection is
    the identity so that posenc returns the context layer before transformers' dense."""
    deberta = pytest.importorskip("transformers.models.deberta_v2.modeling_deberta_v2")
    config_module = pytest.importorskip("transformers.models.deberta_v2.configuration_deberta_v2")
    heads, d = 4, HEAD_DIM[1 + len(terms)]
    dim = heads * d
    config = config_module.DebertaV2Config(
        hidden_size=dim,
        num_attention_heads=heads,
        num_hidden_layers=1,
        intermediate_size=8,
        relative_attention=True,
        max_relative_positions=32,
        position_buckets=buckets,
        pos_att_type=list(terms),
        share_att_key=share,
        norm_rel_ebd="layer_norm" if norm else "none",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    encoder = deberta.DebertaV2Encoder(config).double().eval()
    randomize(encoder)
    ref = encoder.layer[0].attention.self
    pos = DebertaRelative(
        heads,
        d,
        dim,
        max_relative_positions=32,
        position_buckets=buckets,
        pos_att_type=terms,
        share_att_key=share,
        norm_rel_ebd=norm,
        dtype=torch.float64,
    )
    attn = Attention(dim, heads, pos=pos, causal=causal, backend=backend, dtype=torch.float64)
    with torch.no_grad():
        for layer in (ref.query_proj, ref.key_proj, ref.value_proj):
            layer.bias.zero_()
        attn.q_proj.weight.copy_(ref.query_proj.weight)
        attn.k_proj.weight.copy_(ref.key_proj.weight)
        attn.v_proj.weight.copy_(ref.value_proj.weight)
        attn.out_proj.weight.copy_(torch.eye(dim))
        pos.embedding.weight.copy_(encoder.rel_embeddings.weight)
        if norm:
            assert pos.embedding.norm is not None
            pos.embedding.norm.load_state_dict(encoder.LayerNorm.state_dict())
        if pos.pos_key_proj is not None:
            pos.pos_key_proj.load_state_dict(ref.pos_key_proj.state_dict())
        if pos.pos_query_proj is not None:
            pos.pos_query_proj.load_state_dict(ref.pos_query_proj.state_dict())
    return encoder, ref, attn


@pytest.mark.parametrize("terms", TERMS, ids="+".join)
@pytest.mark.parametrize("share", [True, False], ids=["shared_key", "separate"])
@pytest.mark.parametrize("buckets", [0, 8], ids=["span32", "buckets8"])
def test_matches_transformers_disentangled_self_attention(
    buckets: int, share: bool, terms: tuple[str, ...]
) -> None:
    # 40 tokens: distances up to 39 pass both the span (8 or 32) and max_relative_positions.
    encoder, ref, attn = transformers_pair(buckets, share, terms)
    x = torch.randn(2, 40, attn.dim, dtype=torch.float64, requires_grad=True)
    everything = torch.ones(2, 1, 40, 40, dtype=torch.bool)
    relative = encoder.get_rel_pos(x)
    want, _ = ref(x, everything, relative_pos=relative, rel_embeddings=encoder.get_rel_embedding())
    got = attn(x)
    assert_close(got, want, rtol=1e-10, atol=1e-10)
    # Gradients of the input and of the shared table agree too.
    weights = torch.linspace(-1, 1, got.numel(), dtype=torch.float64).view_as(got)
    want_grads = torch.autograd.grad((want * weights).sum(), [x, encoder.rel_embeddings.weight])
    table = attn.pos.embedding.weight  # type: ignore[union-attr]
    got_grads = torch.autograd.grad((got * weights).sum(), [x, table])
    assert_close(got_grads, want_grads, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mask_kind", ["causal", "padding", "causal+padding"])
@pytest.mark.parametrize("norm", [True, False], ids=["layer_norm", "no_norm"])
def test_matches_transformers_under_masks_and_chunked(mask_kind: str, norm: bool) -> None:
    # transformers takes any (batch, 1, q, k) mask: causal order and right padding (no row
    # without a visible key, where transformers' softmax is uniform and posenc's row zero).
    chunked = Backend("chunked", block_size=8)
    causal = "causal" in mask_kind
    encoder, ref, attn = transformers_pair(8, True, BOTH, norm=norm, causal=causal, backend=chunked)
    x = torch.randn(3, 40, attn.dim, dtype=torch.float64)
    padding = torch.ones(3, 40, dtype=torch.bool)
    padding[1, 25:] = False
    padding[2, 33:] = False
    allowed = torch.ones(3, 1, 40, 40, dtype=torch.bool)
    kwargs: dict[str, Any] = {}
    if causal:
        allowed &= torch.ones(40, 40, dtype=torch.bool).tril()
    if "padding" in mask_kind:
        allowed &= padding[:, None, None, :]
        kwargs["key_padding_mask"] = padding
    with torch.no_grad():
        want, _ = ref(
            x,
            allowed,
            relative_pos=encoder.get_rel_pos(x),
            rel_embeddings=encoder.get_rel_embedding(),
        )
        got = attn(x, **kwargs)
    assert_close(got, want, rtol=1e-10, atol=1e-10)


# Distances where a float64 logarithm rounds the ceiling differently from transformers'
# float32 one (far beyond the span for most settings; at ±1643 inside it for (512, 4096)).
FLOAT32_CEILINGS = [-163184, -159665, -110319, 48671, -20467, -6395, 145455]


@pytest.mark.parametrize(
    ("buckets", "max_relative"),
    [(8, 32), (256, 512), (16, 64), (3, 10), (2, 5), (256, 1024), (512, 4096), (32, 128)],
)
def test_log_bucket_equals_transformers(buckets: int, max_relative: int) -> None:
    deberta = pytest.importorskip("transformers.models.deberta_v2.modeling_deberta_v2")
    far = torch.tensor([-(10**6), 10**6, 123457, *FLOAT32_CEILINGS])
    delta = torch.cat([torch.arange(-3000, 3001), far])
    want = deberta.make_log_bucket_position(delta, buckets, max_relative).to(torch.int64)
    got = deberta_log_bucket(delta, buckets, max_relative)
    assert got.dtype == torch.int64
    assert_close(got, want, rtol=0, atol=0)


def test_log_bucket_is_float32_like_transformers_not_exact() -> None:
    # Exact arithmetic puts distance 1643 in bucket 428 at (512, 4096); the checkpoints'
    # float32 logarithm (and this function) in 427, a row inside the span.
    assert bucket_float64(1643, 512, 4096) == 428
    got = deberta_log_bucket(torch.tensor([1643, -1643, 1642, 1644]), 512, 4096)
    assert got.tolist() == [427, -427, 427, 428]
    # Where the two agree (the settings the float64 formula tests below use): every row.
    delta = torch.arange(-200, 201)
    exact = torch.tensor([bucket_float64(int(x), 6, 12) for x in delta])
    assert_close(deberta_log_bucket(delta, 6, 12), exact, rtol=0, atol=0)


@pytest.mark.parametrize("buckets", [0, 8])
def test_index_equals_transformers_relative_positions(buckets: int) -> None:
    deberta = pytest.importorskip("transformers.models.deberta_v2.modeling_deberta_v2")
    x = torch.zeros(1, 50, 1)
    relative = deberta.build_relative_position(x, x, bucket_size=buckets, max_position=32)[0]
    span = buckets or 32
    got = deberta_index(
        torch.arange(50), torch.arange(50), max_relative_positions=32, position_buckets=buckets
    )
    assert_close(got, (relative + span).clamp(0, 2 * span - 1), rtol=0, atol=0)


# --- the formula, directly ----------------------------------------------------------------


@pytest.mark.parametrize("terms", TERMS, ids="+".join)
@pytest.mark.parametrize("share", [True, False], ids=["shared_key", "separate"])
@pytest.mark.parametrize(
    ("q_pos", "k_pos"),
    [
        (torch.arange(14), torch.arange(14)),  # self-attention, distances past M = 12
        (torch.arange(11, 14), torch.arange(14)),  # KV cache: 3 new tokens
        (
            torch.tensor([[0, 1, 2], [40, 41, 42]]),
            torch.tensor([[0, 3, 5, 9, 20], [2, 30, 41, 50, 70]]),
        ),
    ],
    ids=["self", "cache", "batched"],
)
def test_logit_term_matches_direct_formula(
    q_pos: torch.Tensor, k_pos: torch.Tensor, share: bool, terms: tuple[str, ...]
) -> None:
    pos = make(terms, share_att_key=share)
    generator = torch.Generator().manual_seed(3)
    q = torch.randn(2, 2, q_pos.shape[-1], 4, generator=generator, dtype=torch.float64)
    k = torch.randn(2, 2, k_pos.shape[-1], 4, generator=generator, dtype=torch.float64)
    got = pos(q, k, q_pos, k_pos)
    assert_close(got, direct_terms(q, k, q_pos, k_pos, pos), rtol=1e-12, atol=1e-12)
    if "p2c" in terms:  # the paper's δ(j, i) row for p2c is another function
        paper = direct_terms(q, k, q_pos, k_pos, pos, paper_p2c=True)
        assert not torch.allclose(got, paper)


@pytest.mark.parametrize("buckets", [0, 6])
def test_cache_rows_and_batched_positions_equal_full_computation(buckets: int) -> None:
    pos = make(position_buckets=buckets)
    q, k = (
        torch.randn(2, 2, 20, 4, dtype=torch.float64),
        torch.randn(2, 2, 20, 4, dtype=torch.float64),
    )
    full = pos(q, k, torch.arange(20), torch.arange(20))
    assert_close(pos(q[:, :, 15:], k, torch.arange(15, 20), torch.arange(20)), full[:, :, 15:])
    shifted = torch.stack([torch.arange(20), torch.arange(100, 120)])  # only distances count
    assert_close(pos(q, k, shifted, shifted), full)


@pytest.mark.parametrize("key_slice", [1, 3, 7])
def test_p2c_key_slices_equal_one_slice(key_slice: int) -> None:
    pos = make()
    keys, queries = pos.position_tables(torch.float64)
    q, k = (
        torch.randn(2, 2, 2, 4, dtype=torch.float64),
        torch.randn(2, 2, 17, 4, dtype=torch.float64),
    )
    index = deberta_index(
        torch.tensor([15, 16]), torch.arange(17), max_relative_positions=12, position_buckets=6
    )
    one = disentangled_logits(q, k, index, 0.5, position_keys=keys, position_queries=queries)
    sliced = disentangled_logits(
        q, k, index, 0.5, position_keys=keys, position_queries=queries, key_slice=key_slice
    )
    assert_close(sliced, one, rtol=1e-14, atol=1e-14)


def test_kv_cache_decoding_equals_full_forward() -> None:
    pos = DebertaRelative(
        4, 4, 16, max_relative_positions=12, position_buckets=6, dtype=torch.float64
    )
    randomize(pos, std=0.5)
    attn = Attention(16, 4, num_kv_heads=2, pos=pos, causal=True, dtype=torch.float64)
    x = torch.randn(2, 20, 16, dtype=torch.float64)
    cache = KVCache()
    steps = [attn(x[:, :13], cache=cache)]  # prefill, then one token at a time
    steps += [attn(x[:, t : t + 1], cache=cache) for t in range(13, 20)]
    assert_close(torch.cat(steps, dim=1), attn(x), rtol=1e-12, atol=1e-12)


def test_logit_scale_counts_the_terms() -> None:
    assert make(BOTH).logit_scale(4) == pytest.approx(1 / math.sqrt(12), rel=1e-15)
    assert make(("p2c",)).logit_scale(4) == pytest.approx(1 / math.sqrt(8), rel=1e-15)
    with pytest.raises(ValueError, match="head_dim"):
        make().logit_scale(8)


# --- backends, masks, gradients ----------------------------------------------------------

MASKS = {
    "causal": {"causal": True},
    "bidirectional": {"causal": False},
    "padding": {
        "causal": False,
        "key_padding_mask": torch.tensor([[True] * 16, [False] * 5 + [True] * 11]),
    },
    "cache": {"causal": True, "q_pos": torch.arange(10, 16), "k_pos": torch.arange(16)},
}


@pytest.mark.parametrize("grad", [True, False], ids=["blocks", "plan"])
@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("share", [True, False], ids=["shared_key", "separate"])
def test_chunked_equals_sdpa_outputs_and_gradients(
    share: bool, mask: str, grad: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checkpointed blocks with gradients; without, the flash-parts plan at default
    positions (blocks of 4 queries of 16 keys have keys past the rows' reach on both sides,
    and a band: test_plan_reach_is_where_the_rows_stop_changing)."""
    chosen = record_plans(monkeypatch)
    pos = make(share_att_key=share)
    kwargs = MASKS[mask]
    q_len = 6 if mask == "cache" else 16
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(2, 2, q_len, 4, generator=generator, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 16, 4, generator=generator, dtype=torch.float64) for _ in range(2))
    want, want_grads = run("sdpa", pos, q, k, v, kwargs, grad)
    got, got_grads = run(Backend("chunked", block_size=4), pos, q, k, v, kwargs, grad)
    planned = not grad and mask != "cache"  # the cache's positions are not token indices
    assert chosen == ["disentangled relative" if planned else None]
    assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert len(got_grads) == len(want_grads) == (3 + len(list(pos.parameters()))) * grad
    assert_close(got_grads, want_grads, rtol=1e-12, atol=1e-12)


def test_plan_reach_is_where_the_rows_stop_changing() -> None:
    pos = make()  # max_relative_positions 12, 6 buckets
    distance = torch.arange(-20, 21)
    rows = pos.distance_rows(distance)
    want = deberta_index(torch.zeros(1), -distance, max_relative_positions=12, position_buckets=6)
    assert torch.equal(rows, want[0])
    for by_distance in (rows[20:], rows[:21].flip(0)):  # past (δ ≥ 0), future (δ ≤ 0)
        reach = edge_reach(by_distance)
        assert 0 < reach <= 16 - 4  # the first block of 4 queries has keys beyond it
        assert bool((by_distance[reach:] == by_distance[-1]).all())
        assert by_distance[reach - 1] != by_distance[-1]


def test_attention_output_matches_manual_softmax_with_causal_and_padding_masks() -> None:
    pos = make()
    q, k, v = (torch.randn(2, 2, 9, 4, dtype=torch.float64) for _ in range(3))
    padding = torch.ones(2, 9, dtype=torch.bool)
    padding[1, 6:] = False
    got = attend(q, k, v, pos=pos, causal=True, key_padding_mask=padding)
    scale = 1 / math.sqrt(12)
    logits = scale * q @ k.transpose(-1, -2) + direct_terms(
        q, k, torch.arange(9), torch.arange(9), pos
    )
    allowed = torch.ones(9, 9, dtype=torch.bool).tril() & padding[:, None, None, :]
    want = logits.masked_fill(~allowed, float("-inf")).softmax(-1) @ v
    assert_close(got, want)


@pytest.mark.parametrize("share", [True, False], ids=["shared_key", "separate"])
def test_attention_module_with_grouped_keys_chunked_equals_sdpa(share: bool) -> None:
    # Grouped keys: under share_att_key the position keys come from k_proj's 2 heads and
    # are repeated per group, as attention repeats the content keys.
    first = DebertaRelative(
        4,
        4,
        16,
        max_relative_positions=12,
        position_buckets=6,
        share_att_key=share,
        dtype=torch.float64,
    )
    randomize(first)
    layers = [
        Attention(16, 4, num_kv_heads=2, pos=pos, causal=True, backend=backend, dtype=torch.float64)
        for pos, backend in ((first, "sdpa"), (first.new_layer(), Backend("chunked", block_size=3)))
    ]
    layers[1].load_state_dict(layers[0].state_dict())
    x = torch.randn(2, 11, 16, dtype=torch.float64)
    outs, grads = [], []
    for layer in layers:
        out = layer(x)
        (
            out * torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view_as(out)
        ).sum().backward()
        outs.append(out.detach())
        grads.append([p.grad.clone() for p in layer.parameters()])  # type: ignore[union-attr]
        layer.zero_grad()  # the shared table's gradient too
    assert_close(outs[1], outs[0], rtol=1e-12, atol=1e-12)
    assert_close(grads[1], grads[0], rtol=1e-12, atol=1e-12)
    with torch.no_grad():  # the forward-only plan (keys past the reach: 11 tokens, reach 6)
        assert_close(layers[1](x), outs[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("share", [True, False], ids=["shared_key", "separate"])
def test_gradcheck_embedding_norm_and_position_projections(share: bool) -> None:
    pos = make(share_att_key=share, dim=5, head_dim=3, max_relative_positions=6, position_buckets=4)
    generator = torch.Generator().manual_seed(2)
    q = torch.randn(1, 2, 4, 3, generator=generator, dtype=torch.float64)
    k = torch.randn(1, 2, 7, 3, generator=generator, dtype=torch.float64)
    q_pos, k_pos = torch.arange(3, 7), torch.arange(7)
    names = [n for n, _ in pos.named_parameters()]
    expected = {"embedding.weight", "embedding.norm.weight", "embedding.norm.bias"}
    if not share:
        expected |= {
            "pos_key_proj.weight",
            "pos_key_proj.bias",
            "pos_query_proj.weight",
            "pos_query_proj.bias",
        }
    assert set(names) == expected
    leaves = [p.detach().clone().requires_grad_(True) for p in pos.parameters()]

    def fn(*params: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(
            pos, dict(zip(names, params, strict=True)), (q, k, q_pos, k_pos)
        )

    assert torch.autograd.gradcheck(fn, tuple(leaves))


def test_gradcheck_layer_projections_under_shared_key() -> None:
    # With share_att_key the position keys and queries are the layer's own q_proj and k_proj
    # applied to P: their gradient flows through the content and the position terms.
    pos = DebertaRelative(
        2, 3, 5, max_relative_positions=6, position_buckets=4, dtype=torch.float64
    )
    randomize(pos)
    attn = Attention(5, 2, head_dim=3, pos=pos, causal=True, dtype=torch.float64)
    x = torch.randn(1, 6, 5, dtype=torch.float64)

    def fn(q_weight: torch.Tensor, k_weight: torch.Tensor) -> torch.Tensor:
        weights = {"q_proj.weight": q_weight, "k_proj.weight": k_weight}
        return torch.func.functional_call(attn, weights, (x,))

    leaves = (attn.q_proj.weight, attn.k_proj.weight)
    assert torch.autograd.gradcheck(
        fn, tuple(w.detach().clone().requires_grad_(True) for w in leaves)
    )


# --- sharing, binding --------------------------------------------------------------------


def test_layers_share_the_table_and_attention_binds_its_projections() -> None:
    first = DebertaRelative(4, 8, 32, max_relative_positions=64, position_buckets=16)
    second = first.new_layer()
    assert DebertaRelative.shared_across_layers is False
    assert second.embedding is first.embedding
    layers = nn.ModuleList([Attention(32, 4, pos=p, causal=False) for p in (first, second)])
    for layer in layers:
        pos = layer.pos
        assert isinstance(pos, DebertaRelative)
        assert pos._bound == (layer.q_proj, layer.k_proj)
        assert not any(p is layer.q_proj.weight for p in pos.parameters())  # not registered
        assert set(pos.state_dict()) == {
            "embedding.weight",
            "embedding.norm.weight",
            "embedding.norm.bias",
        }
    # One table in the model's parameters; the gradients of both layers add up in it.
    table = first.embedding.weight
    assert sum(p is table for p in layers.parameters()) == 1
    x = torch.randn(2, 10, 32)
    alone = []
    for layer in layers:
        (grad,) = torch.autograd.grad(layer(x).sum(), table)
        alone.append(grad)
    (together,) = torch.autograd.grad(layers[0](x).sum() + layers[1](x).sum(), table)
    assert_close(together, alone[0] + alone[1])
    assert not torch.allclose(alone[0], alone[1])
    with pytest.raises(ValueError, match="pos"):  # one shared-key encoding per layer
        Attention(32, 4, pos=first, causal=False)


def test_separate_projections_and_embedding_argument() -> None:
    pos = DebertaRelative(
        2,
        4,
        6,
        max_relative_positions=10,
        position_buckets=0,
        pos_att_type=["p2c"],
        share_att_key=False,
        norm_rel_ebd=False,
    )
    assert pos.span == 10 and pos.embedding.weight.shape == (20, 6)
    assert pos.pos_key_proj is None and pos.pos_query_proj is not None
    assert pos.embedding.norm is None
    assert_close(pos.pos_query_proj.bias, torch.zeros(8), rtol=0, atol=0)
    table = DebertaRelativeEmbedding(10, 6, layer_norm=False)
    other = DebertaRelative(
        2, 4, 6, max_relative_positions=10, position_buckets=0, norm_rel_ebd=False, embedding=table
    )
    assert other.embedding is table
    meta = DebertaRelative(2, 4, 6, device="meta")
    assert meta.embedding.weight.device.type == "meta"
    assert "span=256" in repr(meta)


# --- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"num_heads": 0}, "num_heads"),
        ({"head_dim": 2.0}, "head_dim"),
        ({"dim": -1}, "dim"),
        ({"max_relative_positions": 0}, "max_relative_positions"),
        ({"position_buckets": -1}, "position_buckets"),
        ({"position_buckets": 1}, "position_buckets"),
        ({"position_buckets": 8, "max_relative_positions": 5}, "max_relative_positions"),
        ({"pos_att_type": []}, "pos_att_type"),
        ({"pos_att_type": ["p2p"]}, "pos_att_type"),
        ({"pos_att_type": "c2p|p2c"}, "pos_att_type"),
        ({"pos_att_type": ["c2p", "c2p"]}, "pos_att_type"),
        ({"share_att_key": 1}, "share_att_key"),
        ({"norm_rel_ebd": "layer_norm"}, "norm_rel_ebd"),
        ({"projection_bias": None}, "projection_bias"),
        ({"layer_norm_eps": 0.0}, "layer_norm_eps"),
        ({"dtype": torch.int32}, "dtype"),
        ({"embedding": nn.Embedding(512, 8)}, "embedding"),
        ({"embedding": DebertaRelativeEmbedding(128, 8)}, "embedding"),
        ({"embedding": DebertaRelativeEmbedding(256, 8, layer_norm=False)}, "embedding"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict, name: str) -> None:
    settings = {"num_heads": 2, "head_dim": 4, "dim": 8, **kwargs}
    with pytest.raises(ValueError, match=name):
        DebertaRelative(**settings)


def test_bad_calls() -> None:
    pos = make()
    q, k = (
        torch.randn(2, 2, 3, 4, dtype=torch.float64),
        torch.randn(2, 2, 5, 4, dtype=torch.float64),
    )
    with pytest.raises(ValueError, match="q_pos"):
        pos(q, k, torch.tensor([0.0, 0.5, 1.0]), torch.arange(5))
    with pytest.raises(ValueError, match="k_pos"):
        pos(q, k, torch.arange(3), torch.zeros(3, 5))
    with pytest.raises(ValueError, match="q"):
        pos(torch.randn(2, 2, 3, 5), k, torch.arange(3), torch.arange(5))
    with pytest.raises(ValueError, match="k"):
        pos(q, k[:1], torch.arange(3), torch.arange(5))
    with pytest.raises(ValueError, match="q_pos"):
        attend(
            q, k, k, pos=pos, causal=False, q_pos=torch.tensor([0.5, 1, 2]), k_pos=torch.arange(5)
        )
    unbound = DebertaRelative(2, 4, 6)
    with pytest.raises(ValueError, match="share_att_key"):
        unbound(q, k, torch.arange(3), torch.arange(5))
    with pytest.raises(ValueError, match="q_proj"):
        unbound.bind_projections(nn.Linear(6, 4), nn.Linear(6, 8))
    with pytest.raises(ValueError, match="k_proj"):
        unbound.bind_projections(nn.Linear(6, 8), nn.Linear(6, 6))
    with pytest.raises(ValueError, match="k_proj"):
        unbound.bind_projections(nn.Linear(6, 8), nn.Linear(5, 8))
    with pytest.raises(ValueError, match="position_buckets"):
        deberta_log_bucket(torch.arange(3), 1, 10)
    with pytest.raises(ValueError, match="position_keys"):
        disentangled_logits(q, k, torch.zeros(3, 5, dtype=torch.long), 1.0)
    with pytest.raises(ValueError, match="flex"):
        Attention(8, 2, pos=DebertaRelative(2, 4, 8), backend="flex")
