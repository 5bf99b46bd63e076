"""Context parallelism on two gloo ranks equals the one-rank attention, for every family.

Each rank computes the one-rank (whole-sequence) attention itself and compares its shard:
outputs and the gradients of q, k, v (its shard) and of the encoding's parameters (summed
over the ranks). float32; the tolerance is ``assert_close``'s float32 default, since a chunk's
keys are cut at its end (another reduction length) where the one-rank run masks them.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.testing import assert_close

from posenc.attention import Attention, ContextParallel, attend, hooks_of
from posenc.lab.distributed import spawn
from posenc.positions import packed_positions
from posenc.registry import encoding_spec
from tests.cases import build_case, case_positions, registered_cases

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()), reason="torch.distributed gloo missing"
)

#: Encodings context parallelism refuses, with the error's words: FoX reads the layer's
#: hidden states (token_state); PoPE's rotation widens q and k to 2 · head_dim, which
#: attend's head_dim check refuses (on one rank as well: the Attention module skips it).
REFUSED = {
    "fox": "token_state",
    "path": "token_transforms",
    "carope": "token_phases",
    "pope": "head_dim",
}

#: Encodings with no attention-side part: their tables are checked on local positions.
EMBEDDING_ONLY = {"complex_order"}

#: The whole-layer check (projections, query scale, rotation): one family of each place an
#: encoding acts, to keep the spawn short; check_case covers every registered encoding.
LAYER_CASES = {
    "rope", "mrope", "xpos", "alibi", "t5", "fire", "shaw", "deberta", "cope", "dape",
    "self_extend", "dual_chunk", "stick_breaking", "learned_sinks", "hope", "rope_axial",
}  # fmt: skip

#: assert_close's float32 tolerance, also for a float64 parameter (GRAPE's slopes): its
#: gradient sums float32 logit terms, in another order on two ranks.
FLOAT32 = {"rtol": 1.3e-6, "atol": 1e-5}

SEQ = 16  # 4 chunks of 4 on 2 ranks; the grid encodings' 3 × 4 grid: 4 chunks of 3
BATCH, HEADS, HEAD_DIM = 2, 4, 8
DOCUMENTS = torch.tensor([0] * 5 + [1] * 7 + [2] * 4)  # boundaries inside the zigzag chunks


def _whole_rotation(encoding: Any, q: Any, k: Any, v: Any, positions: Any) -> Any:
    """What posenc.attention.Attention does to the whole sequence before attending."""
    hooks = hooks_of(encoding)
    if hooks.rotary is None or hooks.segments is not None:
        return q, k, v
    tables = hooks.rotary.rotary_tables(positions, q.dtype)
    q, k = hooks.rotary.rotate_qk(q, k, tables, tables)
    if hooks.value_rotation is not None:
        v = hooks.value_rotation.rotate_values(v, tables)
    return q, k, v


def _inputs(seq: int, generator: torch.Generator) -> list[Any]:
    shape = (BATCH, HEADS, seq, HEAD_DIM)
    return [torch.randn(shape, generator=generator, requires_grad=True) for _ in range(3)]


def _masks(encoding: Any, seq: int, packed: bool) -> dict[str, Any]:
    """Positions, documents and padding of one variant: plain, or packed documents (positions
    restarting per document) with the last two tokens of row 1 padded."""
    positions = case_positions(encoding, seq)
    if not packed:
        return {"positions": positions, "document_ids": None, "key_padding_mask": None}
    if encoding.num_axes == 1:
        positions = packed_positions(DOCUMENTS)
    padding = torch.ones(BATCH, seq, dtype=torch.bool)
    padding[1, -2:] = False
    return {"positions": positions, "document_ids": DOCUMENTS, "key_padding_mask": padding}


def check_case(
    cp: ContextParallel, name: str, kwargs: dict[str, Any], packed: bool, backend: str = "sdpa"
) -> None:
    """Raise AssertionError unless the rank's context-parallel attention of encoding ``name``
    (forward and gradients) equals its shard of the one-rank attention."""
    torch.manual_seed(0)
    encoding = build_case(name, kwargs).eval()
    grid = encoding_spec(name).needs_grid
    seq, causal = (12, False) if grid else (SEQ, True)
    if packed and grid:
        return
    hooks = hooks_of(encoding)
    if hooks.encoding is not None:  # as Attention binds its projections (DeBERTa's shared keys)
        width = HEADS * HEAD_DIM
        hooks.encoding.bind_projections(nn.Linear(width, width), nn.Linear(width, width))
    masks = _masks(encoding, seq, packed)
    positions = masks["positions"]
    if hooks.additive is not None:
        table = hooks.additive.position_embedding(positions)
        local = hooks.additive.position_embedding(cp.shard(positions, -1))
        assert_close(local, cp.shard(table, -2), rtol=0, atol=0)
    if name in EMBEDDING_ONLY:
        return
    generator = torch.Generator().manual_seed(1)
    q, k, v = _inputs(seq, generator)
    weight = torch.randn(BATCH, HEADS, seq, HEAD_DIM, generator=generator)
    if name in REFUSED:
        local_pos = cp.shard(positions, -1)
        rotated = cp.rotate(encoding, *(cp.shard(t, -2) for t in (q, k, v)), local_pos)
        with pytest.raises(ValueError, match=REFUSED[name]):
            cp.attend(*rotated, pos=encoding, positions=local_pos, causal=causal)
        return
    params = [p for p in encoding.parameters() if p.requires_grad]

    # the one-rank run, on the whole sequence
    whole = _whole_rotation(encoding, q, k, v, positions)
    out = attend(
        *whole,
        pos=encoding,
        q_pos=positions,
        k_pos=positions,
        causal=causal,
        document_ids=masks["document_ids"],
        key_padding_mask=masks["key_padding_mask"],
        backend=backend,
    )
    expected = torch.autograd.grad((out * weight).sum(), [q, k, v, *params], allow_unused=True)

    # this rank's shard
    local = {key: None if t is None else cp.shard(t, -1) for key, t in masks.items()}
    q_l, k_l, v_l = (cp.shard(t.detach(), -2).requires_grad_() for t in (q, k, v))
    rotated = cp.rotate(encoding, q_l, k_l, v_l, local["positions"])
    out_l = cp.attend(*rotated, pos=encoding, causal=causal, backend=backend, **local)
    assert_close(out_l, cp.shard(out.detach(), -2), msg=lambda m: f"{name} output: {m}")
    assert_close(cp.unshard(out_l.detach(), -2), out.detach())
    grads = torch.autograd.grad(
        (out_l * cp.shard(weight, -2)).sum(), [q_l, k_l, v_l, *params], allow_unused=True
    )
    for which, got, want in zip("qkv", grads[:3], expected[:3], strict=True):
        assert_close(got, cp.shard(want, -2), msg=lambda m, w=which: f"{name} d{w}: {m}")
    for param, got, want in zip(params, grads[3:], expected[3:], strict=True):
        total = torch.zeros_like(param) if got is None else got.clone()
        dist.all_reduce(total)  # each rank holds the gradient of its queries' terms
        assert_close(
            total,
            torch.zeros_like(param) if want is None else want,
            **FLOAT32,
            msg=lambda m: f"{name} parameter gradient: {m}",
        )


def check_layer(cp: ContextParallel, name: str, kwargs: dict[str, Any]) -> None:
    """A whole Attention layer (projections, rotation, attention, output projection) on the
    rank's tokens equals its shard of the layer on the whole sequence, with gradients."""
    torch.manual_seed(0)
    encoding = build_case(name, kwargs).eval()
    grid = encoding_spec(name).needs_grid
    seq, causal = (12, False) if grid else (SEQ, True)
    layer = Attention(HEADS * HEAD_DIM, HEADS, pos=encoding, causal=causal).eval()
    masks = _masks(encoding, seq, packed=not grid)
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(BATCH, seq, HEADS * HEAD_DIM, generator=generator, requires_grad=True)
    weight = torch.randn(BATCH, seq, HEADS * HEAD_DIM, generator=generator)
    params = [p for p in layer.parameters() if p.requires_grad]
    out = layer(x, masks.pop("positions"), **masks)
    expected = torch.autograd.grad((out * weight).sum(), [x, *params], allow_unused=True)
    whole = _masks(encoding, seq, packed=not grid)
    local = {key: None if t is None else cp.shard(t, -1) for key, t in whole.items()}
    x_l = cp.shard(x.detach(), -2).requires_grad_()
    out_l = cp.attention(layer, x_l, local.pop("positions"), **local)
    assert_close(out_l, cp.shard(out.detach(), -2), msg=lambda m: f"{name} layer: {m}")
    grads = torch.autograd.grad(
        (out_l * cp.shard(weight, -2)).sum(), [x_l, *params], allow_unused=True
    )
    assert_close(grads[0], cp.shard(expected[0], -2), msg=lambda m: f"{name} layer dx: {m}")
    for got, want in zip(grads[1:], expected[1:], strict=True):
        if want is None:  # an additive encoding's table: the layer does not read it
            assert got is None
            continue
        total = torch.zeros_like(want) if got is None else got.clone()
        dist.all_reduce(total)
        assert_close(total, want, **FLOAT32, msg=lambda m: f"{name} layer parameter gradient: {m}")


