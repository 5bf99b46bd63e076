from __future__ import annotations

import sysconfig
import time
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from posenc.lab.data.corpus import (
    SEPARATOR,
    SPLITS,
    LMSource,
    eval_windows,
    load_corpus,
    stdlib_files,
)


def _joined(paths: list[str]) -> torch.Tensor:
    data = bytes([SEPARATOR]).join(Path(p).read_bytes() for p in paths)
    return torch.tensor(list(data), dtype=torch.uint8)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    (root / "sub").mkdir()
    (root / ".hidden").mkdir()
    for i in range(12):
        target = root / ("sub" if i % 2 else ".") / f"doc{i:02d}.txt"
        target.write_text(f"document {i}\n" + "abc " * (i + 1), encoding="utf-8")
    (root / ".hidden" / "secret.txt").write_text("never", encoding="utf-8")
    (root / "image.bin").write_bytes(bytes([137, 80, 0, 1, 2]))  # has NUL: not text
    (root / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))  # not UTF-8
    return root


def test_stdlib_files_are_sorted_python_sources_outside_site_packages() -> None:
    files = stdlib_files()
    root = Path(sysconfig.get_paths()["stdlib"])
    assert files == sorted(files)
    assert len(files) > 100
    assert all(f.suffix == ".py" and f.is_relative_to(root) for f in files)
    assert not any({"site-packages", "test", "tests"} & set(f.parts) for f in files)
    assert root / "os.py" in files


def test_stdlib_file_list_is_cached() -> None:
    stdlib_files()
    start = time.perf_counter()
    again = stdlib_files()
    assert time.perf_counter() - start < 0.05
    again.clear()  # a copy: clearing it leaves the cache intact
    assert stdlib_files()


def test_folder_split_has_no_file_in_two_splits_and_streams_equal_joined_files(
    folder: Path,
) -> None:
    splits = load_corpus([folder], seed=3, fractions=(0.5, 0.25, 0.25))
    names = [set(splits.files[s]) for s in SPLITS]
    assert not (names[0] & names[1] or names[0] & names[2] or names[1] & names[2])
    every = set().union(*names)
    assert len(every) == 12
    assert not any(".hidden" in p or p.endswith((".bin", "latin1.txt")) for p in every)
    assert [len(n) for n in names] == [6, 3, 3]
    for split in SPLITS:
        assert_close(getattr(splits, split), _joined(splits.files[split]))


def test_split_is_deterministic_per_seed(folder: Path) -> None:
    a, b = load_corpus([folder], seed=1), load_corpus([str(folder)], seed=1)
    c = load_corpus([folder], seed=2)
    assert a.files == b.files
    assert_close(a.train, b.train)
    assert a.files != c.files


def test_single_file_and_fraction_zero(folder: Path) -> None:
    files = sorted(str(p) for p in folder.glob("doc*.txt"))
    splits = load_corpus(files[:1], fractions=(1.0, 0.0, 0.0))
    assert splits.files == {"train": files[:1], "validation": [], "test": []}
    assert splits.validation.numel() == 0 and splits.test.dtype == torch.uint8


@pytest.mark.parametrize("max_bytes", [1, 25, 40, 100])
def test_max_bytes_cuts_each_split_to_a_prefix(folder: Path, max_bytes: int) -> None:
    full = load_corpus([folder], seed=0, fractions=(0.5, 0.25, 0.25))
    capped = load_corpus([folder], seed=0, fractions=(0.5, 0.25, 0.25), max_bytes=max_bytes)
    for split in SPLITS:
        stream = getattr(capped, split)
        assert_close(stream, getattr(full, split)[:max_bytes])
        used = capped.files[split]
        assert used == full.files[split][: len(used)]
        # every listed file contributes a byte: the stream is longer than the files before it
        assert _joined(used[:-1]).numel() + (1 if len(used) > 1 else 0) < max(stream.numel(), 1)


