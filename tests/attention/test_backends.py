"""Every backend equals the ``sdpa`` reference: encodings × mask kinds × GQA × dtypes, fwd + bwd."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.testing import assert_close

from posenc.attention import Backend, attend
from posenc.registry import ModelDims, build_encoding
from tests.attention.toys import CumulativeGate
from tests.cases import ALL_CASES, case_id

HEADS, HEAD_DIM, BATCH, LENGTH = 4, 8, 3, 40

# Encodings that act inside attention, plus none and a whole-row scores reader.
SIDE = {"rope", "xpos", "alibi", "t5", "kerple", "sandwich", "fire", "dynamic", "shaw", "xl"}
ENCODINGS: list[tuple[str, dict[str, Any]]] = [("nope", {})]
ENCODINGS += [(n, kw) for n, kw in ALL_CASES if n in SIDE and n not in ("rope", "xpos")]
ENCODINGS += [("t5", {"num_buckets": 8, "max_distance": 6, "bidirectional": True}), ("scores", {})]
BIAS_ONLY = {"nope", "alibi", "t5", "kerple", "sandwich", "fire", "dynamic"}  # flex serves

BACKENDS = {
    # Small blocks so that every path splits the queries into several blocks and parts.
    "chunked": Backend("chunked", block_size=8),
    "blocked": Backend("chunked", block_size=8, structured=False),
    "flex": Backend("flex", compile=False),
}


def make_encoding(name: str, kwargs: dict[str, Any]) -> nn.Module | None:
    if name == "nope":
        return None
    if name == "scores":
        return CumulativeGate(HEADS)
    encoding = build_encoding(name, ModelDims(dim=HEADS * HEAD_DIM, num_heads=HEADS), kwargs)
    for p in encoding.parameters():  # trained encodings are not near their init
        nn.init.normal_(p, std=0.5)
    return encoding


def mask_case(kind: str, generator: torch.Generator) -> tuple[int, dict[str, Any]]:
    """(q_len, attend keyword arguments) of one mask kind over LENGTH keys."""
    padding = torch.ones(BATCH, LENGTH, dtype=torch.bool)
    padding[0, :13] = False  # left padding: the first queries of row 0 see no key
    padding[1, 30:] = False  # right padding
    if kind == "causal":
        return LENGTH, {"causal": True}
    if kind == "bidirectional":
        return LENGTH, {"causal": False}
    if kind == "padding":
        return LENGTH, {"causal": True, "key_padding_mask": padding}
    if kind == "padding-bidirectional":
        padding[2] = False  # a row with no real key at all
        return LENGTH, {"causal": False, "key_padding_mask": padding}
    if kind == "documents":
        ids = torch.repeat_interleave(torch.arange(4), torch.tensor([9, 14, 3, 14]))
        return LENGTH, {"causal": True, "document_ids": ids}
    if kind == "cache":
        # Decoding 6 tokens after 34 cached ones; rows at different offsets, left padding.
        offsets = torch.tensor([0, 7, 100])
        k_pos = offsets[:, None] + torch.arange(LENGTH)
        return 6, {
            "causal": True,
            "key_padding_mask": padding,
            "k_pos": k_pos,
            "q_pos": k_pos[:, -6:],
        }
    if kind == "predicate":
        return LENGTH, {"causal": False, "attn_mask": lambda b, h, q, kv: (q - kv).abs() % 5 != 3}
    raise AssertionError(kind)


MASKS = [
    "causal",
    "bidirectional",
    "padding",
    "padding-bidirectional",
    "documents",
    "cache",
    "predicate",
]


def run(
    backend: Backend | str,
    encoding: nn.Module | None,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    kwargs: dict[str, Any],
    grad: bool,
) -> tuple[Tensor, list[Tensor]]:
    """Output and the gradients of q, k, v and the encoding's parameters."""
    leaves = [x.detach().clone().requires_grad_(grad) for x in (q, k, v)]
    params = list(encoding.parameters()) if encoding is not None else []
    for p in params:
        p.grad = None
    with torch.set_grad_enabled(grad):
        out = attend(*leaves, pos=encoding, backend=backend, **kwargs)
    if not grad:
        return out, []
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    (out * weights).sum().backward()
    grads = [x.grad for x in leaves] + [p.grad.clone() for p in params if p.grad is not None]
    return out.detach(), grads


