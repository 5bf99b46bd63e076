"""A run's data, model and training described in words, from its ``config.json`` and rows
(:func:`data_and_model`, the report's "data and model").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from posenc.lab.findings._common import Row, display_name, seed_count

__all__ = ["data_and_model"]


def _count(n: float) -> str:
    """``132352`` -> ``"0.13 M"``; small counts as they are."""
    return f"{n / 1e6:.2g} M" if n >= 10_000 else f"{n:,.0f}"


def data_and_model(
    config: Mapping[str, Any],
    rows: Sequence[Row] = (),
    corpus: Mapping[str, Any] | None = None,
) -> list[tuple[str, str]]:
    """The data, the model and its training in words, from a run's ``config.json``.

    Args:
        config: the run's ``config.json`` (its ``data``, ``model`` and ``train`` sections; an
            ``evaluated`` list marks a run that only evaluated trained weights).
        rows: its rows (the ``params`` column of the config's ``experiment``'s rows gives the
            parameter counts).
        corpus: what was loaded (``files`` and ``bytes`` per split, ``python``, ``root``),
            as :func:`posenc.lab.demo.corpus_summary` records it; ``None``: from the config.

    Returns:
        ``(what, description)`` pairs; empty when the config has none of those sections.
    """
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a mapping (config.json), got {type(config).__name__}")
    lines: list[tuple[str, str]] = []
    data, model, train = config.get("data"), config.get("model"), config.get("train")
    if isinstance(data, Mapping):
        paths = data.get("corpus") or []
        if paths:
            text = "text files under " + ", ".join(str(p) for p in paths)
        else:
            text = "the Python standard library's own source files (*.py, without its tests)"
            if corpus and corpus.get("python"):
                text += f" of the Python {corpus['python']} on this machine"
                if corpus.get("root"):
                    text += f" ({corpus['root']})"
        text += ", split by file into train, validation and test (no file in two splits)"
        if corpus and corpus.get("files") and corpus.get("bytes"):
            files, size = corpus["files"], corpus["bytes"]
            text += "; " + ", ".join(
                f"{split} {files[split]:,} files, {size[split]:,} tokens"
                for split in ("train", "validation", "test")
                if split in files and split in size
            )
        if data.get("corpus_bytes"):
            text += f"; each split cut at {data['corpus_bytes']:,} bytes"
        text += (
            ". Tokens are bytes (vocabulary 256, files joined by a NUL byte); "
            f"the models train on windows of T = {data.get('train_len')} bytes."
        )
        lines.append(("data", text))
    if isinstance(model, Mapping):
        dim, heads, depth = model.get("dim"), model.get("num_heads"), model.get("depth")
        text = (
            f"byte-level decoder: {depth} layer{'' if depth == 1 else 's'}, width {dim}, "
            f"{heads} head{'' if heads == 1 else 's'}"
        )
        if isinstance(dim, int) and isinstance(heads, int):
            text += f" of {dim // heads}"
        params: dict[str, int] = {}
        experiment = config.get("experiment")
        for row in rows:
            if experiment is not None and row.get("experiment") not in (None, experiment):
                continue  # another experiment's model
            if isinstance(row.get("params"), (int, float)) and row.get("encoding"):
                params.setdefault(str(row["encoding"]), int(row["params"]))
        if params:
            low, high = min(params.values()), max(params.values())
            text += (
                f"; {_count(low)} parameters"
                if low == high
                else (
                    f"; {_count(low)} to {_count(high)} parameters ("
                    + ", ".join(f"{display_name(n)} {p:,}" for n, p in params.items())
                    + ")"
                )
            )
        lines.append(("model", text + "."))
    if isinstance(train, Mapping):
        seeds = train.get("seeds") or []
        text = (
            f"{train.get('steps')} steps of AdamW, batch {train.get('batch_size')}, "
            f"peak learning rate {train.get('lr')}, {train.get('warmup_steps')} warmup steps, "
            f"cosine decay; seeds {', '.join(str(s) for s in seeds)} "
            f"({seed_count(len(seeds))}: tables show mean ± std over them)"
        )
        if config.get("evaluated"):
            text = (
                "none in this run: evaluation only, of the weights "
                + ", ".join(str(p) for p in config["evaluated"])
                + f" (trained as above: {text})"
            )
        lines.append(("training", text + "."))
    return lines
