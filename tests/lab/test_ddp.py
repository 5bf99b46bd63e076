"""DDP path of posenc.lab.train: two gloo processes on CPU match one process on the global batch."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from posenc.lab.batch import Batch, shard_slice
from posenc.lab.config import replace_fields
from posenc.lab.data.corpus import LMSource
from posenc.lab.data.tasks import make_task
from posenc.lab.distributed import rank_and_world, spawn
from posenc.lab.results import read_results_csv
from posenc.lab.train import TrainConfig, read_metrics, train
from posenc.models import DecoderLM, ModelConfig

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()), reason="torch.distributed gloo missing"
)

CONFIG = TrainConfig(
    steps=6,
    batch_size=8,
    lr=1e-2,
    warmup_steps=2,
    eval_every=3,
    checkpoint_every=4,
    log_every=1,
    progress=False,
)


class UnevenMask:
    """LMSource rows where global row ``r`` scores only its first ``2 + 2r`` targets, so the
    two ranks hold different numbers of masked tokens (a per-rank mean would be wrong)."""

    vocab_size = 256

    def __init__(self) -> None:
        # A byte stream with structure to learn: a repeated ramp, every 7th byte scrambled.
        stream = (torch.arange(4096) % 97).to(torch.uint8)
        stream[::7] = torch.randint(0, 256, (stream[::7].numel(),), generator=torch.Generator())
        self.inner = LMSource(stream, seq_len=16, seed=3)

    def batch(self, step: int, batch_size: int, *, rank: int = 0, world_size: int = 1) -> Batch:
        batch = self.inner.batch(step, batch_size, rank=rank, world_size=world_size)
        keep = 2 + 2 * torch.arange(batch_size)[:, None]  # (global batch, 1)
        mask = torch.arange(16) < keep
        return replace(batch, loss_mask=mask[shard_slice(batch_size, rank, world_size)])


def make_source() -> UnevenMask:
    return UnevenMask()


def make_model() -> DecoderLM:
    # float64, so that the different summation order of two shards (float32: ~5e-7 on the
    # loss, ~3e-6 on the parameters after 6 steps) stays far below the tolerances.
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=256, dim=32, depth=2, num_heads=4, pos="alibi")
    return DecoderLM(config).double()


def evaluate(model: torch.nn.Module, step: int) -> dict[str, float]:
    return {"sum_of_params": float(sum(p.double().sum() for p in model.parameters()))}


def ddp_rank(rank: int, world_size: int, run_dir: str) -> None:
    torch.set_num_threads(1)  # two processes on a small machine: no oversubscription
    assert rank_and_world() == (rank, world_size)
    with pytest.raises(ValueError, match="batch_size"):
        train(make_model(), make_source(), replace(CONFIG, batch_size=7), run_dir + "-odd")
    result = train(make_model(), make_source(), CONFIG, run_dir, evaluate=evaluate)
    assert result.steps == CONFIG.steps


def test_two_gloo_processes_match_one_process(tmp_path: Path) -> None:
    single = make_model()
    train(single, make_source(), CONFIG, tmp_path / "single", evaluate=evaluate)
    spawn(ddp_rank, 2, str(tmp_path / "ddp"))

    records = {name: read_metrics(tmp_path / name) for name in ("single", "ddp")}
    for kind in ("train", "eval"):
        steps = [[r["step"] for r in records[name] if r["kind"] == kind] for name in records]
        assert steps[0] == steps[1] != []
    losses = {
        name: torch.tensor([r["loss"] for r in recs if r["kind"] == "train"], dtype=torch.float64)
        for name, recs in records.items()
    }
    torch.testing.assert_close(losses["ddp"], losses["single"], rtol=0, atol=1e-6)
    assert losses["single"][-1] < losses["single"][0]  # it trained
    ddp_final = torch.load(tmp_path / "ddp" / "final.pt")["model"]
    torch.testing.assert_close(ddp_final, single.state_dict(), rtol=0, atol=1e-5)
    # Rank 0 alone wrote the folder: one line per record, nothing duplicated by rank 1.
    assert len(records["ddp"]) == len(records["single"])
    assert not (tmp_path / "ddp-odd").exists() or not any((tmp_path / "ddp-odd").iterdir())


# A task batch is right-padded (reverse rows of lengths 1-12 share one width): with
# randomized positions each row's real tokens take their own draw, made for the global batch.
RANDOMIZED = replace(CONFIG, randomize_positions=64)


def make_task_model() -> DecoderLM:
    torch.manual_seed(0)
    source = make_task("reverse", seed=0)
    config = ModelConfig(vocab_size=source.vocab_size, dim=32, depth=2, num_heads=4, pos="rope")
    return DecoderLM(config).double()


def ddp_task_rank(rank: int, world_size: int, run_dir: str) -> None:
    torch.set_num_threads(1)
    train(make_task_model(), make_task("reverse", seed=0), RANDOMIZED, run_dir)


def test_randomized_positions_of_padded_rows_under_two_processes_match_one(
    tmp_path: Path,
) -> None:
    single = make_task_model()
    train(single, make_task("reverse", seed=0), RANDOMIZED, tmp_path / "single")
    spawn(ddp_task_rank, 2, str(tmp_path / "ddp"))
    losses = {
        name: torch.tensor(
            [r["loss"] for r in read_metrics(tmp_path / name) if r["kind"] == "train"],
            dtype=torch.float64,
        )
        for name in ("single", "ddp")
    }
    assert losses["single"].numel() == RANDOMIZED.steps
    torch.testing.assert_close(losses["ddp"], losses["single"], rtol=0, atol=1e-6)
    ddp_final = torch.load(tmp_path / "ddp" / "final.pt")["model"]
    torch.testing.assert_close(ddp_final, single.state_dict(), rtol=0, atol=1e-5)


LM = dict(train_len=16, batch_size=4, steps=3, dim=16, depth=1, num_heads=2, corpus_bytes=20_000)


def lm_rank(rank: int, world_size: int, out: str) -> None:
    from posenc.lab.experiments.lm import EXPERIMENT, LmConfig
    from posenc.lab.runner import run_experiment

    torch.set_num_threads(1)
    base = LmConfig(encodings=("alibi",), eval_windows=4)
    config = replace_fields(base, progress=False, **LM)
    rows = run_experiment(EXPERIMENT, config, out, echo=None)
    assert rows[0]["world_size"] == world_size


def test_lm_experiment_under_two_processes_matches_one(tmp_path: Path) -> None:
    # The runner under a process group: rank 0 alone writes the folder, both ranks train
    # every run together; the rows equal a single process's on the same global batch.
    from posenc.cli import main

    args = ["--encodings", "alibi", "--eval-windows", "4", "--no-progress", "--threads", "1"]
    for key, value in LM.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    assert main(["lab", "lm", "--out", str(tmp_path / "one"), *args]) == 0
    spawn(lm_rank, 2, str(tmp_path / "two"))
    one = read_results_csv(tmp_path / "one" / "results.csv")
    two = read_results_csv(tmp_path / "two" / "results.csv")
    assert [r["world_size"] for r in one + two] == [1, 2]
    for key in ("val_loss", "train_loss"):
        assert abs(one[0][key] - two[0][key]) < 1e-5, key
    assert (tmp_path / "two" / "report.html").is_file()
    assert read_metrics(tmp_path / "two" / "runs" / "alibi" / "seed0")  # rank 0 logged
