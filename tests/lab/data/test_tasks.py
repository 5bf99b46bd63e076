from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch
from torch.testing import assert_close

from posenc.lab.batch import Batch
from posenc.lab.data.tasks import PAD, SEP, TASKS, Example, TaskSource, accuracy, make_task
from tests.lab.data.task_solvers import SOLVERS as NEW_SOLVERS

Symbols = tuple[str, ...]

# ---- independent solvers: (prompt, task params) -> (problem size, expected answer) ----------


def _copy(prompt: Symbols, params: dict) -> tuple[int, Symbols]:
    return len(prompt), prompt


def _reverse(prompt: Symbols, params: dict) -> tuple[int, Symbols]:
    return len(prompt), prompt[::-1]


def _sort(prompt: Symbols, params: dict) -> tuple[int, Symbols]:
    return len(prompt), tuple(sorted(prompt, key=int))


def _binary_addition(prompt: Symbols, params: dict) -> tuple[int, Symbols]:
    text = "".join(prompt)
    a, b = text.split("+")
    assert len(a) == len(b)
    order = (lambda s: s[::-1]) if params["lsb_first"] else (lambda s: s)
    total = int(order(a), 2) + int(order(b), 2)
    return len(a), tuple(order(format(total, f"0{len(a) + 1}b")))


def _passkey(prompt: Symbols, params: dict) -> tuple[int, Symbols]:
    text = "".join(prompt)
    if params["byte_level"]:
        keys = re.findall(r"The pass key is (\d+)\. Remember it\. (\d+) is the pass key", text)
        assert len(keys) == 1 and keys[0][0] == keys[0][1]
        assert text.endswith("What is the pass key? The pass key is")
        key = keys[0][0]
    else:
        assert text.endswith("Q") and text.count("K") == 1
        key = text[text.index("K") + 1 :][: params["digits"]]
        assert set(text.replace(key, "", 1)) <= set("xyzKQ")
    assert len(key) == params["digits"]
    return len(prompt), tuple(key)


def _flip_flop(prompt: Symbols, params: dict) -> tuple[int, Symbols]:
    ops, bits = prompt[0::2], prompt[1::2]
    assert ops[0] == "w" and ops[-1] == "r" and set(ops) <= {"w", "r", "i"}
    assert set(bits) <= {"0", "1"}
    reads, last = [], None
    for op, bit in zip(ops, bits, strict=True):
        if op == "w":
            last = bit
        elif op == "r":
            reads.append(last)
    return len(ops), tuple(reads)


def _selective_copy(prompt: Symbols, params: dict) -> tuple[int, Symbols]:
    return len(prompt), tuple(s for s in prompt if s != ".")


def _counting(prompt: Symbols, params: dict) -> tuple[int, Symbols]:
    assert prompt[-2] == "?"
    state: dict[str, int] = {}
    ops, i = 0, 0
    body = prompt[:-2]
    while i < len(body):
        ops += 1
        if body[i] == "S":
            state[body[i + 1]] = int(body[i + 2])
            i += 3
        elif body[i] == "I":
            state[body[i + 1]] = (state.get(body[i + 1], 0) + 1) % 10
            i += 2
        else:
            assert body[i] == "D"
            i += 1
    return ops, (str(state.get(prompt[-1], 0)),)


SOLVERS: dict[str, Callable[[Symbols, dict], tuple[int, Symbols]]] = {
    "copy": _copy,
    "reverse": _reverse,
    "sort": _sort,
    "binary_addition": _binary_addition,
    "passkey": _passkey,
    "flip_flop": _flip_flop,
    "selective_copy": _selective_copy,
    "counting": _counting,
    **NEW_SOLVERS,
}

