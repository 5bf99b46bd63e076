"""Encodings by name: the boundary where strings and dicts become typed objects.

The model and the lab choose an encoding by name plus keyword arguments; the registry fills
in what follows from the model's shape (``dim``, ``num_heads``, ``head_dim``,
``max_seq_len``) and rejects unknown keyword arguments.

Example::

    >>> pe = build_encoding("alibi", ModelDims(dim=64, num_heads=4), mode="symmetric")
    >>> type(pe).__name__
    'AlibiBias'
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from posenc.base import NoPE, PositionalEncoding

__all__ = [
    "EncodingSpec",
    "Family",
    "ModelDims",
    "build_encoding",
    "encoding_spec",
    "list_encodings",
]

#: Where a method acts, for listings and docs; attention dispatches on hooks, not on this.
Family = Literal["none", "additive", "rotary", "bias", "contextual"]


@dataclass(frozen=True)
class ModelDims:
    """What an encoding may need to know about the model it goes into."""

    dim: int
    num_heads: int
    head_dim: int | None = None
    max_seq_len: int = 1024
    #: decoder (True) or encoder (False): picks causal/bidirectional defaults of biases.
    causal: bool = True

    @property
    def resolved_head_dim(self) -> int:
        return self.dim // self.num_heads if self.head_dim is None else self.head_dim


@dataclass(frozen=True)
class EncodingSpec:
    """One registered method: its class, paper and how model dims fill its arguments."""

    name: str
    family: Family
    paper: str
    summary: str
    factory: Callable[[], type[PositionalEncoding]]
    from_dims: Callable[[ModelDims], dict[str, Any]]
    #: converts the user's keyword arguments once at this boundary (e.g. dict -> dataclass).
    convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    @property
    def cls(self) -> type[PositionalEncoding]:
        return self.factory()

    def parameters(self) -> dict[str, Any]:
        """Keyword arguments a user may set, with their defaults (model-filled ones omitted)."""
        filled = {"dim", "num_heads", "head_dim", "max_seq_len"}
        return {
            name: (None if p.default is inspect.Parameter.empty else p.default)
            for name, p in _keyword_parameters(self.cls).items()
            if name not in filled
        }


def _keyword_parameters(cls: type) -> dict[str, inspect.Parameter]:
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


def _rope_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``scaling`` in posenc's dict form ``{"type": "yarn", ...}`` becomes a ``Scaling``."""
    scaling = kwargs.get("scaling")
    if not isinstance(scaling, Mapping):
        return kwargs  # None, a Scaling instance, or a wrong type RotaryEmbedding rejects
    from posenc.rotary.scaling import scaling_from_dict

    return {**kwargs, "scaling": scaling_from_dict(scaling)}


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
        "learned",
        "additive",
        "Gehring et al. 2017, https://arxiv.org/abs/1705.03122; Devlin et al. 2019",
        "a trained table of absolute position vectors (finite length, resizable)",
        lambda: _additive().LearnedPositionalEmbedding,
        lambda d: {"dim": d.dim, "max_seq_len": d.max_seq_len},
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
        "shaw",
        "contextual",
        "Shaw et al. 2018, https://arxiv.org/abs/1803.02155",
        "learned relative key and value vectors for clipped distances",
        lambda: _bias().ShawRelative,
        lambda d: {"head_dim": d.resolved_head_dim},
    ),
    EncodingSpec(
        "xl",
        "contextual",
        "Dai et al. 2019, https://arxiv.org/abs/1901.02860",
        "Transformer-XL relative attention: u, v and projected sinusoidal R_{i-j}",
        lambda: _bias().TransformerXLRelative,
        lambda d: {"num_heads": d.num_heads, "head_dim": d.resolved_head_dim, "dim": d.dim},
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


def build_encoding(
    name: str, dims: ModelDims, kwargs: Mapping[str, Any] | None = None, **more: Any
) -> PositionalEncoding:
    """Construct encoding ``name`` for a model of shape ``dims``.

    ``dims.causal`` picks the defaults that differ between decoders and encoders: ALiBi
    ``mode`` (causal / symmetric) and T5 ``bidirectional`` buckets (False / True, as T5's
    decoder and encoder).

    Keyword arguments (``kwargs`` and ``**more``) override the model-filled defaults;
    unknown ones raise ``ValueError`` naming them and listing the allowed ones.
    """
    spec = encoding_spec(name)
    user = {**(kwargs or {}), **more}
    allowed = set(_keyword_parameters(spec.cls))
    unknown = sorted(set(user) - allowed)
    if unknown:
        raise ValueError(
            f"unknown argument(s) {', '.join(unknown)} for encoding {name!r}; "
            f"allowed: {', '.join(sorted(allowed)) or 'none'}"
        )
    if spec.convert is not None:
        user = spec.convert(user)
    return spec.cls(**{**spec.from_dims(dims), **user})
