"""What the catalogue's constructors share: deferred imports of the families, and the
arguments that follow from a model's shape (:class:`~posenc.registry.specs.ModelDims`)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from posenc.encoding.base import PositionalEncoding
from posenc.encoding.protocols import BiasEncoding
from posenc.registry.specs import (
    EncodingSpec,
    ModelDims,
    build_encoding,
    encoding_spec,
    list_encodings,
)

__all__ = [
    "DYNAMIC_REACH",
    "SEGMENT_METHODS",
    "SEGMENT_SPECS",
    "additive_package",
    "bias_package",
    "build_dape",
    "build_inner",
    "build_learned_sinks",
    "build_softcap",
    "contextual_package",
    "coordinate_axes",
    "grid_size",
    "grid_sizes_by_axis",
    "half_width",
    "hope_factory",
    "learned_rotation_kwargs",
    "mhrope_sections",
    "mrope_i_sections",
    "mrope_sections",
    "msrope_axes_dims",
    "rope_kwargs",
    "rotary_package",
    "scores_package",
    "segment_method",
    "segments_package",
    "stick_breaking_class",
    "token_state_package",
    "vocabulary_size",
]


def additive_package():  # imports are deferred so that `posenc list` stays cheap
    from posenc import additive

    return additive


def rotary_package():
    from posenc import rotary

    return rotary


def bias_package():
    from posenc import bias

    return bias


def contextual_package():
    from posenc import contextual

    return contextual


def scores_package():
    from posenc import scores

    return scores


def token_state_package():
    from posenc import token_state

    return token_state


def hope_factory():
    from posenc.rotary.hope import hope_rotary

    return hope_rotary


def rope_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``scaling`` in posenc's dict form ``{"type": "yarn", ...}`` becomes a ``Scaling``."""
    scaling = kwargs.get("scaling")
    if not isinstance(scaling, Mapping):
        return kwargs  # None, a Scaling instance, or a wrong type RotaryEmbedding rejects
    from posenc.rotary.scaling import scaling_from_dict

    return {**kwargs, "scaling": scaling_from_dict(scaling)}


def stick_breaking_class():
    from posenc.softmax.stick_breaking import StickBreaking

    return StickBreaking


def segments_package():
    from posenc import segments

    return segments


def segment_method(name: str) -> Callable[..., PositionalEncoding]:
    """A constructor for segment method ``name`` (a class of :mod:`posenc.segments`) around a
    :class:`~posenc.rotary.RotaryEmbedding`: the method's keyword arguments and RoPE's
    (``head_dim``, ``rotary_dim``, ``base``, ``layout``, ``scaling``) in one signature."""
    method = getattr(segments_package(), name)
    rope_cls = rotary_package().RotaryEmbedding
    rope_params = {
        n: p
        for n, p in inspect.signature(rope_cls).parameters.items()
        if n not in ("device", "dtype")
    }
    method_params = {n: p for n, p in inspect.signature(method).parameters.items() if n != "rotary"}

    def build(**kwargs: Any) -> PositionalEncoding:
        rope = rope_cls(**{k: v for k, v in kwargs.items() if k in rope_params})
        encoding: PositionalEncoding = method(
            rope, **{k: v for k, v in kwargs.items() if k in method_params}
        )
        return encoding

    ordered = [rope_params["head_dim"], *method_params.values()]
    ordered += [p for n, p in rope_params.items() if n != "head_dim"]
    keyword = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in ordered[1:]]
    build.__signature__ = inspect.Signature([ordered[0], *keyword])  # type: ignore[attr-defined]
    build.__doc__ = method.__doc__
    return build


def grid_sizes_by_axis(d: ModelDims) -> dict[str, int]:
    """``height`` and ``width`` of a 2D grid encoding, from ``dims.grid``; ``ValueError``
    naming ``grid`` for a grid of other than two axes."""
    grid = grid_size(d)
    if len(grid) != 2:
        raise ValueError(
            f"grid must be (height, width) for this 2D encoding, got {grid}; encodings on "
            "any number of axes: sinusoidal_grid, rope_axial, learned_factorized"
        )
    return {"height": grid[0], "width": grid[1]}


def grid_size(d: ModelDims) -> tuple[int, ...]:
    """``dims.grid`` (every axis)."""
    if d.grid is None:  # build_encoding checks first; this guards a direct from_dims call
        raise ValueError("grid is required: set ModelDims.grid = (height, width)")
    return d.grid