# Task variants under test: (name, params).
VARIANTS = [
    *((name, {}) for name in TASKS),
    ("binary_addition", {"lsb_first": False}),
    ("passkey", {"byte_level": True, "depth": 0.5}),
    ("mqar", {"queries": 3}),
    ("mqar", {"layout": "zoology"}),
    ("mqar", {"layout": "zoology", "random_non_queries": False, "power_a": 1.0}),
    ("flip_flop", {"p": 0.0}),
    ("flip_flop", {"p": 0.5, "p_write": 0.1}),
    ("niah_single", {"haystack": "essay"}),
    ("niah_single", {"haystack": "needle", "value_digits": 8}),
    ("niah_multikey", {"haystack": "needle"}),
    ("vt", {"haystack": "essay", "chains": 1, "hops": 4}),
    ("fwe", {"alpha": 1.5}),
    ("cwe", {"common_repeats": 6, "uncommon_repeats": 2, "word_vocab": 256}),
    ("state_tracking", {"group": "s3"}),
    ("state_tracking", {"group": "a5", "per_step": False}),
    ("state_tracking", {"group": "parity"}),
]
IDS = [f"{n}-{'-'.join(f'{k}={v}' for k, v in p.items())}" for n, p in VARIANTS]


def _small(name: str, params: dict) -> TaskSource:
    """The task with its default lengths (all short enough to stay fast)."""
    return make_task(name, seed=0, **params)


def _check_example(task: TaskSource, ex: Example, length: int | None = None) -> None:
    """Answer correct by construction, formats consistent, size as requested."""
    size, want = SOLVERS[task.name](ex.prompt, dict(task.params))
    assert ex.answer == want
    scored = ex.answer_mask if ex.tags is None else ex.tags
    masked = tuple(
        s
        for s, m in zip(ex.sequence if ex.tags is None else ex.tags, ex.answer_mask, strict=True)
        if m
    )
    assert len(scored) == len(ex.sequence)
    assert masked == ex.answer and len(ex.answer) >= 1
    if _tagging(task):
        assert ex.sequence == ex.prompt and ex.tags == ex.answer and all(ex.answer_mask)
    elif _inline(task):
        assert ex.sequence == ex.prompt and ex.tags is None
    if task.name == "flip_flop":
        assert all(
            m == (i % 2 == 1 and ex.sequence[i - 1] == "r") for i, m in enumerate(ex.answer_mask)
        )
    if not _inline(task) and not _tagging(task):
        sep = " " if task.params.get("byte_level") else SEP
        assert ex.sequence == (*ex.prompt, sep, *ex.answer)
        assert ex.answer_mask == (False,) * (len(ex.prompt) + 1) + (True,) * len(ex.answer)
    if length is not None:
        assert size == length
    assert len(ex.sequence) - (ex.tags is None) <= task.max_seq_len(size)


def _inline(task: TaskSource) -> bool:
    """Answers scored inside the prompt (no separator)."""
    return task.name == "flip_flop" or task.params.get("layout") == "zoology"


def _tagging(task: TaskSource) -> bool:
    return task.name == "state_tracking" and bool(task.params["per_step"])


def _rows(task: TaskSource, batch: Batch) -> list[Example]:
    """Rebuild the examples of a batch from its tokens, targets and masks."""
    out = []
    for row in range(batch.batch_size):
        real = torch.ones_like(batch.tokens[row], dtype=torch.bool)
        if batch.key_padding_mask is not None:
            real = batch.key_padding_mask[row]
            count = int(real.sum())
            assert bool(real[:count].all()) and not bool(real[count:].any())  # padded at the end
            assert not bool(batch.loss_mask[row, count:].any())
            assert not bool(batch.tokens[row, count:].any())  # pad token 0
        if _tagging(task):
            sequence, tags = (
                task.decode(batch.tokens[row][real]),
                task.decode(batch.targets[row][real]),
            )
            mask = tuple(batch.loss_mask[row][real].tolist())
            answer = tuple(s for s, m in zip(tags, mask, strict=True) if m)
            out.append(Example(sequence, answer, sequence, mask, tags))
            continue
        ids = [*batch.tokens[row][real].tolist(), int(batch.targets[row][real][-1])]
        assert_close(batch.targets[row][real][:-1], batch.tokens[row][real][1:])
        sequence = task.decode(ids)
        mask = (False, *batch.loss_mask[row][real].tolist())
        first = mask.index(True)
        answer = tuple(s for s, m in zip(sequence, mask, strict=True) if m)
        prompt = sequence if _inline(task) else sequence[: first - 1]
        out.append(Example(prompt, answer, sequence, mask))
    return out


