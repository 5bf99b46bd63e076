"""A small vision transformer on sklearn's digits: does a patch grid need a position encoding?

The in-distribution check of ViT's Appendix D.4 (Dosovitskiy et al. 2020,
https://arxiv.org/abs/2010.11929, Table 8: ImageNet 5-shot linear accuracy 0.614 without a
position embedding, 0.640–0.642 with 1-D, 2-D or relative ones: "having a PE matters, which
kind matters little") at CPU scale. The 1797 8×8 images of ``sklearn.datasets.load_digits``
(bundled with scikit-learn, no download; :mod:`posenc.lab.data.digits`) are cut into 2×2
patches, a 4×4 grid of 16 tokens of 4 pixels; the public image classifier
``EncoderClassifier(ModelConfig(pos=..., grid=(4, 4), patch_size=2, in_channels=1), 10)``
(:mod:`posenc.models`: a linear patch embedding, a few bidirectional pre-norm blocks, mean
pooling and a 10-way linear head) classifies them.

Encodings are chosen by name: ``"none"`` (no position at all, the registry's ``"nope"``; the
model sees a bag of patches and is exactly invariant to permuting them) or any encoding of
:mod:`posenc.registry` (``posenc list``), built by :func:`~posenc.registry.build_encoding`
for this model: ``ModelDims(dim, num_heads, max_seq_len=16, causal=False, grid=(4, 4))``
plus the encoding's ``pos_kwargs``. Grid encodings (``needs_grid``: ``"sinusoidal_2d"``, the
MAE 2D sin-cos table; ``"rope_2d"``, RoPE-ViT's axial RoPE, base 100) take the 4×4 grid;
1D ones (``"learned"``, ``"rope"``, ``"alibi"``, ``"t5"``, ...) number the patches row-major.
An encoding reading one position axis gets the row-major patch index, one reading two gets
the patch's (row, column). Refused, naming ``encodings`` and the reason: causal-only methods
(``causal_only``: xPos, whose decay grows for keys after the query; CoPE), encodings that
embed token ids (complex-order), encodings reading other numbers of axes, and arguments
the encoding rejects at this size (e.g. a ``dim`` that the 2D sin-cos table cannot split in
four). ``"learned_1d"`` is kept as the name of
``"learned"`` in the experiment's first results.

Images enter :func:`posenc.lab.train.train` as token rows
(:class:`~posenc.lab.data.digits.DigitsSource`): ``tokens`` are the 64 pixel intensities
(integers 0..16, row-major) and the label is the target of the first column only
(``loss_mask``), so the generic loop (AdamW, cosine schedule, resumable run folders, DDP)
trains a classifier. One run folder per (encoding, seed) under ``out/runs/``.

Example::

    rows = run_vit(replace_fields(VitConfig(), epochs=2, seeds=(0,)), "runs/vit")

The package: this module (config, runs, tables, figure, claim) and :mod:`.model` (the ViT).
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from posenc._validate import check_non_negative_int, check_positive_int
from posenc.lab.batch import derive_seed
from posenc.lab.claims import Claim, Control, difference_at
from posenc.lab.config import EpochArgs, ModelArgs, RunnerArgs
from posenc.lab.data.digits import (
    NUM_IMAGES,
    DigitsSource,
    DigitsSplits,
    load_digits_splits,
)
from posenc.lab.experiments.vit.model import (
    ALIASES,
    NONE,
    DigitsViT,
    DigitsViTConfig,
    patchify,
)
from posenc.lab.figures import encoding_bars
from posenc.lab.runner import (
    Experiment,
    Run,
    Section,
    check_encoding_names,
    check_pos_kwargs_names,
    run_experiment,
)
from posenc.lab.tables import Table, per_encoding_table
from posenc.lab.train import TrainConfig, TrainResult, train

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "ALIASES",
    "DEFAULT_ENCODINGS",
    "EXPERIMENT",
    "DigitsViT",
    "DigitsViTConfig",
    "VitConfig",
    "format_vit_table",
    "patchify",
    "prepare_digits",
    "run_vit",
    "train_digits_vit",
    "vit_accuracy",
]

Row = dict[str, Any]
#: The documented setting: none, 1D learned, 2D sin-cos, 2D axial RoPE.
DEFAULT_ENCODINGS = (NONE, "learned_1d", "sinusoidal_2d", "rope_2d")


class _PerTokenLogits(nn.Module):
    """Shows the classifier to :func:`~posenc.lab.train.train` as a sequence model.

    The class logits are repeated at every pixel column; only column 0 carries a target
    (``loss_mask``), so the loss is the mean cross-entropy over images.
    """

    def __init__(self, vit: DigitsViT) -> None:
        super().__init__()
        self.vit = vit
        self.config = vit.config

    def forward(
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        if positions is not None:
            raise ValueError("positions must be None: the ViT numbers its patches itself")
        logits = self.vit(tokens)  # (batch, 10)
        return logits[:, None, :].expand(-1, tokens.shape[1], -1)


@dataclass(frozen=True)
class VitConfig:
    """The digits ViT experiment (defaults: the documented full setting, ~1–3 min on 2 cores).

    Args:
        encodings: ``"none"`` and registered encodings (``posenc list``; grid encodings such
            as ``"sinusoidal_2d"`` and ``"rope_2d"`` get the patch grid) or their aliases
            (:data:`ALIASES`); one that cannot serve a bidirectional ViT on a patch grid
            raises ``ValueError`` naming ``encodings`` and the reason.
        patch_size: patch side in pixels (2×2 patches of the 8×8 digits: 16 tokens).
        mlp_ratio: MLP hidden width as a multiple of ``model.dim``.
        pos_kwargs: per encoding (as named in ``encodings``), keyword arguments of its
            constructor (a JSON object on the command line, e.g. ``{"rope_2d": {"base":
            50}}``; the axial RoPE's base defaults to RoPE-ViT's 100).
        test_size: held-out images (the rest train).
        split_seed: seed of the train/test split.
        device: torch device of training and evaluation.
        model: the transformer's shape (``dim`` 64, 2 layers of 4 heads).
        train: the seeds (one run per seed and encoding: model init and batch order; the split
            is fixed) and the schedule: ``epochs`` passes over the training images of
            ``batch_size`` (:attr:`steps`), trained by :mod:`posenc.lab.train` (AdamW, linear
            warmup, cosine decay; :meth:`train_config`).
        runner: how the runs execute.
    """

    encodings: tuple[str, ...] = DEFAULT_ENCODINGS
    patch_size: int = 2
    mlp_ratio: float = 4.0
    pos_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    test_size: int = 500
    split_seed: int = 0
    device: str = "cpu"
    model: ModelArgs = field(default_factory=functools.partial(ModelArgs, dim=64, depth=2))
    train: EpochArgs = field(
        default_factory=functools.partial(EpochArgs, batch_size=64, lr=3e-3, warmup_steps=40)
    )
    runner: RunnerArgs = field(default_factory=RunnerArgs)

    def __post_init__(self) -> None:
        # JSON (CLI --set, config.json) gives lists; keep the tuples hashable and comparable.
        object.__setattr__(self, "encodings", check_encoding_names(self.encodings))
        check_pos_kwargs_names(self.pos_kwargs, self.encodings)
        self.model.check_supports("the digits ViT")
        object.__setattr__(self, "test_size", check_positive_int("test_size", self.test_size))
        object.__setattr__(
            self, "split_seed", check_non_negative_int("split_seed", self.split_seed)
        )
        if self.test_size + self.train.batch_size > NUM_IMAGES:
            raise ValueError(
                f"test_size + batch_size must be <= {NUM_IMAGES} images, got "
                f"{self.test_size} + {self.train.batch_size}"
            )
        # The model fields first, naming them; then each encoding on that valid shape.
        model = self.model
        DigitsViTConfig(
            NONE, self.patch_size, model.dim, model.depth, model.num_heads, self.mlp_ratio
        )
        for encoding in self.encodings:
            try:
                self.model_config(encoding)
            except ValueError as error:  # the shape is valid: the encoding is refused
                where = f"pos_kwargs[{encoding!r}]" if encoding in self.pos_kwargs else "encodings"
                raise ValueError(f"{where}: {error}") from None
        self.train_config(0)  # validates device

    @property
    def steps(self) -> int:
        """Optimizer steps per run: ``epochs · ⌊(1797 - test_size) / batch_size⌋``."""
        return self.train.epochs * ((NUM_IMAGES - self.test_size) // self.train.batch_size)

    def model_config(self, encoding: str) -> DigitsViTConfig:
        return DigitsViTConfig(
            encoding=encoding,
            patch_size=self.patch_size,
            dim=self.model.dim,
            depth=self.model.depth,
            num_heads=self.model.num_heads,
            mlp_ratio=self.mlp_ratio,
            pos_kwargs=dict(self.pos_kwargs.get(encoding, {})),
        )

    def train_config(self, seed: int) -> TrainConfig:
        return TrainConfig.for_steps(
            self.steps,
            warmup_steps=self.train.warmup_steps,
            eval_every=max(1, self.steps // 5),
            batch_size=self.train.batch_size,
            lr=self.train.lr,
            weight_decay=self.train.weight_decay,
            seed=seed,
            device=self.device,
            progress=self.runner.progress,
        )


def _accuracy(vit: DigitsViT, pixels: Tensor, labels: Tensor, batch_size: int = 512) -> float:
    device = next(vit.parameters()).device
    was_training = vit.training
    vit.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, pixels.shape[0], batch_size):
            logits = vit(pixels[start : start + batch_size].to(device))
            correct += int((logits.argmax(-1).cpu() == labels[start : start + batch_size]).sum())
    vit.train(was_training)
    return correct / pixels.shape[0]


@functools.cache
def _data(test_size: int, split_seed: int) -> DigitsSplits:
    """The digits splits, loaded once per process."""
    return load_digits_splits(test_size, seed=split_seed)


def _plan(config: VitConfig) -> list[Run]:
    return [
        Run(f"{encoding}/seed{seed}", {"encoding": encoding, "seed": seed})
        for encoding in config.encodings
        for seed in config.train.seeds
    ]


def prepare_digits(config: VitConfig) -> None:
    """Load the digits once in this process (scikit-learn missing: fail before training)."""
    _data(config.test_size, config.split_seed)


def train_digits_vit(
    config: VitConfig, encoding: str, seed: int, run_dir: Path
) -> tuple[DigitsViT, TrainResult, DigitsSplits]:
    """Train (or reload, when finished) the digits ViT with ``encoding`` and ``seed`` in
    ``run_dir``; returns the model holding its final weights, the training result and the
    data splits. The vit and resolution experiments both train through it."""
    data = _data(config.test_size, config.split_seed)
    torch.manual_seed(derive_seed("vit-init", seed))
    model = _PerTokenLogits(DigitsViT(config.model_config(encoding)))
    source = DigitsSource(data.train_pixels, data.train_labels, seed=seed)

    def evaluate(module: nn.Module, step: int) -> dict[str, float]:
        return {"test_accuracy": _accuracy(model.vit, data.test_pixels, data.test_labels)}

    result = train(model, source, config.train_config(seed), run_dir, evaluate=evaluate)
    return model.vit, result, data


def _execute(config: VitConfig, run: Run, run_dir: Path) -> list[Row]:
    encoding, seed = run.params["encoding"], run.params["seed"]
    vit, result, data = train_digits_vit(config, encoding, seed, run_dir)
    model = vit
    row: Row = {
        "experiment": "vit",
        "encoding": encoding,
        "seed": seed,
        "accuracy": _accuracy(model, data.test_pixels, data.test_labels),
        "train_accuracy": _accuracy(model, data.train_pixels, data.train_labels),
        "final_loss": result.final_loss,
        "params": sum(p.numel() for p in model.parameters()),
        "steps": result.steps,
        "train_seconds": result.seconds,
    }
    return [row]


def run_vit(
    config: VitConfig, out: str | Path, *, echo: Callable[[str], None] | None = print
) -> list[Row]:
    """Run (or resume) the digits ViT experiment in folder ``out``; return its result rows.

    Writes ``out/config.json``, a run folder per (encoding, seed) under
    ``out/runs/<encoding>/seed<seed>/`` (skipped when its ``eval.json`` exists),
    ``out/results.csv`` (columns ``experiment, encoding, seed, accuracy, train_accuracy,
    final_loss, params, steps, train_seconds``) and ``out/report.html``.

    Raises:
        ValueError: naming the differing field when ``out`` holds another configuration.
        ImportError: when scikit-learn is missing.
    """
    return run_experiment(EXPERIMENT, config, out, echo=echo)


def format_vit_table(rows: Sequence[Row]) -> str:
    """Accuracy table: one line per encoding, mean ± sample std (min–max) over seeds."""
    selected = [r for r in rows if r.get("experiment") == "vit"]
    width = max([15, *(len(str(r["encoding"])) + 2 for r in selected)])
    header = (
        f"{'encoding':<{width}}{'seeds':>6}{'test acc':>18}{'min–max':>15}{'train acc':>11}"
        f"{'params':>9}"
    )
    lines = ["ViT on sklearn digits (8×8, 2×2 patches, 4×4 grid): test accuracy", header]
    for name in dict.fromkeys(r["encoding"] for r in selected):
        mine = [r for r in selected if r["encoding"] == name]
        accs = [float(r["accuracy"]) for r in mine]
        spread = statistics.stdev(accs) if len(accs) > 1 else 0.0
        train_acc = statistics.fmean(float(r["train_accuracy"]) for r in mine)
        lines.append(
            f"{name:<{width}}{len(mine):>6}{statistics.fmean(accs):>11.4f} ± {spread:.4f}"
            f"{min(accs):>8.4f}–{max(accs):.4f}{train_acc:>11.4f}{mine[0]['params']:>9}"
        )
    return "\n".join(lines)


# --- the published finding its rows test ----------------------------------------------

_VIT = (
    "Dosovitskiy et al. 2021, An Image is Worth 16x16 Words (ViT), "
    "https://arxiv.org/abs/2010.11929; the seed notes' figures"
)

#: ViT's finding that a position encoding helps, as the claim its rows test.
CLAIMS: tuple[Claim, ...] = (
    Claim(
        name="vit_position_encoding_helps",
        text="A position encoding raises the digits ViT's test accuracy: learned 1D table (ViT's "
        "default) minus no encoding, paired by seed, ≥ 0 (decided against none directly).",
        paper=_VIT,
        published="The seed notes: 85.5 % with a position encoding, 80.2 % without (+5.3 points); "
        "ViT Appendix D.4, Table 8 (ImageNet 5-shot linear): 0.642 (1D) vs 0.614 (none)",
        experiment="vit",
        statistic=difference_at(
            "vit", {}, "accuracy", {"encoding": "learned_1d"}, {"encoding": "none"}
        ),
        threshold=0.0,
        direction=">=",
        control=Control("none"),
    ),
)


def _tables(rows: Sequence[Row]) -> list[Table]:
    """The report's table: test and train accuracy per encoding, mean ± std over seeds."""
    values = [("test accuracy", "accuracy", 4), ("train accuracy", "train_accuracy", 4)]
    return per_encoding_table(rows, "Test accuracy per positional encoding", values)


def vit_accuracy(rows: Sequence[Row]) -> Figure:
    """Test accuracy of the digits ViT per positional encoding: mean over seeds, each seed a dot."""
    title = "ViT on sklearn digits (8x8, 2x2 patches)"
    return encoding_bars(rows, "vit", "accuracy", "test accuracy", title, unit=True)


EXPERIMENT = Experiment(
    name="vit",
    summary="digits ViT: none, 1D learned, 2D sin-cos, 2D axial RoPE (any registered encoding)",
    title="posenc: ViT on sklearn digits",
    config=VitConfig,
    plan=_plan,
    execute=_execute,
    table=format_vit_table,
    prepare=prepare_digits,
    claims=CLAIMS,
    sections=(Section("ViT on digits", _tables, {"vit.png": vit_accuracy}),),
)
