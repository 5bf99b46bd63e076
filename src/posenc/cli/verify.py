"""``posenc verify``: a port's RoPE arrays against :mod:`posenc.verify`'s float64 reference."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_verify_parser"]


def _verify_config(text: str) -> Any:
    """A ``config.json`` path, or an HF model type (transformers' defaults for it)."""
    path = Path(text)
    if path.is_file():
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"CONFIG {text!r} is not valid JSON: {error}") from None
    if path.suffix == ".json" or os.sep in text:
        raise ValueError(f"CONFIG {text!r}: no such file")
    try:
        from transformers import AutoConfig
    except ImportError:
        raise ValueError(
            f"CONFIG {text!r} is no file; reading it as an HF model type needs transformers"
        ) from None
    try:
        return AutoConfig.for_model(text)
    except ValueError:
        raise ValueError(f"CONFIG {text!r} is neither a file nor an HF model type") from None


def _verify_positions(text: str) -> Any:
    """``--positions START:STOP[:STEP]`` as an integer range."""
    import torch

    parts = text.split(":")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        numbers = []
    if len(numbers) not in (2, 3) or numbers[0] < 0 or numbers[1] <= numbers[0]:
        raise ValueError(
            f"--positions must be START:STOP[:STEP] with 0 <= START < STOP, got {text!r}"
        )
    if len(numbers) == 3 and numbers[2] < 1:
        raise ValueError(f"--positions STEP must be >= 1, got {text!r}")
    return torch.arange(*numbers)


def _cmd_verify(args: argparse.Namespace) -> int:
    from posenc.verify import load_arrays, reference_arrays, save_arrays, verify

    if args.arrays is None and args.write_reference is None:
        raise ValueError("give --arrays FILE to check, or --write-reference OUT (or both)")
    config = _verify_config(args.config)
    arrays = load_arrays(args.arrays) if args.arrays is not None else {}
    positions = _verify_positions(args.positions) if args.positions is not None else None
    if args.positions_from is not None:
        if args.positions_from not in arrays:
            raise ValueError(
                f"--positions-from {args.positions_from!r}: the arrays have {sorted(arrays)}"
            )
        positions = arrays.pop(args.positions_from)
    options = {"layer_type": args.layer_type, "component": args.component}
    if args.write_reference is not None:
        if positions is None:
            positions = arrays.get("positions")
        if positions is None:
            raise ValueError("--write-reference needs --positions or --positions-from")
        reference = reference_arrays(config, positions, layout=args.layout, **options)
        save_arrays(reference, args.write_reference)
        print(f"wrote {args.write_reference}: {', '.join(sorted(reference))}", file=sys.stderr)
    if args.arrays is None:
        return 0
    report = verify(
        config,
        arrays,
        positions=positions,
        layout=args.layout,
        arithmetic=args.arithmetic,
        **options,
    )
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.summary())
    return 0 if report.ok else 1


def add_verify_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``posenc verify`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "verify",
        help="check a port's RoPE arrays (cos/sin, rotated q/k, M-RoPE ids) against posenc's "
        "float64 reference for a model config, and name the likely bug; exit 0 equal, 1 "
        "mismatch, 2 bad input",
    )
    p.add_argument("config", metavar="CONFIG", help="a config.json, or an HF model type name")
    p.add_argument(
        "--arrays",
        metavar="FILE",
        help=".npz, .safetensors or .npy with any of cos, sin, q, k, q_rotated, k_rotated, "
        "positions, position_ids, token_types, image_grid_thw, video_grid_thw",
    )
    p.add_argument("--layer-type", help="per-layer-type entry (full_attention, main, ...)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--positions", metavar="START:STOP[:STEP]", help="the arrays' positions")
    where.add_argument("--positions-from", metavar="KEY", help="the array holding the positions")
    p.add_argument(
        "--layout",
        choices=("half", "interleaved", "pairs"),
        help="the tables' column order (default: the config's)",
    )
    p.add_argument(
        "--component",
        choices=("attention", "indexer"),
        default="attention",
        help="the DSA indexer has its own layout (default attention)",
    )
    p.add_argument(
        "--arithmetic",
        choices=("float32", "float64"),
        default="float32",
        help="the angle arithmetic a correct port may use (default float32, HF's; float64: "
        "phases in float64 rounded once)",
    )
    p.add_argument(
        "--write-reference", metavar="OUT", help="write the float64 reference arrays to OUT"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_verify)
