"""The explicit plans for training Shaw and Transformer-XL: values and gradients equal to the
``sdpa`` reference, gradcheck, the band views, and where ``auto`` takes them."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn
from torch.testing import assert_close

from posenc.attention import attend
from posenc.attention.backends import choose_backend
from posenc.attention.context import build_context
from posenc.attention.plans.explicit import (
    _common,
    band_add_,
    band_read,
    distance_causal_attention,
    shaw_causal_attention,
    xl_causal_attention,
)
from posenc.bias import KerpleBias, T5RelativeBias
from posenc.contextual import ShawRelative, TransformerXLRelative
from posenc.encoding.resolve import hooks_of
from tests.attention.test_flash import record_plans


def tensors(length: int, kv_heads: int = 4, dtype: torch.dtype = torch.float64) -> list[Tensor]:
    generator = torch.Generator().manual_seed(0)
    shapes = [(2, 4, length, 8), (2, kv_heads, length, 8), (2, kv_heads, length, 8)]
    return [
        torch.randn(shape, generator=generator, dtype=dtype).requires_grad_() for shape in shapes
    ]


def gradients(out: Tensor, inputs: list[Tensor], encoding: nn.Module) -> list[Tensor]:
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    params = [p for p in encoding.parameters() if p.requires_grad]
    return list(torch.autograd.grad((out * weights).sum(), [*inputs, *params]))


ENCODINGS = {
    "shaw k=3": lambda: ShawRelative(8, max_distance=3),
    "shaw k=1": lambda: ShawRelative(8, max_distance=1),
    "shaw k=6 keys only": lambda: ShawRelative(8, max_distance=6, values=False),
    "xl": lambda: TransformerXLRelative(4, 8, 32),
    "t5": lambda: T5RelativeBias(4, bidirectional=False, max_distance=8, num_buckets=8),
    "kerple": lambda: KerpleBias(4),
}
PLAN = {"xl": "explicit sinusoid", "t5": "explicit distance", "kerple": "explicit distance"}


@pytest.mark.parametrize("rows", [64, 4])
@pytest.mark.parametrize("kv_heads", [4, 2])
@pytest.mark.parametrize("length", [7, 20])
@pytest.mark.parametrize("name", list(ENCODINGS))
def test_training_equals_the_reference_in_values_and_gradients(
    monkeypatch: pytest.MonkeyPatch, name: str, length: int, kv_heads: int, rows: int
) -> None:
    """``auto`` under autograd takes the explicit plan; its output and the gradients of q, k,
    v and every table equal the ``sdpa`` backend's materialized reference, in one block of
    rows and in several."""
    monkeypatch.setattr(_common, "EXPLICIT_ROWS", rows)
    torch.manual_seed(0)
    encoding = ENCODINGS[name]().double()
    if isinstance(encoding, ShawRelative) and encoding.max_distance >= length:
        pytest.skip("every key within the clip distance")
    chosen = record_plans(monkeypatch)
    inputs = tensors(length, kv_heads)
    got = attend(*inputs, pos=encoding, causal=True, backend="auto")
    assert chosen == [PLAN.get(name, "explicit clipped")]
    want = attend(*inputs, pos=encoding, causal=True, backend="sdpa")
    assert_close(got, want, rtol=1e-10, atol=1e-10)
    for g, w in zip(
        gradients(got, inputs, encoding), gradients(want, inputs, encoding), strict=True
    ):
        assert_close(g, w, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("name", list(ENCODINGS))
def test_float32_training_equals_the_reference(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setattr(_common, "EXPLICIT_ROWS", 16)  # two blocks of 16 and one of 8
    torch.manual_seed(0)
    encoding = ENCODINGS[name]()
    inputs = tensors(40, dtype=torch.float32)
    got = attend(*inputs, pos=encoding, causal=True, backend="auto")
    want = attend(*inputs, pos=encoding, causal=True, backend="sdpa")
    assert_close(got, want)
    for g, w in zip(
        gradients(got, inputs, encoding), gradients(want, inputs, encoding), strict=True
    ):
        assert_close(g, w)


@pytest.mark.parametrize("rows", [64, 2])
@pytest.mark.parametrize("values", [True, False])
def test_shaw_gradcheck(monkeypatch: pytest.MonkeyPatch, values: bool, rows: int) -> None:
    monkeypatch.setattr(_common, "EXPLICIT_ROWS", rows)
    generator = torch.Generator().manual_seed(0)

    def draw(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64).requires_grad_()

    q, k, v = draw(1, 2, 6, 3), draw(1, 2, 6, 3), draw(1, 2, 6, 3)
    key_table = draw(5, 3)
    value_table = draw(5, 3) if values else None

    def fn(q: Tensor, k: Tensor, v: Tensor, key_table: Tensor, *rest: Tensor) -> Tensor:
        return shaw_causal_attention(q, k, v, key_table, rest[0] if rest else None, 2, 0.7)

    inputs = (q, k, v, key_table, *([value_table] if value_table is not None else []))
    assert torch.autograd.gradcheck(fn, inputs)


@pytest.mark.parametrize("rows", [64, 2])
def test_xl_gradcheck(monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    monkeypatch.setattr(_common, "EXPLICIT_ROWS", rows)
    generator = torch.Generator().manual_seed(0)

    def draw(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64).requires_grad_()

    q, k, v = draw(2, 2, 5, 3), draw(2, 2, 5, 3), draw(2, 2, 5, 3)
    inputs = (q, k, v, draw(2, 3), draw(2, 3), draw(2, 6, 3))

    def fn(q: Tensor, k: Tensor, v: Tensor, u: Tensor, v_bias: Tensor, table: Tensor) -> Tensor:
        return xl_causal_attention(q, k, v, u, v_bias, table, 0.7)

    assert torch.autograd.gradcheck(fn, inputs)


@pytest.mark.parametrize("rows", [64, 2])
def test_distance_gradcheck(monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    monkeypatch.setattr(_common, "EXPLICIT_ROWS", rows)
    generator = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(2, 2, 5, 3, generator=generator, dtype=torch.float64).requires_grad_()
        for _ in range(3)
    )
    values = torch.randn(2, 9, generator=generator, dtype=torch.float64)
    future = torch.arange(4, -5, -1) < 0
    low = torch.finfo(torch.float64).min
    table = values.masked_fill(future, low).requires_grad_()

    def fn(q: Tensor, k: Tensor, v: Tensor, table: Tensor) -> Tensor:
        return distance_causal_attention(q, k, v, table.masked_fill(future, low), 0.7)

    assert torch.autograd.gradcheck(fn, (q, k, v, table))


@pytest.mark.parametrize(
    ("rows", "least", "want"),
    [
        (16, 1, [(0, 16), (16, 32), (32, 40)]),
        (16, 20, [(0, 20), (20, 40)]),
        (64, 1, [(0, 40)]),
    ],
)
def test_row_blocks_follow_the_rows_per_block(
    monkeypatch: pytest.MonkeyPatch, rows: int, least: int, want: list[tuple[int, int]]
) -> None:
    """The blocks of rows read ``EXPLICIT_ROWS`` where the tests above set it."""
    monkeypatch.setattr(_common, "EXPLICIT_ROWS", rows)
    assert _common.row_blocks(40, least) == want


@pytest.mark.parametrize("first", [0, 4, 6])
@pytest.mark.parametrize("reach", [1, 2, 5])
def test_band_views_read_and_add_the_keys_before_each_query(reach: int, first: int) -> None:
    """``band[..., r, c]`` is ``x[..., r, i − reach + 1 + c]`` for query ``i = first + r`` (0
    before key 0), read and added by index, in a block of 5 rows over keys ``[0, first + 5)``."""
    if 0 < first < reach - 1:
        pytest.skip("a later block starts at reach − 1 or after")
    rows, keys = 5, first + 5
    x = torch.randn(2, 3, rows, keys, dtype=torch.float64)
    band = torch.randn(2, 3, rows, reach, dtype=torch.float64)
    want_read = torch.zeros_like(band)
    want_added = x.clone()
    for r in range(rows):
        for c in range(reach):
            j = first + r - reach + 1 + c
            if j >= 0:
                want_read[..., r, c] = x[..., r, j]
                want_added[..., r, j] += band[..., r, c]
    assert_close(band_read(x, reach, first), want_read, rtol=0, atol=0)
    band_add_(x, band, reach, first)
    assert_close(x, want_added, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["shaw k=3", "xl"])
def test_auto_takes_chunked_for_short_causal_training_only(name: str) -> None:
    encoding = ENCODINGS[name]()
    hooks = hooks_of(encoding)
    q = torch.randn(1, 4, 16, 8)
    causal, both_ways = (
        build_context(batch=1, seq=16, device=q.device, causal=flag, hooks=hooks)
        for flag in (True, False)
    )
    assert choose_backend(hooks, q, q, dropout_p=0.0, context=causal) == "chunked"
    assert choose_backend(hooks, q, q, dropout_p=0.1, context=causal) == "sdpa"
    assert choose_backend(hooks, q, q, dropout_p=0.0, context=both_ways) == "sdpa"
    with torch.no_grad():
        assert choose_backend(hooks, q, q, dropout_p=0.0, context=causal) == "sdpa"
    encoding.requires_grad_(False)  # nothing to train: sdpa's fused forward
    assert choose_backend(hooks, q, q, dropout_p=0.0, context=causal) == "sdpa"
    assert choose_backend(hooks, q.requires_grad_(), q, dropout_p=0.0, context=causal) == "chunked"
