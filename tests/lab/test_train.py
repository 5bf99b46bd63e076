"""Tests of posenc.lab.train: schedule, loss, run folder, resume, atomic writes, config checks."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.lab.batch import Batch, derive_seed, shard_slice
from posenc.lab.train import (
    TrainConfig,
    TrainResult,
    atomic_torch_save,
    atomic_write_text,
    lm_loss,
    lr_at,
    parameter_groups,
    read_metrics,
    train,
)
from posenc.lab.train.loop import _model_inputs
from posenc.models import DecoderLM, ModelConfig
from posenc.positions import randomized_positions

VOCAB = 16
SEQ = 12


class CountingSource:
    """Learnable synthetic LM source: each row counts up mod ``VOCAB`` from a random start.

    The global batch of a step is a pure function of ``(seed, step)``; a rank gets its rows.
    """

    vocab_size = VOCAB

    def __init__(self, seed: int = 0, seq_len: int = SEQ) -> None:
        self.seed, self.seq_len = seed, seq_len

    def batch(self, step: int, batch_size: int, *, rank: int = 0, world_size: int = 1) -> Batch:
        generator = torch.Generator().manual_seed(derive_seed("counting", self.seed, step))
        starts = torch.randint(0, VOCAB, (batch_size, 1), generator=generator)
        rows = (starts + torch.arange(self.seq_len + 1)) % VOCAB  # (batch, seq + 1)
        mask = torch.ones(batch_size, self.seq_len, dtype=torch.bool)
        return Batch(rows[:, :-1], rows[:, 1:], mask).shard(rank, world_size)


class InterruptAt:
    """Wraps a source and raises KeyboardInterrupt when asked for step ``stop`` (a kill)."""

    def __init__(self, source: CountingSource, stop: int) -> None:
        self.source, self.stop, self.vocab_size = source, stop, source.vocab_size

    def batch(self, step: int, batch_size: int, *, rank: int = 0, world_size: int = 1) -> Batch:
        if step == self.stop:
            raise KeyboardInterrupt(f"simulated kill before step {step}")
        return self.source.batch(step, batch_size, rank=rank, world_size=world_size)


def tiny_model(pos: str = "rope") -> DecoderLM:
    torch.manual_seed(0)
    return DecoderLM(ModelConfig(vocab_size=VOCAB, dim=32, depth=2, num_heads=4, pos=pos))


def quick_config(**changes: object) -> TrainConfig:
    base = TrainConfig(
        steps=12,
        batch_size=8,
        lr=3e-3,
        warmup_steps=3,
        eval_every=4,
        checkpoint_every=4,
        log_every=1,
        progress=False,
    )
    return replace(base, **changes)


def without_time(records: list[dict]) -> list[dict]:
    return [{key: value for key, value in r.items() if key != "time"} for r in records]


def eval_fn(model: nn.Module, step: int) -> dict[str, float]:
    batch = CountingSource(seed=99).batch(0, 4)
    return {"loss": float(lm_loss(model(batch.tokens), batch))}


# --- schedule, config, loss ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        (0, 1.0 / 10),  # warmup is linear from lr/W at step 0 ...
        (4, 5.0 / 10),
        (9, 1.0),  # ... to lr at step W - 1
        (10, 1.0),  # cosine starts at the peak
        (55, 0.1 + 0.9 * 0.5),  # half way through the decay: cos(pi/2) = 0
        (100, 0.1),  # floor min_lr_ratio·lr at `steps` ...
        (150, 0.1),  # ... and after
    ],
)
def test_lr_schedule_values(step: int, expected: float) -> None:
    config = TrainConfig(steps=100, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(step, config) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_lr_schedule_cosine_shape_and_no_warmup() -> None:
    config = TrainConfig(steps=20, lr=2.0, warmup_steps=0, min_lr_ratio=0.25)
    got = torch.tensor([lr_at(s, config) for s in range(21)], dtype=torch.float64)
    progress = torch.arange(21, dtype=torch.float64) / 20
    want = 2.0 * (0.25 + 0.75 * 0.5 * (1 + torch.cos(math.pi * progress)))
    torch.testing.assert_close(got, want)


def test_lr_at_rejects_negative_step() -> None:
    with pytest.raises(ValueError, match="step"):
        lr_at(-1, TrainConfig())


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("steps", 0),
        ("batch_size", -1),
        ("lr", 0.0),
        ("lr", float("nan")),
        ("weight_decay", -0.1),
        ("warmup_steps", -1),
        ("min_lr_ratio", 1.5),
        ("grad_clip", 0.0),
        ("eval_every", 0),
        ("checkpoint_every", 0),
        ("log_every", 1.5),
        ("seed", -3),
        ("device", "not-a-device"),
        ("progress", "yes"),
        ("randomize_positions", 0),
    ],
)
def test_train_config_rejects_bad_fields(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{field: value})


def test_lm_loss_is_mean_over_masked_targets() -> None:
    logits = torch.randn(2, 5, VOCAB)
    targets = torch.randint(0, VOCAB, (2, 5))
    mask = torch.tensor([[1, 0, 1, 1, 0], [0, 0, 1, 0, 1]], dtype=torch.bool)
    batch = Batch(targets, targets, mask)
    torch.testing.assert_close(lm_loss(logits, batch), F.cross_entropy(logits[mask], targets[mask]))


def test_lm_loss_rejects_mismatched_logits() -> None:
    batch = CountingSource().batch(0, 2)
    with pytest.raises(ValueError, match="logits"):
        lm_loss(torch.randn(2, SEQ + 1, VOCAB), batch)


@pytest.mark.parametrize("pos", ["learned", "t5", "rope"])
def test_parameter_groups_decay_linear_weights_only(pos: str) -> None:
    model = tiny_model(pos)
    decay, keep = parameter_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and keep["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    kept = {names[id(p)] for p in keep["params"]}
    assert decayed | kept == set(names.values()) and not decayed & kept
    linear = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    assert decayed == linear
    assert all(".pos." not in n and "additive" not in n and "embed" not in n for n in decayed)


# --- atomic writes -----------------------------------------------------------------------------


def test_atomic_write_text_replaces_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "a.txt"
    atomic_write_text(target, "one")
    atomic_write_text(target, "two\n")
    assert target.read_text() == "two\n"
    assert [p.name for p in target.parent.iterdir()] == ["a.txt"]


def test_atomic_torch_save_crash_keeps_previous(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "x.pt"
    atomic_torch_save({"w": torch.arange(3)}, target)

    def broken_save(obj: object, handle: object) -> None:
        handle.write(b"half a checkpoint")  # type: ignore[attr-defined]
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        atomic_torch_save({"w": torch.zeros(3)}, target)
    monkeypatch.undo()
    torch.testing.assert_close(torch.load(target)["w"], torch.arange(3))
    assert [p.name for p in tmp_path.iterdir()] == ["x.pt"]


# --- training runs -----------------------------------------------------------------------------


def test_training_learns_and_writes_run_folder(tmp_path: Path) -> None:
    config = quick_config(steps=30, lr=1e-2, warmup_steps=5, eval_every=10, checkpoint_every=10)
    result = train(tiny_model(), CountingSource(), config, tmp_path, evaluate=eval_fn)
    for name in ("config.json", "metrics.jsonl", "checkpoints/last.pt", "final.pt", "done.json"):
        assert (tmp_path / name).is_file(), name
    records = read_metrics(tmp_path)
    losses = [r["loss"] for r in records if r["kind"] == "train"]
    assert [r["step"] for r in records if r["kind"] == "train"] == list(range(1, 31))
    assert [r["step"] for r in records if r["kind"] == "eval"] == [10, 20, 30]
    assert losses[0] > math.log(VOCAB) - 0.5  # starts near chance
    assert losses[-1] < losses[0] - 1.0  # and learns the counting rule
    evals = [r["metrics"]["loss"] for r in records if r["kind"] == "eval"]
    assert evals[-1] < evals[0]
    assert isinstance(result, TrainResult) and result.steps == 30 and result.resumed_from is None
    assert result.final_loss == losses[-1]
    assert result.tokens_per_second > 0 and result.peak_memory_bytes > 0
    stored = json.loads((tmp_path / "config.json").read_text())
    assert stored["train"]["steps"] == 30 and stored["model"]["dim"] == 32
    assert json.loads((tmp_path / "done.json").read_text())["final_loss"] == result.final_loss
    final = torch.load(tmp_path / "final.pt")
    assert final["step"] == 30 and set(final["model"]) == set(tiny_model().state_dict())


@pytest.mark.parametrize("grad_clip", [None, 1e-3])
def test_first_step_logs_mean_loss_and_pre_clip_grad_norm(
    tmp_path: Path, grad_clip: float | None
) -> None:
    reference = tiny_model()
    batch = CountingSource().batch(0, 8)
    loss = lm_loss(reference(batch.tokens), batch)
    loss.backward()
    norms = torch.stack([p.grad.norm() for p in reference.parameters() if p.grad is not None])
    config = quick_config(steps=1, grad_clip=grad_clip)
    train(tiny_model(), CountingSource(), config, tmp_path)
    (record,) = read_metrics(tmp_path)
    assert record["step"] == 1 and record["lr"] == lr_at(0, config)
    torch.testing.assert_close(record["loss"], loss.item())
    torch.testing.assert_close(record["grad_norm"], norms.norm().item())


@pytest.mark.parametrize("randomize", [None, 40])
def test_resume_after_kill_matches_uninterrupted_run(tmp_path: Path, randomize: int | None) -> None:
    config = quick_config(randomize_positions=randomize)
    model_a = tiny_model()
    result_a = train(model_a, CountingSource(), config, tmp_path / "a", evaluate=eval_fn)

    run_b = tmp_path / "b"
    with pytest.raises(KeyboardInterrupt):  # killed during step 10 (checkpoint at 8)
        train(tiny_model(), InterruptAt(CountingSource(), 9), config, run_b)
    assert max(r["step"] for r in read_metrics(run_b)) == 9  # lines past the checkpoint exist
    assert torch.load(run_b / "checkpoints" / "last.pt")["step"] == 8
    model_b = tiny_model()
    result_b = train(model_b, CountingSource(), config, run_b, evaluate=eval_fn)

    assert result_b.resumed_from == 8
    torch.testing.assert_close(model_b.state_dict(), model_a.state_dict(), rtol=0, atol=0)
    # The interrupted session ran without evaluate, the resumed one evaluates from step 9 on.
    records_a, records_b = read_metrics(tmp_path / "a"), read_metrics(run_b)
    train_a = without_time([r for r in records_a if r["kind"] == "train"])
    assert without_time([r for r in records_b if r["kind"] == "train"]) == train_a
    assert result_b.final_loss == result_a.final_loss
    eval_a = without_time([r for r in records_a if r["kind"] == "eval" and r["step"] > 8])
    assert without_time([r for r in records_b if r["kind"] == "eval"]) == eval_a


def test_resume_reproduces_eval_lines_exactly(tmp_path: Path) -> None:
    config = quick_config(steps=8, eval_every=2, checkpoint_every=3)
    train(tiny_model(), CountingSource(), config, tmp_path / "a", evaluate=eval_fn)
    run_b = tmp_path / "b"
    with pytest.raises(KeyboardInterrupt):
        train(
            tiny_model(),
            InterruptAt(CountingSource(), 5),
            config,
            run_b,
            evaluate=eval_fn,
        )
    train(tiny_model(), CountingSource(), config, run_b, evaluate=eval_fn)
    assert without_time(read_metrics(run_b)) == without_time(read_metrics(tmp_path / "a"))


def test_crash_while_writing_checkpoint_keeps_previous_loadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = quick_config(steps=8, checkpoint_every=4)
    real_save = torch.save
    calls = []

    def save_then_crash(obj: object, handle: object) -> None:
        calls.append(1)
        if len(calls) == 2:  # the second checkpoint (step 8) dies half-written
            handle.write(b"torn")  # type: ignore[attr-defined]
            raise OSError("killed mid-write")
        real_save(obj, handle)

    monkeypatch.setattr(torch, "save", save_then_crash)
    with pytest.raises(OSError, match="mid-write"):
        train(tiny_model(), CountingSource(), config, tmp_path)
    monkeypatch.undo()
    checkpoint = torch.load(tmp_path / "checkpoints" / "last.pt")
    assert checkpoint["step"] == 4
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["last.pt"]
    model = tiny_model()
    result = train(model, CountingSource(), config, tmp_path)
    assert result.resumed_from == 4
    reference = tiny_model()
    train(reference, CountingSource(), config, tmp_path / "reference")
    torch.testing.assert_close(model.state_dict(), reference.state_dict(), rtol=0, atol=0)


def test_finished_run_returns_stored_result_and_final_weights(tmp_path: Path) -> None:
    # A finished run trains nothing (the source would raise at step 0) and the model comes
    # back holding the final weights, as after the training that produced them.
    config = quick_config(steps=4)
    trained = tiny_model()
    first = train(trained, CountingSource(), config, tmp_path)
    lines = (tmp_path / "metrics.jsonl").read_text()
    model = tiny_model()
    assert not torch.equal(model.head.weight, trained.head.weight)
    second = train(model, InterruptAt(CountingSource(), 0), config, tmp_path)
    assert second == first
    assert (tmp_path / "metrics.jsonl").read_text() == lines
    torch.testing.assert_close(model.state_dict(), trained.state_dict(), rtol=0, atol=0)


def test_progress_flag_is_not_part_of_the_experiment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train(tiny_model(), CountingSource(), quick_config(steps=2), tmp_path)
    train(tiny_model(), CountingSource(), quick_config(steps=2, progress=True), tmp_path)
    assert capsys.readouterr().err == ""  # second call returned the stored result


def test_progress_bar_uses_tqdm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tqdm")
    train(tiny_model(), CountingSource(), quick_config(steps=3, progress=True), tmp_path)
    err = capsys.readouterr().err
    assert "3/3" in err and "loss=" in err and "tok_s=" in err


def test_progress_falls_back_to_prints_without_tqdm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # import raises ImportError
    train(tiny_model(), CountingSource(), quick_config(steps=2, progress=True), tmp_path)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" loss")[0] for line in lines] == ["step 1/2", "step 2/2"]
    assert all("tok/s" in line for line in lines)


@pytest.mark.parametrize(("field", "value"), [("lr", 1e-3), ("seed", 1), ("steps", 13)])
def test_config_mismatch_names_run_dir_and_field(tmp_path: Path, field: str, value: object) -> None:
    with pytest.raises(KeyboardInterrupt):
        train(tiny_model(), InterruptAt(CountingSource(), 1), quick_config(), tmp_path)
    with pytest.raises(ValueError, match=rf"run_dir .*{field}"):
        train(tiny_model(), CountingSource(), quick_config(**{field: value}), tmp_path)


def test_model_config_mismatch_is_detected(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        train(tiny_model("rope"), InterruptAt(CountingSource(), 1), quick_config(), tmp_path)
    with pytest.raises(ValueError, match=r"model\.pos"):
        train(tiny_model("alibi"), CountingSource(), quick_config(), tmp_path)


# --- randomized positions ------------------------------------------------------------------------


class PositionSpy(nn.Module):
    """Records the positions each training forward receives."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = tiny_model()
        self.seen: list[Tensor | None] = []

    def forward(self, tokens: Tensor, positions: Tensor | None = None, **kwargs: object) -> Tensor:
        self.seen.append(None if positions is None else positions.clone())
        return self.inner(tokens, positions, **kwargs)


