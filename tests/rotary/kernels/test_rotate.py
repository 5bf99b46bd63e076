"""posenc.rotary.kernels: every implementation and mode equals the reference rotation.

The reference is the plain formula in the compute dtype from float64-derived tables:
``(a·c − b·s, b·c + a·s)`` per pair, rounded once to x's dtype. Every path is expected to
give the same bits (same roundings), so whole tensors are compared with ``torch.equal``
where that is the claim and ``assert_close`` for gradients.
"""

from __future__ import annotations

import builtins
import importlib

import pytest
import torch

from posenc.rotary import RotaryEmbedding, XPos, kernels
from posenc.rotary.kernels import fast, rotary_impl, rotate, torch_path
from posenc.rotary.layouts import pair_views

HAS_NUMBA = "numba" in kernels.available_impls()
IMPLS = ["torch", pytest.param("numba", marks=pytest.mark.skipif(not HAS_NUMBA, reason="numba"))]
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def _tables(seq: int, rotary_dim: int, dtype: torch.dtype, batch: int | None = None):
    generator = torch.Generator().manual_seed(1)
    shape = (seq, rotary_dim // 2) if batch is None else (batch, 1, seq, rotary_dim // 2)
    angles = torch.randn(shape, generator=generator, dtype=torch.float64) * 3
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    return (0.9 * angles.cos()).to(compute), (0.9 * angles.sin()).to(compute)


def _reference(x, c, s, layout, rotary_dim):
    a, b = pair_views(x.to(c.dtype), rotary_dim, layout)
    expected = x.clone()
    new_a, new_b = pair_views(expected, rotary_dim, layout)
    new_a.copy_(a * c - b * s)
    new_b.copy_(b * c + a * s)
    return expected


def _x(shape, dtype, strided=False):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=generator).to(dtype)
    if strided:  # (batch, seq, heads, dim) memory seen as (batch, heads, seq, dim)
        x = x.transpose(1, 2).contiguous().transpose(1, 2)
    return x


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [16, 10])
@pytest.mark.parametrize("mode", ["new", "out", "inplace"])
@pytest.mark.parametrize("tables", ["shared", "per_row"])
def test_every_mode_equals_reference(impl, dtype, layout, rotary_dim, mode, tables) -> None:
    x = _x((2, 3, 7, 16), dtype, strided=tables == "shared")
    c, s = _tables(7, rotary_dim, dtype, batch=None if tables == "shared" else 2)
    expected = _reference(x, c, s, layout, rotary_dim)
    kwargs = {"layout": layout, "rotary_dim": rotary_dim, "impl": impl}
    if mode == "new":
        got = rotate(x, c, s, **kwargs)
    elif mode == "out":
        out = torch.full_like(x, float("nan"))
        got = rotate(x, c, s, out=out, **kwargs)
        assert got is out
    else:
        got = x.clone()
        assert rotate(got, c, s, inplace=True, **kwargs) is got
    assert got.dtype == dtype
    assert torch.equal(got, expected)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [128, 64])
@pytest.mark.parametrize("mode", ["new", "out", "inplace"])
def test_common_head_dims_equal_reference(impl, dtype, layout, rotary_dim, mode) -> None:
    # 64 and 128 rotary dims run kernels specialized to their pair count.
    x = _x((2, 3, 5, 128), dtype, strided=True)
    c, s = _tables(5, rotary_dim, dtype, batch=2)
    kwargs = {"layout": layout, "rotary_dim": rotary_dim, "impl": impl}
    if mode == "new":
        got = rotate(x, c, s, **kwargs)
    elif mode == "out":
        got = rotate(x, c, s, out=torch.full_like(x, float("nan")), **kwargs)
    else:
        got = rotate(x.clone(), c, s, inplace=True, **kwargs)
    assert torch.equal(got, _reference(x, c, s, layout, rotary_dim))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("shared", [True, False])
