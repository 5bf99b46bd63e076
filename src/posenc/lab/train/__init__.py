"""Training loop of the lab: AdamW, warmup and cosine decay, clipping, resumable run folders, DDP.

A run is a folder::

    run_dir/
      config.json          {"train": TrainConfig, "model": model.config, "model_class": ...}
      metrics.jsonl        one JSON object per line: {"kind": "train", "step", "loss", "lr",
                           "grad_norm", "tokens", "time": {...}} or {"kind": "eval", "step",
                           "metrics": {...}, "time": {...}}; everything under "time" is wall-clock
                           and differs between runs, everything else is reproducible
      checkpoints/last.pt  model, optimizer, step, token count and log window (TrainState)
      final.pt             {"model": state_dict, "config": ..., "step": steps} at the end
      done.json            the :class:`TrainResult`, written last

Every file is written atomically (temporary file in the same folder, then ``os.replace``), so a
kill at any point leaves the previous version readable. Calling :func:`train` again with the
same arguments resumes from ``checkpoints/last.pt`` (dropping ``metrics.jsonl`` lines past the
checkpoint step) or, when ``done.json`` exists, returns the stored result without training.

The package, by concept: :mod:`.config` (:class:`TrainConfig`, :class:`TrainResult`),
:mod:`.state` (:class:`TrainState`: the model, its optimizer, the step, the counters and the
log window), :mod:`.loop` (:func:`train`: a step updates the state, then its log, evaluation
and checkpoint read it), :mod:`.optim` (AdamW's groups and the schedule), :mod:`.loss` (the
masked cross-entropy) and :mod:`.progress`. Determinism: batches are
``source.batch(step, ...)``, a pure function of the source's seed and the step; the global
torch RNG (dropout) is re-seeded before every step from ``(config.seed, step, rank)`` inside
:func:`torch.random.fork_rng`, so no RNG state needs checkpointing and the caller's RNG is
untouched. A resumed run therefore equals the uninterrupted one bit for bit on CPU with the
same thread settings.

Example::

    >>> source = LMSource(load_corpus(max_bytes=100_000).train, seq_len=64)
    >>> model = DecoderLM(ModelConfig(dim=32, depth=2, num_heads=4))
    >>> result = train(model, source, TrainConfig(steps=30, progress=False), "runs/tiny")
    >>> result.final_loss < math.log(256)
    True
"""

from __future__ import annotations

from posenc.lab.run import atomic_torch_save, atomic_write_text, read_metrics
from posenc.lab.train.config import TrainConfig, TrainResult
from posenc.lab.train.loop import peak_memory_bytes, train
from posenc.lab.train.loss import lm_loss, masked_ce_sum
from posenc.lab.train.optim import ADAM_BETAS, ADAM_EPS, lr_at, parameter_groups
from posenc.lab.train.state import LogWindow, TrainState

__all__ = [
    "ADAM_BETAS",
    "ADAM_EPS",
    "LogWindow",
    "TrainConfig",
    "TrainResult",
    "TrainState",
    "atomic_torch_save",
    "atomic_write_text",
    "lm_loss",
    "lr_at",
    "masked_ce_sum",
    "parameter_groups",
    "peak_memory_bytes",
    "read_metrics",
    "train",
]