def test_randomized_positions_are_seeded_per_step(tmp_path: Path) -> None:
    config = quick_config(steps=3, randomize_positions=64)
    spy = PositionSpy()
    train(spy, CountingSource(), config, tmp_path / "a")
    assert len(spy.seen) == 3
    for step, positions in enumerate(spy.seen):
        generator = torch.Generator().manual_seed(derive_seed("positions", config.seed, step))
        want = randomized_positions(SEQ, 64, batch=8, generator=generator)
        torch.testing.assert_close(positions, want, rtol=0, atol=0)
        assert positions.shape == (8, SEQ) and int(positions.max()) < 64
    assert not torch.equal(spy.seen[0], spy.seen[1])


class PaddedCountingSource:
    """:class:`CountingSource` rows padded with token 0 on one side: global row ``r`` has
    ``SEQ - 3 * (r % 4)`` real tokens (so rows of every rank are padded), as a task batch."""

    vocab_size = VOCAB

    def __init__(self, side: str = "right") -> None:
        self.inner, self.side = CountingSource(), side

    @staticmethod
    def real_lengths(batch_size: int) -> list[int]:
        return [SEQ - 3 * (r % 4) for r in range(batch_size)]

    def batch(self, step: int, batch_size: int, *, rank: int = 0, world_size: int = 1) -> Batch:
        full = self.inner.batch(step, batch_size)
        lengths = torch.tensor(self.real_lengths(batch_size))[:, None]  # (batch, 1)
        real = torch.arange(SEQ) < lengths  # (batch, seq), right padding
        if self.side == "left":
            real = real.flip(-1)
        tokens = torch.where(real, full.tokens, 0)
        padded = Batch(tokens, full.targets, real, key_padding_mask=real)
        return padded.shard(rank, world_size)


