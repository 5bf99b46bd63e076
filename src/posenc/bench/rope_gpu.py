"""``posenc bench rope --only gpu``: RoPE's Triton kernel against the device's memory bandwidth.

RoPE is memory-bound: its floor is one read and one write of q and k. On CUDA, q and k are
``1 × 32 × 8192 × 128`` (128 MiB each in float32, 64 MiB in bfloat16: far past any L2
cache), half layout, full rotary dim, one ``(seq, 64)`` float32 table pair. The candidates —
the ``copy_`` floor into preallocated buffers, and the Triton kernel (q and k in one launch
or one launch each; in place, into ``out=``, or into fresh tensors) — run in interleaved
rounds (the order rotates each round), each timed with CUDA events over ``calls``
back-to-back calls; a figure is the median over rounds, ``ratio`` the median of per-round
ratios to the floor.

Achieved bandwidth is bytes moved over time: q and k read and written once
(``2 · (|q| + |k|)`` bytes, the copy's too) plus the tables read once (the kernel's). Its
fraction of the device's peak is the target's figure (``percent_of_peak``). The peak is the
theoretical one, ``2 · memory_clock_rate · memory_bus_width / 8`` from
``torch.cuda.get_device_properties`` (double data rate: two transfers per clock; what
``torch.cuda._device_limits`` computes), or, where this torch lacks those fields, the
bandwidth the ``copy_`` floor achieves in the same run; each row names its ``peak_source``.

Without CUDA, or without triton, the suite measures nothing and returns no rows.

Example (synthetic timings: 0.5 ms to move 1.5 GB against a 3.35 TB/s peak)::

    >>> rows = bandwidth_rows(
    ...     {"copy_ floor": [5e-4], "triton q+k inplace": [5e-4]},
    ...     {"copy_ floor": 1_500_000_000, "triton q+k inplace": 1_500_000_000},
    ...     peak=3.35e12, peak_source="device properties", extra={"dtype": "float32"},
    ... )
    >>> round(rows[1]["percent_of_peak"], 1), rows[1]["gb_per_s"]
    (89.6, 3000.0)
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from posenc.rotary import RotaryEmbedding
from posenc.rotary.kernels import available_impls, rotate, rotate_pair

__all__ = ["COLUMNS", "SHAPE", "bandwidth_rows", "device_peak", "gpu"]

SHAPE = (1, 32, 8192, 128)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
BASELINE = "copy_ floor"

#: the table's columns: ``(key, header, format)``
COLUMNS: list[tuple[str, str, str]] = [
    ("device", "device", ""),
    ("dtype", "dtype", ""),
    ("name", "path", ""),
    ("seconds", "s", ".6f"),
    ("ratio", "× copy_ floor", ".2f"),
    ("gb_per_s", "GB/s", ".0f"),
    ("percent_of_peak", "% of peak", ".1f"),
    ("peak_gb_per_s", "peak GB/s", ".0f"),
    ("peak_source", "peak from", ""),
]


def device_peak(device: torch.device) -> float | None:
    """The theoretical memory bandwidth of a CUDA ``device`` in bytes/s, ``2 ·
    memory_clock_rate (kHz) · 1000 · memory_bus_width (bits) / 8``; ``None`` where this
    torch's device properties lack either field (or report 0)."""
    properties = torch.cuda.get_device_properties(device)
    clock_khz = getattr(properties, "memory_clock_rate", 0)
    bus_bits = getattr(properties, "memory_bus_width", 0)
    if not clock_khz or not bus_bits:
        return None
    return 2.0 * clock_khz * 1000.0 * bus_bits / 8.0


