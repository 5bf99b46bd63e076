"""The configuration of posenc's small transformers (:mod:`posenc.models`).

:class:`ModelConfig` holds the shape, the encoding by name, the input (token ids, or images
cut into patches on a ``grid``) and the per-layer options the frontier's schedules are made of
(Llama-4's iRoPE and SmolLM3: NoPE layers, chunked local attention, a query temperature;
Cohere's RNoPE-SWA and SWAN-GPT: a sliding window on the encoded layers; Qwen3-Next and Kimi
Linear: linear-attention layers beside softmax ones; gated attention's output gate);
:meth:`ModelConfig.layer_attention` is the one place that says what one layer gets
(:class:`LayerAttention`). :mod:`posenc.models.schedules` builds the published schedules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from posenc._validate import check_int, check_positive_int
from posenc.attention import QueryScale
from posenc.attention.backends import NAMES as BACKENDS
from posenc.registry import ModelDims, list_encodings

__all__ = ["LayerAttention", "Mixer", "ModelConfig"]

#: A layer's token mixer: softmax attention (with the encoding), linear attention (the
#: ``linear`` backend, :mod:`posenc.attention.linear`) or a gated delta rule
#: (:class:`~posenc.attention.delta_rule.GatedDeltaNet`); the last two take no encoding.
Mixer = Literal["softmax", "linear", "delta"]
MIXERS: tuple[str, ...] = get_args(Mixer)


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a small transformer and its positional encoding.

    Args:
        vocab_size: token vocabulary (256 for bytes).
        dim, depth, num_heads: width, layers and query heads.
        num_kv_heads: key/value heads for grouped-query attention (default ``num_heads``).
        mlp_ratio: hidden width of the MLP relative to ``dim`` (``int(mlp_ratio · dim) ≥ 1``).
        max_seq_len: only used by encodings with a finite table (learned absolute).
        pos: registered encoding name (see ``posenc list``).
        pos_kwargs: keyword arguments for the encoding's constructor.
        dropout: dropout on attention probabilities and residual branches, in ``[0, 1)``.
        backend: attention backend, ``"auto"`` (default), ``"sdpa"``, ``"flex"``,
            ``"chunked"`` or ``"linear"`` (linear attention, another model: see
            :mod:`posenc.attention.backends`).
        nope_layers: indices in ``[0, depth)`` of layers whose attention gets no encoding
            (Llama-4's iRoPE: every 4th layer, HF ``no_rope_layers`` flags 0); needs an
            encoding that acts in attention (not an additive one).
        chunk_size: chunked local attention (``Attention(chunk_size=)``, Llama-4's
            ``attention_chunk_size``) on every layer not in ``nope_layers``; ≥ 1 or None.
        query_scale: a :class:`~posenc.attention.QueryScale` (``QueryScale.llama4()``,
            ``QueryScale.logn(train_len)``) on the ``nope_layers`` when there are any
            (Llama-4's temperature tuning), else on every layer (Qwen-1's log-n); needs
            one-axis positions. Only softmax layers take it.
        window: sliding-window attention of ``window`` keys (``Attention(window=)``) on
            every encoded softmax layer (not in ``nope_layers``), ≥ 1 or None: with
            ``nope_layers`` Cohere Command A's RNoPE-SWA and SWAN-GPT (global NoPE layers,
            windowed RoPE ones; :mod:`posenc.models.schedules`). Not with ``chunk_size``.
        mixers: per layer ``"softmax"``, ``"linear"`` or ``"delta"`` (:data:`Mixer`), one per
            layer, or ``()`` for softmax everywhere: linear : softmax hybrids (3:1 in
            Qwen3-Next, Kimi Linear: :func:`~posenc.models.schedules.hybrid_mixers`). A
            linear or delta layer takes no positional encoding (order is its recurrence's),
            no window, chunk or query scale; ``"delta"`` is causal (``DecoderLM`` only).
            Not with ``backend="linear"`` (every layer linear already).
        output_gate: gated attention's sigmoid output gate on every softmax layer
            (``Attention(output_gate=True)``: ``o ⊙ σ(x W_g)``, Qwen3-Next).
        grid: the token grid of an image (``(height, width)`` in patches) or a video
            (``(frames, height, width)``), row-major: token ``t`` of an ``H × W`` grid sits at
            row ``t // W``, column ``t % W``. Grid encodings (``rope_axial``, ``rope_mixed``,
            ``rope_2d``, ``sinusoidal_2d``, ``learned_2d``, ...: ``needs_grid`` in ``posenc
            list``) take their sizes from it and need it; the model's default positions
            are the grid's (:func:`~posenc.positions.grid_positions` for an encoding reading
            one axis per grid axis, the row-major index for one reading one axis). Only
            :class:`~posenc.models.EncoderClassifier` takes a grid. Needs
            ``max_seq_len >= prod(grid)``.
        patch_size: the model reads images ``(batch, in_channels, H, W)`` cut into
            ``patch_size × patch_size`` patches (a linear patch embedding, as ViT's) in place
            of token ids; needs a 2-axis ``grid`` (the images' default size is
            ``grid · patch_size``); ``vocab_size`` is then unused. None: token ids.
        in_channels: channels of the images (with ``patch_size``; 3 for RGB).
    """

    vocab_size: int = 256
    dim: int = 128
    depth: int = 2
    num_heads: int = 4
    num_kv_heads: int | None = None
    mlp_ratio: float = 4.0
    max_seq_len: int = 1024
    pos: str = "rope"
    pos_kwargs: dict[str, Any] = field(default_factory=dict)
    dropout: float = 0.0
    backend: str = "auto"
    nope_layers: tuple[int, ...] = ()
    chunk_size: int | None = None
    query_scale: QueryScale | None = None
    window: int | None = None
    mixers: tuple[Mixer, ...] = ()
    output_gate: bool = False
    grid: tuple[int, ...] | None = None
    patch_size: int | None = None
    in_channels: int = 3

    def __post_init__(self) -> None:
        for name in ("vocab_size", "dim", "depth", "num_heads", "max_seq_len"):
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        if self.dim % self.num_heads != 0:
            raise ValueError(f"dim ({self.dim}) must be divisible by num_heads ({self.num_heads})")
        if self.num_kv_heads is not None:
            kv_heads = check_positive_int("num_kv_heads", self.num_kv_heads)
            object.__setattr__(self, "num_kv_heads", kv_heads)
            if self.num_heads % self.num_kv_heads:
                raise ValueError(
                    f"num_kv_heads ({self.num_kv_heads}) must divide num_heads ({self.num_heads})"
                )
        ratio = self.mlp_ratio
        if (
            isinstance(ratio, bool)
            or not isinstance(ratio, (int, float))
            or not math.isfinite(ratio)
        ):
            raise ValueError(f"mlp_ratio must be a finite number > 0, got {ratio!r}")
        if int(ratio * self.dim) < 1:
            raise ValueError(
                f"mlp_ratio must give at least one hidden unit: int(mlp_ratio * dim) = "
                f"int({ratio} * {self.dim}) = {int(ratio * self.dim)}; "
                f"use mlp_ratio >= {1 / self.dim:g}"
            )
        dropout = self.dropout
        if (
            isinstance(dropout, bool)
            or not isinstance(dropout, (int, float))
            or not 0.0 <= dropout < 1.0
        ):
            raise ValueError(f"dropout must be a number in [0, 1), got {dropout!r}")
        if not isinstance(self.pos, str):
            raise ValueError(f"pos must be an encoding name (str), got {type(self.pos).__name__}")
        if not isinstance(self.pos_kwargs, dict):
            raise ValueError(f"pos_kwargs must be a dict, got {type(self.pos_kwargs).__name__}")
        if self.backend not in BACKENDS:
            raise ValueError(
                f"backend must be one of {', '.join(map(repr, BACKENDS))}; got {self.backend!r}"
            )
        object.__setattr__(self, "nope_layers", _check_nope_layers(self.nope_layers, self.depth))
        if self.chunk_size is not None:
            chunk = check_positive_int("chunk_size", self.chunk_size)
            object.__setattr__(self, "chunk_size", chunk)
        if self.query_scale is not None and not isinstance(self.query_scale, QueryScale):
            raise ValueError(
                "query_scale must be a posenc QueryScale (QueryScale.llama4(), "
                f"QueryScale.logn(train_len)) or None; got {type(self.query_scale).__name__}"
            )
        if self.window is not None:
            object.__setattr__(self, "window", check_positive_int("window", self.window))
            if self.chunk_size is not None:
                raise ValueError(
                    f"window ({self.window}) and chunk_size ({self.chunk_size}) are two local "
                    "masks for the encoded layers; give one"
                )
            if self.backend == "linear":
                raise ValueError("window needs softmax attention; backend 'linear' has none")
        object.__setattr__(self, "mixers", self._checked_mixers())
        if not isinstance(self.output_gate, bool):
            raise ValueError(f"output_gate must be True or False, got {self.output_gate!r}")
        object.__setattr__(self, "grid", _check_grid(self.grid, self.max_seq_len))
        check_positive_int("in_channels", self.in_channels)
        if self.patch_size is not None:
            check_positive_int("patch_size", self.patch_size)
            if self.grid is None or len(self.grid) != 2:
                raise ValueError(
                    "grid must be (height, width) in patches when patch_size is set (images "
                    f"are cut into a 2-axis grid of patches); got grid={self.grid!r}"
                )
        if self.grid is None and self.pos in _grid_encoding_names():
            raise ValueError(
                f"grid is required: encoding {self.pos!r} is defined on a patch grid; set "
                "ModelConfig(grid=(height, width)) in patches (e.g. grid=(8, 8) with "
                "patch_size=4 for 32×32 images), or (frames, height, width) for a video"
            )

    @property
    def images(self) -> bool:
        """The model reads images cut into patches (``patch_size`` set), not token ids."""
        return self.patch_size is not None

    @property
    def num_tokens(self) -> int | None:
        """Tokens of the grid, ``prod(grid)`` (None without a grid)."""
        return None if self.grid is None else math.prod(self.grid)

    def mixer(self, index: int) -> Mixer:
        """Layer ``index``'s token mixer (``mixers``, default softmax)."""
        return self.mixers[index] if self.mixers else "softmax"

    def layer_attention(self, index: int) -> LayerAttention:
        """What layer ``index`` gets: its mixer; on a softmax layer the encoding or none
        (``nope_layers``), ``chunk_size`` or ``window`` on the encoded ones, ``query_scale``
        on the NoPE layers when there are any, else on every softmax layer (Llama-4: chunked
        RoPE layers, global NoPE layers with the temperature; RNoPE-SWA: windowed RoPE
        layers, global NoPE ones). A linear or delta layer gets none of them."""
        mixer = self.mixer(index)
        if mixer != "softmax":
            return LayerAttention(encoded=False, mixer=mixer)
        nope = index in self.nope_layers
        scaled = nope or not self.nope_layers
        return LayerAttention(
            encoded=not nope,
            chunk_size=None if nope else self.chunk_size,
            query_scale=self.query_scale if scaled else None,
            window=None if nope else self.window,
        )

    def _checked_mixers(self) -> tuple[Mixer, ...]:
        """``mixers`` as a tuple of one :data:`Mixer` per layer (or empty)."""
        mixers = self.mixers
        if isinstance(mixers, (str, bytes)) or not isinstance(mixers, (tuple, list)):
            raise ValueError(
                f"mixers must be a tuple of {', '.join(map(repr, MIXERS))}, one per layer, or "
                f"(); got {type(mixers).__name__}"
            )
        if mixers and len(mixers) != self.depth:
            raise ValueError(
                f"mixers must name one mixer per layer (depth = {self.depth}); got {len(mixers)}"
            )
        unknown = sorted({str(m) for m in mixers if m not in MIXERS})
        if unknown:
            raise ValueError(f"mixers must be {', '.join(map(repr, MIXERS))}; got {unknown}")
        if mixers and self.backend == "linear":
            raise ValueError(
                "mixers: backend 'linear' makes every layer linear; give backend 'auto' (or "
                "another softmax backend) with mixers"
            )
        clash = [i for i in self.nope_layers if mixers and mixers[i] != "softmax"]
        if clash:
            raise ValueError(
                f"nope_layers {clash} are {mixers[clash[0]]!r} layers, which take no encoding "
                "anyway; list softmax layers only in nope_layers"
            )
        return tuple(mixers)

    def dims(self, *, causal: bool) -> ModelDims:
        return ModelDims(
            dim=self.dim,
            num_heads=self.num_heads,
            max_seq_len=self.max_seq_len,
            causal=causal,
            grid=self.grid,
            vocab_size=None if self.images else self.vocab_size,  # images have no token ids
            num_kv_heads=self.num_kv_heads,
        )


