"""The data section of a lab config: the byte corpus, its split and the training length."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from posenc._validate import check_non_negative_int, check_positive_int

if TYPE_CHECKING:
    from posenc.lab.data.corpus import CorpusSplits

__all__ = ["DataArgs"]


@dataclass(frozen=True)
class DataArgs:
    """The byte-level corpus (:func:`posenc.lab.data.corpus.load_corpus`) and the length the
    model trains at.

    Args:
        corpus: text files or folders; empty = the Python standard library sources.
        corpus_bytes: cap on each split's size (``None`` = the whole corpus).
        split_seed: seed of the train/validation/test split by file (fixed across seeds).
        train_len: ``T``, the training context in bytes.
    """

    corpus: tuple[str, ...] = ()
    corpus_bytes: int | None = None
    split_seed: int = 0
    train_len: int = 128

    def __post_init__(self) -> None:
        corpus = self.corpus
        if isinstance(corpus, str) or not all(isinstance(path, str) for path in corpus):
            raise ValueError(f"corpus must be a tuple of paths (str), got {corpus!r}")
        object.__setattr__(self, "corpus", tuple(corpus))
        if self.corpus_bytes is not None:
            object.__setattr__(
                self, "corpus_bytes", check_positive_int("corpus_bytes", self.corpus_bytes)
            )
        object.__setattr__(
            self, "split_seed", check_non_negative_int("split_seed", self.split_seed)
        )
        object.__setattr__(self, "train_len", check_positive_int("train_len", self.train_len))

    def load(self) -> CorpusSplits:
        """The corpus's :class:`~posenc.lab.data.corpus.CorpusSplits`."""
        from posenc.lab.data.corpus import load_corpus

        return load_corpus(self.corpus or None, seed=self.split_seed, max_bytes=self.corpus_bytes)