def inputs(dtype: torch.dtype, q_len: int, kv_heads: int) -> tuple[Tensor, Tensor, Tensor]:
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(BATCH, HEADS, q_len, HEAD_DIM, generator=generator, dtype=torch.float64)
    k, v = (
        torch.randn(BATCH, kv_heads, LENGTH, HEAD_DIM, generator=generator, dtype=torch.float64)
        for _ in range(2)
    )
    return q.to(dtype), k.to(dtype), v.to(dtype)


def check_backend(
    backend_name: str,
    name: str,
    kwargs: dict,
    mask: str,
    dtype: torch.dtype,
    kv_heads: int,
    **tolerance: float,
) -> None:
    if backend_name == "flex":
        # FlexAttention's eager mode runs through dynamo; start from a clean cache so that a
        # guard cached for another score_mod is not reused (torch's guards crashed on that).
        torch._dynamo.reset()
    torch.manual_seed(0)
    encoding = make_encoding(name, kwargs)
    if encoding is not None:
        encoding = encoding.to(dtype if dtype == torch.float64 else torch.float32)
    q_len, mask_kwargs = mask_case(mask, torch.Generator().manual_seed(2))
    q, k, v = inputs(dtype, q_len, kv_heads)
    grad = backend_name != "flex"  # FlexAttention has no backward on the CPU
    want, want_grads = run("sdpa", encoding, q, k, v, mask_kwargs, grad)
    got, got_grads = run(BACKENDS[backend_name], encoding, q, k, v, mask_kwargs, grad)
    assert got.dtype == dtype
    assert_close(got, want, **tolerance)
    assert len(got_grads) == len(want_grads)
    for g, w in zip(got_grads[:3], want_grads[:3], strict=True):
        assert_close(g, w, **tolerance)
    # A parameter's gradient sums over every (batch, head, query, key) pair, in another order
    # per backend: float32 rounding then grows like sqrt(terms) · eps.
    terms = BATCH * HEADS * q.shape[-2] * LENGTH
    param_tolerance = tolerance
    if dtype == torch.float32:
        bound = 2 * terms**0.5 * torch.finfo(torch.float32).eps
        param_tolerance = {"rtol": bound, "atol": bound}
    for g, w in zip(got_grads[3:], want_grads[3:], strict=True):
        assert_close(g, w, **param_tolerance)


# Flex's mask handling does not depend on the score_mod: these two see every mask kind,
# every other bias the two kinds that change what its score_mod reads (none: causal; shifted
# positions: cache).
FLEX_EVERY_MASK = {"nope", "t5-num_buckets=8-max_distance=6-bidirectional=True"}
FLEX_MASKS = {"causal", "cache"}


def float64_cases() -> list[Any]:
    """Every encoding × mask kind through each backend; the cases one factor already covers run
    with ``-m slow`` only (the default run is about 5 minutes on 2 cores).

    chunked: with and without GQA. blocked: GQA; without it slow (for every encoding without a
    structured plan chunked is the blocked walk itself, and how key heads are shared does not
    depend on the plan).
    flex (eager, forward only): the encodings it serves (a contextual term or scores reader is a
    construction error there), every mask for ``FLEX_EVERY_MASK``, ``FLEX_MASKS`` for the rest.
    """
    cases = []
    for n, kw in ENCODINGS:
        for backend in BACKENDS:
            if backend == "flex" and n not in BIAS_ONLY:
                continue
            for kv_heads in [2] if backend == "flex" else [HEADS, 2]:
                for mask in MASKS:
                    slow = (backend == "blocked" and kv_heads == HEADS) or (
                        backend == "flex"
                        and case_id(n, kw) not in FLEX_EVERY_MASK
                        and mask not in FLEX_MASKS
                    )
                    name = f"{backend}-{case_id(n, kw)}-kv{kv_heads}-{mask}"
                    marks = [pytest.mark.slow] if slow else []
                    cases.append(pytest.param(backend, n, kw, kv_heads, mask, id=name, marks=marks))
    return cases


