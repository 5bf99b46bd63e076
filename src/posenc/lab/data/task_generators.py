"""The algorithmic synthetic tasks' generators and their table (:data:`TASKS`), and the
building blocks of every task module (:class:`Example`, :class:`TaskSpec`, :func:`qa_example`).

Each generator maps ``(rng, length, params)`` to an :class:`Example` whose answer is correct
by construction; :mod:`posenc.lab.data.tasks` turns examples into batches. Papers per task are
listed in :mod:`posenc.lab.data.tasks`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "PAD",
    "SEP",
    "TASKS",
    "Example",
    "ParamRange",
    "Params",
    "TaskSpec",
    "float_param",
    "int_param",
    "min_length",
    "qa_example",
]

PAD = "<pad>"
SEP = "<sep>"
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_DIGITS = "0123456789"


@dataclass(frozen=True)
class Example:
    """One task instance as symbols.

    Attributes:
        prompt: symbols before the separator (flip-flop: the whole instruction string).
        answer: the scored symbols, in order.
        sequence: the full sequence ``(*prompt, sep, *answer)`` (flip-flop: the instructions).
        answer_mask: True at the positions of ``sequence`` that hold answer symbols.
        tags: None for next-token tasks (``targets = sequence[1:]``); for a tagging task
            (state tracking), the target symbol of every position of ``sequence``, which is
            then the model's whole input (``tokens = sequence``, ``targets = tags``, scored
            where ``answer_mask`` is True): the answers never enter the input.
    """

    prompt: tuple[str, ...]
    answer: tuple[str, ...]
    sequence: tuple[str, ...]
    answer_mask: tuple[bool, ...]
    tags: tuple[str, ...] | None = None


def qa_example(prompt: list[str], answer: list[str], sep: str = SEP) -> Example:
    """The example ``(*prompt, sep, *answer)`` scored on ``answer``."""
    sequence = (*prompt, sep, *answer)
    mask = (False,) * (len(prompt) + 1) + (True,) * len(answer)
    return Example(tuple(prompt), tuple(answer), sequence, mask)


Params = Mapping[str, object]
#: A parameter's allowed values: an inclusive ``(low, high)`` of ints or floats, or the
#: allowed strings.
ParamRange = tuple[int, int] | tuple[float, float] | tuple[str, ...]


def int_param(params: Params, key: str) -> int:
    """The integer ``params[key]`` (task parameters are checked before generation)."""
    value = params[key]
    assert isinstance(value, int), key
    return value


def float_param(params: Params, key: str) -> float:
    """The number ``params[key]`` as a float (task parameters are checked before generation)."""
    value = params[key]
    assert isinstance(value, (int, float)), key
    return float(value)


def _any_length(length: int, params: Params) -> None:
    del length, params


@dataclass(frozen=True)
class TaskSpec:
    """A task: its default lengths and parameters and the functions that make it.

    Attributes:
        name: key in :data:`TASKS`.
        description: what ``length`` means, the format and the vocabulary.
        train_lengths: inclusive range ``(low, high)`` sampled per row in training.
        test_lengths: longer lengths to evaluate at.
        defaults: default task parameters (``make_task(name, **params)`` overrides them).
        vocab: ``params -> symbols``; ``vocab[0]`` is padding.
        generate: ``(rng, length, params) -> Example``.
        max_symbols: ``(length, params) ->`` the longest ``Example.sequence`` at that length.
        check: ``(length, params) -> None``; raises ``ValueError`` for invalid combinations.
        ranges: the allowed values of this task's own parameters (:data:`ParamRange`);
            parameters not named here use the shared table of :mod:`posenc.lab.data.tasks`.
    """

    name: str
    description: str
    train_lengths: tuple[int, int]
    test_lengths: tuple[int, ...]
    defaults: Mapping[str, object]
    vocab: Callable[[Params], tuple[str, ...]]
    generate: Callable[[random.Random, int, Params], Example]
    max_symbols: Callable[[int, Params], int]
    check: Callable[[int, Params], None] = _any_length
    ranges: Mapping[str, ParamRange] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "defaults", MappingProxyType(dict(self.defaults)))
        object.__setattr__(self, "ranges", MappingProxyType(dict(self.ranges)))


def min_length(minimum: Callable[[Params], int]) -> Callable[[int, Params], None]:
    """A ``check`` refusing lengths below ``minimum(params)``, naming ``length``."""

    def check(length: int, params: Params) -> None:
        if length < minimum(params):
            raise ValueError(f"length must be >= {minimum(params)} for these params, got {length}")

    return check


def _letters(params: Params) -> list[str]:
    return list(_LETTERS[: int_param(params, "alphabet_size")])


def _copy(rng: random.Random, n: int, params: Params) -> Example:
    symbols = rng.choices(_letters(params), k=n)
    return qa_example(symbols, symbols)


def _reverse(rng: random.Random, n: int, params: Params) -> Example:
    symbols = rng.choices(_letters(params), k=n)
    return qa_example(symbols, symbols[::-1])


def _sort(rng: random.Random, n: int, params: Params) -> Example:
    digits = rng.choices(_DIGITS[: int_param(params, "num_digits")], k=n)
    return qa_example(digits, sorted(digits))


def _bits(value: int, width: int, lsb_first: bool) -> list[str]:
    text = format(value, f"0{width}b")
    return list(text[::-1] if lsb_first else text)


def _binary_addition(rng: random.Random, n: int, params: Params) -> Example:
    a, b = rng.getrandbits(n), rng.getrandbits(n)
    lsb = bool(params["lsb_first"])
    prompt = [*_bits(a, n, lsb), "+", *_bits(b, n, lsb)]
    return qa_example(prompt, _bits(a + b, n + 1, lsb))


_FILLER_TEXT = "The grass is green. The sky is blue. The sun is yellow. Here we go. "
_FILLER_TEXT += "There and back again. "
_QUESTION_TEXT = "What is the pass key? The pass key is"


def _key_text(key: str) -> str:
    return f" The pass key is {key}. Remember it. {key} is the pass key. "


def _passkey_overhead(params: Params) -> int:
    digits = int_param(params, "digits")
    if params["byte_level"]:
        return len(_key_text("0" * digits)) + len(_QUESTION_TEXT)
    return digits + 2  # marker K, the digits, question Q


def _passkey(rng: random.Random, n: int, params: Params) -> Example:
    digits = int_param(params, "digits")
    key = str(rng.randint(10 ** (digits - 1), 10**digits - 1))
    depth_param = params["depth"]
    depth = rng.random() if depth_param is None else float(depth_param)  # type: ignore[arg-type]
    filler_total = n - _passkey_overhead(params)
    before = round(depth * filler_total)
    if params["byte_level"]:
        reps = filler_total // len(_FILLER_TEXT) + 1
        text_filler = (_FILLER_TEXT * reps)[:filler_total]
        text = text_filler[:before] + _key_text(key) + text_filler[before:] + _QUESTION_TEXT
        return qa_example(list(text), list(key), sep=" ")
    filler = ["xyz"[i % 3] for i in range(filler_total)]
    return qa_example([*filler[:before], "K", *key, *filler[before:], "Q"], list(key))


def _passkey_vocab(params: Params) -> tuple[str, ...]:
    if params["byte_level"]:
        return tuple(chr(i) for i in range(256))
    return (PAD, SEP, *_DIGITS, "K", "Q", "x", "y", "z")


def _flip_flop_write(params: Params) -> float:
    """The probability of a write in the middle of the string: ``p_write``, or ``(1 - p) / 2``
    (the paper's FFL(p): writes and reads equally likely) when it is None."""
    if params["p_write"] is None:
        return (1 - float_param(params, "p")) / 2
    return float_param(params, "p_write")


def _flip_flop_check(length: int, params: Params) -> None:
    if length < 2:
        raise ValueError(f"length must be >= 2 for flip_flop (a write and a read), got {length}")
    if float_param(params, "p") + _flip_flop_write(params) > 1:
        raise ValueError("p + p_write must be <= 1 for flip_flop (p_read = 1 - p - p_write)")


def _flip_flop(rng: random.Random, n: int, params: Params) -> Example:
    p_ignore, p_write = float_param(params, "p"), _flip_flop_write(params)
    sequence: list[str] = []
    mask: list[bool] = []
    memory = "0"
    for index in range(n):
        if index == 0:
            op = "w"
        elif index == n - 1:
            op = "r"
        else:
            draw = rng.random()
            op = "i" if draw < p_ignore else ("w" if draw < p_ignore + p_write else "r")
        bit = memory if op == "r" else rng.choice("01")
        memory = bit if op == "w" else memory
        sequence += [op, bit]
        mask += [False, op == "r"]
    answer = tuple(s for s, m in zip(sequence, mask, strict=True) if m)
    return Example(tuple(sequence), answer, tuple(sequence), tuple(mask))


def _selective_copy(rng: random.Random, n: int, params: Params) -> Example:
    count = int_param(params, "num_tokens")
    where = sorted(rng.sample(range(n), count))
    data = rng.choices(_letters(params), k=count)
    prompt = ["."] * n
    for index, symbol in zip(where, data, strict=True):
        prompt[index] = symbol
    return qa_example(prompt, data)


def _counting(rng: random.Random, n: int, params: Params) -> Example:
    names = list(_LETTERS[: int_param(params, "num_variables")])
    p_set, p_inc = float_param(params, "p_set"), float_param(params, "p_increment")
    values = dict.fromkeys(names, 0)
    prompt: list[str] = []
    for _ in range(n):
        draw, var = rng.random(), rng.choice(names)
        if draw < p_set:
            values[var] = rng.randrange(10)
            prompt += ["S", var, str(values[var])]
        elif draw < p_set + p_inc:
            values[var] = (values[var] + 1) % 10
            prompt += ["I", var]
        else:
            prompt.append("D")
    query = rng.choice(names)
    return qa_example([*prompt, "?", query], [str(values[query])])


def _letters_vocab(params: Params) -> tuple[str, ...]:
    return (PAD, SEP, *_letters(params))


TASKS: dict[str, TaskSpec] = {
    "copy": TaskSpec(
        name="copy",
        description="length = n random letters (the first alphabet_size of a..z); answer: them.",
        train_lengths=(1, 12),
        test_lengths=(16, 24, 32, 48),
        defaults={"alphabet_size": 8},
        vocab=_letters_vocab,
        generate=_copy,
        max_symbols=lambda n, p: 2 * n + 1,
    ),
    "reverse": TaskSpec(
        name="reverse",
        description="length = n random letters; answer: them in reverse order.",
        train_lengths=(1, 12),
        test_lengths=(16, 24, 32, 48),
        defaults={"alphabet_size": 8},
        vocab=_letters_vocab,
        generate=_reverse,
        max_symbols=lambda n, p: 2 * n + 1,
    ),
    "sort": TaskSpec(
        name="sort",
        description="length = n random digits (0..num_digits-1); answer: them sorted ascending.",
        train_lengths=(1, 12),
        test_lengths=(16, 24, 32, 48),
        defaults={"num_digits": 10},
        vocab=lambda p: (PAD, SEP, *_DIGITS[: int_param(p, "num_digits")]),
        generate=_sort,
        max_symbols=lambda n, p: 2 * n + 1,
    ),
    "binary_addition": TaskSpec(
        name="binary_addition",
        description="length = n bits per operand: prompt 'a + b' with both written in "
        "exactly n bits; answer: a + b in exactly n + 1 bits. lsb_first=True (default) writes "
        "every number least-significant bit first, so the carry flows left to right.",
        train_lengths=(1, 8),
        test_lengths=(12, 16, 24, 32),
        defaults={"lsb_first": True},
        vocab=lambda p: (PAD, SEP, "0", "1", "+"),
        generate=_binary_addition,
        max_symbols=lambda n, p: 3 * n + 3,
    ),
    "passkey": TaskSpec(
        name="passkey",
        description="length = prompt tokens: filler with a digits-long key hidden at depth "
        "(fraction of the filler before it; None = uniform per row), then a question; answer: "
        "the key's digits. Small vocabulary: filler 'x y z x ...', key 'K d d d d d', question "
        "'Q'. byte_level=True: English filler, key sentence and question as bytes (vocab 256, "
        "separator ' ', padding NUL), usable on a byte-level LM.",
        train_lengths=(128, 256),
        test_lengths=(384, 512, 768, 1024),
        defaults={"depth": None, "digits": 5, "byte_level": False},
        vocab=_passkey_vocab,
        generate=_passkey,
        max_symbols=lambda n, p: n + 1 + int_param(p, "digits"),
        check=min_length(_passkey_overhead),
    ),
    "flip_flop": TaskSpec(
        name="flip_flop",
        description="FFL(p), Liu et al. 2023: length = n instructions, each an op and a bit: "
        "'w b' writes b, 'i b' is ignored, 'r b' reads (b = the last written bit). The first "
        "op is w, the last r; in between i with probability p, w with probability p_write "
        "(None = (1 - p) / 2, the paper's FFL(p)) and r otherwise. The paper trains on "
        "FFL(0.8) and tests on sparse FFL(0.98) and dense FFL(0.1). Answers are inline: every "
        "read's bit (no separator).",
        train_lengths=(8, 32),
        test_lengths=(48, 64, 96, 128),
        defaults={"p": 0.8, "p_write": None},
        vocab=lambda p: (PAD, SEP, "w", "r", "i", "0", "1"),
        generate=_flip_flop,
        max_symbols=lambda n, p: 2 * n,
        check=_flip_flop_check,
        ranges={"p_write": (0.0, 1.0)},
    ),
    "selective_copy": TaskSpec(
        name="selective_copy",
        description="length = prompt tokens: num_tokens letters at random places among "
        "noise '.'; answer: the letters in order.",
        train_lengths=(8, 24),
        test_lengths=(32, 48, 64, 96),
        defaults={"num_tokens": 4, "alphabet_size": 8},
        vocab=lambda p: (*_letters_vocab(p), "."),
        generate=_selective_copy,
        max_symbols=lambda n, p: n + 1 + int_param(p, "num_tokens"),
        check=min_length(lambda p: int_param(p, "num_tokens")),
    ),
    "counting": TaskSpec(
        name="counting",
        description="length = n ops on num_variables variables a, b, ... (all start at 0): "
        "'S v d' sets v to digit d (prob p_set), 'I v' adds 1 mod 10 (prob p_increment), 'D' "
        "does nothing; then '? v'; answer: v's final value (one digit).",
        train_lengths=(4, 16),
        test_lengths=(24, 32, 48, 64),
        defaults={"num_variables": 3, "p_set": 0.2, "p_increment": 0.5},
        vocab=lambda p: (
            PAD,
            SEP,
            "S",
            "I",
            "D",
            "?",
            *_LETTERS[: int_param(p, "num_variables")],
            *_DIGITS,
        ),
        generate=_counting,
        max_symbols=lambda n, p: 3 * n + 4,
    ),
}
"""The algorithmic tasks by name; see each :attr:`TaskSpec.description`. The other task
modules (:mod:`~posenc.lab.data.recall`, :mod:`~posenc.lab.data.ruler`,
:mod:`~posenc.lab.data.state_tracking`) add theirs in :data:`posenc.lab.data.tasks.TASKS`."""

# Allowed ranges (inclusive) of the task parameters; None is allowed where the default is None.
