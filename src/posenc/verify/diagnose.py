""":func:`verify`: compare a port's RoPE arrays with posenc's float64 reference and name the
likely cause of a mismatch from :data:`~posenc.verify.catalogue.BUG_CLASSES`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal

import torch
from torch import Tensor

from posenc.verify.catalogue import BUG_CLASSES
from posenc.verify.compare import EPS32, KeyReport, compare_key, pair_of_channel, tolerance
from posenc.verify.reference import mrope_ids
from posenc.verify.report import VerifyReport
from posenc.verify.spec import TABLE_LAYOUTS, RopeSpec, rope_spec
from posenc.verify.variants import Case, Variant, variant_arrays

__all__ = ["ARRAY_KEYS", "verify"]

#: The array names :func:`verify` reads.
ARRAY_KEYS = (
    "positions",
    "cos",
    "sin",
    "q",
    "k",
    "q_rotated",
    "k_rotated",
    "position_ids",
    "token_types",
    "image_grid_thw",
    "video_grid_thw",
)
_CHECKED = ("cos", "sin", "q_rotated", "k_rotated", "position_ids")
#: unit roundoff of the angle arithmetic a correct port may use
_UNITS = {"float32": EPS32, "float64": 2.0**-53}


def _as_tensor(key: str, value: Any) -> Tensor:
    if not isinstance(value, Tensor):
        try:
            value = torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(
                f"arrays[{key!r}] must be an array, got {type(value).__name__}"
            ) from None
    if value.is_complex() or (value.dtype == torch.bool and key not in ("token_types",)):
        raise ValueError(f"arrays[{key!r}] must be real numbers, got {value.dtype}")
    if value.is_floating_point() and not bool(torch.isfinite(value).all()):
        raise ValueError(f"arrays[{key!r}] must be finite; it contains NaN or inf")
    return value


def _table(key: str, value: Tensor, seq: int) -> Tensor:
    """A table as ``(seq, width)``: leading axes of size 1 dropped (HF's ``(1, seq, d)``)."""
    while value.dim() > 2 and value.shape[0] == 1:
        value = value[0]
    if value.dim() != 2 or value.shape[0] != seq:
        raise ValueError(
            f"arrays[{key!r}] must be (seq={seq}, width) (leading axes of size 1 allowed), got "
            f"{tuple(value.shape)}"
        )
    return value


def _read_arrays(
    config: Any, arrays: Mapping[str, Any], positions: Any
) -> tuple[dict[str, Tensor], Tensor, Tensor | None]:
    """Validated arrays, the positions, and the reference M-RoPE ids (from token types)."""
    if not isinstance(arrays, Mapping):
        raise ValueError(
            f"arrays must be a mapping of names to arrays, got {type(arrays).__name__}"
        )
    unknown = sorted(set(arrays) - set(ARRAY_KEYS))
    if unknown:
        raise ValueError(f"arrays has unknown key(s) {unknown}; allowed: {list(ARRAY_KEYS)}")
    found = {key: _as_tensor(key, value) for key, value in arrays.items()}
    if not any(key in found for key in _CHECKED):
        raise ValueError(f"arrays must hold at least one of {list(_CHECKED)}, got {sorted(found)}")
    for out, inp in (("q_rotated", "q"), ("k_rotated", "k")):
        if out in found and inp not in found:
            raise ValueError(f"arrays[{out!r}] needs the unrotated input arrays[{inp!r}]")
    ids = None
    if "token_types" in found:
        ids = mrope_ids(
            config, found["token_types"], found.get("image_grid_thw"), found.get("video_grid_thw")
        )
    elif "position_ids" in found and positions is None and "positions" not in found:
        found["positions"] = found.pop("position_ids")
    if positions is not None:
        positions = _as_tensor("positions", positions)
    elif "positions" in found:
        positions = found["positions"]
    elif ids is not None:
        positions = ids
    else:
        seq = next(found[k] for k in ("cos", "sin", "q_rotated", "k_rotated") if k in found)
        while seq.dim() > 2 and seq.shape[0] == 1:
            seq = seq[0]
        positions = torch.arange(seq.shape[-2])
    if positions.dim() == 3 and positions.shape[1] == 1:
        positions = positions[:, 0]
    if positions.dim() not in (1, 2) or positions.numel() == 0 or (positions < 0).any():
        raise ValueError(
            f"positions must be non-negative (seq,) or (3, seq), got shape {tuple(positions.shape)}"
        )
    if "position_ids" in found:
        found["position_ids"] = found["position_ids"].reshape(3, -1)
    seq = positions.shape[-1]
    for key in ("cos", "sin"):
        if key in found:
            found[key] = _table(key, found[key], seq)
    return found, positions, ids


def _compare_all(
    spec: RopeSpec,
    found: Mapping[str, Tensor],
    expected: Mapping[str, Tensor],
    positions: Tensor,
    layout: str,
    unit: float = EPS32,
) -> tuple[KeyReport, ...] | None:
    """Key reports of ``found`` against ``expected`` (``None`` when a shape differs)."""
    reports = []
    for key in _CHECKED:
        if key not in found:
            continue
        user, ref = found[key], expected.get(key)
        if ref is None or tuple(user.shape) != tuple(ref.shape):
            return None
        if key == "position_ids":  # exact; (seq, axes) so that rows are tokens
            tol = torch.zeros(ref.shape[::-1], dtype=torch.float64)
            report = compare_key(key, user.T, ref.T, tol, positions)
            reports.append(
                replace(report, shape=tuple(user.shape), reference_shape=tuple(ref.shape))
            )
            continue
        x = found.get(key[0]) if key.endswith("_rotated") else None
        tol = tolerance(
            spec, positions, key, ref, user.dtype, layout=layout, x=x, arithmetic_unit=unit
        )
        reports.append(compare_key(key, user, ref, tol, positions))
    return tuple(reports)


def _precision_explains(
    spec: RopeSpec,
    found: Mapping[str, Tensor],
    expected: Mapping[str, Tensor],
    positions: Tensor,
    layout: str,
    unit: float,
) -> bool:
    """Whether the errors look like angle arithmetic of unit roundoff ``unit``: every entry
    within that arithmetic's tolerance, and a quarter or more of the entries where such
    arithmetic shows (its allowance over ten times float32's) beyond float32's tolerance (a
    precision bug spreads over every large angle; a local bug does not)."""
    sensitive = beyond = 0
    for key in ("cos", "sin", "q_rotated", "k_rotated"):
        if key not in found:
            continue
        user, ref = found[key], expected[key]
        x = found.get(key[0]) if key.endswith("_rotated") else None
        strict = tolerance(spec, positions, key, ref, user.dtype, layout=layout, x=x)
        loose = tolerance(
            spec, positions, key, ref, user.dtype, layout=layout, x=x, arithmetic_unit=unit
        )
        error = (user.to(torch.float64) - ref.to(user.dtype).to(torch.float64)).abs()
        if bool((error > loose).any()):
            return False
        shows = loose > 10 * strict
        sensitive += int(shows.sum())
        beyond += int((shows & (error > strict)).sum())
    return sensitive > 0 and beyond >= sensitive / 4


def _hint(spec: RopeSpec, reports: tuple[KeyReport, ...], layout: str) -> str:
    notes = []
    pairs = spec.rotary_dim // 2
    for r in reports:
        if r.ok or r.key == "position_ids":
            if not r.ok:
                notes.append("position_ids differ from posenc.positions.multimodal's")
            continue
        if r.key.endswith("_rotated"):
            lo = spec.head_dim - spec.rotary_dim if spec.trailing else 0
            inside = [c - lo for c in r.channels if lo <= c < lo + spec.rotary_dim]
            if len(inside) < len(r.channels):
                notes.append(f"{r.key}: pass-through channels changed (partial width or slice?)")
            channel_layout: str = spec.layout
            width = spec.rotary_dim
        else:
            inside, channel_layout, width = list(r.channels), layout, r.shape[-1]
        if r.first_position is not None and all(v == 0 for v in r.first_position):
            notes.append(
                f"{r.key}: differs at position 0, which must be cos = A, sin = 0 (A, offset?)"
            )
        used = sorted({pair_of_channel(c, width, channel_layout) for c in inside})
        if used:
            first, last = used[0], used[-1]
            periods = [
                2 * math.pi / float(spec.inv_freq[i])
                for i in (first, last)
                if i < pairs and float(spec.inv_freq[i]) > 0
            ]
            where = (
                "low-frequency"
                if first >= pairs // 2
                else ("high-frequency" if last < pairs // 2 else "high- and low-frequency")
            )
            text = f"{r.key}: {where} pairs {first}-{last} differ"
            if len(periods) == 2:
                text += f" (periods {periods[0]:.3g} to {periods[1]:.3g} positions)"
            if where == "low-frequency":
                text += ": the scaling's parameters (factor, L0, ramp) or the base?"
            notes.append(text)
    return "; ".join(notes) or "see the per-array report"


def _deinterleaved(
    spec: RopeSpec,
    found: Mapping[str, Tensor],
    expected: Mapping[str, Tensor],
    positions: Tensor,
    layout: str,
    unit: float,
) -> VerifyReport | None:
    """An ok report when interleaved q/k come back de-interleaved (evens, then odds, in the
    rotated slice: HF's ``apply_rotary_pos_emb_interleave`` for DeepSeek-V3); the scores
    ``q·k`` are unchanged when q and k share the permutation."""
    keys = [key for key in ("q_rotated", "k_rotated") if key in found]
    if spec.layout != "interleaved" or not keys:
        return None
    width = spec.rotary_dim
    lo = spec.head_dim - width if spec.trailing else 0
    order = list(range(spec.head_dim))
    order[lo : lo + width] = [lo + c for c in (*range(0, width, 2), *range(1, width, 2))]
    permuted = dict(expected)
    inputs = dict(found)
    for key in keys:
        permuted[key] = expected[key][..., order]
        inputs[key[0]] = found[key[0]][..., order]  # the tolerance follows the channels
    half = replace(spec, layout="half")
    reports = _compare_all(half, inputs, permuted, positions, layout, unit)
    if reports is None or not all(r.ok for r in reports):
        return None
    note = (
        "q/k rotated come back de-interleaved (even channels of the rope slice, then odd: "
        "HF's DeepSeek order); equal up to that permutation, which leaves q·k unchanged"
    )
    return VerifyReport(True, reports, None, None, note, spec, layout)


def verify(
    config: Any,
    arrays: Mapping[str, Any],
    *,
    positions: Tensor | None = None,
    layer_type: str | None = None,
    layout: Literal["half", "interleaved", "pairs"] | None = None,
    component: Literal["attention", "indexer"] = "attention",
    arithmetic: Literal["float32", "float64"] = "float32",
) -> VerifyReport:
    """Compare a port's RoPE arrays with posenc's float64 reference and name the likely cause.

    The reference (:func:`~posenc.verify.reference_arrays`) is rounded to each array's dtype;
    an array passes when every entry is within the tolerance of
    :mod:`posenc.verify.compare` (float32 angle arithmetic plus one rounding). On a mismatch,
    each applicable class of :data:`~posenc.verify.BUG_CLASSES` builds its buggy arrays, and
    the first whose arrays the user's match (within the same tolerance) is the ``cause``.

    Args:
        config: a ``config.json`` dict or ``PretrainedConfig``.
        arrays: any of ``cos``, ``sin`` (``(seq, width)``, leading axes of size 1 allowed),
            ``q_rotated``/``k_rotated`` with their inputs ``q``/``k`` (``(..., seq,
            head_dim)``), ``position_ids`` (``(3, seq)``) with ``token_types`` and the
            grids; ``positions`` (``(seq,)`` or ``(3, seq)``) unless given below.
        positions: the positions the arrays are for (default: ``arrays['positions']``, the
            ids from ``token_types``, or ``0 … seq−1``).
        layer_type: the per-layer-type entry of the config (Gemma 3/4, DeepSeek-V4).
        layout: the tables' column order: ``half``, ``interleaved`` or ``pairs`` (one column
            per pair); default the config's.
        component: ``"attention"``, or the DSA ``"indexer"``.
        arithmetic: the angle arithmetic a correct port may use: ``"float32"`` (HF's; its
            error grows with the position, ~6e-2 at 262k) or ``"float64"`` (phases in float64,
            rounded once: posenc's rule; float32 angles are then a mismatch, named in the
            hint).

    Raises:
        ValueError: naming the argument: unknown keys, wrong shapes, non-finite values, an
            unknown layer type or layout.

    Example::

        >>> cfg = {"head_dim": 8, "rope_theta": 100.0}
        >>> ref = reference_arrays(cfg, torch.arange(4))
        >>> verify(cfg, {"cos": ref["cos"].float(), "sin": ref["sin"].float()}).ok
        True
    """
    if layout is not None and layout not in TABLE_LAYOUTS:
        raise ValueError(f"layout must be one of {list(TABLE_LAYOUTS)}, got {layout!r}")
    if arithmetic not in _UNITS:
        raise ValueError(f"arithmetic must be one of {list(_UNITS)}, got {arithmetic!r}")
    unit = _UNITS[arithmetic]
    found, positions, ids = _read_arrays(config, arrays, positions)
    seq_len = int(positions.max()) + 1
    spec = rope_spec(config, layer_type, component=component, seq_len=seq_len)
    table_layout = spec.layout if layout is None else layout
    if spec.axes is None and positions.dim() == 2:
        raise ValueError(
            f"positions are (3, seq) but the config has no M-RoPE sections; got "
            f"{tuple(positions.shape)}"
        )
    correct = Variant("reference", spec, positions)
    inputs = {"q": found.get("q"), "k": found.get("k")}
    expected = variant_arrays(correct, layout, inputs)
    if ids is not None:
        expected["position_ids"] = ids
    reports = _compare_all(spec, found, expected, positions, table_layout, unit)
    shape_error = reports is None
    if reports is not None and all(r.ok for r in reports):
        return VerifyReport(True, reports, None, None, None, spec, table_layout)
    equivalent = _deinterleaved(spec, found, expected, positions, table_layout, unit)
    if equivalent is not None:
        return equivalent
    case = Case(config, spec, positions, component)
    for bug in BUG_CLASSES:
        variants = bug.variants(case)
        for variant in variants:
            buggy = variant_arrays(variant, layout, inputs)
            if "position_ids" in found and "position_ids" not in buggy and ids is not None:
                buggy["position_ids"] = ids
            buggy_layout: str = table_layout
            if variant.swap_tables and layout is not None:
                buggy_layout = {"half": "interleaved", "interleaved": "half"}.get(layout, layout)
            elif variant.swap_tables:
                buggy_layout = variant.spec.layout
            matched = _compare_all(
                variant.spec, found, buggy, variant.positions, buggy_layout, unit
            )
            if matched is not None and all(r.ok for r in matched):
                if reports is None:  # the shapes say it: report them against the reference's
                    reports = tuple(
                        KeyReport(
                            r.key,
                            r.shape,
                            r.dtype,
                            math.inf,
                            math.inf,
                            1,
                            None,
                            None,
                            (),
                            tuple(expected[r.key].shape),
                        )
                        for r in matched
                    )
                return VerifyReport(False, reports, bug, variant.label, None, spec, table_layout)
        if bug.arithmetic is not None and reports is not None and variants:
            # reduced-precision arithmetic in another op order than the variant's
            low_unit = float(torch.finfo(bug.arithmetic).eps) / 2
            if _precision_explains(spec, found, expected, positions, table_layout, low_unit):
                label = f"within {bug.arithmetic} arithmetic's error of the reference"
                return VerifyReport(False, reports, bug, label, None, spec, table_layout)
    if shape_error:
        shapes = {
            key: (tuple(found[key].shape), tuple(expected[key].shape))
            for key in _CHECKED
            if key in found and key in expected and found[key].shape != expected[key].shape
        }
        key, (got, want) = next(iter(shapes.items()))
        raise ValueError(
            f"arrays[{key!r}] has shape {got}; the reference for this config has {want} "
            f"(rotary_dim {spec.rotary_dim}, head_dim {spec.head_dim}), and no known bug class "
            "gives that shape"
        )
    assert reports is not None
    hint = _hint(spec, reports, table_layout)
    if unit < EPS32:
        loose = _compare_all(spec, found, expected, positions, table_layout, EPS32)
        if loose is not None and all(r.ok for r in loose):
            hint = (
                "within float32 arithmetic's error of the reference: the angles were computed "
                "in float32 (HF's way), not in float64 and rounded once; arithmetic='float32' "
                "accepts that"
            )
    return VerifyReport(False, reports, None, None, hint, spec, table_layout)