def check_packed_unpacked(cp: ContextParallel, name: str) -> list[float]:
    """Packed documents under context parallelism equal each document attended alone on one
    rank (its own positions from 0); returns max|Δ| per document.

    Not bitwise: a packed row also sums the exact zeros of other documents' keys, in another
    blocking of the reduction than the document alone, so the last bit or two differ (max|Δ|
    2.4e-7 at |out| < 1 for rope, ALiBi, T5, KERPLE, FIRE, XL, CoPE; docs/distributed.md);
    compared at assert_close's float32 tolerance."""
    torch.manual_seed(0)
    encoding = build_case(name, {}).eval()
    generator = torch.Generator().manual_seed(2)
    q, k, v = (t.detach() for t in _inputs(SEQ, generator))
    positions = packed_positions(DOCUMENTS)
    local_pos = cp.shard(positions, -1)
    q_l, k_l, v_l = (cp.shard(t, -2) for t in (q, k, v))
    rotated = cp.rotate(encoding, q_l, k_l, v_l, local_pos)
    out_l = cp.attend(
        *rotated,
        pos=encoding,
        positions=local_pos,
        causal=True,
        document_ids=cp.shard(DOCUMENTS, -1),
    )
    packed = cp.unshard(out_l, -2)
    deltas = []
    for doc in DOCUMENTS.unique():
        at = torch.eq(DOCUMENTS, doc).nonzero().flatten()
        span = slice(int(at[0]), int(at[-1]) + 1)
        alone = torch.arange(span.stop - span.start)
        whole = _whole_rotation(encoding, q[..., span, :], k[..., span, :], v[..., span, :], alone)
        out = attend(*whole, pos=encoding, q_pos=alone, k_pos=alone, causal=True)
        assert_close(packed[..., span, :], out, msg=lambda m: f"{name} document: {m}")
        deltas.append(float((packed[..., span, :] - out).abs().max().detach()))
    return deltas


