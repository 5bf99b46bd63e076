"""RULER's synthetic families at the lab's scale: needles, variable tracking, word extraction.

Re-implemented from the rules of RULER's generators (Hsieh et al. 2024, "RULER: What's the
Real Context Size of Your Long-Context Language Models?", https://arxiv.org/abs/2404.06654;
``NVIDIA/RULER`` ``scripts/data/synthetic/``: ``niah.py``, ``variable_tracking.py``,
``common_words_extraction.py``, ``freq_words_extraction.py``) with one symbol per token and
small vocabularies, so that a CPU model can learn them. ``length`` is the prompt's exact token
count for every task here (the answer follows a separator). Every value and every distractor is
drawn so that it can never be mistaken for the answer (distinct values, distractor keys outside
the queried ones), and the answer is recoverable from the prompt alone.

* **Needle in a haystack** (``niah_*``): needles ``N k d d d d`` (marker, key, a value of
  ``value_digits`` digits) hidden in a haystack, then ``Q k ...`` (the queried keys); answer: each
  queried key's values, in query order and, per key, in prompt order. RULER's knobs:
  ``needle_keys`` (keys with needles; RULER's ``num_needle_k``), ``needle_values`` (values per
  key, ``num_needle_v``), ``needle_queries`` (keys asked, ``num_needle_q``) and ``haystack``:
  ``"noise"`` (``x y z x y z ...``, RULER's repeated sentence), ``"essay"`` (a fixed text of
  filler words generated once on the machine and repeated, standing in for Paul Graham's essays)
  or ``"needle"`` (distractor needles with other keys and values, the remainder of a needle's
  width as noise tokens at the start). Presets: ``niah_single``
  (RULER's niah_single_1: noise, 1 key), ``niah_multikey`` (multikey_1: essay, 4 keys, 1 asked),
  ``niah_multivalue`` (essay, 4 values of one key), ``niah_multiquery`` (essay, 4 keys, all
  asked); RULER's other variants are parameter values (``haystack="needle"`` is multikey_2,
  ``value_digits=8`` stands in for single_3's UUIDs).
* **Variable tracking** (``vt``): ``chains`` chains of ``hops + 1`` variables (letters), ``A = d
  d d d`` then ``B = A``, ``C = B``, ..., each chain's statements in order at random places in
  the haystack; then ``? d d d d`` (chain 0's value); answer: the chain's variables in binding
  order. RULER's defaults are 1 chain of 4 hops; here 1 chain of 2 (what a small model learns
  in the suite's budget).
* **Common words extraction** (``cwe``): a shuffled list of ``common`` words repeated
  ``common_repeats`` times and other words ``uncommon_repeats`` times each (RULER: 10 words, 30
  and 3 times, or 6 and 1 below 4k tokens; here one more uncommon word, fewer times, fills the
  length exactly); answer: the common words in order of first appearance.
* **Frequent words extraction** (``fwe``): ``length`` words where the word of rank ``k`` appears
  ``⌊length · k^(−alpha) / ζ(alpha)⌋`` times (RULER's Zipf law, ``alpha = 2``), rank 1 being the
  noise word ``"."`` (RULER's ``'...'``, which also takes the rounding remainder); answer: the
  ``top`` most frequent other words, most frequent first.

HELMET (Yen et al. 2025, https://arxiv.org/abs/2410.02694) found that needle retrieval does not
predict downstream long-context results: a verdict resting on the ``niah_*`` tasks alone says so.

Example::

    >>> from posenc.lab.data.tasks import make_task
    >>> ex = make_task("niah_single").examples(1, length=64)[0]
    >>> len(ex.prompt), len(ex.answer)
    (64, 4)
"""

from __future__ import annotations

import functools
import itertools
import math
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

__all__ = ["ESSAY", "NEEDLE_TASKS", "RULER_TASKS", "fwe_counts", "zeta"]

