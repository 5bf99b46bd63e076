"""DroPE in the suite: drop a trained RoPE model's encoding, recalibrate briefly at ``L``, extend.

Gelberg et al. 2025, "Extending the Context of Pretrained LLMs by Dropping Their Positional
Embeddings" (ICLR 2026, https://arxiv.org/abs/2512.12167): RoPE speeds up training, but a
model that keeps it fails past its training length even with RoPE scaling; remove every
positional embedding after training (the model becomes NoPE), train it a little more at the
**original** length (the *recalibration*: 0.5-2 % of the pretraining budget in the paper),
and it then extends zero-shot. Published needle retrieval at 2×, 4×, 8× the training length:
74.9, 55.0, 52.5 %, against YaRN's 12.2 % and NTK's 7.2 % at 8×.

Here, for every ``rope`` run of the suite (plain positions) when ``drope_steps > 0``: a NoPE
decoder of the same shape loads the trained weights unchanged (RoPE holds none, so every
tensor carries over), trains ``drope_steps`` more steps on the task's training distribution
(sizes up to ``L``, the run's learning rate, warmup ``min(warmup_steps, drope_steps // 10)``,
a batch stream of its own: seed ``seed + RECALIBRATION_SEED``) in the run's ``drope/``
folder (resumed like any run), and is scored at every size: rows with ``method = "drope"``
beside the rope model's (``method = "rope"``) and the zero-shot methods'. At this scale the
recalibration is a larger share of training than the paper's (the rows carry
``recalibrate_steps``); the report states it beside the claim.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from posenc.lab.experiments import extend, generalize
from posenc.lab.runner import Run
from posenc.lab.train import train
from posenc.models import DecoderLM

__all__ = ["DROPE", "RECALIBRATION_SEED", "drope_rows"]

#: The ``method`` of DroPE's rows.
DROPE = "drope"
#: Added to a run's seed for the recalibration's batch stream (the weights come from the run).
RECALIBRATION_SEED = 1000

Row = dict[str, Any]


def drope_rows(
    tasks_config: generalize.TasksConfig, steps: int, run: Run, folder: Path, rows: list[Row]
) -> list[Row]:
    """The rope run of ``folder`` with its encoding dropped and recalibrated for ``steps``
    steps at ``L`` (``tasks_config``'s training distribution, schedule and device), scored at
    every size of ``rows`` (the run's rows on the training distribution)."""
    task, seed = run.params["task"], run.params["seed"]
    source = tasks_config.source(task, seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DecoderLM(tasks_config.model_config(task, "nope", randomized=False))
    model.load_state_dict(extend.final_state(folder))  # RoPE holds no weights
    model.to(tasks_config.device)
    schedule = dataclasses.replace(
        tasks_config.train,
        steps=steps,
        warmup_steps=min(tasks_config.train.warmup_steps, steps // 10),
    )
    train_config = schedule.train_config(
        seed + RECALIBRATION_SEED, device=tasks_config.device, progress=False
    )
    result = train(model, source, train_config, folder / DROPE)
    out = []
    for row in rows:
        if row["test_set"] != "train":
            continue
        token_acc, seq_acc = generalize.evaluate_task(
            model, source, row["length"], examples=tasks_config.eval_examples, seed=seed
        )
        out.append(
            {
                **row,
                "method": DROPE,
                "token_acc": token_acc,
                "seq_acc": seq_acc,
                "recalibrate_steps": steps,
                "recalibrate_loss": result.final_loss,
            }
        )
    return out
