"""Byte-level text corpora for the lab: the Python standard library by default, any text too.

No downloads: the default corpus is the ``*.py`` source of the standard library of the Python
running this code (found through :mod:`sysconfig`), split **by file** into train, validation
and test, so that no file is seen in two splits. Tokens are bytes (vocabulary 256); files are
joined with a NUL separator byte (``0``), which never occurs inside a text file.

Example::

    >>> splits = load_corpus(max_bytes=100_000)
    >>> source = LMSource(splits.train, seq_len=128, seed=0)
    >>> source.batch(step=0, batch_size=8).tokens.shape
    torch.Size([8, 128])
    >>> eval_windows(splits.validation, seq_len=128).shape[1]
    129
"""

from __future__ import annotations

import functools
import math
import os
import random
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from posenc._validate import check_non_negative_int, check_positive_int
from posenc.lab.batch import Batch, derive_seed, shard_slice

__all__ = [
    "SEPARATOR",
    "SPLITS",
    "CorpusSplits",
    "LMSource",
    "context_free_loss",
    "eval_windows",
    "load_corpus",
    "stdlib_files",
]

SEPARATOR = 0
"""The byte that joins files in a split's stream (NUL; text files never contain it)."""

SPLITS = ("train", "validation", "test")

# Folders of the standard library left out of the default corpus: installed third-party
# packages and the test suites (Lib/test holds deliberately broken and oddly encoded files).
_EXCLUDED_DIRS = frozenset(
    {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test"}
)


@functools.lru_cache(maxsize=1)
def _stdlib_files() -> tuple[Path, ...]:
    root = Path(sysconfig.get_paths()["stdlib"])
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _EXCLUDED_DIRS]
        for name in names:
            path = Path(folder) / name
            if name.endswith(".py") and path.is_file():
                found.append(path)
    return tuple(p for p in sorted(found) if _read_text(p) is not None)


def stdlib_files() -> list[Path]:
    """The standard library's ``*.py`` files on this machine, sorted by path.

    Found under ``sysconfig.get_paths()["stdlib"]``. Left out: ``site-packages`` and
    ``dist-packages`` (third-party code), ``__pycache__``, the test suites (folders named
    ``test``, ``tests`` and ``idle_test``, which hold deliberately broken files) and files
    that are not readable text (see :func:`load_corpus`). About 730 files and 12 MB for
    Python 3.11; the first call reads them all once (about 0.2 s) and the list is cached for
    the process. It differs between Python versions: record ``sys.version`` with results.

    Raises:
        ValueError: if no file is found (e.g. a Python whose standard library is zipped).
    """
    files = _stdlib_files()
    if not files:
        raise ValueError(
            f"no *.py files found under the stdlib path {sysconfig.get_paths()['stdlib']}; "
            "pass paths= to load_corpus"
        )
    return list(files)


def _read_text(path: Path) -> bytes | None:
    """The file's bytes if it is a readable text file (UTF-8, no NUL byte), else None."""
    try:
        data = path.read_bytes()
        data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return None if bytes([SEPARATOR]) in data else data


def _collect(paths: Sequence[str | Path]) -> list[Path]:
    """Files named in ``paths`` plus every file under named folders, sorted, deduplicated."""
    found: set[Path] = set()
    for entry in paths:
        path = Path(entry)
        if path.is_dir():
            for folder, dirs, names in os.walk(path):
                dirs[:] = [d for d in dirs if not d.startswith(".")]
                found.update(Path(folder) / n for n in names if not n.startswith("."))
        elif path.is_file():
            found.add(path)
        else:
            raise ValueError(f"paths must name existing files or folders; {str(path)!r} is neither")
    return sorted(found)


@dataclass(frozen=True)
class CorpusSplits:
    """Three uint8 byte streams and the files each one holds.

    Attributes:
        train, validation, test: ``(n,)`` uint8 tensors, the split's files joined with
            :data:`SEPARATOR`, possibly cut at ``max_bytes``.
        files: ``{"train": [...], "validation": [...], "test": [...]}``, the paths (as
            strings, in stream order) of the files that contributed at least one byte.
    """

    train: Tensor
    validation: Tensor
    test: Tensor
    files: dict[str, list[str]]


def _split_counts(n: int, fractions: tuple[float, float, float]) -> list[int]:
    """File counts per split: every split with a positive fraction gets at least one file."""
    counts = [0, 0, 0]
    for i in (1, 2):
        if fractions[i] > 0:
            counts[i] = max(1, round(fractions[i] * n))
    counts[0] = n - counts[1] - counts[2]
    if (fractions[0] > 0 and counts[0] < 1) or counts[0] < 0:
        raise ValueError(
            f"paths must hold enough text files for every split with a positive fraction; "
            f"found {n} for fractions {fractions}"
        )
    return counts


