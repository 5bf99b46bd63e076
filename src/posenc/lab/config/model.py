"""The model section of a lab config: the transformer's shape and its per-layer options
(:class:`ModelArgs`), a published layer schedule by name (:data:`Schedule`) resolved by
:mod:`posenc.models.schedules`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal, get_args

from posenc._validate import check_positive_int
from posenc.models import ModelConfig, schedules
from posenc.models.config import Mixer
from posenc.softmax.query_scale import QueryScale

__all__ = ["LAYER_OPTIONS", "ModelArgs", "QueryScaleName", "Schedule"]


#: A named per-layer schedule of :mod:`posenc.models.schedules`, resolved with
#: ``ModelArgs.interval`` and ``ModelArgs.window``: NoPE every ``interval``-th layer (SmolLM3),
#: RNoPE-SWA (Cohere), SWAN-GPT, or a ``interval - 1 : 1`` linear : softmax hybrid of gated
#: delta-rule or linear-attention layers.
Schedule = Literal["nope_every", "rnope_swa", "swan", "hybrid_delta", "hybrid_linear"]
#: A query temperature by name: Llama-4's (``QueryScale.llama4()``) or Qwen-1's log-n
#: (``QueryScale.logn(train_len)``).
QueryScaleName = Literal["none", "llama4", "logn"]

#: The layer options of :class:`ModelArgs` (beyond the shape), in the order a label lists them.
LAYER_OPTIONS = (
    "schedule",
    "interval",
    "window",
    "nope_layers",
    "mixers",
    "output_gate",
    "chunk_size",
    "query_scale",
)
_NOPE_SCHEDULES = ("nope_every", "rnope_swa", "swan")
_MIXER_SCHEDULES = ("hybrid_delta", "hybrid_linear")


@dataclass(frozen=True)
class ModelArgs:
    """The transformer's shape (``head_dim = dim / num_heads``) and its per-layer options:
    which layers take the encoding, a sliding window or chunks on those, the token mixer of
    each layer and gated attention's output gate (:class:`posenc.models.ModelConfig`;
    docs/hybrids.md). :meth:`config_kwargs` gives them to ``ModelConfig`` in one line.

    Args:
        dim: the model's width, a multiple of ``num_heads``.
        depth: its layers (blocks).
        num_heads: attention heads per layer.
        schedule: a published layout by name (:data:`Schedule`, built by
            :mod:`posenc.models.schedules`): ``"nope_every"`` (a NoPE layer every
            ``interval``-th layer, SmolLM3), ``"rnope_swa"`` (those NoPE layers global, a
            sliding ``window`` on the others: Cohere's RNoPE-SWA,
            https://arxiv.org/abs/2501.18795), ``"swan"`` (RNoPE-SWA plus log-n query scaling
            on the NoPE layers past the training length: SWAN-GPT,
            https://arxiv.org/abs/2504.08719), ``"hybrid_delta"`` / ``"hybrid_linear"``
            (softmax every ``interval``-th layer, gated delta-rule or linear attention
            elsewhere: Qwen3-Next's 3 : 1). ``None``: the layers below as given.
        interval: the schedule's ``k`` ("every ``k``-th layer", layers ``k - 1, 2k - 1, ...``).
        window: sliding-window attention of this many keys on every encoded softmax layer
            (needed by ``rnope_swa`` and ``swan``); ``None``: global.
        nope_layers: indices of layers without the encoding (not with a schedule that sets
            them).
        mixers: one token mixer per layer, ``"softmax"``, ``"linear"`` or ``"delta"``, or
            ``()`` for softmax everywhere (not with a hybrid schedule); ``"delta"`` is causal,
            so decoders only.
        output_gate: gated attention's sigmoid output gate on every softmax layer
            (https://arxiv.org/abs/2505.06708).
        chunk_size: chunked local attention on the encoded layers (Llama-4); not with
            ``window``.
        query_scale: a query temperature (:data:`QueryScaleName`) on the NoPE layers when
            there are any, else on every softmax layer; ``"logn"`` scales by the run's
            training length.

    Example::

        >>> ModelArgs(depth=4, schedule="rnope_swa", window=32).label()
        'rnope_swa+w32'
    """

    dim: int = 128
    depth: int = 4
    num_heads: int = 4
    schedule: Schedule | None = None
    interval: int = 4
    window: int | None = None
    nope_layers: tuple[int, ...] = ()
    mixers: tuple[Mixer, ...] = ()
    output_gate: bool = False
    chunk_size: int | None = None
    query_scale: QueryScaleName = "none"

    def __post_init__(self) -> None:
        for name in ("dim", "depth", "num_heads", "interval"):
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        if self.dim % self.num_heads:  # checked here, before any experiment writes a folder
            raise ValueError(
                f"dim must be a multiple of num_heads (head_dim = dim / num_heads), got dim "
                f"{self.dim} and num_heads {self.num_heads}"
            )
        schedules = get_args(Schedule)
        if self.schedule is not None and self.schedule not in schedules:
            raise ValueError(
                f"schedule must be one of {', '.join(map(repr, schedules))} or None, got "
                f"{self.schedule!r}"
            )
        scales = get_args(QueryScaleName)
        if self.query_scale not in scales:
            raise ValueError(
                f"query_scale must be one of {', '.join(map(repr, scales))}, got "
                f"{self.query_scale!r}"
            )
        for name in ("nope_layers", "mixers"):  # JSON and the command line give lists
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        if self.schedule in _NOPE_SCHEDULES and self.nope_layers:
            raise ValueError(
                f"nope_layers {list(self.nope_layers)}: schedule {self.schedule!r} sets the NoPE "
                "layers (every interval-th); give one or the other"
            )
        if self.schedule in _MIXER_SCHEDULES and self.mixers:
            raise ValueError(
                f"mixers: schedule {self.schedule!r} sets each layer's mixer; give one or the other"
            )
        if self.schedule in ("rnope_swa", "swan") and self.window is None:
            raise ValueError(
                f"window is required with schedule {self.schedule!r} (the sliding window of "
                "its encoded layers, e.g. --model.window 64)"
            )
        if self.schedule == "swan" and self.query_scale != "none":
            raise ValueError(
                f"query_scale {self.query_scale!r}: schedule 'swan' sets log-n scaling on its "
                "NoPE layers; give one or the other"
            )
        ModelConfig(**self.config_kwargs(train_len=2))  # its checks name the field

    @property
    def layered(self) -> bool:
        """Whether any per-layer option differs from its default (a plain transformer)."""
        return any(getattr(self, name) != _DEFAULTS[name] for name in LAYER_OPTIONS)

    def config_kwargs(self, *, train_len: int, causal: bool = True) -> dict[str, Any]:
        """These arguments as :class:`~posenc.models.ModelConfig` keyword arguments: the shape
        and the per-layer options, the named ``schedule`` resolved by
        :mod:`posenc.models.schedules`.

        Args:
            train_len: the run's training length (``"logn"`` and ``"swan"`` scale past it).
            causal: the model is a decoder; ``False`` refuses ``"delta"`` mixers (a causal
                recurrence).

        Example::

            >>> ModelArgs(depth=4, schedule="hybrid_delta").config_kwargs(train_len=64)["mixers"]
            ('delta', 'delta', 'delta', 'softmax')
        """
        depth, k = self.depth, self.interval
        options: dict[str, Any] = {
            "dim": self.dim,
            "depth": depth,
            "num_heads": self.num_heads,
            "window": self.window,
            "nope_layers": self.nope_layers,
            "mixers": self.mixers,
            "output_gate": self.output_gate,
            "chunk_size": self.chunk_size,
            "query_scale": None,
        }
        if self.query_scale == "llama4":
            options["query_scale"] = QueryScale.llama4()
        elif self.query_scale == "logn":
            options["query_scale"] = QueryScale.logn(max(2, train_len))
        if self.schedule == "nope_every":
            options.update(schedules.nope_every(depth, k))
        elif self.schedule == "rnope_swa":
            options.update(schedules.rnope_swa(depth, self.window or 0, k))
        elif self.schedule == "swan":
            options.update(schedules.swan(depth, self.window or 0, max(2, train_len), k))
        elif self.schedule in _MIXER_SCHEDULES:
            mixer: Mixer = "delta" if self.schedule == "hybrid_delta" else "linear"
            options["mixers"] = schedules.hybrid_mixers(depth, k, mixer)
        if not causal and "delta" in options["mixers"]:
            raise ValueError(
                f"mixers: 'delta' layers (a gated delta rule) are causal; this model is an "
                f"encoder (mixers {list(options['mixers'])}): use 'linear' or 'softmax'"
            )
        return options

    def check_supports(self, model: str, supported: Sequence[str] = ()) -> None:
        """Refuse the per-layer options a model other than ``ModelConfig``'s cannot take.

        Raises:
            ValueError: naming the first option set to other than its default that is not
                in ``supported`` (``model.window: the graph transformer takes no window``).
        """
        for name in LAYER_OPTIONS:
            if name not in supported and getattr(self, name) != _DEFAULTS[name]:
                raise ValueError(
                    f"model.{name}: {model} takes no {name.replace('_', ' ')} (got "
                    f"{getattr(self, name)!r}); it supports "
                    f"{', '.join(f'model.{s}' for s in supported) or 'none of the layer options'}"
                )

    def label(self) -> str:
        """The per-layer options as a short name, ``""`` for a plain transformer:
        ``"rnope_swa+w64+gate"``, ``"nope[1,3]"``, ``"mixers=ddds"``. Results rows carry it
        (a ``schedule`` column) so runs with and without a window or gate stay apart."""
        parts = []
        if self.schedule is not None:
            parts.append(self.schedule + ("" if self.interval == 4 else f"/{self.interval}"))
        if self.window is not None:
            parts.append(f"w{self.window}")
        if self.nope_layers:
            parts.append(f"nope[{','.join(map(str, self.nope_layers))}]")
        if self.mixers:
            parts.append("mixers=" + "".join(m[0] for m in self.mixers))
        if self.output_gate:
            parts.append("gate")
        if self.chunk_size is not None:
            parts.append(f"chunk{self.chunk_size}")
        if self.query_scale != "none":
            parts.append(f"qs={self.query_scale}")
        return "+".join(parts)

    def row_fields(self) -> dict[str, str]:
        """``{"schedule": label}`` for a result row, or ``{}`` for a plain transformer (rows
        written before the options read the same)."""
        return {"schedule": self.label()} if self.layered else {}


_DEFAULTS = {f.name: f.default for f in fields(ModelArgs)}