def learned_rotation_kwargs(d: ModelDims) -> dict[str, Any]:
    """LieRE / ComRoPE on ``dims.grid``: one axis per entry, per-head generators, positions
    scaled by ``1 / size`` per axis (the references' unit-interval coordinates)."""
    grid = grid_size(d)
    return {
        "head_dim": d.resolved_head_dim,
        "num_axes": len(grid),
        "num_heads": d.num_heads,
        "position_scale": tuple(1.0 / n for n in grid),
    }


def coordinate_axes(d: ModelDims) -> int:
    """Coordinates per token of a Fourier encoding: (row, column) on a grid, else the position."""
    return 1 if d.grid is None else len(d.grid)


def half_width(name: str, dim: int) -> int:
    if dim % 2:
        raise ValueError(f"dim must be even for encoding {name!r} (cos and sin halves), got {dim}")
    return dim // 2


def build_dape(
    dims: ModelDims,
    inner: str | None = "alibi",
    hidden: int = 32,
    inner_kwargs: dict[str, Any] | None = None,
) -> PositionalEncoding:
    """DAPE around the registered bias ``inner`` (built for the same model; None: DAPE on
    the logits alone), one per layer as in the reference."""
    from posenc.scores.dape import DapeBias

    if inner is None:
        return DapeBias(dims.num_heads, None, hidden=hidden)
    spec = encoding_spec(inner)
    if spec.family != "bias":
        names = ", ".join(s.name for s in list_encodings() if s.family == "bias")
        raise ValueError(f"inner must name a pointwise bias ({names}) or None, got {inner!r}")
    built = build_encoding(inner, dims, inner_kwargs)
    assert isinstance(built, BiasEncoding)  # the spec's family is "bias"
    return DapeBias(dims.num_heads, built, hidden=hidden)


def build_inner(
    dims: ModelDims, inner: str | None, inner_kwargs: Mapping[str, Any] | None
) -> PositionalEncoding | None:
    """The registered encoding ``inner`` (built for the same model) that a softmax wrapper
    holds; None for none. ``ValueError`` naming ``inner`` for an unknown name or a segment
    method (its segments merge softmaxes of their own)."""
    if inner is None:
        return None
    names = {spec.name: spec for spec in list_encodings()}
    if not isinstance(inner, str) or inner not in names:
        raise ValueError(f"inner must name a registered encoding or be None, got {inner!r}")
    if names[inner].family in ("segments", "softmax"):
        raise ValueError(
            f"inner: {inner!r} cannot be wrapped (a segment method merges softmaxes of its own; "
            "a softmax wrapper goes outside: wrap it in pos_kwargs' inner of the other)"
        )
    if inner_kwargs is not None and not isinstance(inner_kwargs, Mapping):
        raise ValueError(f"inner_kwargs must be a dict or None, got {type(inner_kwargs).__name__}")
    return build_encoding(inner, dims, inner_kwargs)


def build_softcap(
    dims: ModelDims,
    inner: str | None = "rope",
    cap: float = 50.0,
    inner_kwargs: dict[str, Any] | None = None,
) -> PositionalEncoding:
    """Gemma 2's tanh soft-capping around the registered encoding ``inner`` (RoPE)."""
    from posenc.softmax.softcap import SoftCap, check_cap

    check_cap(cap)  # before building inner
    return SoftCap(build_inner(dims, inner, inner_kwargs), cap=cap)


def build_learned_sinks(
    dims: ModelDims,
    inner: str | None = "rope",
    init_std: float = 0.02,
    inner_kwargs: dict[str, Any] | None = None,
) -> PositionalEncoding:
    """gpt-oss's learned per-head sink logits around the registered encoding ``inner``
    (RoPE), one set per layer."""
    from posenc.softmax.sinks import LearnedSinks

    return LearnedSinks(dims.num_heads, build_inner(dims, inner, inner_kwargs), init_std=init_std)