def test_rotate_pair_equals_two_rotations(impl, dtype, inplace, shared) -> None:
    # q with 4 heads over 3 new positions; k with 2 heads (GQA) over 9 cached + new positions,
    # or both over the same positions with one table.
    q = _x((2, 4, 3 if not shared else 9, 16), dtype, strided=True)
    k = _x((2, 2, 9, 16), dtype) * 3
    k_tables = _tables(9, 16, dtype, batch=2)
    q_tables = k_tables if shared else tuple(t[:, :, -3:] for t in k_tables)
    expected = (_reference(q, *q_tables, "half", 16), _reference(k, *k_tables, "half", 16))
    q_in, k_in = (q.clone(), k.clone()) if inplace else (q, k)
    got = kernels.rotate_pair(
        q_in, k_in, q_tables, k_tables, layout="half", rotary_dim=16, inplace=inplace, impl=impl
    )
    assert (got[0] is q_in and got[1] is k_in) == inplace
    assert torch.equal(got[0], expected[0])
    assert torch.equal(got[1], expected[1])
    if not inplace:  # inputs untouched
        assert torch.equal(q_in, q) and torch.equal(k_in, k)


@pytest.mark.parametrize("impl", IMPLS)
def test_rotate_pair_gradients(impl) -> None:
    q = _x((1, 2, 6, 8), torch.float64).requires_grad_()
    k = _x((1, 1, 6, 8), torch.float64).requires_grad_()
    tables = _tables(6, 8, torch.float64)
    got_q, got_k = kernels.rotate_pair(q, k, tables, tables, layout="half", rotary_dim=8, impl=impl)
    (got_q.sum() + 2 * got_k.sum()).backward()
    c, s = tables
    assert torch.equal(q.grad, _reference(torch.ones_like(q), c, -s, "half", 8))
    assert torch.equal(k.grad, _reference(torch.full_like(k, 2.0), c, -s, "half", 8))
    with pytest.raises(RuntimeError, match="inplace=True"):
        kernels.rotate_pair(q, k, tables, tables, layout="half", rotary_dim=8, inplace=True)


@pytest.mark.parametrize("impl", IMPLS)
def test_one_position_table_serves_every_position(impl) -> None:
    x = _x((1, 2, 5, 8), torch.float32)
    c, s = _tables(1, 8, torch.float32)
    expected = _reference(x, c.expand(5, 4), s.expand(5, 4), "half", 8)
    assert torch.equal(rotate(x, c, s, layout="half", rotary_dim=8, impl=impl), expected)


@pytest.mark.parametrize("impl", IMPLS)
def test_kv_cache_shapes_and_single_position(impl) -> None:
    # One decoding step (seq 1) and a key block of another length, per-row tables.
    for seq in (1, 5):
        x = _x((2, 4, seq, 8), torch.float32)
        c, s = _tables(seq, 8, torch.float32, batch=2)
        assert torch.equal(
            rotate(x, c, s, layout="half", rotary_dim=8, impl=impl),
            _reference(x, c, s, "half", 8),
        )


def test_torch_blocks_equal_one_pass(monkeypatch) -> None:
    # The torch path splits long inputs into blocks of positions; blocks change nothing.
    x = _x((1, 2, 37, 8), torch.bfloat16)
    c, s = _tables(37, 8, torch.bfloat16)
    monkeypatch.setattr(torch_path, "_BLOCK", 16)
    for mode in ("new", "out", "inplace"):
        y = x.clone()
        got = rotate(
            y,
            c,
            s,
            layout="interleaved",
            rotary_dim=8,
            impl="torch",
            out=torch.empty_like(x) if mode == "out" else None,
            inplace=mode == "inplace",
        )
        assert torch.equal(got, _reference(x, c, s, "interleaved", 8))
    x32 = x.float()
    got = rotate(x32, c, s, layout="half", rotary_dim=8, impl="torch")
    assert torch.equal(got, _reference(x32, c, s, "half", 8))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_gradients_equal_reference(impl, layout) -> None:
    x = _x((2, 2, 5, 12), torch.float64).requires_grad_()
    c, s = _tables(5, 8, torch.float64)
    got = rotate(x, c, s, layout=layout, rotary_dim=8, impl=impl)
    grad_out = torch.randn_like(got)
    (grad,) = torch.autograd.grad(got, x, grad_out)
    x_ref = x.detach().clone().requires_grad_()
    (grad_ref,) = torch.autograd.grad(
        _reference_differentiable(x_ref, c, s, layout), x_ref, grad_out
    )
    torch.testing.assert_close(grad, grad_ref, rtol=0, atol=1e-14)
    assert torch.autograd.gradcheck(
        lambda t: rotate(t, c, s, layout=layout, rotary_dim=8, impl=impl), (x,)
    )