def test_stdlib_corpus_capped_is_fast_and_disjoint() -> None:
    start = time.perf_counter()
    splits = load_corpus(max_bytes=50_000, seed=0)
    assert time.perf_counter() - start < 5.0
    for split in SPLITS:
        assert getattr(splits, split).numel() == 50_000
    names = [set(splits.files[s]) for s in SPLITS]
    assert not (names[0] & names[1] or names[0] & names[2] or names[1] & names[2])
    assert_close(splits.validation, _joined(splits.files["validation"])[:50_000])


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"fractions": (0.5, 0.5, 0.5)}, "fractions"),
        ({"fractions": (1.2, -0.1, -0.1)}, "fractions"),
        ({"max_bytes": 0}, "max_bytes"),
        ({"seed": -1}, "seed"),
    ],
)
def test_load_corpus_bad_arguments(folder: Path, kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        load_corpus([folder], **kwargs)  # type: ignore[arg-type]


def test_load_corpus_bad_paths(tmp_path: Path, folder: Path) -> None:
    with pytest.raises(ValueError, match="paths"):
        load_corpus([tmp_path / "missing"])
    one = next(folder.glob("doc*.txt"))
    with pytest.raises(ValueError, match="paths"):
        load_corpus([one])  # one file cannot fill three splits


STREAM = torch.arange(1000, dtype=torch.int64).remainder(251).to(torch.uint8)


def test_lm_source_windows_are_consecutive_bytes_of_the_stream() -> None:
    stream = torch.arange(1000)  # every value marks its own offset
    batch = LMSource(stream, seq_len=16, seed=0).batch(step=3, batch_size=8)
    assert batch.tokens.shape == (8, 16) and batch.tokens.dtype == torch.int64
    starts = batch.tokens[:, :1]
    assert_close(batch.tokens, starts + torch.arange(16))
    assert_close(batch.targets, batch.tokens + 1)
    assert bool(((starts >= 0) & (starts <= 1000 - 17)).all())
    assert bool(batch.loss_mask.all()) and batch.key_padding_mask is None
    assert batch.loss_mask.dtype == torch.bool


def test_lm_source_reaches_the_last_window() -> None:
    stream = torch.arange(20)
    source = LMSource(stream, seq_len=16, seed=0)
    starts = torch.cat([source.batch(step, 8).tokens[:, 0] for step in range(20)])
    assert_close(starts.unique(), torch.arange(4))


def test_lm_source_deterministic_in_seed_and_step() -> None:
    a, b = LMSource(STREAM, 16, seed=0), LMSource(STREAM, 16, seed=0)
    assert_close(a.batch(5, 8).tokens, b.batch(5, 8).tokens)
    assert not torch.equal(a.batch(5, 8).tokens, a.batch(6, 8).tokens)
    assert not torch.equal(a.batch(5, 8).tokens, LMSource(STREAM, 16, seed=1).batch(5, 8).tokens)


@pytest.mark.parametrize("world_size", [2, 4])
def test_lm_source_shards_concatenate_to_the_global_batch(world_size: int) -> None:
    source = LMSource(STREAM, 16, seed=7)
    whole = source.batch(2, 8)
    parts = [source.batch(2, 8, rank=r, world_size=world_size) for r in range(world_size)]
    assert_close(torch.cat([p.tokens for p in parts]), whole.tokens)
    assert_close(torch.cat([p.targets for p in parts]), whole.targets)


def test_lm_source_bad_arguments() -> None:
    with pytest.raises(ValueError, match="seq_len"):
        LMSource(STREAM[:10], seq_len=10)
    with pytest.raises(ValueError, match="stream"):
        LMSource(STREAM.float(), seq_len=4)
    with pytest.raises(ValueError, match="batch_size"):
        LMSource(STREAM, 4).batch(0, 6, rank=0, world_size=4)
    with pytest.raises(ValueError, match="step"):
        LMSource(STREAM, 4).batch(-1, 4)


@pytest.mark.parametrize("seq_len", [1, 7, 32, 999])
def test_eval_windows_targets_tile_the_stream(seq_len: int) -> None:
    windows = eval_windows(STREAM, seq_len)
    count = (STREAM.numel() - 1) // seq_len
    assert windows.shape == (count, seq_len + 1)
    assert_close(windows[:, 1:].reshape(-1), STREAM[1 : count * seq_len + 1].long())
    assert_close(windows[:, :-1].reshape(-1), STREAM[: count * seq_len].long())


def test_eval_windows_max_windows_keeps_evenly_spaced_whole_windows() -> None:
    full = eval_windows(STREAM, 10)
    some = eval_windows(STREAM, 10, max_windows=5)
    assert some.shape == (5, 11)
    index = [full.tolist().index(row) for row in some.tolist()]
    assert index == sorted(set(index)) and index[0] == 0 and index[-1] == len(full) - 1
    assert_close(eval_windows(STREAM, 10, max_windows=10_000), full)


def test_eval_windows_bad_arguments() -> None:
    with pytest.raises(ValueError, match="seq_len"):
        eval_windows(STREAM[:5], 5)
    with pytest.raises(ValueError, match="max_windows"):
        eval_windows(STREAM, 5, max_windows=0)