@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=IDS)
def test_examples_are_correct_at_train_and_test_lengths(name: str, params: dict) -> None:
    task = _small(name, params)
    low, high = task.train_lengths
    for length in (low, high, *task.test_lengths[:1], task.test_lengths[-1]):
        for ex in task.examples(3, length, seed=1):
            _check_example(task, ex, length)


@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=IDS)
def test_training_batches_decode_to_correct_examples_in_the_train_range(
    name: str, params: dict
) -> None:
    task = _small(name, params)
    batch = task.batch(step=0, batch_size=8)
    low, high = task.train_lengths
    assert batch.tokens.dtype == torch.int64 and batch.loss_mask.dtype == torch.bool
    assert int(batch.tokens.max()) < task.vocab_size
    for ex in _rows(task, batch):
        _check_example(task, ex)
        assert low <= SOLVERS[name](ex.prompt, dict(task.params))[0] <= high
    assert batch.seq_len <= task.max_seq_len()


@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=IDS)
def test_test_batches_have_the_forced_length(name: str, params: dict) -> None:
    task = _small(name, params)
    length = task.test_lengths[0]
    batch = task.batch(step=1, batch_size=4, length=length)
    for ex in _rows(task, batch):
        _check_example(task, ex, length)
    assert batch.seq_len <= task.max_seq_len(length)


def test_declared_lengths_are_train_short_test_long() -> None:
    assert set(TASKS) == {
        "copy", "reverse", "sort", "binary_addition", "passkey", "mqar", "flip_flop",
        "selective_copy", "counting", "niah_single", "niah_multikey", "niah_multivalue",
        "niah_multiquery", "vt", "cwe", "fwe", "state_tracking",
    }  # fmt: skip
    for spec in TASKS.values():
        low, high = spec.train_lengths
        assert 1 <= low <= high < min(spec.test_lengths)
        assert list(spec.test_lengths) == sorted(spec.test_lengths)


@pytest.mark.parametrize("name", ["copy", "reverse", "sort", "binary_addition", "passkey"])
def test_max_seq_len_is_the_exact_width_of_fixed_size_tasks(name: str) -> None:
    task = make_task(name)
    length = task.test_lengths[0]
    assert task.batch(0, 2, length=length).seq_len == task.max_seq_len(length)


@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=IDS)
def test_same_seed_same_batch_other_seed_or_step_differs(name: str, params: dict) -> None:
    a = make_task(name, seed=3, **params).batch(5, 8)
    b = make_task(name, seed=3, **params).batch(5, 8)
    for field in ("tokens", "targets", "loss_mask"):
        assert_close(getattr(a, field), getattr(b, field))
    other_seed = make_task(name, seed=4, **params).batch(5, 8)
    other_step = make_task(name, seed=3, **params).batch(6, 8)
    for other in (other_seed, other_step):
        assert a.tokens.shape != other.tokens.shape or not torch.equal(a.tokens, other.tokens)
    length = TASKS[name].train_lengths[1]
    ex = make_task(name, seed=0, **params).examples(2, length, seed=0)
    assert ex == make_task(name, seed=9, **params).examples(2, length, seed=0)
    assert ex != make_task(name, seed=0, **params).examples(2, length, seed=1)


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("length", [None, 16])
def test_shards_concatenate_to_the_global_batch(world_size: int, length: int | None) -> None:
    for name in ("copy", "counting", "flip_flop"):
        task = make_task(name, seed=1)
        whole = task.batch(2, 8, length=length)
        parts = [
            task.batch(2, 8, rank=r, world_size=world_size, length=length)
            for r in range(world_size)
        ]
        for field in ("tokens", "targets", "loss_mask", "key_padding_mask"):
            if getattr(whole, field) is None:
                assert all(getattr(p, field) is None for p in parts)
            else:
                assert_close(torch.cat([getattr(p, field) for p in parts]), getattr(whole, field))


