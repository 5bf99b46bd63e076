"""posenc.rotary.kernels._triton: the Triton rotation gives the torch path's bits.

Every case rotates in place and into ``out`` (strided unlike ``x``, prefilled with NaN) and
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
    whose products are exact halfway between two bfloat16/float16 values.
    ``inputs``: ``contiguous``; ``transposed`` a (batch, seq, heads, head_dim) buffer seen
    as (batch, heads, seq, head_dim); ``q_k`` a query block at the last two positions and
    keys of another head count and length; ``empty`` no positions.
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
            DTYPES, LAYOUTS, ["batch", "one", "decode", "broadcast", "sliced", "ties"]
        )
    ),
    *(
        Case(dtype, layout, 24, 12, inputs=inputs)
        for dtype, layout, inputs in itertools.product(
            DTYPES, LAYOUTS, ["transposed", "q_k", "empty"]
        )
    ),
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


def _inputs(case: Case, device: str) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``[(x, c, s), ...]``: the tensors to rotate, each with its tables."""
    dtype = DTYPES[case.dtype]
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    r2 = case.rotary_dim // 2
    seq = 1 if case.tables == "decode" else 0 if case.inputs == "empty" else SEQ
    x = _x((BATCH, HEADS, seq, case.head_dim), dtype, case.inputs == "transposed", device)
    if case.inputs == "q_k":
        c, s = _tables((BATCH, 1, SEQ, r2), compute, device)
        q = _x((BATCH, 4, 2, case.head_dim), dtype, False, device)
        return [(q, c[:, :, -2:], s[:, :, -2:]), (x, c, s)]
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


def check(case: Case, device: str) -> None:
    """Rotate in place and into ``out``; both equal the torch path bit for bit."""
    layout, rotary_dim = case.layout, case.rotary_dim
    for x, c, s in _inputs(case, device):
        expected = torch_rotate(x, c, s, layout, rotary_dim, None, False)

        rotated = x.clone()
        run_triton([(rotated, c, s, None)], layout == "interleaved", rotary_dim)
        _assert_same_bits(rotated, expected)

        # ``out`` strided unlike x: contiguous for a transposed x, transposed otherwise.
        b, h, p, d = x.shape
        if x.is_contiguous():
            out = x.new_full((b, p, h, d), float("nan")).transpose(1, 2)
        else:
            out = x.new_full((b, h, p, d), float("nan"))
        before = x.clone()
        run_triton([(x, c, s, out)], layout == "interleaved", rotary_dim)
        _assert_same_bits(out, expected)
        _assert_same_bits(x, before)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("case", CASES, ids=str)
def test_cuda_equals_torch(case: Case) -> None:
    check(case, "cuda")


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