def mrope_sections(d: ModelDims, name: str = "mrope") -> tuple[int, int, int]:
    """Qwen2-VL's split of the ``head_dim / 2`` pairs between (time, row, column) at any
    width: a quarter for time, the rest shared by row and column ([16, 24, 24] at 128;
    VideoRoPE's too)."""
    pairs = d.resolved_head_dim // 2
    if pairs < 3:
        raise ValueError(f"{name} needs head_dim >= 6 (three axes), got {d.resolved_head_dim}")
    spatial = (pairs - pairs // 4) // 2
    return pairs - 2 * spatial, spatial, spatial


def mrope_i_sections(d: ModelDims, name: str = "ilrope") -> tuple[int, int, int]:
    """MRoPE-I's (Qwen3-VL's) split of the ``head_dim / 2`` pairs: 5/16 each for row and column,
    the rest for time ([24, 20, 20] at head_dim 128)."""
    pairs = d.resolved_head_dim // 2
    if pairs < 3:
        raise ValueError(f"{name} needs head_dim >= 6 (three axes), got {d.resolved_head_dim}")
    spatial = max(1, pairs * 5 // 16)
    return pairs - 2 * spatial, spatial, spatial


def mhrope_sections(d: ModelDims) -> tuple[int, int, int]:
    """MHRoPE's key/value heads per axis: a quarter for time, the rest shared by row and column
    ([2, 3, 3] of 8 heads, the study's); left-over heads are unrotated."""
    heads = d.resolved_num_kv_heads
    if heads < 3:
        raise ValueError(
            f"mhrope needs num_kv_heads >= 3 (one head per axis at least), got {heads}"
        )
    time = max(1, heads // 4)
    return time, (heads - time) // 2, (heads - time) // 2


def msrope_axes_dims(d: ModelDims) -> tuple[int, int, int]:
    """Qwen-Image's channels per (frame, row, column) at any width: an eighth of the pairs
    for the frame, the rest halved ([16, 56, 56] at head_dim 128)."""
    pairs = d.resolved_head_dim // 2
    if pairs < 3 or d.resolved_head_dim % 2:
        raise ValueError(f"msrope needs an even head_dim >= 6, got {d.resolved_head_dim}")
    frame = max(1, pairs // 8)
    spatial = pairs - frame
    return 2 * frame, 2 * (spatial - spatial // 2), 2 * (spatial // 2)


def vocabulary_size(name: str, d: ModelDims) -> int:
    """``dims.vocab_size`` of an encoding that embeds token ids."""
    if d.vocab_size is None:
        raise ValueError(
            f"vocab_size is required for encoding {name!r} (it embeds token ids): build it "
            "through a model config, or give ModelDims(vocab_size=...)"
        )
    return d.vocab_size


#: The segment methods (posenc.segments) around RoPE: (name, class, paper, summary).
SEGMENT_METHODS = (
    (
        "self_extend",
        "SelfExtend",
        "Jin et al. 2024, https://arxiv.org/abs/2401.01325",
        "RoPE with a neighbor window at true positions and floor-divided (grouped) positions "
        "beyond it",
    ),
    (
        "dual_chunk",
        "DualChunk",
        "An et al. 2024 (DCA), https://arxiv.org/abs/2402.17463",
        "RoPE with intra-chunk, successive-chunk and inter-chunk positions (Dual Chunk Attention)",
    ),
    (
        "rerope",
        "ReRoPE",
        "Su 2023, https://github.com/bojone/rerope",
        "RoPE whose distances are capped at a window (leak=k: grow 1/k beyond it, Leaky ReRoPE)",
    ),
    (
        "lm_infinite",
        "LMInfinite",
        "Han et al. 2023, https://arxiv.org/abs/2308.16137",
        "RoPE in a Λ-shaped window: the first tokens at a capped distance and a recent window",
    ),
    (
        "sinks",
        "AttentionSinks",
        "Xiao et al. 2023 (StreamingLLM), https://arxiv.org/abs/2309.17453",
        "RoPE over attention sinks and a recent window, positions inside the rolling cache",
    ),
)
SEGMENT_SPECS = tuple(
    EncodingSpec(
        name,
        "segments",
        paper,
        f"{summary}; no training (causal)",
        functools.partial(segment_method, cls),
        lambda d: {"head_dim": d.resolved_head_dim},
        convert=rope_kwargs,
        causal_only=True,
    )
    for name, cls, paper, summary in SEGMENT_METHODS
)

#: Distances the registry's dynamic position bias covers at least (its table is rebuilt
#: every forward: 2·16384 − 1 MLP rows, about 1 ms at width 16).
DYNAMIC_REACH = 16_384
