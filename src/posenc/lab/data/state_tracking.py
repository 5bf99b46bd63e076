"""State tracking: the word problem of a finite group (permutation composition).

Merrill et al. 2024, "The Illusion of State in State-Space Models"
(https://arxiv.org/abs/2404.08819): a sequence of group elements ``g_1 .. g_n`` and the states
``s_t = g_t ∘ s_{t−1}`` (``s_0`` the identity: apply ``g_1`` first, then ``g_2``, ...). The word
problem of ``S5`` (and of the simple group ``A5``) is NC¹-complete, so a constant-depth
transformer cannot solve it at every length, whatever its positional encoding; ``S3`` is
solvable but non-abelian, and parity (``S2``) is the abelian case. PaTH (Yang et al. 2025,
https://arxiv.org/abs/2505.16381) reports it solves these where RoPE does not, on Merrill et
al.'s protocol: token tagging, where every position is labelled with the state after it.

Elements are permutations of ``0 .. m − 1`` numbered in lexicographic order (``g0`` is the
identity); the same symbols name inputs and states.

* ``per_step = True`` (the tagging protocol): the input is ``g_1 .. g_n`` alone and position
  ``t`` is scored on ``s_t`` (:attr:`~posenc.lab.data.task_generators.Example.tags`; the states
  never enter the input, or each step would only need the previous state).
* ``per_step = False``: ``g_1 .. g_n <sep> s_n``, the final state only.

``length`` is ``n``, the number of elements.

Example::

    >>> from posenc.lab.data.tasks import make_task
    >>> ex = make_task("state_tracking", group="s3").examples(1, length=5)[0]
    >>> len(ex.sequence), len(ex.answer)
    (5, 5)
"""

from __future__ import annotations

import functools
import itertools
import random

from posenc.lab.data.task_generators import PAD, SEP, Example, Params, TaskSpec, qa_example

__all__ = ["GROUPS", "STATE_TASKS", "compose", "group_elements"]

#: The groups by name: (degree, even permutations only).
GROUPS = {"parity": (2, False), "s3": (3, False), "a5": (5, True), "s5": (5, False)}

Permutation = tuple[int, ...]


def _is_even(perm: Permutation) -> bool:
    inversions = sum(a > b for a, b in itertools.combinations(perm, 2))
    return inversions % 2 == 0


@functools.cache
def group_elements(group: str) -> tuple[Permutation, ...]:
    """The elements of ``group`` (:data:`GROUPS`) in lexicographic order, identity first."""
    degree, even = GROUPS[group]
    perms = itertools.permutations(range(degree))
    return tuple(p for p in perms if not even or _is_even(p))


def compose(after: Permutation, before: Permutation) -> Permutation:
    """``after ∘ before``: apply ``before``, then ``after`` (``i ↦ after[before[i]]``)."""
    return tuple(after[i] for i in before)


def _symbols(group: str) -> list[str]:
    return [f"g{i}" for i in range(len(group_elements(group)))]


def _state_tracking(rng: random.Random, n: int, params: Params) -> Example:
    group = str(params["group"])
    elements = group_elements(group)
    index = {p: i for i, p in enumerate(elements)}
    inputs = [rng.randrange(len(elements)) for _ in range(n)]
    state, states = elements[0], []
    for i in inputs:
        state = compose(elements[i], state)
        states.append(index[state])
    words = [f"g{i}" for i in inputs]
    tags = [f"g{i}" for i in states]
    if not params["per_step"]:
        return qa_example(words, tags[-1:])
    return Example(tuple(words), tuple(tags), tuple(words), (True,) * n, tuple(tags))


STATE_TASKS: dict[str, TaskSpec] = {
    "state_tracking": TaskSpec(
        name="state_tracking",
        description="Word problem of a permutation group (Merrill et al. 2024): length = n "
        "random elements g_1..g_n of group (parity, s3, a5, s5; 'g0' the identity); the "
        "state s_t = g_t o s_(t-1). per_step=True tags every input position with s_t (the "
        "states are targets, never inputs); per_step=False asks s_n after a separator.",
        train_lengths=(4, 16),
        test_lengths=(32, 64, 128),
        defaults={"group": "s5", "per_step": True},
        vocab=lambda p: (PAD, SEP, *_symbols(str(p["group"]))),
        generate=_state_tracking,
        # tagging: tokens are the n inputs (max_seq_len = max_symbols - 1 = n)
        max_symbols=lambda n, p: n + 1 if p["per_step"] else n + 2,
        ranges={"group": tuple(GROUPS)},
    ),
}
"""The state-tracking task by name."""