@pytest.mark.parametrize("side", ["right", "left"])
def test_randomized_positions_of_a_padded_row_are_its_unpadded_ones(
    tmp_path: Path, side: str
) -> None:
    # Row r's real tokens get exactly the positions an unpadded row of their length gets
    # from the same seed (randomized_positions on arange rows), whatever the padding.
    config = quick_config(steps=2, randomize_positions=64)
    spy = PositionSpy()
    train(spy, PaddedCountingSource(side), config, tmp_path)
    assert len(spy.seen) == 2
    for step, positions in enumerate(spy.seen):
        assert positions is not None and positions.shape == (8, SEQ)
        seed = derive_seed("positions", config.seed, step)
        for row, length in enumerate(PaddedCountingSource.real_lengths(8)):
            generator = torch.Generator().manual_seed(seed)
            want = randomized_positions(length, 64, batch=8, generator=generator)[row]
            real = slice(0, length) if side == "right" else slice(SEQ - length, SEQ)
            pad = slice(length, SEQ) if side == "right" else slice(0, SEQ - length)
            torch.testing.assert_close(positions[row, real], want, rtol=0, atol=0)
            # padding keeps the positions it was given (0 .. T - 1); attention masks it
            torch.testing.assert_close(positions[row, pad], torch.arange(SEQ)[pad], rtol=0, atol=0)


