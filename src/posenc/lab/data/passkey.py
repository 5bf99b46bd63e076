"""Passkey retrieval on a byte-level LM: is a key hidden in filler found at a given depth?

The test of Mohtashami & Jaggi 2023 (https://arxiv.org/abs/2305.16300), used by PI (Table 4)
and YaRN (Table 5) to measure an extended context: English filler with the sentence
``The pass key is 12345. Remember it. 12345 is the pass key.`` placed at ``depth`` (the
fraction of the filler before it), then ``What is the pass key? The pass key is`` and the
five digits to produce. Built from :func:`posenc.lab.data.tasks.make_task` (``"passkey"``,
``byte_level=True``), so a model of the embedded byte corpus reads it as ordinary text.

``context_len`` counts every token the model reads: the prompt, the separating space and the
answer digits but the last, i.e. the ``tokens`` of the batch are exactly ``context_len`` wide
and their positions are ``0 .. context_len - 1``.

Accuracy is teacher-forced exact match: a trial counts when ``argmax`` of the logits is the
right digit at every answer position, each predicted from the true previous digits. This is
the same number greedy decoding gives: if every teacher-forced argmax is right, greedy
decoding reads the same prefixes and writes the same digits; otherwise its first wrong digit
comes after a correct prefix, which is a teacher-forced error.

Example::

    >>> batch = passkey_batch(128, depth=0.5, trials=4)
    >>> batch.tokens.shape
    torch.Size([4, 128])
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor, nn

from posenc._validate import check_non_negative_int, check_positive_int
from posenc.lab.batch import Batch, BatchSource, derive_seed
from posenc.lab.data.tasks import TaskSource, accuracy, make_task

__all__ = [
    "PASSKEY_DIGITS",
    "PasskeyMix",
    "passkey_accuracy",
    "passkey_batch",
    "passkey_min_context",
]

#: digits of the key (the task's default).
PASSKEY_DIGITS = 5


def _task(seed: int, depth: float | None) -> TaskSource:
    return make_task("passkey", seed=seed, byte_level=True, depth=depth, digits=PASSKEY_DIGITS)


@functools.cache
def passkey_min_context() -> int:
    """The shortest ``context_len`` that holds the key sentence and the question (no filler)."""
    task = _task(0, None)
    length = 1
    while True:  # the task's own check knows its overhead; find the first length it accepts
        try:
            task.max_seq_len(length)
        except ValueError:
            length += 1
            continue
        return length + PASSKEY_DIGITS


def _prompt_length(context_len: int) -> int:
    context_len = check_positive_int("context_len", context_len)
    minimum = passkey_min_context()
    if context_len < minimum:
        raise ValueError(f"context_len must be >= {minimum} for a byte passkey, got {context_len}")
    return context_len - PASSKEY_DIGITS


def passkey_batch(
    context_len: int, depth: float | None, trials: int, *, seed: int = 0, step: int = 0
) -> Batch:
    """``trials`` byte-level passkey rows of exactly ``context_len`` tokens.

    Args:
        context_len: tokens per row (≥ :func:`passkey_min_context`).
        depth: fraction of the filler before the key, in ``[0, 1]``; None = uniform per row.
        trials: rows.
        seed: task seed (the keys); the same seed gives the same keys at every depth.
        step: batch index within the seed's stream.

    Returns:
        a :class:`~posenc.lab.batch.Batch` with ``loss_mask`` True on the answer digits.
    """
    trials = check_positive_int("trials", trials)
    step = check_non_negative_int("step", step)
    prompt = _prompt_length(context_len)
    return _task(seed, depth).batch(step, trials, length=prompt)


def passkey_accuracy(
    model: nn.Module,
    context_len: int,
    depth: float,
    trials: int,
    *,
    seed: int = 0,
    max_tokens_per_batch: int = 16384,
) -> tuple[float, float]:
    """Passkey retrieval of ``model`` at one (context length, depth).

    Args:
        model: maps ``(tokens, positions)`` to logits ``(B, T, 256)`` (e.g. a byte
            :class:`~posenc.models.DecoderLM`); run in eval mode without gradients.
        context_len, depth, trials, seed: as in :func:`passkey_batch`.
        max_tokens_per_batch: rows per forward are ``max(1, this // context_len)``.

    Returns:
        ``(accuracy, token_accuracy)``: the fraction of trials with all digits right
        (teacher-forced argmax, equal to greedy decoding's exact match), and the fraction of
        digits right.
    """
    batch = passkey_batch(context_len, depth, trials, seed=seed)
    rows = max(1, max_tokens_per_batch // context_len)
    device = next(model.parameters()).device
    digits_right, keys_right = 0.0, 0.0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for start in range(0, trials, rows):
            part = _rows(batch, slice(start, start + rows)).to(device)
            logits: Tensor = model(part.tokens, None)
            token_acc, seq_acc = accuracy(logits, part)
            count = part.tokens.shape[0]
            digits_right += token_acc * count  # every row has the same number of digits
            keys_right += seq_acc * count
    model.train(was_training)
    return keys_right / trials, digits_right / trials


def _rows(batch: Batch, rows: slice) -> Batch:
    return Batch(batch.tokens[rows], batch.targets[rows], batch.loss_mask[rows])


class PasskeyMix:
    """A training source: ``source``'s batches with ``passkey_steps`` of every ``steps``
    (evenly spread) replaced by passkey rows of width ``length`` (random depths, keys from
    ``seed``, drawn from a stream of their own: the keys :func:`passkey_accuracy` tests with the
    same ``seed`` are never trained on).

    Step ``i`` is a passkey step when ``⌊(i+1)p/n⌋ > ⌊ip/n⌋`` (``p`` passkey steps of ``n``),
    so the choice is a pure function of the step and resume or DDP see the same batches.

    Args:
        source: a byte-level :class:`~posenc.lab.batch.BatchSource` of rows ``length`` wide.
        length: passkey context length (≥ :func:`passkey_min_context`).
        steps: ``n`` ≥ 1.
        passkey_steps: ``p`` in ``[0, n]``.
        seed: passkey task seed.
    """

    vocab_size = 256

    def __init__(
        self, source: BatchSource, length: int, steps: int, passkey_steps: int, seed: int = 0
    ) -> None:
        if passkey_steps:
            _prompt_length(length)
        self.steps = check_positive_int("steps", steps)
        self.passkey_steps = check_non_negative_int("passkey_steps", passkey_steps)
        if passkey_steps > steps:
            raise ValueError(f"passkey_steps must be <= steps ({steps}), got {passkey_steps}")
        self.source, self.length, self.seed = source, length, seed
        self._key_seed = derive_seed("passkey_train", seed)

    def is_passkey(self, step: int) -> bool:
        """Whether step ``step`` trains on passkey rows."""
        p, n = self.passkey_steps, self.steps
        return (step + 1) * p // n > step * p // n

    def batch(self, step: int, batch_size: int, *, rank: int = 0, world_size: int = 1) -> Batch:
        """Rank ``rank``'s shard of step ``step``'s global batch (see the class)."""
        if not self.is_passkey(step):
            return self.source.batch(step, batch_size, rank=rank, world_size=world_size)
        rows = passkey_batch(self.length, None, batch_size, seed=self._key_seed, step=step)
        return rows.shard(rank, world_size)