def test_variable_lengths_are_padded_with_a_key_padding_mask() -> None:
    batch = make_task("copy", seed=0, train_lengths=(1, 12)).batch(0, 16)
    assert batch.key_padding_mask is not None
    lengths = batch.key_padding_mask.sum(-1)
    assert int(lengths.min()) < batch.seq_len == int(lengths.max())
    fixed = make_task("copy").batch(0, 4, length=5)
    assert fixed.key_padding_mask is None and fixed.seq_len == 10


def test_passkey_depth_places_the_key() -> None:
    for depth, before in [(0.0, 0), (1.0, 20 - 7), (0.25, 3)]:  # 13 filler symbols
        ex = make_task("passkey", depth=depth, train_lengths=(20, 20), test_lengths=(30,))
        prompt = ex.examples(1, 20, seed=0)[0].prompt
        assert prompt.index("K") == before


def test_byte_level_passkey_uses_bytes() -> None:
    task = make_task("passkey", byte_level=True)
    assert task.vocab_size == 256
    batch = task.batch(0, 2, length=200)
    text = bytes(batch.tokens[0].tolist()).decode("ascii")
    key = re.findall(r"The pass key is (\d{5})\. Remember it", text)[0]
    assert "What is the pass key? The pass key is " + key[:-1] == text[-42:]
    assert_close(batch.targets[0][batch.loss_mask[0]], torch.tensor(list(key.encode())))


def test_accuracy_counts_answer_positions_only() -> None:
    task = make_task("reverse", seed=0)
    batch = task.batch(0, 4, length=5)
    logits = torch.nn.functional.one_hot(batch.targets, task.vocab_size).float()
    assert accuracy(logits, batch) == (1.0, 1.0)
    prompt_wrong = logits.clone()
    prompt_wrong[:, 0] = prompt_wrong[:, 0].roll(1, -1)  # position 0 is not an answer
    assert accuracy(prompt_wrong, batch) == (1.0, 1.0)
    answer_wrong = logits.clone()
    answer_wrong[0, -1] = answer_wrong[0, -1].roll(1, -1)
    token_acc, sequence_acc = accuracy(answer_wrong, batch)
    assert token_acc == pytest.approx(1 - 1 / 20)
    assert sequence_acc == pytest.approx(3 / 4)
    with pytest.raises(ValueError, match="logits"):
        accuracy(logits[:, :-1], batch)


def test_decode_inverts_encode_and_pad_is_token_zero() -> None:
    for name in TASKS:
        task = make_task(name)
        assert task.vocab[0] == PAD and len(set(task.vocab)) == task.vocab_size
        assert task.encode(task.decode(list(range(task.vocab_size)))) == list(
            range(task.vocab_size)
        )


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: make_task("nope"), "name"),
        (lambda: make_task("copy", colour=3), "colour"),
        (lambda: make_task("copy", alphabet_size=1), "alphabet_size"),
        (lambda: make_task("flip_flop", p=1.0), "p"),
        (lambda: make_task("binary_addition", lsb_first=1), "lsb_first"),
        (lambda: make_task("counting", p_set=0.6, p_increment=0.6), "p_set"),
        (lambda: make_task("mqar", num_keys=8), "length"),  # test lengths above num_keys
        (lambda: make_task("copy", train_lengths=(5, 2)), "train_lengths"),
        (lambda: make_task("copy", test_lengths=(0,)), "test_lengths"),
        (lambda: make_task("copy", seed=-1), "seed"),
        (lambda: make_task("passkey").batch(0, 2, length=5), "length"),
        (lambda: make_task("selective_copy").batch(0, 2, length=2), "length"),
        (lambda: make_task("copy").batch(0, 3, world_size=2), "batch_size"),
        (lambda: make_task("copy").batch(-1, 2), "step"),
        (lambda: make_task("copy").examples(0, 3), "n"),
    ],
)
def test_bad_arguments_raise_naming_them(call: Callable[[], object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()