@pytest.mark.parametrize("world_size", [2, 4, 8])
def test_randomized_positions_of_a_rank_are_its_rows_of_one_process(world_size: int) -> None:
    # The draw for global row r does not depend on which rank holds it (padded rows too).
    config = quick_config(randomize_positions=64)
    source = PaddedCountingSource()
    single = _model_inputs(source.batch(5, 8), config, 5, shard_slice(8, 0, 1))
    assert single is not None
    for rank in range(world_size):
        rows = shard_slice(8, rank, world_size)
        batch = source.batch(5, 8, rank=rank, world_size=world_size)
        got = _model_inputs(batch, config, 5, rows)
        assert got is not None
        torch.testing.assert_close(got, single[rows], rtol=0, atol=0)


def test_randomized_positions_map_the_batch_positions() -> None:
    # A batch's own positions (two packed documents of 6 per row) are randomized, not replaced
    # by 0 .. T - 1: each document restarts at its row's first drawn position.
    config = quick_config(randomize_positions=64)
    batch = replace(CountingSource().batch(0, 8), positions=torch.arange(SEQ) % 6)
    got = _model_inputs(batch, config, 3, shard_slice(8, 0, 1))
    generator = torch.Generator().manual_seed(derive_seed("positions", config.seed, 3))
    document = randomized_positions(6, 64, batch=8, generator=generator)
    torch.testing.assert_close(got, document.repeat(1, 2), rtol=0, atol=0)
    fractional = replace(batch, positions=torch.arange(SEQ) / 2)
    with pytest.raises(ValueError, match="positions must be whole numbers"):
        _model_inputs(fractional, config, 3, shard_slice(8, 0, 1))