def load_corpus(
    paths: Sequence[str | Path] | str | Path | None = None,
    *,
    seed: int = 0,
    fractions: tuple[float, float, float] = (0.9, 0.05, 0.05),
    max_bytes: int | None = None,
) -> CorpusSplits:
    """Load text files as byte streams split by file into train, validation and test.

    The sorted list of text files is shuffled with ``random.Random(seed)`` and cut into
    consecutive groups by **file count** in proportion to ``fractions`` (a split with a
    positive fraction gets at least one file). Each split's stream is its files' raw bytes
    joined with one :data:`SEPARATOR` byte, in shuffled order. With ``max_bytes`` the stream
    is the first ``max_bytes`` bytes of that (whole files in order, the last one cut short,
    possibly right after its separator), and files past the cap are never joined, which
    keeps small runs fast.

    Args:
        paths: files and folders (walked recursively, hidden entries skipped); ``None`` for
            :func:`stdlib_files`. Only text files are used: readable, valid UTF-8 and free of
            NUL bytes; others are skipped silently (each candidate is read once to check).
        seed: seed of the file shuffle.
        fractions: non-negative shares of train, validation, test summing to 1.
        max_bytes: cap on each split's stream length, or None for no cap.

    Returns:
        :class:`CorpusSplits`.

    Raises:
        ValueError: naming ``fractions``, ``max_bytes`` or ``paths`` for bad input or too few
            files.
    """
    if max_bytes is not None:
        max_bytes = check_positive_int("max_bytes", max_bytes)
    seed = check_non_negative_int("seed", seed)
    if (
        len(fractions) != 3
        or any(not isinstance(f, (int, float)) or f < 0 for f in fractions)
        or abs(sum(fractions) - 1.0) > 1e-6
    ):
        raise ValueError(f"fractions must be three numbers >= 0 summing to 1, got {fractions}")
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if paths is None:
        candidates = stdlib_files()
    else:
        candidates = [p for p in _collect(paths) if _read_text(p) is not None]
    if not candidates:
        raise ValueError("paths holds no text files")
    order = [str(p) for p in candidates]
    random.Random(seed).shuffle(order)
    counts = _split_counts(len(order), tuple(float(f) for f in fractions))  # type: ignore[arg-type]
    streams: dict[str, Tensor] = {}
    files: dict[str, list[str]] = {}
    start = 0
    for name, count in zip(SPLITS, counts, strict=True):
        streams[name], files[name] = _join(order[start : start + count], max_bytes)
        start += count
    return CorpusSplits(streams["train"], streams["validation"], streams["test"], files)


def _join(paths: list[str], max_bytes: int | None) -> tuple[Tensor, list[str]]:
    """Read text files in order, join them with the separator, stop at ``max_bytes``."""
    parts: list[bytes] = []
    used: list[str] = []
    size = 0
    for path in paths:
        if max_bytes is not None and size >= max_bytes:
            break
        data = _read_text(Path(path))
        if data is None:
            continue
        if parts:
            parts.append(bytes([SEPARATOR]))
            size += 1
        if max_bytes is None or size < max_bytes:  # at least one byte of it is kept
            used.append(path)
        parts.append(data)
        size += len(data)
    joined = b"".join(parts)
    if max_bytes is not None:
        joined = joined[:max_bytes]
    stream = torch.frombuffer(bytearray(joined), dtype=torch.uint8) if joined else None
    return (torch.zeros(0, dtype=torch.uint8) if stream is None else stream), used


def _check_stream(stream: Tensor, seq_len: int) -> None:
    seq_len = check_positive_int("seq_len", seq_len)
    if not isinstance(stream, Tensor) or stream.dim() != 1 or stream.is_floating_point():
        raise ValueError("stream must be a 1-D integer (uint8) tensor of bytes")
    if stream.numel() < seq_len + 1:
        raise ValueError(
            f"seq_len must be < the stream length ({stream.numel()}) to make one window of "
            f"seq_len + 1 bytes; got seq_len={seq_len}"
        )


