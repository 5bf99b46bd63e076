"""The configuration of posenc's small transformers (:mod:`posenc.models`).

:class:`ModelConfig` holds the shape, the encoding by name, the input (token ids, or images
cut into patches on a ``grid``) and the per-layer attention options (Llama-4's iRoPE layout:
NoPE layers, chunked local attention, a query temperature);
:meth:`ModelConfig.layer_attention` says what one layer gets (:class:`LayerAttention`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from posenc._validate import check_int, check_positive_int
from posenc.attention import QueryScale
from posenc.attention.backends import NAMES as BACKENDS
from posenc.registry import ModelDims, list_encodings

__all__ = ["LayerAttention", "ModelConfig"]


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
            one-axis positions.
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

    def layer_attention(self, index: int) -> LayerAttention:
        """What layer ``index``'s attention gets: the encoding or none (``nope_layers``),
        ``chunk_size`` on the encoded layers, ``query_scale`` on the NoPE layers when there
        are any, else on every layer (Llama-4: chunked RoPE layers, global NoPE layers with
        the temperature)."""
        nope = index in self.nope_layers
        scaled = nope or not self.nope_layers
        return LayerAttention(
            encoded=not nope,
            chunk_size=None if nope else self.chunk_size,
            query_scale=self.query_scale if scaled else None,
        )

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
        encoded: the layer's attention takes the model's encoding (False: NoPE layer).
        chunk_size: chunked local attention, or None (global).
        query_scale: the query temperature, or None.
    """

    encoded: bool = True
    chunk_size: int | None = None
    query_scale: QueryScale | None = None