def test_randomize_positions_shorter_than_sequence_raises(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="randomize_positions"):
        train(tiny_model(), CountingSource(), quick_config(randomize_positions=SEQ - 1), tmp_path)


def test_a_run_folder_written_before_the_image_fields_resumes(tmp_path: Path) -> None:
    from posenc.lab.run import ADDED_FIELDS, check_run_dir

    model = {"dim": 64, "pos": "rope", "grid": None, "patch_size": None, "in_channels": 3}
    expected = {"model": model, "train": {"steps": 10}}
    older = {"model": {"dim": 64, "pos": "rope"}, "train": {"steps": 10}}
    (tmp_path / "config.json").write_text(json.dumps(older))
    check_run_dir(tmp_path, expected)  # the fields it lacks had these values in effect
    assert {name for _, name in ADDED_FIELDS} == {"grid", "patch_size", "in_channels"}
    # a model config without the field (another class) is compared as it is
    other = {"model": {"dim": 64, "in_channels": None}, "train": {"steps": 10}}
    (tmp_path / "config.json").write_text(json.dumps({**other, "model": {"dim": 64}}))
    check_run_dir(tmp_path, other)
    # a field the folder does record still has to match, and so does everything else
    for stored in ({**older["model"], "in_channels": 1}, {"dim": 32, "pos": "rope"}):
        (tmp_path / "config.json").write_text(json.dumps({**older, "model": stored}))
        with pytest.raises(ValueError, match="holds a different experiment"):
            check_run_dir(tmp_path, expected)