class LMSource:
    """Random windows of a byte stream for next-byte language modelling.

    Each row is ``seq_len + 1`` consecutive bytes from a uniformly random start; ``tokens``
    are the first ``seq_len``, ``targets`` the last ``seq_len`` (the next byte), and every
    target counts. The starts of step ``s`` come from a ``torch.Generator`` seeded with
    :func:`~posenc.lab.batch.derive_seed` of ``(seed, s)``, so a step's global batch is fixed
    by the seed alone (resume and DDP shards reproduce it).

    Args:
        stream: ``(n,)`` uint8 byte stream (e.g. ``load_corpus().train``).
        seq_len: tokens per row.
        seed: data seed.

    Shape:
        ``batch(step, B, rank=r, world_size=w)`` → :class:`Batch` with ``(B / w, seq_len)``
        int64 ``tokens`` and ``targets``, all-True ``loss_mask``, no positions, no padding.
    """

    vocab_size: int = 256

    def __init__(self, stream: Tensor, seq_len: int, seed: int = 0) -> None:
        _check_stream(stream, seq_len)
        seed = check_non_negative_int("seed", seed)
        self.stream = stream
        self.seq_len = seq_len
        self.seed = seed

    def batch(self, step: int, batch_size: int, *, rank: int = 0, world_size: int = 1) -> Batch:
        """Rank ``rank``'s contiguous shard of step ``step``'s global batch of ``batch_size``."""
        step = check_non_negative_int("step", step)
        rows = shard_slice(batch_size, rank, world_size)
        generator = torch.Generator().manual_seed(derive_seed("lm", self.seed, step))
        high = self.stream.numel() - self.seq_len  # last valid start + 1
        starts = torch.randint(0, high, (batch_size,), generator=generator)[rows]
        offsets = torch.arange(self.seq_len + 1)
        windows = self.stream[starts[:, None] + offsets].long()  # (B / w, seq_len + 1)
        tokens, targets = windows[:, :-1], windows[:, 1:]
        return Batch(tokens, targets, torch.ones_like(tokens, dtype=torch.bool))


def eval_windows(stream: Tensor, seq_len: int, max_windows: int | None = None) -> Tensor:
    """Windows of ``seq_len + 1`` bytes whose targets tile the stream without overlap.

    Window ``i`` is ``stream[i * seq_len : i * seq_len + seq_len + 1]``: its inputs are the
    first ``seq_len`` bytes and its targets the last ``seq_len``, so consecutive windows share
    one boundary byte (the last target of one is the first input of the next) and together
    the targets score every byte of ``stream[1 : N * seq_len + 1]`` exactly once. A tail
    shorter than a window is dropped. With ``max_windows``, that many windows evenly spaced
    over the stream (first and last included) are kept, in order.

    Returns:
        ``(N, seq_len + 1)`` int64 tensor.

    Raises:
        ValueError: naming ``seq_len`` when the stream is shorter than one window, or
            ``max_windows`` when it is not a positive int.
    """
    _check_stream(stream, seq_len)
    count = (stream.numel() - 1) // seq_len
    index = torch.arange(count)
    if max_windows is not None:
        max_windows = check_positive_int("max_windows", max_windows)
        if max_windows < count:
            index = torch.linspace(0, count - 1, max_windows).round().long().unique()
    starts = index * seq_len
    return stream[starts[:, None] + torch.arange(seq_len + 1)].long()


def context_free_loss(train: Tensor, targets: Tensor, vocab_size: int = 256) -> float:
    """The loss of a model that ignores context: a unigram fitted on ``train``, scored on
    ``targets``.

    .. math::

        p(v) = \\frac{c_v + 1}{N + V}, \\qquad
        \\text{loss} = -\\frac{1}{M} \\sum_{j=1}^{M} \\ln p(t_j)

    with ``c_v`` the count of token ``v`` among the ``N`` train tokens (add-one smoothed, so
    a token never seen in training still has a finite loss), ``V = vocab_size`` and ``t_j``
    the ``M`` targets. In nats per token, as the cross-entropy of a language model: a model
    whose eval loss is not well below it has not used its context
    (:data:`posenc.lab.claims.LEARNED_LOSS_FRACTION`).

    Args:
        train: integer tensor of train tokens (any shape).
        targets: integer tensor of the tokens scored (any shape), e.g. the targets of
            :func:`eval_windows`: ``eval_windows(stream, seq_len)[:, 1:]``.
        vocab_size: ``V``; every token must be in ``[0, V)``.

    Returns:
        The mean negative log-probability of ``targets``, a float.

    Raises:
        ValueError: naming ``train`` or ``targets`` when empty, floating point or out of
            ``[0, vocab_size)``, or ``vocab_size`` when not a positive int.

    Example::

        >>> round(context_free_loss(torch.tensor([1, 1, 2]), torch.tensor([1]), vocab_size=3), 4)
        0.6931
    """
    vocab_size = check_positive_int("vocab_size", vocab_size)
    for name, tokens in (("train", train), ("targets", targets)):
        if not isinstance(tokens, Tensor) or tokens.is_floating_point() or tokens.is_complex():
            raise ValueError(f"{name} must be an integer tensor of tokens, got {tokens!r}")
        if tokens.numel() == 0:
            raise ValueError(f"{name} must hold at least one token, got an empty tensor")
        low, high = int(tokens.min()), int(tokens.max())
        if low < 0 or high >= vocab_size:
            raise ValueError(
                f"{name} must hold tokens in [0, vocab_size={vocab_size}), got [{low}, {high}]"
            )
    counts = torch.bincount(train.reshape(-1).long(), minlength=vocab_size).double() + 1.0
    log_p = counts.log() - math.log(float(counts.sum()))
    return float(-log_p[targets.reshape(-1).long()].mean())
