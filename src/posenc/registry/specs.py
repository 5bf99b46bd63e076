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

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from posenc._validate import check_positive_int
from posenc.encoding.base import PositionalEncoding

__all__ = [
    "EncodingSpec",
    "Family",
    "ModelDims",
    "add_builtin_encodings",
    "build_encoding",
    "encoding_spec",
    "keyword_parameters",
    "list_encodings",
    "register_encoding",
    "sequence_encoding_spec",
    "unregister_encoding",
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
            vocab = check_positive_int("vocab_size", self.vocab_size)
            object.__setattr__(self, "vocab_size", vocab)
        if self.num_kv_heads is not None:
            kv_heads = check_positive_int("num_kv_heads", self.num_kv_heads)
            object.__setattr__(self, "num_kv_heads", kv_heads)
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
            for name, p in keyword_parameters(self.cls).items()
            if name not in filled
        }


def keyword_parameters(cls: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    """Named constructor arguments a user may set (no ``*args``, ``**kwargs``, device, dtype)."""
    skip = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return {
        name: p
        for name, p in inspect.signature(cls).parameters.items()
        if p.kind not in skip and name not in ("device", "dtype")
    }


#: the built-in encodings' names (:mod:`posenc.registry.catalogue`), which stay registered
_BUILTIN: set[str] = set()
_BY_NAME: dict[str, EncodingSpec] = {}


def add_builtin_encodings(specs: tuple[EncodingSpec, ...]) -> None:
    """Register the built-in encodings (the catalogue, at import of :mod:`posenc.registry`);
    they cannot be unregistered."""
    for spec in specs:
        register_encoding(spec)
        _BUILTIN.add(spec.name)


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
            "sequence model cannot use it (an image model can: EncoderClassifier("
            f"ModelConfig(pos={name!r}, grid=(height, width), patch_size=...), num_classes))"
        )
    return spec


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
            "(height, width), the grid of the image model it goes into (grid is None; "
            "through a model, ModelConfig(grid=(height, width)))"
        )
    user = {**(kwargs or {}), **more}
    randomized = user.pop("randomized", None)
    allowed = set(keyword_parameters(spec.cls))
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