@pytest.mark.parametrize(("backend_name", "name", "kwargs", "kv_heads", "mask"), float64_cases())
def test_float64_equals_reference_to_1e_10(
    backend_name: str, name: str, kwargs: dict, mask: str, kv_heads: int
) -> None:
    check_backend(backend_name, name, kwargs, mask, torch.float64, kv_heads, rtol=1e-10, atol=1e-10)


# blocked: -m slow only. For every encoding without a structured plan chunked is the blocked
# walk itself; for ALiBi and T5 the blocked walk is checked in float64 above.
BLOCKED_SLOW = pytest.param("blocked", marks=pytest.mark.slow)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mask", ["causal", "padding", "documents", "cache"])
@pytest.mark.parametrize(
    ("name", "kwargs"), [pytest.param(n, kw, id=case_id(n, kw)) for n, kw in ENCODINGS]
)
@pytest.mark.parametrize("backend_name", ["chunked", BLOCKED_SLOW])
def test_low_precision_equals_reference(
    backend_name: str, name: str, kwargs: dict, mask: str, dtype: torch.dtype
) -> None:
    # float32: the default tolerances. bfloat16: outputs and gradients are O(1) here, and the
    # reference's own bf16 kernel rounds intermediates, so two correct results differ by
    # about one bf16 step at that scale (2^-7 ≈ 7.8e-3): allow two steps, absolute.
    tolerance = {"rtol": 1.6e-2, "atol": 1.6e-2} if dtype == torch.bfloat16 else {}
    check_backend(backend_name, name, kwargs, mask, dtype, 2, **tolerance)


@pytest.mark.parametrize("name", ["alibi", "t5"])
def test_flex_float32_equals_reference(name: str) -> None:
    check_backend("flex", name, {}, "padding", torch.float32, 2)


FORWARD_ONLY = {"shaw", "xl"} | (BIAS_ONLY - {"nope"})  # DeBERTa: tests/contextual/test_deberta.py


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(
    "mask", ["causal", "bidirectional", "padding", "padding-bidirectional", "cache"]
)
@pytest.mark.parametrize(
    ("name", "kwargs"),
    [pytest.param(n, kw, id=case_id(n, kw)) for n, kw in ENCODINGS if n in FORWARD_ONLY],
)
def test_plans_without_gradients_equal_reference(
    name: str, kwargs: dict, mask: str, dtype: torch.dtype
) -> None:
    """The chunked backend without gradients: Shaw's and Transformer-XL's forward-only
    flash plans (default positions), and every pointwise bias on its plan (linear, by
    distance, or materialized per block: FIRE, and any bias at positions of its own)."""
    tolerance = {"rtol": 1e-10, "atol": 1e-10} if dtype == torch.float64 else {}
    encoding = make_encoding(name, kwargs)
    assert encoding is not None
    encoding = encoding.to(dtype)
    q_len, mask_kwargs = mask_case(mask, torch.Generator().manual_seed(2))
    q, k, v = inputs(dtype, q_len, 2)
    with torch.no_grad():
        want = attend(q, k, v, pos=encoding, backend="sdpa", **mask_kwargs)
        got = attend(q, k, v, pos=encoding, backend=BACKENDS["chunked"], **mask_kwargs)
    assert_close(got, want, **tolerance)