def _grid_encoding_names() -> frozenset[str]:
    """Names of the registered encodings that need a grid (``needs_grid``), read at call
    time (a user's registered encoding counts)."""
    return frozenset(spec.name for spec in list_encodings() if spec.needs_grid)


def _check_grid(grid: object, max_seq_len: int) -> tuple[int, ...] | None:
    """``grid`` as a tuple of 1 to 3 axis sizes >= 1 whose product fits ``max_seq_len``."""
    if grid is None:
        return None
    if isinstance(grid, (str, bytes)) or not isinstance(grid, (tuple, list)):
        raise ValueError(
            "grid must be None or 1 to 3 axis sizes ((height, width) in patches; (frames, "
            f"height, width)), got {type(grid).__name__}"
        )
    if not 1 <= len(grid) <= 3:
        raise ValueError(
            "grid must be None or 1 to 3 axis sizes ((height, width) in patches; (frames, "
            f"height, width)), got {len(grid)} axes: {tuple(grid)!r}"
        )
    sizes = tuple(check_positive_int(f"grid[{i}]", n) for i, n in enumerate(grid))
    if math.prod(sizes) > max_seq_len:
        raise ValueError(
            f"grid {sizes} holds {math.prod(sizes)} tokens, more than max_seq_len="
            f"{max_seq_len}; give max_seq_len >= prod(grid)"
        )
    return sizes  # JSON gives a list


def _check_nope_layers(layers: object, depth: int) -> tuple[int, ...]:
    """``nope_layers`` as a sorted tuple of distinct layer indices in ``[0, depth)``."""
    if isinstance(layers, (str, bytes)) or not isinstance(layers, (tuple, list, range)):
        raise ValueError(
            f"nope_layers must be a tuple of layer indices, got {type(layers).__name__}"
        )
    layers = [check_int("nope_layers", index, low=0, high=depth - 1) for index in layers]
    if len(set(layers)) != len(layers):
        raise ValueError(f"nope_layers must not repeat a layer; got {list(layers)}")
    return tuple(sorted(layers))


@dataclass(frozen=True)
class LayerAttention:
    """One layer's attention options (:meth:`ModelConfig.layer_attention`).

    Attributes:
        encoded: the layer's attention takes the model's encoding (False: NoPE layer, or a
            linear or delta layer).
        chunk_size: chunked local attention, or None (global).
        query_scale: the query temperature, or None.
        window: sliding-window attention of that many keys, or None (global).
        mixer: the token mixer (:data:`Mixer`).
    """

    encoded: bool = True
    chunk_size: int | None = None
    query_scale: QueryScale | None = None
    window: int | None = None
    mixer: Mixer = "softmax"