def _reference_differentiable(x, c, s, layout):
    a, b = pair_views(x, 8, layout)
    new = (a * c - b * s, b * c + a * s)
    if layout == "half":
        return torch.cat((*new, x[..., 8:]), dim=-1)
    return torch.cat((torch.stack(new, dim=-1).flatten(-2), x[..., 8:]), dim=-1)


@pytest.mark.skipif(not HAS_NUMBA, reason="numba")
def test_bfloat16_gradient_is_rotation_back() -> None:
    x = _x((1, 2, 6, 8), torch.bfloat16).requires_grad_()
    c, s = _tables(6, 8, torch.bfloat16)
    rotate(x, c, s, layout="half", rotary_dim=8, impl="numba").backward(torch.ones_like(x))
    expected = _reference(torch.ones_like(x), c, -s, "half", 8)
    assert torch.equal(x.grad, expected)


def test_inplace_and_out_refuse_autograd() -> None:
    x = _x((1, 1, 4, 8), torch.float32).requires_grad_()
    c, s = _tables(4, 8, torch.float32)
    with pytest.raises(RuntimeError, match="inplace=True"):
        rotate(x, c, s, layout="half", rotary_dim=8, inplace=True)
    with pytest.raises(RuntimeError, match="out="):
        rotate(x, c, s, layout="half", rotary_dim=8, out=torch.empty_like(x))


def test_bad_impl_names_the_argument() -> None:
    with pytest.raises(ValueError, match="impl"):
        kernels.set_rotary_impl("cuda-magic")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="impl"), rotary_impl("nope"):  # type: ignore[arg-type]
        pass


@pytest.mark.skipif(not HAS_NUMBA, reason="numba")
def test_numba_refuses_what_it_cannot_serve() -> None:
    x = _x((1, 1, 4, 8), torch.float32).transpose(-1, -2)  # channel stride ≠ 1
    c, s = _tables(8, 4, torch.float32)
    with pytest.raises(ValueError, match="impl='numba'"):
        rotate(x, c, s, layout="half", rotary_dim=4, impl="numba")


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("encoding", ["rope", "partial", "xpos", "yarn"])
def test_encodings_equal_on_every_impl(impl, encoding) -> None:
    from posenc.rotary import YaRN

    module = {
        "rope": lambda: RotaryEmbedding(32),
        "partial": lambda: RotaryEmbedding(32, rotary_dim=16, layout="interleaved"),
        "xpos": lambda: XPos(32),
        "yarn": lambda: RotaryEmbedding(32, scaling=YaRN(4.0, 64)),
    }[encoding]()
    q, k = _x((2, 4, 300, 32), torch.bfloat16), _x((2, 4, 300, 32), torch.bfloat16) * 2
    positions = torch.arange(300)
    with rotary_impl("torch"):
        expected = module(q, k, positions, positions)
    with rotary_impl(impl):
        got = module(q, k, positions, positions)
    for g, e in zip(got, expected, strict=True):
        assert torch.equal(g, e)


@pytest.mark.skipif(not HAS_NUMBA, reason="numba")
def test_compile_fullgraph_through_the_custom_op() -> None:
    rope = RotaryEmbedding(16)
    q = _x((1, 2, 64, 16), torch.float32).requires_grad_()
    positions = torch.arange(64)

    def f(q):
        return rope(q, q, positions, positions)[0].square().sum()

    with rotary_impl("numba"):
        compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
        loss = compiled(q)
        (grad,) = torch.autograd.grad(loss, q)
    with rotary_impl("torch"):
        (grad_ref,) = torch.autograd.grad(f(q), q)
    torch.testing.assert_close(loss, f(q).detach(), rtol=0, atol=0)
    torch.testing.assert_close(grad, grad_ref, rtol=1e-6, atol=1e-6)


def test_without_numba_everything_runs_on_torch(monkeypatch) -> None:
    real_import = builtins.__import__

    def no_numba(name, *args, **kwargs):
        if name == "numba" or name.startswith("numba."):
            raise ImportError("hidden by the test")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_numba)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    fast.numba_kernels.cache_clear()
    fast.triton_kernel.cache_clear()
    try:
        assert kernels.available_impls() == ("auto", "torch")
        with pytest.raises(ValueError, match=r"'\.\[fast\]'"):
            kernels.set_rotary_impl("numba")
        rope = RotaryEmbedding(32)
        q = _x((1, 4, 512, 32), torch.float32)  # large enough for auto to want numba
        positions = torch.arange(512)
        got = rope(q, q, positions, positions)[0]
        c, s = rope.rotary_tables(positions, torch.float32)
        assert torch.equal(got, _reference(q, c, s, "half", 32))
    finally:
        fast.numba_kernels.cache_clear()
        fast.triton_kernel.cache_clear()


