"""``posenc bench rope``: applying RoPE against the memory floor, side by side.

q and k are ``1 × 16 × 4096 × 128`` (half layout, full rotary dim), timed in one process,
interleaved rounds, each figure the median of per-round ratios to the floor
``q_out.copy_(q); k_out.copy_(k)`` into preallocated buffers of the same dtype. Every
suite runs at one thread and at all threads (``torch.set_num_threads``; numba follows it).

Suites:

* ``forward``: float32 and bfloat16. The floor, ``clone()`` of q and k (a fresh output:
  first-touch page faults), HF's ``q·cos + rotate_half(q)·sin`` with tables precomputed in
  q's dtype, rotary-embedding-torch's ``apply_rotary_emb`` and ``torch.compile`` of HF's form
  where installed / compilable, posenc's torch path and numba path (``new``, ``out=``,
  ``inplace``, q and k in one in-place call) from prepared tables; end to end from
  positions: HF's rotary ``forward`` + apply, ``RotaryEmbedding.forward`` (fresh outputs)
  and the attention's step (tables from the hook, q and k rotated in place in one call).
* ``backward``: float32 and bfloat16, the backward of posenc's rotation (``new``) as a ratio
  to its forward, per implementation.
* ``gpu``: on CUDA only (no rows elsewhere), the Triton kernel's achieved memory bandwidth as
  a fraction of the device's peak (:mod:`posenc.bench.rope_gpu`).
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from posenc.bench import compare, format_suites, run_suites
from posenc.bench.rope_gpu import COLUMNS as GPU_COLUMNS
from posenc.bench.rope_gpu import gpu
from posenc.bench.targets import TARGETS
from posenc.rotary import RotaryEmbedding
from posenc.rotary.kernels import available_impls, rotate, rotate_pair

__all__ = ["SUITES", "format_result", "run"]

SHAPE = (1, 16, 4096, 128)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _thread_counts() -> list[int]:
    cores = os.cpu_count() or 1
    return [1] if cores == 1 else [1, cores]


def _inputs(dtype: torch.dtype) -> tuple[Tensor, Tensor, RotaryEmbedding, Tensor]:
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(SHAPE, generator=generator).to(dtype)
    k = torch.randn(SHAPE, generator=generator).to(dtype)
    rope = RotaryEmbedding(SHAPE[-1])
    return q, k, rope, torch.arange(SHAPE[2])


def _rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _hf_form(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """HF's ``apply_rotary_pos_emb`` (re-stated here so the benchmark runs without HF)."""
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def _hf_end_to_end(
    q: Tensor, k: Tensor, inv_freq: Tensor, positions: Tensor
) -> tuple[Tensor, Tensor]:
    """HF's rotary embedding ``forward`` (float32 ``inv_freq @ positions``, cos, sin, cast to
    q's dtype) and ``apply_rotary_pos_emb``: HF's whole per-forward work, re-stated."""
    freqs = (inv_freq[None, :, None] @ positions[None, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(q.dtype)[:, None], emb.sin().to(q.dtype)[:, None]
    return _hf_form(q, k, cos, sin)


def _forward_candidates(dtype: torch.dtype) -> dict[str, Callable[[], object]]:
    q, k, rope, positions = _inputs(dtype)
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    cos, sin = rope.cos_sin(positions, torch.float32)
    cos_x, sin_x = cos.to(dtype), sin.to(dtype)
    c, s = rope.rotary_tables(positions, dtype)
    q_in, k_in = q.clone(), k.clone()  # rotated in place round after round (angles add up)
    inv_freq = rope.inv_freq("cpu").float()

    def floor() -> None:
        q_out.copy_(q)
        k_out.copy_(k)

    candidates: dict[str, Callable[[], object]] = {
        "copy_ floor": floor,
        "clone": lambda: (q.clone(), k.clone()),
        "HF form": lambda: _hf_form(q, k, cos_x, sin_x),
        "HF end to end": lambda: _hf_end_to_end(q, k, inv_freq, positions),
    }
    if importlib.util.find_spec("rotary_embedding_torch") is not None:
        from rotary_embedding_torch import apply_rotary_emb

        freqs = torch.outer(positions.float(), rope.inv_freq("cpu").float())
        freqs = torch.cat((freqs, freqs), dim=-1)
        candidates["rotary-embedding-torch"] = lambda: (
            apply_rotary_emb(freqs, q, seq_dim=-2),
            apply_rotary_emb(freqs, k, seq_dim=-2),
        )
    compiled = torch.compile(_hf_form, dynamic=False)
    try:
        compiled(q, k, cos_x, sin_x)
        candidates["compile(HF form)"] = lambda: compiled(q, k, cos_x, sin_x)
    except Exception:  # no C++ compiler for inductor: leave the row out
        pass
    for impl in ("torch", "numba"):
        if impl not in available_impls():
            continue
        candidates.update(_posenc_paths(impl, q, k, c, s, (q_out, k_out), (q_in, k_in)))

    def end_to_end() -> object:
        return rope(q, k, positions, positions)

    def attention_step() -> object:
        # What the attention does per forward without autograd: tables from positions (the
        # hook computes them: no gather), then q and k rotated in place in one call.
        tables = rope.rotary_tables(positions, dtype)
        return rope.rotate_qk(q_in, k_in, tables, tables, inplace=True)

    candidates["RotaryEmbedding.forward (auto)"] = end_to_end
    candidates["attention step (auto)"] = attention_step
    return candidates


def _posenc_paths(
    impl: str,
    q: Tensor,
    k: Tensor,
    c: Tensor,
    s: Tensor,
    outs: tuple[Tensor, Tensor],
    ins: tuple[Tensor, Tensor],
) -> dict[str, Callable[[], object]]:
    kw: dict[str, Any] = {"layout": "half", "rotary_dim": SHAPE[-1], "impl": impl}

    def new() -> object:
        return rotate(q, c, s, **kw), rotate(k, c, s, **kw)

    def out() -> object:
        return rotate(q, c, s, out=outs[0], **kw), rotate(k, c, s, out=outs[1], **kw)

    def inplace() -> object:
        return rotate(ins[0], c, s, inplace=True, **kw), rotate(ins[1], c, s, inplace=True, **kw)

    def pair() -> object:
        return rotate_pair(ins[0], ins[1], (c, s), (c, s), inplace=True, **kw)

    return {
        f"{impl} new": new,
        f"{impl} out=": out,
        f"{impl} inplace": inplace,
        f"{impl} q+k inplace": pair,
    }


def forward() -> list[dict[str, Any]]:
    """Each path as a ratio to the ``copy_`` floor of its own dtype."""
    rows = []
    for threads in _thread_counts():
        torch.set_num_threads(threads)
        for dtype_name, dtype in DTYPES.items():
            with torch.no_grad():
                timings = compare(_forward_candidates(dtype), "copy_ floor", rounds=15, warmup=2)
            for timing in timings:
                rows.append({"threads": threads, "dtype": dtype_name, **timing.as_dict()})
    return rows


def backward() -> list[dict[str, Any]]:
    """Backward of posenc's rotation as a ratio to its forward, per implementation."""
    rows = []
    for threads in _thread_counts():
        torch.set_num_threads(threads)
        for dtype_name, dtype in DTYPES.items():
            q, _, rope, positions = _inputs(dtype)
            c, s = rope.rotary_tables(positions, dtype)
            grad = torch.randn_like(q)
            for impl in ("torch", "numba"):
                if impl not in available_impls():
                    continue
                leaf = q.clone().requires_grad_()
                kw: dict[str, Any] = {"layout": "half", "rotary_dim": SHAPE[-1], "impl": impl}
                # Each round times a forward, then the backward of that same forward.
                ratios = []
                for round_ in range(17):
                    start = time.perf_counter()
                    out = rotate(leaf, c, s, **kw)
                    middle = time.perf_counter()
                    torch.autograd.grad(out, leaf, grad)
                    if round_ >= 2:  # warm-up
                        ratios.append((time.perf_counter() - middle) / (middle - start))
                ratio = statistics.median(ratios)
                rows.append({"threads": threads, "dtype": dtype_name, "name": impl, "ratio": ratio})
    return rows


SUITES: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "forward": forward,
    "backward": backward,
    "gpu": gpu,  # CUDA only: the Triton kernel's bandwidth (posenc.bench.rope_gpu)
}


def run(suites: list[str] | None = None) -> dict[str, Any]:
    """Run the chosen suites (all by default) and return ``{"machine", suite: rows}``."""
    result = run_suites(SUITES, suites)
    result["machine"]["threads"] = " and ".join(map(str, _thread_counts()))
    return result


_COLUMNS: dict[str, list[tuple[str, str, str]]] = {
    "forward": [
        ("threads", "threads", ""),
        ("dtype", "dtype", ""),
        ("name", "path", ""),
        ("seconds", "s", ".4f"),
        ("ratio", "× copy_ floor", ".2f"),
    ],
    "backward": [
        ("threads", "threads", ""),
        ("dtype", "dtype", ""),
        ("name", "impl", ""),
        ("ratio", "backward × forward", ".2f"),
    ],
    "gpu": GPU_COLUMNS,
}


def format_result(result: dict[str, Any]) -> str:
    """The machine line and one table per suite, each figure with a target beside its goal
    (:data:`posenc.bench.targets.TARGETS`)."""
    return format_suites(result, _COLUMNS, bench="rope", targets=TARGETS)
