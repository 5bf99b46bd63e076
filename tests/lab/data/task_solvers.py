"""Independent solvers of the recall, RULER and state-tracking tasks for the task tests: each
reads an example's prompt as a person would and returns ``(problem size, expected answer)``,
asserting the properties the generators promise (distinct values, distractors that never
collide with the answer)."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable

Symbols = tuple[str, ...]


def mqar(prompt: Symbols, params: dict) -> tuple[int, Symbols]:
    if params["layout"] == "zoology":
        n = len(prompt) // (2 + 2 * params["slots_per_pair"])
        table = dict(zip(prompt[0 : 2 * n : 2], prompt[1 : 2 * n : 2], strict=True))
        assert len(table) == n and len(set(table.values())) == n  # distinct keys and values
        region = prompt[2 * n :]
        asked = [region[i] for i in range(0, len(region), 2) if region[i] in table]
        assert sorted(asked) == sorted(table)  # every key asked exactly once
        for i in range(0, len(region), 2):
            if region[i] in table:
                assert region[i + 1] == table[region[i]]
        return n, tuple(table[k] for k in asked)
    n = sum(1 for s in prompt if s.startswith("v"))
    table = dict(zip(prompt[0 : 2 * n : 2], prompt[1 : 2 * n : 2], strict=True))
    assert len(table) == n and len(set(table.values())) == n
    queries = prompt[2 * n :]
    assert all(q.startswith("k") for q in queries)
    return n, tuple(table[q] for q in queries)


def niah(prompt: Symbols, params: dict) -> tuple[int, Symbols]:
    digits = params["value_digits"]
    question = len(prompt) - 1 - prompt[::-1].index("Q")
    asked = prompt[question + 1 :]
    needles: list[tuple[str, str]] = []
    i = 0
    while i < question:
        if prompt[i] == "N":
            value = prompt[i + 2 : i + 2 + digits]
            assert all(d.isdigit() for d in value)
            needles.append((prompt[i + 1], "".join(value)))
            i += 2 + digits
        else:
            assert prompt[i] in {"x", "y", "z"} or prompt[i].startswith("e")
            i += 1
    keys = {k for k, _ in needles}
    assert len(set(asked)) == len(asked) == params["needle_queries"]
    answer = [v for key in asked for k, v in needles if k == key]
    # every queried key has exactly its needles; no other needle shares a value with them
    assert len(answer) == len(asked) * params["needle_values"]
    values = [v for _, v in needles]
    assert all(values.count(v) == 1 for v in answer)
    if params["haystack"] != "needle":
        assert len(keys) == params["needle_keys"]
    return len(prompt), tuple(d for v in answer for d in v)


def vt(prompt: Symbols, params: dict) -> tuple[int, Symbols]:
    question = prompt.index("?")
    value = prompt[question + 1 :]
    bound: dict[str, Symbols] = {}
    order = []
    for i, symbol in enumerate(prompt[:question]):
        if symbol == "=":
            var, rhs = prompt[i - 1], prompt[i + 1]
            assert var.isupper() and var not in bound  # each variable bound once
            bound[var] = bound[rhs] if rhs.isupper() else prompt[i + 1 : i + 1 + len(value)]
            order.append(var)
    answer = tuple(v for v in order if bound[v] == value)
    assert len(answer) == params["hops"] + 1
    assert sum(1 for v in set(bound.values()) if v == value) == 1
    return len(prompt), answer


def cwe(prompt: Symbols, params: dict) -> tuple[int, Symbols]:
    counts = Counter(prompt)
    common = [w for w in counts if counts[w] == params["common_repeats"]]
    assert len(common) == params["common"]
    others = sorted(counts[w] for w in counts if w not in common)
    assert all(c == params["uncommon_repeats"] for c in others[1:])  # one word may fill less
    assert not others or 1 <= others[0] <= params["uncommon_repeats"]
    return len(prompt), tuple(w for w in dict.fromkeys(prompt) if w in common)


def fwe(prompt: Symbols, params: dict) -> tuple[int, Symbols]:
    counts = Counter(w for w in prompt if w != ".")
    ranked = sorted(counts, key=lambda w: -counts[w])
    top = params["top"]
    tops = [counts[w] for w in ranked[: top + 1]] + [0]
    assert all(a > b for a, b in itertools.pairwise(tops[: top + 1]))  # a unique top
    return len(prompt), tuple(ranked[:top])


def state_tracking(prompt: Symbols, params: dict) -> tuple[int, Symbols]:
    degree = {"parity": 2, "s3": 3, "a5": 5, "s5": 5}[params["group"]]
    perms = sorted(itertools.permutations(range(degree)))
    if params["group"] == "a5":
        perms = [p for p in perms if sum(a > b for a, b in itertools.combinations(p, 2)) % 2 == 0]
    state = list(range(degree))
    states = []
    for symbol in prompt:
        g = perms[int(symbol[1:])]
        state = [g[s] for s in state]  # apply g after the state so far
        states.append(f"g{perms.index(tuple(state))}")
    return len(prompt), tuple(states) if params["per_step"] else tuple(states[-1:])


SOLVERS: dict[str, Callable[[Symbols, dict], tuple[int, Symbols]]] = {
    "mqar": mqar,
    "niah_single": niah,
    "niah_multikey": niah,
    "niah_multivalue": niah,
    "niah_multiquery": niah,
    "vt": vt,
    "cwe": cwe,
    "fwe": fwe,
    "state_tracking": state_tracking,
}