def test_triton_serves_cuda_only() -> None:
    x = _x((1, 1, 4, 8), torch.float32)
    c, s = _tables(4, 8, torch.float32)
    if "triton" not in kernels.available_impls():
        with pytest.raises(ValueError, match="impl='triton' needs triton"):
            rotate(x, c, s, layout="half", rotary_dim=8, impl="triton")
    else:
        with pytest.raises(ValueError, match="impl='triton' serves CUDA tensors"):
            rotate(x, c, s, layout="half", rotary_dim=8, impl="triton")


@pytest.mark.skipif(
    not (torch.cuda.is_available() and "triton" in kernels.available_impls()),
    reason="needs CUDA and triton",
)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["new", "out", "inplace", "pair"])
def test_triton_dispatch_on_cuda(dtype, mode) -> None:
    x = _x((2, 4, 33, 128), dtype, strided=True).cuda()
    c, s = (t.cuda() for t in _tables(33, 128, dtype, batch=2))
    expected = _reference(x, c, s, "half", 128)
    kwargs = {"layout": "half", "rotary_dim": 128}
    with rotary_impl("auto"):
        if mode == "new":
            got = rotate(x, c, s, **kwargs)
        elif mode == "out":
            got = rotate(x, c, s, out=torch.empty_like(x), **kwargs)
        elif mode == "inplace":
            got = rotate(x.clone(), c, s, inplace=True, **kwargs)
        else:
            got = kernels.rotate_pair(x, x * 2, (c, s), (c, s), **kwargs)[0]
    assert torch.equal(got, expected)
    q = x.double().requires_grad_()  # autograd through the custom op, rotation by −θ
    rotate(q, c.double(), s.double(), impl="triton", **kwargs).sum().backward()
    assert torch.equal(q.grad, _reference(torch.ones_like(q), c.double(), -s.double(), "half", 128))


