"""posenc.rotary.kernels._triton: the Triton rotation gives the torch path's bits.

Every case rotates in place and into ``out`` (strided unlike ``x``, prefilled with NaN), each
tensor in its own launch and, where a case has two (q and k), both in one launch, and
compares whole tensors with :func:`posenc.rotary.kernels.torch_path.torch_rotate`, bit for bit. On
CUDA the cases run here. Without it they run under Triton's interpreter
(``TRITON_INTERPRET=1``, numpy on CPU tensors), which must be set before triton is imported:
one child process runs this file as a script over every case, so the variable never reaches
the pytest process.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch

pytest.importorskip("triton")

from posenc.positions.multimodal import IMAGE, TEXT, mrope_position_ids
from posenc.rotary import MultiAxisRotary
from posenc.rotary.kernels._triton import run_triton
from posenc.rotary.kernels.torch_path import torch_rotate

DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float64": torch.float64,
}
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
LAYOUTS = ("half", "interleaved")
BATCH, HEADS, SEQ = 2, 3, 5


@dataclass(frozen=True)
class Case:
    """One configuration of the kernel.

    ``tables``: ``seq`` (seq, r2); ``batch`` (batch, 1, seq, r2); ``one`` (1, 1, seq, r2);
    ``decode`` x and tables at one position; ``broadcast`` a (1, r2) table for every
    position; ``sliced`` a non-contiguous window of longer tables; ``ties`` c = 1.5, s = 0,
    whose products are exact halfway between two bfloat16/float16 values; ``mrope``
    Qwen2-VL's M-RoPE (``MultiAxisRotary.mrope``) at the ``(3, batch, seq)`` positions of
    text and image tokens (``mrope_position_ids``), a (batch, 1, seq, r2) table per token.
    ``inputs``: ``contiguous``; ``transposed`` a (batch, seq, heads, head_dim) buffer seen
    as (batch, heads, seq, head_dim); ``qkv`` q and k as views of one packed projection
    ``(batch, seq, 3 · heads · head_dim)``; ``q_k`` a query block at the last two positions
    and keys of another head count and length; ``q_empty`` no query positions beside keys
    (the pair launches k alone); ``q_k_dtypes`` a float32 query beside keys of the case's
    dtype (two launches); ``empty`` no positions.
    """

    dtype: str
    layout: str
    head_dim: int = 16
    rotary_dim: int = 16
    tables: str = "seq"
    inputs: str = "contiguous"

    def __str__(self) -> str:
        return "-".join(str(v) for v in vars(self).values())


CASES = [
    # Both layouts, full and partial rotary_dim (r2 = 6: not a power of two), every dtype.
    *(
        Case(dtype, layout, head_dim, rotary_dim)
        for dtype, layout, (head_dim, rotary_dim) in itertools.product(
            DTYPES, LAYOUTS, [(16, 16), (16, 8), (24, 12)]
        )
    ),
    *(
        Case(dtype, layout, 24, 12, tables=tables)
        for dtype, layout, tables in itertools.product(
            DTYPES, LAYOUTS, ["batch", "one", "decode", "broadcast", "sliced", "ties", "mrope"]
        )
    ),
    *(
        Case(dtype, layout, 24, 12, inputs=inputs)
        for dtype, layout, inputs in itertools.product(
            DTYPES, LAYOUTS, ["transposed", "qkv", "q_k", "q_empty", "q_k_dtypes", "empty"]
        )
    ),
    # M-RoPE tables on q and k of different lengths, in one launch.
    *(Case(dtype, layout, 24, 12, "mrope", "q_k") for dtype in DTYPES for layout in LAYOUTS),
]


def _x(
    shape: tuple[int, int, int, int], dtype: torch.dtype, transposed: bool, device: str
) -> torch.Tensor:
    generator = torch.Generator().manual_seed(sum(shape))
    if transposed:  # (batch, seq, heads, head_dim) memory
        b, h, p, d = shape
        x = torch.randn((b, p, h, d), generator=generator).transpose(1, 2)
    else:
        x = torch.randn(shape, generator=generator)
    return x.to(device=device, dtype=dtype)


def _tables(
    shape: tuple[int, ...], compute: torch.dtype, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    angles = torch.randn(shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    amplitude = 0.5 + torch.rand(shape, generator=torch.Generator().manual_seed(2))
    c, s = amplitude * angles.cos(), amplitude * angles.sin()  # c = A·cos θ, s = A·sin θ
    return c.to(device=device, dtype=compute), s.to(device=device, dtype=compute)


def _mrope_tables(
    rotary_dim: int, layout: str, compute: torch.dtype, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Qwen2-VL's M-RoPE tables (batch, 1, SEQ, rotary_dim / 2): rows of text and one image."""
    sections = [rotary_dim // 6, rotary_dim // 6, rotary_dim // 2 - 2 * (rotary_dim // 6)]
    rope = MultiAxisRotary.mrope(rotary_dim, sections, layout=layout)  # type: ignore[arg-type]
    types = torch.tensor([[TEXT, IMAGE, IMAGE, TEXT, TEXT], [TEXT, TEXT, IMAGE, IMAGE, TEXT]])
    positions, _ = mrope_position_ids(types, [[1, 4, 2], [1, 2, 4]])  # (3, batch, seq)
    c, s = rope.rotary_tables(positions, compute)
    return c.to(device), s.to(device)


def _qkv(
    shape: tuple[int, int, int, int], dtype: torch.dtype, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k as views of one packed ``(batch, seq, 3 · heads · head_dim)`` projection."""
    b, h, p, d = shape
    generator = torch.Generator().manual_seed(sum(shape))
    packed = torch.randn((b, p, 3 * h * d), generator=generator).to(device=device, dtype=dtype)
    q, k, _ = packed.view(b, p, 3, h, d).unbind(2)
    return q.transpose(1, 2), k.transpose(1, 2)  # (batch, heads, seq, head_dim) views


def _inputs(case: Case, device: str) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``[(x, c, s), ...]``: the tensors to rotate, each with its tables."""
    dtype = DTYPES[case.dtype]
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    r2 = case.rotary_dim // 2
    seq = 1 if case.tables == "decode" else 0 if case.inputs == "empty" else SEQ
    x = _x((BATCH, HEADS, seq, case.head_dim), dtype, case.inputs == "transposed", device)
    if case.inputs in ("q_k", "q_empty", "q_k_dtypes"):
        if case.tables == "mrope":
            c, s = _mrope_tables(case.rotary_dim, case.layout, compute, device)
        else:
            c, s = _tables((BATCH, 1, SEQ, r2), compute, device)
        q_seq = 0 if case.inputs == "q_empty" else 2
        q_dtype = torch.float32 if case.inputs == "q_k_dtypes" else dtype
        q = _x((BATCH, 4, q_seq, case.head_dim), q_dtype, False, device)
        q_c, q_s = c[:, :, SEQ - q_seq :], s[:, :, SEQ - q_seq :]
        if q_dtype != dtype:
            q_c, q_s = q_c.float(), q_s.float()
        return [(q, q_c, q_s), (x, c, s)]
    if case.inputs == "qkv":
        c, s = _tables((seq, r2), compute, device)
        q, k = _qkv((BATCH, HEADS, seq, case.head_dim), dtype, device)
        return [(q, c, s), (k, c, s)]
    if case.tables == "mrope":
        return [(x, *_mrope_tables(case.rotary_dim, case.layout, compute, device))]
    table_shape = {
        "seq": (seq, r2),
        "batch": (BATCH, 1, seq, r2),
        "one": (1, 1, seq, r2),
        "decode": (BATCH, 1, 1, r2),
        "broadcast": (1, r2),
        "sliced": (BATCH, 1, seq + 3, r2),
        "ties": (seq, r2),
    }[case.tables]
    c, s = _tables(table_shape, compute, device)
    if case.tables == "sliced":
        c, s = c[:, :, 3:], s[:, :, 3:]
    elif case.tables == "ties":
        c, s = torch.full_like(c, 1.5), torch.zeros_like(s)
    return [(x, c, s)]


def _assert_same_bits(got: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    bits = BITS[got.element_size()]  # and the signs of zeros
    assert torch.equal(got.view(bits), expected.view(bits))


def _out_like(x: torch.Tensor) -> torch.Tensor:
    """A NaN-filled buffer of x's shape, strided unlike x: contiguous for a non-contiguous
    x, a transposed (batch, seq, heads, head_dim) buffer otherwise."""
    b, h, p, d = x.shape
    if x.is_contiguous():
        return x.new_full((b, p, h, d), float("nan")).transpose(1, 2)
    return x.new_full((b, h, p, d), float("nan"))


def check(case: Case, device: str) -> None:
    """Rotate into ``out``, then in place, each tensor in its own launch and (q, k) in one;
    every result equals the torch path bit for bit, and ``out=`` leaves its input as it was."""
    interleaved, rotary_dim = case.layout == "interleaved", case.rotary_dim
    inputs = _inputs(case, device)
    expected = [torch_rotate(x, c, s, case.layout, rotary_dim, None, False) for x, c, s in inputs]
    originals = [x.clone() for x, _, _ in inputs]
    one_each = [[i] for i in range(len(inputs))]
    groupings = [one_each] if len(inputs) == 1 else [one_each, [list(range(len(inputs)))]]
    for groups in groupings:
        outs = [_out_like(x) for x, _, _ in inputs]
        for group in groups:
            run_triton([(*inputs[i], outs[i]) for i in group], interleaved, rotary_dim)
        for i, (x, _, _) in enumerate(inputs):
            _assert_same_bits(outs[i], expected[i])
            _assert_same_bits(x, originals[i])
        for group in groups:
            run_triton([(*inputs[i], None) for i in group], interleaved, rotary_dim)
        for i, (x, _, _) in enumerate(inputs):
            _assert_same_bits(x, expected[i])
            x.copy_(originals[i])  # the inputs again, for the next grouping


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("case", CASES, ids=str)
def test_cuda_equals_torch(case: Case) -> None:
    check(case, "cuda")


@pytest.mark.parametrize(
    ("k_dtype", "q_seq", "out", "launches"),
    [
        (torch.bfloat16, 2, False, [[0, 1]]),  # q and k: one launch
        (torch.bfloat16, 2, True, [[0, 1]]),
        (torch.float32, 2, False, [[0], [1]]),  # two dtypes: one launch each
        (torch.bfloat16, 0, False, [[1]]),  # no query positions: k alone
    ],
)
def test_q_and_k_share_a_launch_where_they_can(
    monkeypatch: pytest.MonkeyPatch, k_dtype: torch.dtype, q_seq: int, out: bool, launches: list
) -> None:
    from posenc.rotary.kernels import _triton

    launched: list[list[torch.Tensor]] = []
    monkeypatch.setattr(_triton, "_launch", lambda items, *_: launched.append(items))
    q = torch.zeros(1, 4, q_seq, 8, dtype=torch.bfloat16)
    k = torch.zeros(1, 2, 3, 8, dtype=k_dtype)
    c = torch.ones(3, 4)
    items = [(x, c, c, torch.empty_like(x) if out else None) for x in (q, k)]
    run_triton(items, False, 8)
    index = {id(item): i for i, item in enumerate(items)}
    assert [[index[id(item)] for item in group] for group in launched] == launches


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_rotate_pair_equals_torch(dtype: str, inplace: bool) -> None:
    """``rotate_pair(impl="triton")``, the attention's path (one launch), on M-RoPE tables."""
    from posenc.rotary.kernels import rotate_pair

    for layout in LAYOUTS:
        case = Case(dtype, layout, 24, 12, "mrope", "q_k")
        (q, q_c, q_s), (k, k_c, k_s) = _inputs(case, "cuda")
        expected = [
            torch_rotate(x, c, s, layout, 12, None, False) for x, c, s in _inputs(case, "cuda")
        ]
        got = rotate_pair(
            q,
            k,
            (q_c, q_s),
            (k_c, k_s),
            layout=layout,
            rotary_dim=12,
            inplace=inplace,
            impl="triton",
        )
        for result, want in zip(got, expected, strict=True):
            _assert_same_bits(result, want)


@pytest.mark.skipif(torch.cuda.is_available(), reason="runs on CUDA instead")
def test_interpreter_equals_torch() -> None:
    result = subprocess.run(
        [sys.executable, __file__],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(CASES)} cases passed" in result.stdout


def _main() -> int:
    """Every case on the CPU (under the interpreter); the failures listed, exit status 1."""
    assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1"
    failures = []
    for case in CASES:
        try:
            check(case, "cpu")
        except Exception as error:  # every failing case reported, not just the first
            failures.append(f"{case}: {type(error).__name__}: {error}")
    print("\n".join(failures))
    print(f"{len(CASES) - len(failures)} cases passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(_main())
