"""Passkey retrieval data and scoring: batch layout, exact-match accuracy, the minimum
context, and the passkey mix that trains a base on keys the test never asks."""

from __future__ import annotations

import re

import pytest
import torch
from torch import Tensor, nn

from posenc.lab.data.corpus import LMSource
from posenc.lab.data.passkey import (
    PASSKEY_DIGITS,
    PasskeyMix,
    passkey_accuracy,
    passkey_batch,
    passkey_min_context,
)


def test_passkey_mix_replaces_the_chosen_steps():
    stream = torch.randint(0, 256, (5000,), dtype=torch.uint8)
    mix = PasskeyMix(LMSource(stream, 112, seed=0), 112, steps=10, passkey_steps=3, seed=0)
    chosen = [step for step in range(10) if mix.is_passkey(step)]
    assert len(chosen) == 3
    for step in range(10):
        batch = mix.batch(step, 4)
        assert batch.tokens.shape == (4, 112)
        assert int(batch.loss_mask.sum()) == (4 * PASSKEY_DIGITS if step in chosen else 4 * 112)


def test_passkey_mix_trains_on_keys_the_test_never_asks():
    stream = torch.randint(0, 256, (5000,), dtype=torch.uint8)
    mix = PasskeyMix(LMSource(stream, 112, seed=0), 112, steps=4, passkey_steps=4, seed=0)

    def keys(batch):
        return {
            bytes(row[mask].tolist())
            for row, mask in zip(batch.targets, batch.loss_mask, strict=True)
        }

    trained = set().union(*(keys(mix.batch(step, 8)) for step in range(4)))
    tested = keys(passkey_batch(112, None, 8, seed=0, step=0))
    assert len(trained) == 32
    assert not trained & tested


class _KeyReader(nn.Module):
    """Reads the key from the text and puts the argmax on its digits (``wrong``: last digit +1)."""

    def __init__(self, wrong: bool = False) -> None:
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(()))
        self.wrong = wrong

    def forward(self, tokens: Tensor, positions: Tensor | None) -> Tensor:
        logits = torch.zeros(*tokens.shape, 256)
        for row, ids in enumerate(tokens.tolist()):
            key = re.search(rb"pass key is (\d{5})\.", bytes(ids)).group(1).decode()
            if self.wrong:
                key = key[:-1] + str((int(key[-1]) + 1) % 10)
            for i, digit in enumerate(key):
                logits[row, tokens.shape[1] - PASSKEY_DIGITS + i, ord(digit)] = 1.0
        return logits


@pytest.mark.parametrize("depth", [0.0, 0.5, 1.0])
def test_passkey_batch_is_context_len_wide_with_the_digits_scored_last(depth):
    batch = passkey_batch(160, depth, 3, seed=0)
    assert batch.tokens.shape == (3, 160)
    expected = torch.zeros(3, 160, dtype=torch.bool)
    expected[:, -PASSKEY_DIGITS:] = True
    torch.testing.assert_close(batch.loss_mask, expected)


@pytest.mark.parametrize(("wrong", "expected"), [(False, (1.0, 1.0)), (True, (0.0, 0.8))])
def test_passkey_accuracy_counts_exact_matches(wrong, expected):
    assert passkey_accuracy(_KeyReader(wrong), 200, 0.5, 5, max_tokens_per_batch=400) == expected


def test_passkey_context_below_minimum_raises():
    with pytest.raises(ValueError, match="context_len"):
        passkey_batch(passkey_min_context() - 1, 0.5, 2)
    passkey_batch(passkey_min_context(), 0.5, 2)  # the minimum itself works