@pytest.mark.skipif(not HAS_NUMBA, reason="numba")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rotary_dim", [128, 64, 24])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_serial_and_parallel_numba_kernels_equal_reference(threads, rotary_dim, dtype) -> None:
    # One torch thread runs numba's serial kernels (no threading layer), more the parallel.
    # Both inline the same row code, whose every dtype the tests above check; two dtypes
    # here (a wide and a narrow one) keep the cold-cache compile time of the suite down.
    from posenc.rotary.kernels._numba import kernel_for

    assert kernel_for(rotary_dim // 2, 1) is not kernel_for(rotary_dim // 2, 2)
    x = _x((2, 3, 70, 128), dtype, strided=True)  # several jobs of 64 rows
    c, s = _tables(70, rotary_dim, dtype, batch=2)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = rotate(x, c, s, layout="half", rotary_dim=rotary_dim, impl="numba")
        pair = kernels.rotate_pair(
            x.clone(),
            x.clone(),
            (c, s),
            (c, s),
            layout="half",
            rotary_dim=rotary_dim,
            inplace=True,
            impl="numba",
        )
    finally:
        torch.set_num_threads(before)
    expected = _reference(x, c, s, "half", rotary_dim)
    assert torch.equal(got, expected)
    assert torch.equal(pair[0], expected) and torch.equal(pair[1], expected)


def _as_bits(x):
    return x.view({8: torch.int64, 4: torch.int32, 2: torch.int16}[x.element_size()])


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_inplace_leaves_pass_through_bits_untouched(impl, dtype, layout) -> None:
    # Pass-through channels hold NaNs with payloads: rewriting them (even with themselves
    # through a float conversion) could change their bits.
    x = _x((2, 3, 70, 24), dtype, strided=True)
    _as_bits(x[..., 16:]).fill_(-1)  # all-ones bits: a NaN with a full payload
    before = _as_bits(x[..., 16:]).clone()
    c, s = _tables(70, 16, dtype, batch=2)
    expected = _reference(x, c, s, layout, 16)
    kernels.rotate_pair(x, x[:1], (c, s), (c[:1], s[:1]), layout=layout, rotary_dim=16, impl=impl)
    got = rotate(x, c, s, layout=layout, rotary_dim=16, inplace=True, impl=impl)
    assert torch.equal(_as_bits(got[..., 16:]), before)
    assert torch.equal(_as_bits(got[..., :16]), _as_bits(expected[..., :16]))
    out = rotate(x.clone(), c, s, layout=layout, rotary_dim=16, out=torch.zeros_like(x), impl=impl)
    assert torch.equal(_as_bits(out[..., 16:]), before)  # copied out of place


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("mode", ["new", "inplace"])
def test_mrope_numba_equals_torch(dtype, layout, mode) -> None:
    # Qwen2-VL's M-RoPE: per-token tables (batch, 1, seq, pairs) from 3 × (batch, seq)
    # positions (sections of 14 pairs: not a specialized pair count).
    from posenc.rotary import MultiAxisRotary

    if not HAS_NUMBA:
        pytest.skip("numba")
    rope = MultiAxisRotary.mrope(28, (4, 5, 5), layout=layout)
    generator = torch.Generator().manual_seed(3)
    q_pos = torch.randint(0, 50, (3, 2, 70), generator=generator)
    k_pos = torch.randint(0, 50, (3, 2, 90), generator=generator)
    q, k = _x((2, 4, 70, 28), dtype, strided=True), _x((2, 2, 90, 28), dtype) * 2
    q_tables, k_tables = rope.rotary_tables(q_pos, dtype), rope.rotary_tables(k_pos, dtype)
    assert q_tables[0].shape == (2, 1, 70, 14)
    results = {}
    for impl in ("torch", "numba"):
        q_in, k_in = q.clone(), k.clone()
        results[impl] = kernels.rotate_pair(
            q_in,
            k_in,
            q_tables,
            k_tables,
            layout=layout,
            rotary_dim=28,
            inplace=mode == "inplace",
            impl=impl,
        )
    for got, expected in zip(results["numba"], results["torch"], strict=True):
        assert torch.equal(got, expected)
    assert torch.equal(results["torch"][0], _reference(q, *q_tables, layout, 28))


@pytest.mark.skipif(not HAS_NUMBA, reason="numba")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("tile", [None, 1, 5, 64])
@pytest.mark.parametrize("inplace", [False, True])
def test_numba_jobs_cover_every_tile_edge(monkeypatch, threads, tile, inplace) -> None:
    # Jobs are (batch row, range of positions): q of one position (a decoding step) and k of
    # 13 positions in ranges that do not divide it, other head counts, strided q; the
    # one-thread kernel takes the positions from positions_per_job too.
    if tile is not None:
        monkeypatch.setattr(fast, "positions_per_job", lambda seq, batch, threads: tile)
    q = _x((3, 4, 1, 24), torch.bfloat16, strided=True)
    k = _x((3, 2, 13, 24), torch.bfloat16) * 3
    k_tables = _tables(13, 16, torch.bfloat16, batch=3)
    q_tables = tuple(t[:, :, -1:] for t in k_tables)
    expected = (_reference(q, *q_tables, "half", 16), _reference(k, *k_tables, "half", 16))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = kernels.rotate_pair(
            q.clone(),
            k.clone(),
            q_tables,
            k_tables,
            layout="half",
            rotary_dim=16,
            inplace=inplace,
            impl="numba",
        )
    finally:
        torch.set_num_threads(before)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])


def test_positions_per_job() -> None:
    assert fast.positions_per_job(4096, 1, 1) == 4096  # one thread: one run per head
    assert fast.positions_per_job(4096, 1, 2) == 512  # 8 jobs: 4 per thread
    assert fast.positions_per_job(100, 1, 2) == 64  # at least 64 positions a job
    assert fast.positions_per_job(4096, 16, 2) == 4096  # the batch rows are jobs enough


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("inplace", [False, True])
def test_rotate_pair_of_other_head_dims(impl, inplace) -> None:
    # q and k share the rotated channels but not the row length (each copies its own rows).
    q = _x((2, 3, 40, 16), torch.float32)
    k = _x((2, 1, 40, 24), torch.float32, strided=True)
    tables = _tables(40, 16, torch.float32)
    got = kernels.rotate_pair(
        q.clone(),
        k.clone(),
        tables,
        tables,
        layout="half",
        rotary_dim=16,
        inplace=inplace,
        impl=impl,
    )
    assert torch.equal(got[0], _reference(q, *tables, "half", 16))
    assert torch.equal(got[1], _reference(k, *tables, "half", 16))