_DIGITS = "0123456789"
_NOISE = ("x", "y", "z")
_ESSAY_WORDS = tuple(f"e{i}" for i in range(16))
_VARIABLES = tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_HAYSTACKS = ("noise", "essay", "needle")


def _make_essay(words: int = 1009) -> tuple[str, ...]:
    """A fixed filler text: words of a 16-word vocabulary with Zipf-like frequencies, the same on
    every machine (its own seeded generator)."""
    rng = random.Random(20240406)
    return tuple(rng.choices(_ESSAY_WORDS, weights=[1 / (i + 1) for i in range(16)], k=words))


#: The ``"essay"`` haystack's text, repeated as needed (every example starts at its first word).
ESSAY = _make_essay()


def _filler(kind: str, count: int) -> list[str]:
    source = _NOISE if kind == "noise" else ESSAY
    return [source[i % len(source)] for i in range(count)]


def _insert(rng: random.Random, haystack: list[str], pieces: list[list[str]]) -> list[str]:
    """``pieces`` in order at random token boundaries of ``haystack`` (several may share one)."""
    where = sorted(rng.choices(range(len(haystack) + 1), k=len(pieces)))
    out: list[str] = []
    last = 0
    for index, piece in zip(where, pieces, strict=True):
        out += haystack[last:index] + piece
        last = index
    return out + haystack[last:]


def _value_range(digits: int) -> range:
    """The ``digits``-digit numbers (no leading zero; 0-9 for one digit)."""
    return range(10 ** (digits - 1) if digits > 1 else 0, 10**digits)


def _values(rng: random.Random, count: int, digits: int) -> list[str]:
    """``count`` distinct ``digits``-digit numbers as strings."""
    return [str(v) for v in rng.sample(_value_range(digits), count)]


def _check_values(count: int, digits: int, what: str) -> None:
    if count > len(_value_range(digits)):
        raise ValueError(
            f"value_digits ({digits}) has {len(_value_range(digits))} values, fewer than the "
            f"{count} distinct values {what} needs"
        )


# ---- needle in a haystack ---------------------------------------------------------------


def _needle_overhead(params: Params) -> int:
    needles = int_param(params, "needle_keys") * int_param(params, "needle_values")
    return (
        needles * (2 + int_param(params, "value_digits")) + 1 + int_param(params, "needle_queries")
    )