def bandwidth_rows(
    times: Mapping[str, Sequence[float]],
    bytes_moved: Mapping[str, int],
    *,
    peak: float | None,
    peak_source: str,
    extra: Mapping[str, Any],
    baseline: str = BASELINE,
) -> list[dict[str, Any]]:
    """One row per candidate from its per-round seconds per call (``times``, rounds aligned
    across candidates) and the bytes one call moves.

    ``peak`` in bytes/s; ``None``: the baseline's achieved bandwidth stands for it and
    ``peak_source`` is replaced by ``"copy_ floor (measured)"``. ``extra`` (device, dtype)
    starts every row.
    """
    if baseline not in times:
        raise ValueError(f"baseline {baseline!r} is not among the candidates")
    base = times[baseline]
    if peak is None:
        peak = bytes_moved[baseline] / statistics.median(base)
        peak_source = "copy_ floor (measured)"
    rows = []
    for name, rounds in times.items():
        seconds = statistics.median(rounds)
        achieved = bytes_moved[name] / seconds
        rows.append(
            {
                **extra,
                "name": name,
                "seconds": seconds,
                "ratio": statistics.median(t / b for t, b in zip(rounds, base, strict=True)),
                "gb_per_s": achieved / 1e9,
                "percent_of_peak": 100.0 * achieved / peak,
                "peak_gb_per_s": peak / 1e9,
                "peak_source": peak_source,
                "bytes": bytes_moved[name],
                "rounds": len(rounds),
            }
        )
    return rows


def _time_rounds(
    candidates: Mapping[str, Callable[[], object]], *, rounds: int, calls: int, warmup: int
) -> dict[str, list[float]]:
    """Seconds per call of each candidate in each round, from CUDA events around ``calls``
    back-to-back calls; the order of candidates rotates by one each round."""
    names = list(candidates)
    for _ in range(warmup):
        for call in candidates.values():
            call()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        order = names[index % len(names) :] + names[: index % len(names)]
        events = []
        for name in order:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                candidates[name]()
            end.record()
            events.append((name, start, end))
        torch.cuda.synchronize()
        for name, start, end in events:
            times[name].append(start.elapsed_time(end) / 1000.0 / calls)  # ms → s
    return times


def _candidates(
    dtype: torch.dtype, device: torch.device
) -> tuple[dict[str, Callable[[], object]], dict[str, int]]:
    """The calls to time and the bytes each moves."""
    generator = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(SHAPE, generator=generator, device=device).to(dtype)
    k = torch.randn(SHAPE, generator=generator, device=device).to(dtype)
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    q_in, k_in = q.clone(), k.clone()  # rotated in place round after round
    rope = RotaryEmbedding(SHAPE[-1], device=device)
    c, s = rope.rotary_tables(torch.arange(SHAPE[2], device=device), dtype)
    kw: dict[str, Any] = {"layout": "half", "rotary_dim": SHAPE[-1], "impl": "triton"}

    def floor() -> None:
        q_out.copy_(q)
        k_out.copy_(k)

    candidates: dict[str, Callable[[], object]] = {
        BASELINE: floor,
        "triton q+k inplace": lambda: rotate_pair(q_in, k_in, (c, s), (c, s), inplace=True, **kw),
        "triton q+k new": lambda: rotate_pair(q, k, (c, s), (c, s), **kw),
        "triton inplace": lambda: (
            rotate(q_in, c, s, inplace=True, **kw),
            rotate(k_in, c, s, inplace=True, **kw),
        ),
        "triton out=": lambda: (
            rotate(q, c, s, out=q_out, **kw),
            rotate(k, c, s, out=k_out, **kw),
        ),
    }
    qk_bytes = 2 * (q.numel() * q.element_size() + k.numel() * k.element_size())
    table_bytes = c.numel() * c.element_size() + s.numel() * s.element_size()
    bytes_moved = {name: qk_bytes + (0 if name == BASELINE else table_bytes) for name in candidates}
    return candidates, bytes_moved


def gpu(rounds: int = 15, calls: int = 10, warmup: int = 3) -> list[dict[str, Any]]:
    """The Triton kernel's achieved bandwidth and its fraction of the device's peak, per
    dtype and path; ``[]`` without CUDA or triton."""
    if not torch.cuda.is_available() or "triton" not in available_impls():
        return []
    device = torch.device("cuda", torch.cuda.current_device())
    peak = device_peak(device)
    extra = {"device": torch.cuda.get_device_name(device)}
    rows = []
    with torch.no_grad():
        for dtype_name, dtype in DTYPES.items():
            candidates, bytes_moved = _candidates(dtype, device)
            times = _time_rounds(candidates, rounds=rounds, calls=calls, warmup=warmup)
            rows += bandwidth_rows(
                times,
                bytes_moved,
                peak=peak,
                peak_source="device properties (memory clock × bus width × 2)",
                extra={**extra, "dtype": dtype_name},
            )
            del candidates
            torch.cuda.empty_cache()
    return rows