def sweep_rank(rank: int, world_size: int, cases: list[tuple[str, dict[str, Any]]]) -> None:
    torch.set_num_threads(1)
    cp = ContextParallel.from_group()
    assert (cp.rank, cp.world_size) == (rank, world_size)
    for name, kwargs in cases:
        for packed in (False, True):
            check_case(cp, name, kwargs, packed)
    for name, kwargs in cases:
        if name in LAYER_CASES:
            check_layer(cp, name, kwargs)
    for name, kwargs in (("alibi", {}), ("t5", {}), ("rope", {}), ("cope", {})):
        check_case(cp, name, kwargs, packed=True, backend="chunked")  # its block plans
    for name in ("rope", "alibi", "t5", "kerple", "fire", "xl", "cope"):
        check_packed_unpacked(cp, name)


def test_two_ranks_equal_one_rank_every_registered_encoding() -> None:
    """One spawn over every registered encoding (and the variants whose code paths differ),
    plain and packed, forward and backward; then packed against unpacked documents."""
    spawn(sweep_rank, 2, [tuple(p.values) for p in registered_cases()])


def flex_rank(rank: int, world_size: int) -> None:
    """FlexAttention (CPU: forward only) reads global positions in its score_mod too."""
    torch.set_num_threads(1)
    cp = ContextParallel.from_group()
    positions = packed_positions(DOCUMENTS)
    for name in ("t5",):  # its score_mod reads buckets of global distances
        torch.manual_seed(0)
        encoding = build_case(name, {}).eval()
        q, k, v = (t.detach() for t in _inputs(SEQ, torch.Generator().manual_seed(1)))
        with torch.no_grad():
            expected = attend(
                q,
                k,
                v,
                pos=encoding,
                q_pos=positions,
                k_pos=positions,
                causal=True,
                document_ids=DOCUMENTS,
                backend="flex",
            )
            out = cp.attend(
                *(cp.shard(t, -2) for t in (q, k, v)),
                pos=encoding,
                positions=cp.shard(positions, -1),
                causal=True,
                document_ids=cp.shard(DOCUMENTS, -1),
                backend="flex",
            )
        assert_close(out, cp.shard(expected, -2), msg=lambda m, n=name: f"{n} flex: {m}")


@pytest.mark.slow
def test_two_ranks_equal_one_rank_flex() -> None:
    """About a minute on the CPU (FlexAttention compiles each shape)."""
    spawn(flex_rank, 2)


def test_refuses_odd_local_length() -> None:
    cp = ContextParallel(rank=0, world_size=1)
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(ValueError, match="even"):
        cp.attend(q, q, q, positions=torch.arange(3), causal=True)


def test_refuses_positions_of_another_length() -> None:
    cp = ContextParallel(rank=0, world_size=1)
    q = torch.randn(1, 2, 4, 4)
    with pytest.raises(ValueError, match="positions must be this rank's shard"):
        cp.attend(q, q, q, positions=torch.arange(8), causal=True)


@pytest.mark.parametrize(("rank", "world_size"), [(2, 2), (-1, 2), (0, 0)])
def test_refuses_bad_rank(rank: int, world_size: int) -> None:
    with pytest.raises(ValueError, match=r"rank|world_size"):
        ContextParallel(rank=rank, world_size=world_size)


def test_one_rank_is_attend() -> None:
    """world_size 1: both chunks on one rank, no communication, equal to attend."""
    cp = ContextParallel(rank=0, world_size=1)
    encoding = build_case("alibi", {})
    q, k, v = (t.detach() for t in _inputs(SEQ, torch.Generator().manual_seed(3)))
    positions = torch.arange(SEQ)
    out = cp.attend(q, k, v, pos=encoding, positions=positions, causal=True)
    assert_close(out, attend(q, k, v, pos=encoding, causal=True))