def _niah(rng: random.Random, n: int, params: Params) -> Example:
    num_keys, per_key = int_param(params, "needle_keys"), int_param(params, "needle_values")
    digits, key_vocab = int_param(params, "value_digits"), int_param(params, "key_vocab")
    keys = rng.sample(range(key_vocab), num_keys)
    values = _values(rng, num_keys * per_key, digits)
    needles = [(keys[i // per_key], value) for i, value in enumerate(values)]
    rng.shuffle(needles)  # RULER shuffles the needles before placing them
    pieces = [["N", f"k{key}", *value] for key, value in needles]
    filler_total = n - _needle_overhead(params)
    if params["haystack"] == "needle":
        unit = 2 + digits
        count, extra = divmod(filler_total, unit)
        others = [k for k in range(key_vocab) if k not in keys]
        used = set(values)
        units = []
        for _ in range(count):
            value = _values(rng, 1, digits)[0]
            while value in used:
                value = _values(rng, 1, digits)[0]
            units.append(["N", f"k{rng.choice(others)}", *value])
        where = sorted(rng.choices(range(count + 1), k=len(pieces)))
        prompt = _filler("noise", extra)
        last = 0
        for index, piece in zip(where, pieces, strict=True):
            prompt += [s for u in units[last:index] for s in u] + piece
            last = index
        prompt += [s for u in units[last:] for s in u]
    else:
        prompt = _insert(rng, _filler(str(params["haystack"]), filler_total), pieces)
    asked = rng.sample(keys, int_param(params, "needle_queries"))
    answer = [d for key in asked for k, value in needles if k == key for d in value]
    return qa_example([*prompt, "Q", *(f"k{k}" for k in asked)], answer)


def _niah_check(length: int, params: Params) -> None:
    keys, queries = int_param(params, "needle_keys"), int_param(params, "needle_queries")
    if queries > keys:
        raise ValueError(f"needle_queries ({queries}) must be <= needle_keys ({keys})")
    extra = params["haystack"] == "needle"
    needles = keys * int_param(params, "needle_values")
    _check_values(
        needles + extra, int_param(params, "value_digits"), "the needles (and a distractor)"
    )
    if keys + extra > int_param(params, "key_vocab"):
        raise ValueError(
            f"key_vocab must be >= needle_keys{' + 1 (distractor keys)' if extra else ''}"
        )
    if length < _needle_overhead(params):
        raise ValueError(
            f"length must be >= {_needle_overhead(params)} (needles and question) for these "
            f"params, got {length}"
        )


def _niah_spec(name: str, summary: str, **defaults: object) -> TaskSpec:
    return TaskSpec(
        name=name,
        description=f"{summary} length = prompt tokens: needles 'N k d..d' (key, value_digits "
        "digits) in a haystack (noise 'x y z ...', essay: fixed filler words e0..e15, or "
        "needle: distractor needles of other keys), then 'Q' and the queried keys; answer: "
        "each queried key's values (query order; per key, prompt order).",
        train_lengths=(32, 64),
        test_lengths=(128, 256, 512),
        defaults={
            "haystack": "noise",
            "needle_keys": 1,
            "needle_values": 1,
            "needle_queries": 1,
            "key_vocab": 16,
            "value_digits": 4,
            **defaults,
        },
        vocab=lambda p: (
            PAD,
            SEP,
            "N",
            "Q",
            *_NOISE,
            *_ESSAY_WORDS,
            *(f"k{i}" for i in range(int_param(p, "key_vocab"))),
            *_DIGITS,
        ),
        generate=_niah,
        max_symbols=lambda n, p: (
            n
            + 1
            + int_param(p, "needle_queries")
            * int_param(p, "needle_values")
            * int_param(p, "value_digits")
        ),
        check=_niah_check,
        ranges={
            "haystack": _HAYSTACKS,
            "needle_keys": (1, 64),
            "needle_values": (1, 16),
            "needle_queries": (1, 64),
            "key_vocab": (1, 1024),
            "value_digits": (1, 9),
        },
    )


NEEDLE_TASKS: dict[str, TaskSpec] = {
    "niah_single": _niah_spec("niah_single", "RULER niah_single_1: one needle in noise."),
    "niah_multikey": _niah_spec(
        "niah_multikey",
        "RULER niah_multikey_1: 4 needles of 4 keys in essay, one asked.",
        haystack="essay",
        needle_keys=4,
    ),
    "niah_multivalue": _niah_spec(
        "niah_multivalue",
        "RULER niah_multivalue: 4 values of one key in essay, all recalled.",
        haystack="essay",
        needle_values=4,
    ),
    "niah_multiquery": _niah_spec(
        "niah_multiquery",
        "RULER niah_multiquery: 4 needles of 4 keys in essay, all asked.",
        haystack="essay",
        needle_keys=4,
        needle_queries=4,
    ),
}
"""The needle-retrieval presets (what HELMET warns a verdict should not rest on alone)."""


# ---- variable tracking ------------------------------------------------------------------


def _vt_overhead(params: Params) -> int:
    chains, hops = int_param(params, "chains"), int_param(params, "hops")
    digits = int_param(params, "value_digits")
    return chains * (2 + digits + 3 * hops) + 1 + digits


def _vt(rng: random.Random, n: int, params: Params) -> Example:
    chains, hops = int_param(params, "chains"), int_param(params, "hops")
    names = rng.sample(_VARIABLES, chains * (hops + 1))
    values = _values(rng, chains, int_param(params, "value_digits"))
    statements = []  # per chain, its statements in binding order
    for c in range(chains):
        chain = names[c * (hops + 1) : (c + 1) * (hops + 1)]
        lines = [[chain[0], "=", *values[c]]]
        lines += [[chain[j + 1], "=", chain[j]] for j in range(hops)]
        statements.append(lines)
    order = [c for c in range(chains) for _ in range(hops + 1)]
    rng.shuffle(order)  # a random merge that keeps each chain's order
    taken = [0] * chains
    pieces = []
    for c in order:
        pieces.append(statements[c][taken[c]])
        taken[c] += 1
    haystack = _filler(str(params["haystack"]), n - _vt_overhead(params))
    prompt = _insert(rng, haystack, pieces)
    return qa_example([*prompt, "?", *values[0]], names[: hops + 1])


def _vt_check(length: int, params: Params) -> None:
    variables = int_param(params, "chains") * (int_param(params, "hops") + 1)
    if variables > len(_VARIABLES):
        raise ValueError(f"chains * (hops + 1) must be <= 26 (one letter each), got {variables}")
    _check_values(int_param(params, "chains"), int_param(params, "value_digits"), "the chains")
    if length < _vt_overhead(params):
        raise ValueError(f"length must be >= {_vt_overhead(params)} for these params, got {length}")


# ---- word extraction --------------------------------------------------------------------


def _words(params: Params) -> list[str]:
    return [f"w{i}" for i in range(int_param(params, "word_vocab"))]


def _cwe_uncommon(length: int, params: Params) -> tuple[int, int]:
    """``(words, remainder)``: uncommon words repeated ``uncommon_repeats`` times, and the
    repeats of one more uncommon word that fills the length exactly (0 when none)."""
    rest = length - int_param(params, "common") * int_param(params, "common_repeats")
    return divmod(rest, int_param(params, "uncommon_repeats"))


def _cwe(rng: random.Random, n: int, params: Params) -> Example:
    common = int_param(params, "common")
    words, remainder = _cwe_uncommon(n, params)
    chosen = rng.sample(_words(params), common + words + (remainder > 0))
    listing = chosen[:common] * int_param(params, "common_repeats")
    listing += chosen[common : common + words] * int_param(params, "uncommon_repeats")
    listing += chosen[common + words :] * remainder
    rng.shuffle(listing)
    answer = [w for w in dict.fromkeys(listing) if w in chosen[:common]]
    return qa_example(listing, answer)


def _cwe_check(length: int, params: Params) -> None:
    common, repeats = int_param(params, "common"), int_param(params, "common_repeats")
    if repeats <= int_param(params, "uncommon_repeats"):
        raise ValueError("common_repeats must be > uncommon_repeats (the answer must be unique)")
    if length < common * repeats:
        raise ValueError(
            f"length must be >= common * common_repeats ({common * repeats}), got {length}"
        )
    words, remainder = _cwe_uncommon(length, params)
    distinct = common + words + (remainder > 0)
    if distinct > int_param(params, "word_vocab"):
        raise ValueError(
            f"word_vocab ({int_param(params, 'word_vocab')}) must be >= the distinct words of "
            f"length {length} ({distinct})"
        )


@functools.cache
def zeta(alpha: float) -> float:
    """Riemann's ``ζ(alpha) = Σ_k k^(−alpha)`` for ``alpha > 1`` (a partial sum and its
    Euler–Maclaurin tail, exact to ~1e-12 for ``alpha ≥ 1.1``)."""
    terms = 10_000
    head = math.fsum(k**-alpha for k in range(1, terms))
    return head + terms ** (1 - alpha) / (alpha - 1) + terms**-alpha / 2


def fwe_counts(length: int, alpha: float, ranks: int) -> list[int]:
    """Occurrences of the words of rank ``1 .. ranks`` in a frequent-words list of ``length``
    words: ``⌊length · k^(−alpha) / ζ(alpha)⌋``, rank 1 (noise) taking the remainder."""
    counts = [math.floor(length * k**-alpha / zeta(alpha)) for k in range(1, ranks + 1)]
    counts[0] += length - sum(counts)
    return counts


def _fwe(rng: random.Random, n: int, params: Params) -> Example:
    counts = fwe_counts(n, float_param(params, "alpha"), int_param(params, "word_vocab") + 1)
    words = [".", *rng.sample(_words(params), len(counts) - 1)]
    listing = [w for w, c in zip(words, counts, strict=True) for _ in range(c)]
    rng.shuffle(listing)
    return qa_example(listing, words[1 : 1 + int_param(params, "top")])


def _fwe_check(length: int, params: Params) -> None:
    top, vocab = int_param(params, "top"), int_param(params, "word_vocab")
    if top >= vocab:
        raise ValueError(f"top ({top}) must be < word_vocab ({vocab})")
    counts = fwe_counts(length, float_param(params, "alpha"), top + 2)
    if not all(a > b for a, b in itertools.pairwise(counts[1:])):
        raise ValueError(
            f"length {length} is too short for alpha {params['alpha']}: the top {top} words' "
            f"counts {counts[1:]} must strictly decrease (and exceed the next word's)"
        )


RULER_TASKS: dict[str, TaskSpec] = {
    **NEEDLE_TASKS,
    "vt": TaskSpec(
        name="vt",
        description="RULER variable tracking: length = prompt tokens: chains of hops + 1 "
        "variables ('A = d..d', then 'B = A', ...) in a haystack (noise or essay), then '? d..d' "
        "(chain 0's value); answer: every variable bound to it, in binding order.",
        train_lengths=(40, 64),
        test_lengths=(128, 256, 512),
        defaults={"chains": 1, "hops": 2, "value_digits": 4, "haystack": "noise"},
        vocab=lambda p: (PAD, SEP, "?", "=", *_NOISE, *_ESSAY_WORDS, *_VARIABLES, *_DIGITS),
        generate=_vt,
        max_symbols=lambda n, p: n + 2 + int_param(p, "hops"),
        check=_vt_check,
        ranges={
            "chains": (1, 26),
            "hops": (1, 25),
            "value_digits": (1, 9),
            "haystack": ("noise", "essay"),
        },
    ),
    "cwe": TaskSpec(
        name="cwe",
        description="RULER common words extraction: length = list tokens: common words "
        "repeated common_repeats times and the others uncommon_repeats times, shuffled; "
        "answer: the common words in order of first appearance.",
        train_lengths=(32, 64),
        test_lengths=(128, 256, 512),
        defaults={
            "common": 3,
            "common_repeats": 4,
            "uncommon_repeats": 1,
            "word_vocab": 512,
        },
        vocab=lambda p: (PAD, SEP, *_words(p)),
        generate=_cwe,
        max_symbols=lambda n, p: n + 1 + int_param(p, "common"),
        check=_cwe_check,
        ranges={
            "common": (1, 64),
            "common_repeats": (2, 256),
            "uncommon_repeats": (1, 255),
            "word_vocab": (2, 1 << 16),
        },
    ),
    "fwe": TaskSpec(
        name="fwe",
        description="RULER frequent words extraction: length = list tokens: the word of rank k "
        "appears floor(length k^-alpha / zeta(alpha)) times, rank 1 the noise word '.'; "
        "answer: the top next most frequent words, most frequent first.",
        train_lengths=(96, 128),
        test_lengths=(256, 512, 1024),
        defaults={"alpha": 2.0, "top": 3, "word_vocab": 64},
        vocab=lambda p: (PAD, SEP, ".", *_words(p)),
        generate=_fwe,
        max_symbols=lambda n, p: n + 1 + int_param(p, "top"),
        check=_fwe_check,
        ranges={"alpha": (1.1, 8.0), "top": (1, 16), "word_vocab": (2, 4096)},
    ),
}
"""RULER's synthetic families by name (the needle presets, ``vt``, ``cwe``, ``fwe``)."""
