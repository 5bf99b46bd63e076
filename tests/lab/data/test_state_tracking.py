"""Properties of posenc.lab.data.state_tracking beyond the shared task tests: the groups, the
composition order, and the tagging batches (states are targets, never inputs)."""

from __future__ import annotations

import itertools

import pytest
import torch

from posenc.lab.data.state_tracking import GROUPS, compose, group_elements
from posenc.lab.data.tasks import make_task


@pytest.mark.parametrize(("group", "order"), [("parity", 2), ("s3", 6), ("a5", 60), ("s5", 120)])
def test_groups_are_closed_with_the_identity_first(group: str, order: int) -> None:
    elements = group_elements(group)
    assert len(elements) == len(set(elements)) == order
    assert elements[0] == tuple(range(GROUPS[group][0]))
    members = set(elements)
    for a, b in itertools.product(elements[:12], repeat=2):
        assert compose(a, b) in members


def test_compose_applies_the_right_argument_first() -> None:
    swap01, cycle = (1, 0, 2), (1, 2, 0)  # i -> swap01[i], i -> cycle[i]
    assert compose(swap01, cycle) == (0, 2, 1)  # 0 -> 1 -> 0, 1 -> 2 -> 2, 2 -> 0 -> 1
    assert compose(cycle, swap01) != compose(swap01, cycle)  # S3 is not abelian


def test_final_state_task_asks_the_last_tag() -> None:
    tags = make_task("state_tracking", group="s5").examples(5, 20, seed=2)
    final = make_task("state_tracking", group="s5", per_step=False).examples(5, 20, seed=2)
    for a, b in zip(tags, final, strict=True):
        assert b.prompt == a.sequence and b.answer == a.answer[-1:]


def test_tagging_batch_keeps_states_out_of_the_input() -> None:
    task = make_task("state_tracking", group="s3")
    batch = task.batch(0, 8)
    ex = task.examples(1, 6, seed=0)[0]
    one = task.collate([ex])
    assert torch.equal(one.tokens[0], torch.tensor(task.encode(ex.sequence)))
    assert torch.equal(one.targets[0], torch.tensor(task.encode(ex.answer)))
    assert bool(one.loss_mask.all())
    assert batch.seq_len <= task.max_seq_len()
    assert task.max_seq_len(16) == 16
