"""Encodings by name: the boundary where strings and dicts become typed objects.

The model and the lab choose an encoding by name plus keyword arguments; the registry fills
in what follows from the model's shape (``dim``, ``num_heads``, ``head_dim``,
``max_seq_len``, and for image models the patch ``grid``) and rejects unknown keyword
arguments.

Example::

    >>> pe = build_encoding("alibi", ModelDims(dim=64, num_heads=4), mode="symmetric")
    >>> type(pe).__name__
    'AlibiBias'
    >>> build_encoding("rope_2d", ModelDims(dim=64, num_heads=4, grid=(4, 6))).width
    6
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from posenc._validate import check_positive_int
from posenc.encoding.base import NoPE, PositionalEncoding
from posenc.encoding.protocols import BiasEncoding

__all__ = [
    "EncodingSpec",
    "Family",
    "ModelDims",
    "build_encoding",
    "encoding_spec",
    "list_encodings",
    "sequence_encoding_spec",
]

#: Where a method acts: the package that holds it (``posenc.<family>``) and the protocol it
#: derives from, one taxonomy for the registry, the folders and the README; attention reads
#: the protocols (:mod:`posenc.encoding.resolve`), never this name. ``softmax``: a transform
#: of attention's softmax (soft-capping and learned sinks around an ``inner`` encoding;
#: stick-breaking's weights in place of it). ``graph``: positions from structure
#: (:mod:`posenc.graph`), built by their own constructors rather than by name.
Family = Literal[
    "none",
    "additive",
    "rotary",
    "bias",
    "contextual",
    "scores",
    "softmax",
    "token_state",
    "segments",
]


@dataclass(frozen=True)
class ModelDims:
    """What an encoding may need to know about the model it goes into.

    Args:
        dim: the model's width.
        num_heads: attention heads.
        head_dim: channels per head (default ``dim // num_heads``).
        max_seq_len: the longest sequence (encodings with a finite table).
        causal: decoder (True) or encoder (False): picks causal/bidirectional defaults of
            biases.
        grid: the patch grid ``(height, width)`` of an image model, whose tokens are the
            patches in row-major order (token ``t`` at row ``t // width``, column
            ``t % width``), ``(time, height, width)`` of a video model, or one axis (the
            frames of a signal); None for a sequence model. Grid encodings
            (:attr:`EncodingSpec.needs_grid`) take their sizes from it: those defined on
            any number of axes (``sinusoidal_grid``, ``rope_axial``, ``learned_factorized``)
            read one axis per entry, the 2D ones (``sinusoidal_2d``, ``rope_2d``,
            ``rope_mixed``, ``learned_2d``) refuse a grid of other than two axes.
        vocab_size: the model's token vocabulary, for encodings that read token ids
            (complex-order embeddings replace the token embedding); None when unknown.
        num_kv_heads: key/value heads of grouped-query attention (default ``num_heads``), for
            encodings with per-key-head parameters (FoPE's coefficients).

    Raises:
        ValueError: naming ``grid`` unless it is None or two integers >= 1; naming
            ``vocab_size`` unless it is None or an integer >= 1; naming ``num_kv_heads``
            unless it is None or a positive divisor of ``num_heads``.
    """

    dim: int
    num_heads: int
    head_dim: int | None = None
    max_seq_len: int = 1024
    causal: bool = True
    grid: tuple[int, ...] | None = None
    vocab_size: int | None = None
    num_kv_heads: int | None = None

    def __post_init__(self) -> None:
        if self.vocab_size is not None:
            check_positive_int("vocab_size", self.vocab_size)
        if self.num_kv_heads is not None:
            check_positive_int("num_kv_heads", self.num_kv_heads)
            if self.num_heads % self.num_kv_heads:
                raise ValueError(
                    f"num_kv_heads ({self.num_kv_heads}) must divide num_heads ({self.num_heads})"
                )
        if self.grid is None:
            return
        if isinstance(self.grid, (str, bytes)) or not isinstance(self.grid, (tuple, list)):
            raise ValueError(f"grid must be None or 1 to 3 axis sizes, got {self.grid!r}")
        if not 1 <= len(self.grid) <= 3:
            raise ValueError(
                f"grid must be None or 1 to 3 axis sizes ((height, width); (time, height, "
                f"width)), got {self.grid!r}"
            )
        sizes = tuple(check_positive_int(f"grid[{i}]", n) for i, n in enumerate(self.grid))
        object.__setattr__(self, "grid", sizes)  # JSON gives a list

    @property
    def resolved_head_dim(self) -> int:
        return self.dim // self.num_heads if self.head_dim is None else self.head_dim

    @property
    def resolved_num_kv_heads(self) -> int:
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads


@dataclass(frozen=True)
class EncodingSpec:
    """One registered method: its class, paper and how model dims fill its arguments.

    Attributes:
        name, family, paper, summary: what ``posenc list`` shows.
        factory: returns the class (deferred import).
        from_dims: the constructor arguments that follow from a :class:`ModelDims`.
        convert: converts the user's keyword arguments once at this boundary (e.g. dict ->
            dataclass).
        needs_grid: the encoding is defined on a patch grid and takes its ``height`` and
            ``width`` from ``ModelDims.grid`` (2D sin-cos, axial 2D RoPE); building it
            without a grid raises ``ValueError`` naming ``grid``.
        causal_only: the method is defined for causal (decoder) attention only, e.g. xPos,
            whose decay turns into growth for keys after the query; encoders refuse it.
    """

    name: str
    family: Family
    paper: str
    summary: str
    factory: Callable[[], Callable[..., PositionalEncoding]]
    from_dims: Callable[[ModelDims], dict[str, Any]]
    convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    needs_grid: bool = False
    causal_only: bool = False

    @property
    def cls(self) -> Callable[..., PositionalEncoding]:
        """The constructor: a class, or a preset (a classmethod such as
        ``MultiAxisRotary.axial``: one class, several methods)."""
        return self.factory()

    def parameters(self) -> dict[str, Any]:
        """Keyword arguments a user may set, with their defaults (model-filled ones omitted)."""
        filled = {"dim", "num_heads", "head_dim", "max_seq_len"}
        example = ModelDims(
            dim=64, num_heads=4, grid=(4, 4) if self.needs_grid else None, vocab_size=256
        )
        filled |= set(self.from_dims(example))  # grid sizes, axes, Fourier in_dim, ...
        return {
            name: (None if p.default is inspect.Parameter.empty else p.default)
            for name, p in _keyword_parameters(self.cls).items()
            if name not in filled
        }


def _keyword_parameters(cls: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    """Named constructor arguments a user may set (no ``*args``, ``**kwargs``, device, dtype)."""
    skip = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return {
        name: p
        for name, p in inspect.signature(cls).parameters.items()
        if p.kind not in skip and name not in ("device", "dtype")
    }


def _additive():  # imports are deferred so that `posenc list` stays cheap
    from posenc import additive

    return additive


def _rotary():
    from posenc import rotary

    return rotary


def _bias():
    from posenc import bias

    return bias


def _contextual():
    from posenc import contextual

    return contextual


def _scores():
    from posenc import scores

    return scores


def _token_state():
    from posenc import token_state

    return token_state


def _hope():
    from posenc.rotary.hope import hope_rotary

    return hope_rotary


def _rope_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``scaling`` in posenc's dict form ``{"type": "yarn", ...}`` becomes a ``Scaling``."""
    scaling = kwargs.get("scaling")
    if not isinstance(scaling, Mapping):
        return kwargs  # None, a Scaling instance, or a wrong type RotaryEmbedding rejects
    from posenc.rotary.scaling import scaling_from_dict

    return {**kwargs, "scaling": scaling_from_dict(scaling)}


def _stick_breaking():
    from posenc.softmax.stick_breaking import StickBreaking

    return StickBreaking


def _segments():
    from posenc import segments

    return segments


def _segmented(name: str) -> Callable[..., PositionalEncoding]:
    """A constructor for segment method ``name`` (a class of :mod:`posenc.segments`) around a
    :class:`~posenc.rotary.RotaryEmbedding`: the method's keyword arguments and RoPE's
    (``head_dim``, ``rotary_dim``, ``base``, ``layout``, ``scaling``) in one signature."""
    method = getattr(_segments(), name)
    rope_cls = _rotary().RotaryEmbedding
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


def _grid(d: ModelDims) -> dict[str, int]:
    """``height`` and ``width`` of a 2D grid encoding, from ``dims.grid``; ``ValueError``
    naming ``grid`` for a grid of other than two axes."""
    grid = _grid_size(d)
    if len(grid) != 2:
        raise ValueError(
            f"grid must be (height, width) for this 2D encoding, got {grid}; encodings on "
            "any number of axes: sinusoidal_grid, rope_axial, learned_factorized"
        )
    return {"height": grid[0], "width": grid[1]}


def _grid_size(d: ModelDims) -> tuple[int, ...]:
    """``dims.grid`` (every axis)."""
    if d.grid is None:  # build_encoding checks first; this guards a direct from_dims call
        raise ValueError("grid is required: set ModelDims.grid = (height, width)")
    return d.grid


def _learned_rotation(d: ModelDims) -> dict[str, Any]:
    """LieRE / ComRoPE on ``dims.grid``: one axis per entry, per-head generators, positions
    scaled by ``1 / size`` per axis (the references' unit-interval coordinates)."""
    grid = _grid_size(d)
    return {
        "head_dim": d.resolved_head_dim,
        "num_axes": len(grid),
        "num_heads": d.num_heads,
        "position_scale": tuple(1.0 / n for n in grid),
    }


def _coordinate_axes(d: ModelDims) -> int:
    """Coordinates per token of a Fourier encoding: (row, column) on a grid, else the position."""
    return 1 if d.grid is None else len(d.grid)


def _half(name: str, dim: int) -> int:
    if dim % 2:
        raise ValueError(f"dim must be even for encoding {name!r} (cos and sin halves), got {dim}")
    return dim // 2


def _dape(
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
        names = ", ".join(s.name for s in _SPECS if s.family == "bias")
        raise ValueError(f"inner must name a pointwise bias ({names}) or None, got {inner!r}")
    built = build_encoding(inner, dims, inner_kwargs)
    assert isinstance(built, BiasEncoding)  # the spec's family is "bias"
    return DapeBias(dims.num_heads, built, hidden=hidden)


def _inner(
    dims: ModelDims, inner: str | None, inner_kwargs: Mapping[str, Any] | None
) -> PositionalEncoding | None:
    """The registered encoding ``inner`` (built for the same model) that a softmax wrapper
    holds; None for none. ``ValueError`` naming ``inner`` for an unknown name or a segment
    method (its segments merge softmaxes of their own)."""
    if inner is None:
        return None
    if not isinstance(inner, str) or inner not in _BY_NAME:
        raise ValueError(f"inner must name a registered encoding or be None, got {inner!r}")
    if _BY_NAME[inner].family in ("segments", "softmax"):
        raise ValueError(
            f"inner: {inner!r} cannot be wrapped (a segment method merges softmaxes of its own; "
            "a softmax wrapper goes outside: wrap it in pos_kwargs' inner of the other)"
        )
    if inner_kwargs is not None and not isinstance(inner_kwargs, Mapping):
        raise ValueError(f"inner_kwargs must be a dict or None, got {type(inner_kwargs).__name__}")
    return build_encoding(inner, dims, inner_kwargs)


def _softcap(
    dims: ModelDims,
    inner: str | None = "rope",
    cap: float = 50.0,
    inner_kwargs: dict[str, Any] | None = None,
) -> PositionalEncoding:
    """Gemma 2's tanh soft-capping around the registered encoding ``inner`` (RoPE)."""
    from posenc.softmax.softcap import SoftCap, check_cap

    check_cap(cap)  # before building inner
    return SoftCap(_inner(dims, inner, inner_kwargs), cap=cap)


def _learned_sinks(
    dims: ModelDims,
    inner: str | None = "rope",
    init_std: float = 0.02,
    inner_kwargs: dict[str, Any] | None = None,
) -> PositionalEncoding:
    """gpt-oss's learned per-head sink logits around the registered encoding ``inner``
    (RoPE), one set per layer."""
    from posenc.softmax.sinks import LearnedSinks

    return LearnedSinks(dims.num_heads, _inner(dims, inner, inner_kwargs), init_std=init_std)


def _mrope_sections(d: ModelDims, name: str = "mrope") -> tuple[int, int, int]:
    """Qwen2-VL's split of the ``head_dim / 2`` pairs between (time, row, column) at any
    width: a quarter for time, the rest shared by row and column ([16, 24, 24] at 128;
    VideoRoPE's too)."""
    pairs = d.resolved_head_dim // 2
    if pairs < 3:
        raise ValueError(f"{name} needs head_dim >= 6 (three axes), got {d.resolved_head_dim}")
    spatial = (pairs - pairs // 4) // 2
    return pairs - 2 * spatial, spatial, spatial


def _vocab_size(name: str, d: ModelDims) -> int:
    """``dims.vocab_size`` of an encoding that embeds token ids."""
    if d.vocab_size is None:
        raise ValueError(
            f"vocab_size is required for encoding {name!r} (it embeds token ids): build it "
            "through a model config, or give ModelDims(vocab_size=...)"
        )
    return d.vocab_size


#: The segment methods (posenc.segments) around RoPE: (name, class, paper, summary).
_SEGMENT_METHODS = (
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
_SEGMENT_SPECS = tuple(
    EncodingSpec(
        name,
        "segments",
        paper,
        f"{summary}; no training (causal)",
        functools.partial(_segmented, cls),
        lambda d: {"head_dim": d.resolved_head_dim},
        convert=_rope_kwargs,
        causal_only=True,
    )
    for name, cls, paper, summary in _SEGMENT_METHODS
)

_SPECS: tuple[EncodingSpec, ...] = (
    EncodingSpec(
        "nope",
        "none",
        "Kazemnejad et al. 2023, https://arxiv.org/abs/2305.19466",
        "no positional information (causal masks still leak order)",
        lambda: NoPE,
        lambda d: {},
    ),
    EncodingSpec(
        "sinusoidal",
        "additive",
        "Vaswani et al. 2017, https://arxiv.org/abs/1706.03762",
        "fixed sin/cos of position added to token embeddings",
        lambda: _additive().SinusoidalEncoding,
        lambda d: {"dim": d.dim},
    ),
    EncodingSpec(
        "scaled_sinusoidal",
        "additive",
        "Hua et al. 2022, https://arxiv.org/abs/2202.10447",
        "sinusoidal times a learned scalar gain",
        lambda: _additive().ScaledSinusoidalEncoding,
        lambda d: {"dim": d.dim},
    ),
    EncodingSpec(
        "cape",
        "additive",
        "Likhomanenko et al. 2021 (CAPE), https://arxiv.org/abs/2106.03143",
        "sinusoidal of continuous positions, in training shifted globally and per token and "
        "scaled per sequence (max_global_shift, max_local_shift, max_global_scaling: 0, 0, 1 "
        "by default, the reference's)",
        lambda: _additive().CAPE,
        lambda d: {"dim": d.dim},
    ),
    EncodingSpec(
        "learned",
        "additive",
        "Gehring et al. 2017, https://arxiv.org/abs/1705.03122; Devlin et al. 2019",
        "a trained table of absolute position vectors (finite length, resizable)",
        lambda: _additive().LearnedPositionalEmbedding,
        lambda d: {"dim": d.dim, "max_seq_len": d.max_seq_len},
    ),
    EncodingSpec(
        "complex_order",
        "additive",
        "Wang et al. 2020, https://arxiv.org/abs/1912.12333",
        "token embedding r_j·e^{i(ω_j·pos + θ_j)} per token, real view [Re | Im] (replaces "
        "the token embedding)",
        lambda: _additive().ComplexOrderEmbedding,
        lambda d: {"vocab_size": _vocab_size("complex_order", d), "dim": d.dim},
    ),
    EncodingSpec(
        "rope",
        "rotary",
        "Su et al. 2021, https://arxiv.org/abs/2104.09864",
        "rotate q and k pairs by position-proportional angles",
        lambda: _rotary().RotaryEmbedding,
        lambda d: {"head_dim": d.resolved_head_dim},
        convert=_rope_kwargs,
    ),
    EncodingSpec(
        "xpos",
        "rotary",
        "Sun et al. 2022, https://arxiv.org/abs/2212.10554",
        "RoPE whose q·k decays as ζ^((n − m)/B) per channel pair (for causal attention)",
        lambda: _rotary().XPos,
        lambda d: {"head_dim": d.resolved_head_dim},
        causal_only=True,
    ),
    EncodingSpec(
        "pope",
        "rotary",
        "Gopalakrishnan et al. 2025 (PoPE), https://arxiv.org/abs/2509.10534",
        "polar coordinates: softplus(q_c)·softplus(k_c)·cos((i − j)θ_c − δ_hc), magnitudes "
        "from content and phases from position, a learned phase bias per head and channel",
        lambda: _rotary().PolarEmbedding,
        lambda d: {"head_dim": d.resolved_head_dim, "num_heads": d.num_heads},
    ),
    EncodingSpec(
        "fope",
        "rotary",
        "Hua et al. 2024 (FoPE), https://arxiv.org/abs/2412.17739",
        "Fourier position embedding: each pair's cos and sin are learned per-KV-head mixes of "
        "the cos and sin of all frequencies; those slower than one period per max_seq_len are "
        "dropped (their pairs do not rotate); vLLM's FourierRotaryEmbedding",
        lambda: _rotary().FourierRotaryEmbedding,
        lambda d: {
            "head_dim": d.resolved_head_dim,
            "num_kv_heads": d.resolved_num_kv_heads,
            "train_length": d.max_seq_len,
        },
    ),
    EncodingSpec(
        "hope",
        "rotary",
        "Chen et al. 2025 (HoPE, ACL), https://arxiv.org/abs/2410.21216",
        "RoPE whose low-frequency pairs (period 2π/θ_i > the training length, max_seq_len) "
        "do not rotate: only high-frequency pairs carry position",
        _hope,
        lambda d: {"head_dim": d.resolved_head_dim, "train_length": d.max_seq_len},
    ),
    EncodingSpec(
        "alibi",
        "bias",
        "Press et al. 2022, https://arxiv.org/abs/2108.12409",
        "linear distance penalty with a geometric slope per head",
        lambda: _bias().AlibiBias,
        lambda d: {"num_heads": d.num_heads, "mode": "causal" if d.causal else "symmetric"},
    ),
    EncodingSpec(
        "t5",
        "bias",
        "Raffel et al. 2020, https://arxiv.org/abs/1910.10683",
        "learned scalar per head and log-spaced distance bucket, shared by all layers",
        lambda: _bias().T5RelativeBias,
        lambda d: {"num_heads": d.num_heads, "bidirectional": not d.causal},
    ),
    EncodingSpec(
        "kerple",
        "bias",
        "Chi et al. 2022, https://arxiv.org/abs/2205.09921",
        "learned log (or power) kernel of the distance per head, -r1·ln(1 + r2·|i-j|)",
        lambda: _bias().KerpleBias,
        lambda d: {"num_heads": d.num_heads},
    ),
    EncodingSpec(
        "sandwich",
        "bias",
        "Chi et al. 2023, https://arxiv.org/abs/2212.10356",
        "parameter-free: the sinusoidal encoding's dot product Σ cos((i-j)ω_k) - d/2, per head",
        lambda: _bias().SandwichBias,
        lambda d: {"num_heads": d.num_heads, "head_dim": d.resolved_head_dim},
    ),
    EncodingSpec(
        "fire",
        "bias",
        "Li et al. 2023, https://arxiv.org/abs/2310.04418",
        "learned MLP of the progressively normalized log distance ψ(i-j)/ψ(max(i, L·s))",
        lambda: _bias().FireBias,
        lambda d: {"num_heads": d.num_heads},
    ),
    EncodingSpec(
        "dynamic",
        "bias",
        "x-transformers DynamicPositionBias; Liu et al. 2022 (Swin-v2), "
        "https://arxiv.org/abs/2111.09883",
        "MLP of the (optionally log-scaled) signed distance, one bias per head",
        lambda: _bias().DynamicPositionBias,
        lambda d: {
            "num_heads": d.num_heads,
            "hidden": max(d.dim // 4, 1),
            # the reach of its distance table, not a training length: the MLP is meant to
            # be evaluated beyond T (test-long sweeps go to 16k)
            "max_seq_len": max(d.max_seq_len, _DYNAMIC_REACH),
        },
    ),
    EncodingSpec(
        "shaw",
        "contextual",
        "Shaw et al. 2018, https://arxiv.org/abs/1803.02155",
        "learned relative key and value vectors for clipped distances",
        lambda: _contextual().ShawRelative,
        lambda d: {"head_dim": d.resolved_head_dim},
    ),
    EncodingSpec(
        "xl",
        "contextual",
        "Dai et al. 2019, https://arxiv.org/abs/1901.02860",
        "Transformer-XL relative attention: u, v and projected sinusoidal R_{i-j}",
        lambda: _contextual().TransformerXLRelative,
        lambda d: {"num_heads": d.num_heads, "head_dim": d.resolved_head_dim, "dim": d.dim},
    ),
    EncodingSpec(
        "deberta",
        "contextual",
        "He et al. 2021 (DeBERTa), https://arxiv.org/abs/2006.03654",
        "disentangled attention: content-to-position and position-to-content terms over "
        "log-bucketed relative positions, 1/√(3d) (v3 defaults)",
        lambda: _contextual().DebertaRelative,
        lambda d: {"num_heads": d.num_heads, "head_dim": d.resolved_head_dim, "dim": d.dim},
    ),
    EncodingSpec(
        "cope",
        "scores",
        "Golovneva et al. 2024 (CoPE), https://arxiv.org/abs/2405.18719",
        "contextual positions: a sigmoid gate per key, positions counted over gated keys, "
        "interpolated position embeddings (for causal attention)",
        lambda: _scores().CoPE,
        lambda d: {"num_heads": d.num_heads, "head_dim": d.resolved_head_dim},
        causal_only=True,
    ),
    EncodingSpec(
        "dape",
        "scores",
        "Zheng et al. 2024 (DAPE), https://arxiv.org/abs/2405.14722",
        "MLP over every pair's logits and static bias across heads, around any bias "
        "(inner: alibi, kerple, fire, ...)",
        lambda: _dape,
        lambda d: {"dims": d},
    ),
    EncodingSpec(
        "softcap",
        "softmax",
        "Gemma Team 2024 (Gemma 2), https://arxiv.org/abs/2408.00118",
        "tanh soft-capping of the logits, c·tanh(s/c) (c = 50), around any encoding "
        "(inner: rope by default)",
        lambda: _softcap,
        lambda d: {"dims": d},
    ),
    EncodingSpec(
        "learned_sinks",
        "softmax",
        "OpenAI 2025 (gpt-oss), https://arxiv.org/abs/2508.10925",
        "a learned sink logit per head in every row's softmax, with no value, around any "
        "encoding (inner: rope by default)",
        lambda: _learned_sinks,
        lambda d: {"dims": d},
    ),
    EncodingSpec(
        "fox",
        "token_state",
        "Lin et al. 2025 (Forgetting Transformer, ICLR), "
        "https://github.com/zhixuan-lin/forgetting-transformer",
        "a forget gate per head and token from the hidden state; logits += Σ log f over the "
        "tokens between key and query (data-dependent ALiBi; for causal attention)",
        lambda: _token_state().ForgettingGate,
        lambda d: {"dim": d.dim, "num_heads": d.num_heads},
        causal_only=True,
    ),
    EncodingSpec(
        "stick_breaking",
        "softmax",
        "Tan et al. 2024 (stick-breaking attention), https://arxiv.org/abs/2410.17980",
        "no softmax and no positions: key j takes σ(q·k) of what the keys between it and the "
        "query left, the rest times a learned vector (for causal attention)",
        lambda: _stick_breaking(),
        lambda d: {"num_heads": d.num_heads, "head_dim": d.resolved_head_dim},
        causal_only=True,
    ),
    *_SEGMENT_SPECS,
    EncodingSpec(
        "sinusoidal_2d",
        "additive",
        "He et al. 2021 (MAE), https://arxiv.org/abs/2111.06377; "
        "Dosovitskiy et al. 2020 (ViT), https://arxiv.org/abs/2010.11929",
        "fixed sin/cos of a patch's row and column added to its embedding (needs a grid)",
        lambda: _additive().Sinusoidal2D,
        lambda d: {**_grid(d), "dim": d.dim},
        needs_grid=True,
    ),
    EncodingSpec(
        "sinusoidal_grid",
        "additive",
        "He et al. 2021 (MAE), https://arxiv.org/abs/2111.06377; "
        "Vaswani et al. 2017, https://arxiv.org/abs/1706.03762",
        "fixed sin/cos of each grid axis (row, column; time) in a chosen channel layout "
        "(MAE, timm, positional-encodings, factorized); any grid size per call (needs a grid)",
        lambda: _additive().SinusoidalGrid,
        lambda d: {"num_axes": len(_grid_size(d)), "dim": d.dim},
        needs_grid=True,
    ),
    EncodingSpec(
        "learned_2d",
        "additive",
        "Dosovitskiy et al. 2020 (ViT), https://arxiv.org/abs/2010.11929",
        "a learned table over the patch grid (row-major), resampled to a new grid bicubically "
        "as timm's resample_abs_pos_embed (needs a grid)",
        lambda: _additive().LearnedGrid,
        lambda d: {"size": tuple(_grid(d).values()), "dim": d.dim},
        needs_grid=True,
    ),
    EncodingSpec(
        "learned_factorized",
        "additive",
        "Feichtenhofer et al. 2022 (MAE-ST), https://arxiv.org/abs/2205.09113",
        "a sum of learned per-axis tables, R[row] + C[column] (groups of axes: MAE-ST's "
        "separable space + time) (needs a grid)",
        lambda: _additive().FactorizedLearned,
        lambda d: {"size": _grid_size(d), "dim": d.dim},
        needs_grid=True,
    ),
    EncodingSpec(
        "fourier",
        "additive",
        "Tancik et al. 2020, https://arxiv.org/abs/2006.10739",
        "random Gaussian Fourier features [cos 2πBv | sin 2πBv] of a token's coordinates "
        "(its position, or its row and column on a grid)",
        lambda: _additive().GaussianFourierFeatures,
        lambda d: {"in_dim": _coordinate_axes(d), "num_features": _half("fourier", d.dim)},
    ),
    EncodingSpec(
        "learnable_fourier",
        "additive",
        "Li et al. 2021, https://arxiv.org/abs/2106.02795",
        "learned Fourier features of a token's coordinates through a GELU MLP (Algorithm 1)",
        lambda: _additive().LearnableFourierFeatures,
        lambda d: {"in_dim": _coordinate_axes(d), "dim": d.dim},
    ),
    EncodingSpec(
        "rope_axial",
        "rotary",
        "Heo et al. 2024 (RoPE-ViT), https://arxiv.org/abs/2403.13298",
        "axial RoPE on multi-axis grid positions: pair groups rotate by the column and the row "
        "(MultiAxisRotary.axial; any grid per call) (needs a grid)",
        lambda: _rotary().MultiAxisRotary.axial,
        lambda d: {"head_dim": d.resolved_head_dim, "num_axes": len(_grid_size(d))},
        needs_grid=True,
    ),
    EncodingSpec(
        "rope_mixed",
        "rotary",
        "Heo et al. 2024 (RoPE-ViT, RoPE-Mixed), https://arxiv.org/abs/2403.13298",
        "learnable per-head frequencies over row and column, one set per layer "
        "(MultiAxisRotary.mixed) (needs a grid)",
        lambda: _rotary().MultiAxisRotary.mixed,
        lambda d: (
            {"head_dim": d.resolved_head_dim, "num_heads": d.num_heads}
            if _grid(d)  # (row, column) only: refuses another grid naming it
            else {}
        ),
        needs_grid=True,
    ),
    EncodingSpec(
        "mrope",
        "rotary",
        "Wang et al. 2024 (Qwen2-VL), https://arxiv.org/abs/2409.12191",
        "M-RoPE: pairs rotate by a token's time, row or column (positions (3, batch, seq) "
        "from posenc.positions.multimodal.mrope_position_ids; text-only: three equal axes); "
        "interleaved=True is Qwen3-VL's layout (MultiAxisRotary.mrope)",
        lambda: _rotary().MultiAxisRotary.mrope,
        lambda d: {"head_dim": d.resolved_head_dim, "sections": _mrope_sections(d)},
        convert=_rope_kwargs,
    ),
    EncodingSpec(
        "videorope",
        "rotary",
        "Wei et al. 2025 (VideoRoPE), https://arxiv.org/abs/2502.05173",
        "M-RoPE's frequencies with time on the lowest and row/column interleaved on the "
        "highest (positions (3, batch, seq), diagonal layout and temporal spacing from "
        "posenc.positions.multimodal_layouts.videorope_position_ids) (MultiAxisRotary.videorope)",
        lambda: _rotary().MultiAxisRotary.videorope,
        lambda d: {"head_dim": d.resolved_head_dim, "sections": _mrope_sections(d, "videorope")},
        convert=_rope_kwargs,
    ),
    EncodingSpec(
        "rope_2d",
        "rotary",
        "Heo et al. 2024, https://arxiv.org/abs/2403.13298",
        "axial RoPE: half the pairs rotate by a patch's column, half by its row (needs a grid)",
        lambda: _rotary().AxialRotary2D,
        lambda d: {"head_dim": d.resolved_head_dim, **_grid(d)},
        needs_grid=True,
    ),
    EncodingSpec(
        "liere",
        "rotary",
        "Ostmeier et al. 2024 (LieRE), https://arxiv.org/abs/2406.10322",
        "learned rotations exp(Σ p_a A_a) with free skew-symmetric block generators per axis "
        "and head, one set per layer; not relative (LearnedRotation.liere) (needs a grid)",
        lambda: _rotary().LearnedRotation.liere,
        _learned_rotation,
        needs_grid=True,
    ),
    EncodingSpec(
        "comrope_ap",
        "rotary",
        "Yu et al. 2025 (ComRoPE-AP), https://arxiv.org/abs/2506.03737",
        "learned rotations exp(Σ p_a A_a), block j rotating by axis j mod N (commuting: "
        "relative), one set per layer (LearnedRotation.comrope_ap) (needs a grid)",
        lambda: _rotary().LearnedRotation.comrope_ap,
        _learned_rotation,
        needs_grid=True,
    ),
    EncodingSpec(
        "comrope_ld",
        "rotary",
        "Yu et al. 2025 (ComRoPE-LD), https://arxiv.org/abs/2506.03737",
        "learned rotations exp(Σ p_a A_a), one generator per block scaled per axis "
        "(commuting: relative), one set per layer (LearnedRotation.comrope_ld) (needs a grid)",
        lambda: _rotary().LearnedRotation.comrope_ld,
        _learned_rotation,
        needs_grid=True,
    ),
)
_BUILTIN = frozenset(spec.name for spec in _SPECS)
_BY_NAME = {spec.name: spec for spec in _SPECS}


def list_encodings() -> tuple[EncodingSpec, ...]:
    """Every registered encoding, in the order of the docs (user additions last)."""
    return tuple(_BY_NAME.values())


def register_encoding(spec: EncodingSpec) -> None:
    """Make a user's encoding buildable by name (models, the lab, ``posenc list``).

    Raises:
        ValueError: if ``spec`` is not an :class:`EncodingSpec` or its name is taken.
    """
    if not isinstance(spec, EncodingSpec):
        raise ValueError(f"spec must be an EncodingSpec, got {type(spec).__name__}")
    if spec.name in _BY_NAME:
        raise ValueError(f"an encoding named {spec.name!r} is already registered")
    _BY_NAME[spec.name] = spec


def unregister_encoding(name: str) -> None:
    """Remove an encoding added by :func:`register_encoding` (built-in ones stay)."""
    if name in _BUILTIN:
        raise ValueError(f"{name!r} is a built-in encoding and cannot be removed")
    if name not in _BY_NAME:
        raise ValueError(f"no encoding named {name!r} is registered")
    del _BY_NAME[name]


def encoding_spec(name: str) -> EncodingSpec:
    """The spec registered under ``name``; ``ValueError`` listing the names otherwise."""
    if name not in _BY_NAME:
        raise ValueError(f"unknown encoding {name!r}; choose one of {', '.join(_BY_NAME)}")
    return _BY_NAME[name]


def sequence_encoding_spec(name: str, argument: str = "encodings") -> EncodingSpec:
    """:func:`encoding_spec` of an encoding a sequence model (no image grid) can use;
    ``ValueError`` naming ``argument`` for an unknown name or a grid encoding."""
    spec = encoding_spec(name)
    if spec.needs_grid:
        raise ValueError(
            f"{argument}: {name!r} encodes positions on an image grid (ModelDims.grid); a "
            "sequence model cannot use it (the ViT experiment can)"
        )
    return spec


#: Distances the registry's dynamic position bias covers at least (its table is rebuilt
#: every forward: 2·16384 − 1 MLP rows, about 1 ms at width 16).
_DYNAMIC_REACH = 16_384


def build_encoding(
    name: str, dims: ModelDims, kwargs: Mapping[str, Any] | None = None, **more: Any
) -> PositionalEncoding:
    """Construct encoding ``name`` for a model of shape ``dims``.

    ``dims.causal`` picks the defaults that differ between decoders and encoders: ALiBi
    ``mode`` (causal / symmetric) and T5 ``bidirectional`` buckets (False / True, as T5's
    decoder and encoder). ``dims.grid`` gives grid encodings their height and width.

    Keyword arguments (``kwargs`` and ``**more``) override the model-filled defaults;
    unknown ones raise ``ValueError`` naming them and listing the allowed ones. One keyword
    is every encoding's: ``randomized=L`` (or ``{"max_length": L, "evaluation": "ordered"}``)
    wraps it in :class:`~posenc.encoding.randomized.RandomizedPositions` (Ruoss et al. 2023), e.g.
    ``ModelConfig(pos="rope", pos_kwargs={"randomized": 256})``.

    Raises:
        ValueError: for an unknown name or argument, or naming ``grid`` when the encoding
            needs a grid (:attr:`EncodingSpec.needs_grid`) and ``dims.grid`` is None.
    """
    spec = encoding_spec(name)
    if spec.needs_grid and dims.grid is None:
        raise ValueError(
            f"encoding {name!r} is defined on a patch grid: set ModelDims.grid = "
            "(height, width), the grid of the image model it goes into (grid is None)"
        )
    user = {**(kwargs or {}), **more}
    randomized = user.pop("randomized", None)
    allowed = set(_keyword_parameters(spec.cls))
    unknown = sorted(set(user) - allowed)
    if unknown:
        raise ValueError(
            f"unknown argument(s) {', '.join(unknown)} for encoding {name!r}; "
            f"allowed: {', '.join(sorted(allowed)) or 'none'}"
        )
    if spec.convert is not None:
        user = spec.convert(user)
    encoding = spec.cls(**{**spec.from_dims(dims), **user})
    return encoding if randomized is None else _randomized(encoding, randomized)


def _randomized(encoding: PositionalEncoding, option: object) -> PositionalEncoding:
    """Wrap ``encoding`` in :class:`~posenc.encoding.randomized.RandomizedPositions` from the
    ``randomized`` option: ``L`` (an int) or ``{"max_length": L, "evaluation": ...}``."""
    from posenc.encoding.randomized import RandomizedPositions

    if isinstance(option, Mapping):
        unknown = sorted(set(option) - {"max_length", "evaluation"})
        if unknown or "max_length" not in option:
            raise ValueError(
                "randomized must be max_length (an int) or a mapping with max_length and "
                f"optionally evaluation; got keys {sorted(option)}"
            )
        settings = dict(option)
    elif isinstance(option, int) and not isinstance(option, bool):
        settings = {"max_length": option}
    else:
        raise ValueError(
            f"randomized must be max_length (an int) or a mapping, got {type(option).__name__}"
        )
    table = getattr(encoding, "max_seq_len", None)
    length = settings["max_length"]
    if isinstance(table, int) and isinstance(length, int) and table < length:
        raise ValueError(
            f"randomized max_length {length} exceeds the encoding's table "
            f"(max_seq_len={table}): give max_seq_len >= max_length"
        )
    wrapped: Any = RandomizedPositions(encoding, **settings)
    return wrapped  # it delegates every hook to encoding
