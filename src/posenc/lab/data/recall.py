"""Multi-query associative recall (MQAR): key-value pairs, then queries of the keys.

Zoology's protocol (Arora et al. 2023, https://arxiv.org/abs/2312.04927; generator
``zoology/data/associative_recall.py``, ``multiquery_ar``): ``n`` pairs ``k v`` with keys drawn
without replacement from a key vocabulary and values without replacement from a disjoint value
vocabulary; every key is asked exactly once; the number of pairs and queries grows with the
length. Two layouts:

* ``layout = "appended"`` (the lab's first form): the pairs, then the ``n`` keys again in random
  order (``queries = q`` asks ``q`` keys drawn with replacement instead), a separator, and their
  values in order.
* ``layout = "zoology"``: the pairs, then a query region of ``space = slots_per_pair · n``
  two-token slots. Key ``i`` sits at the start of slot ``g_i``, the ``g_i`` distinct and drawn
  with ``p(g) ∝ (g + 1)^(power_a − 1)`` (``power_a = 0.01``, zoology's default, puts most
  queries close to the pairs; ``1`` is uniform); the token after a query key is its value, the
  answer scored there. Other slots hold random keys and values (``random_non_queries``,
  zoology's default; here the keys are drawn among those *without* a pair, so a filler never
  rebinds a queried key, which zoology's uniform filler tokens can) or ``"_"`` filler.
  Zoology leaves the value out of the input (its label is shifted); here the value follows
  its key in the sequence, which a causal model cannot see when predicting it.

Example::

    >>> from posenc.lab.data.tasks import make_task
    >>> ex = make_task("mqar", layout="zoology").examples(1, length=4)[0]
    >>> len(ex.sequence) == 2 * 4 + 2 * 7 * 4
    True
"""

from __future__ import annotations

import random

from posenc.lab.data.task_generators import (
    PAD,
    SEP,
    Example,
    Params,
    TaskSpec,
    float_param,
    int_param,
    qa_example,
)

__all__ = ["RECALL_TASKS", "gap_weights"]

_FILLER = "_"


def gap_weights(space: int, power_a: float) -> list[float]:
    """Zoology's query-gap law over slots ``0 .. space − 1``: ``p(g) ∝ (g + 1)^(power_a − 1)``,
    normalized to sum to 1."""
    weights = [(g + 1) ** (power_a - 1) for g in range(space)]
    total = sum(weights)
    return [w / total for w in weights]


def _queries(n: int, params: Params) -> int:
    return n if params["queries"] is None else int_param(params, "queries")


def _pairs(rng: random.Random, n: int, params: Params) -> tuple[list[str], list[str]]:
    keys = rng.sample(range(int_param(params, "num_keys")), n)
    values = rng.sample(range(int_param(params, "num_values")), n)
    return [f"k{k}" for k in keys], [f"v{v}" for v in values]


def _weighted_sample(rng: random.Random, weights: list[float], count: int) -> list[int]:
    """``count`` distinct indices drawn one at a time with probability ∝ ``weights`` among those
    left (numpy's ``choice(replace=False, p=...)``)."""
    left = list(range(len(weights)))
    chosen = []
    for _ in range(count):
        index = rng.choices(range(len(left)), weights=[weights[i] for i in left])[0]
        chosen.append(left.pop(index))
    return chosen


def _mqar(rng: random.Random, n: int, params: Params) -> Example:
    keys, values = _pairs(rng, n, params)
    table = dict(zip(keys, values, strict=True))
    pairs = [s for kv in zip(keys, values, strict=True) for s in kv]
    if params["layout"] == "appended":
        if params["queries"] is None:
            asked = rng.sample(keys, n)
        else:
            asked = rng.choices(keys, k=_queries(n, params))
        return qa_example([*pairs, *asked], [table[k] for k in asked])
    space = int_param(params, "slots_per_pair") * n
    gaps = _weighted_sample(rng, gap_weights(space, float_param(params, "power_a")), n)
    others = sorted(set(range(int_param(params, "num_keys"))) - {int(k[1:]) for k in keys})
    region = []
    for _ in range(space):
        if params["random_non_queries"] and others:
            key = f"k{rng.choice(others)}"
            region += [key, f"v{rng.randrange(int_param(params, 'num_values'))}"]
        else:
            region += [_FILLER, _FILLER]
    mask = [False] * (len(pairs) + len(region))
    for key, gap in zip(keys, gaps, strict=True):
        region[2 * gap : 2 * gap + 2] = [key, table[key]]
        mask[len(pairs) + 2 * gap + 1] = True
    sequence = tuple(pairs + region)
    answer = tuple(s for s, m in zip(sequence, mask, strict=True) if m)
    return Example(sequence, answer, sequence, tuple(mask))


def _max_symbols(n: int, params: Params) -> int:
    if params["layout"] == "zoology":
        return 2 * n + 2 * int_param(params, "slots_per_pair") * n
    return 2 * n + 2 * _queries(n, params) + 1


def _check(length: int, params: Params) -> None:
    limit = min(int_param(params, "num_keys"), int_param(params, "num_values"))
    if not 1 <= length <= limit:
        raise ValueError(
            f"length must be in [1, min(num_keys, num_values) = {limit}] for mqar (keys and "
            f"values are distinct), got {length}"
        )
    if params["layout"] == "zoology" and params["queries"] is not None:
        raise ValueError("queries must be None with layout='zoology' (every key is asked once)")


def _vocab(params: Params) -> tuple[str, ...]:
    keys = (f"k{i}" for i in range(int_param(params, "num_keys")))
    values = (f"v{i}" for i in range(int_param(params, "num_values")))
    return (PAD, SEP, *keys, *values, _FILLER)


RECALL_TASKS: dict[str, TaskSpec] = {
    "mqar": TaskSpec(
        name="mqar",
        description="MQAR (zoology): length = n key-value pairs 'k v k v ...' with distinct "
        "keys (of num_keys) and distinct values (of num_values, a disjoint vocabulary); every "
        "key is asked once. layout='appended': the keys again in random order, then their "
        "values after the separator (queries=q asks q keys drawn with replacement). "
        "layout='zoology': a query region of slots_per_pair * n two-token slots after the "
        "pairs, key i at slot g_i ~ (g + 1)^(power_a - 1) followed by its value (scored "
        "inline), other slots random keys and values (random_non_queries) or '_'.",
        train_lengths=(2, 8),
        test_lengths=(12, 16, 24, 32),
        defaults={
            "num_keys": 32,
            "num_values": 32,
            "queries": None,
            "layout": "appended",
            "slots_per_pair": 7,
            "power_a": 0.01,
            "random_non_queries": True,
        },
        vocab=_vocab,
        generate=_mqar,
        max_symbols=_max_symbols,
        check=_check,
        ranges={
            "layout": ("appended", "zoology"),
            "slots_per_pair": (1, 64),
            "power_a": (0.001, 1.0),
        },
    ),
}
"""The recall tasks by name."""
