"""posenc's RoPE inside an HF ``transformers`` model: :func:`patch_rotary`, :func:`unpatch_rotary`.

Every text rotary module of the model (any submodule whose class is an HF
``…RotaryEmbedding`` with the ``forward(x, position_ids[, layer_type])`` contract, at any depth
and under any attribute name: one per decoder, per stack, per layer, per theta) is replaced by
an :class:`HFRotaryAdapter` that returns posenc's tables in the format HF's module returned
(read off HF's module once: half-split or interleaved cos/sin, half-width cos/sin, or complex
``freqs_cis``). The sequence rotaries of
:data:`~posenc.integrations.hf.sequence.SEQUENCE_CONVENTIONS` (conformers' and CLVP's
``forward(hidden_states)``, positions 0…seq−1) are replaced by
:class:`~posenc.integrations.hf.sequence.SequenceRotaryAdapter`. With ``vision=True`` the
axial vision rotaries of
:data:`~posenc.integrations.hf.vision.VISION_CONVENTIONS` (2-D / 3-D patch coordinates) are
replaced too, by :class:`~posenc.integrations.hf.vision.VisionRotaryAdapter`. Other rotary
modules without the text contract (and vision ones without ``vision=True``) are refused unless
``keep_non_text=True`` says to leave them to HF: nothing is skipped silently.
Reference: ``transformers`` 5.23.0 (``LlamaRotaryEmbedding``, ``Gemma3RotaryEmbedding``,
``CohereRotaryEmbedding``, ``GptOssRotaryEmbedding``, ``Llama4TextRotaryEmbedding``).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Literal

import torch
from torch import Tensor, nn

from posenc.integrations.hf._common import RotaryStandIn, config_head_dim, rope_layer_types
from posenc.integrations.hf.config import mrope_from_config
from posenc.integrations.hf.conventions import UNDECLARED_MROPE_AXES
from posenc.integrations.hf.rope_parameters import RopeParameters, read_rope_parameters
from posenc.integrations.hf.sequence import (
    SequenceRotaryAdapter,
    is_sequence_rotary,
    sequence_adapter,
)
from posenc.integrations.hf.vision import VisionRotaryAdapter, is_vision_rotary, vision_adapter
from posenc.rotary.multi_axis import MultiAxisRotary
from posenc.rotary.rope import RotaryEmbedding

__all__ = [
    "HFRotaryAdapter",
    "TableFormat",
    "is_text_rotary",
    "patch_rotary",
    "rotary_modules",
    "unpatch_rotary",
]

#: How an HF rotary module hands its tables to attention: ``"half"`` cos/sin
#: ``(…, seq, rotary_dim)`` as ``cat(c, c)`` (Llama), ``"interleaved"`` as
#: ``repeat_interleave(c, 2)`` (Cohere), ``"half_width"`` one value per pair (gpt-oss),
#: ``"complex"`` ``freqs_cis = A·e^{iφ}`` (Llama 4, DeepSeek-V2).
TableFormat = Literal["half", "interleaved", "half_width", "complex"]


_PASSTHROUGH = frozenset({"config", "layer_types", "mrope_section"})


class HFRotaryAdapter(nn.Module):
    """HF-style rotary module backed by posenc: ``forward(x, position_ids[, layer_type])``.

    .. math:: \\cos = A·\\cos(m θ'), \\quad \\sin = A·\\sin(m θ')

    in HF's ``table_format`` (see :data:`TableFormat`). Phases are float64 (posenc), then
    rounded once to ``x.dtype``. Length-dependent scalings (dynamic NTK, LongRoPE) follow HF's
    runtime rules inside each rope. ``mscales`` (PhiMoE's LongRoPE): the attention factor is
    ``long`` when ``max(position_ids) + 1 > L0`` else ``short``, replacing the rope's.

    Args:
        rope: a half-layout :class:`RotaryEmbedding` (the one used without a layer type).
        original: the HF module it replaces, kept (unregistered) for :func:`unpatch_rotary`.
        layer_ropes: per layer type ropes (``rotary_emb(x, positions, layer_type)``).
        table_format: the format HF's module returns.
        mscales: ``(short, long, L0)`` or ``None``.

    Shape:
        - x: any tensor; only its dtype is read.
        - position_ids: ``(batch, seq)``.
        - Output: cos and sin ``(batch, seq, rotary_dim)`` (``rotary_dim // 2`` half-width) in
          ``x.dtype``, or one complex ``(batch, seq, rotary_dim // 2)`` tensor.
    """

    original: nn.Module | None

    def __init__(
        self,
        rope: RotaryEmbedding,
        original: nn.Module | None = None,
        *,
        layer_ropes: Mapping[str, RotaryEmbedding] | None = None,
        table_format: TableFormat = "half",
        mscales: tuple[float, float, int] | None = None,
        mrope: MultiAxisRotary | None = None,
        layer_mropes: Mapping[str, MultiAxisRotary] | None = None,
    ) -> None:
        super().__init__()
        self.rope = rope
        self.layer_ropes = nn.ModuleDict(dict(layer_ropes or {}))
        self.layer_mropes = nn.ModuleDict(dict(layer_mropes or {}))
        self.table_format = table_format
        self.mscales = mscales
        self.mrope = mrope
        # Kept out of the module tree so that state_dict, .to() and named_modules ignore it.
        self.__dict__["original"] = original

    def __getattr__(self, name: str) -> Any:
        # Model code reads a few data attributes of its rotary module (granite_swa keys its
        # tables by rotary_emb.config's theta); those come from HF's module, nothing computed.
        original = self.__dict__.get("original")
        if name in _PASSTHROUGH and original is not None:
            return getattr(original, name)
        return super().__getattr__(name)

    @torch.no_grad()
    def forward(
        self, x: Tensor, position_ids: Tensor, layer_type: str | None = None
    ) -> tuple[Tensor, Tensor] | Tensor:
        rope = self.rope
        if layer_type is not None and len(self.layer_ropes):
            if layer_type not in self.layer_ropes:
                raise ValueError(
                    f"layer_type {layer_type!r} has no RoPE; the config's rope_parameters give "
                    f"{sorted(self.layer_ropes)}"
                )
            rope = self.layer_ropes[layer_type]  # type: ignore[assignment]
        mrope = self.mrope
        if layer_type is not None and layer_type in self.layer_mropes:
            mrope = self.layer_mropes[layer_type]  # type: ignore[assignment]
        if mrope is not None:  # (axes, batch, seq) t/h/w positions; text: all rows equal
            positions = position_ids.expand(mrope.num_axes, *position_ids.shape[-2:])
            cos, sin = mrope.rotary_tables(positions, torch.float64)
            cos, sin = cos[:, 0], sin[:, 0]  # (batch, seq, pairs), A included
        elif self.table_format == "half" and self.mscales is None:
            cos, sin = rope.cos_sin(position_ids, x.dtype)
            return cos.to(x.dtype), sin.to(x.dtype)
        else:
            cos, sin = rope.cos_sin(position_ids, torch.float64)
            pairs = rope.rotary_dim // 2
            cos, sin = cos[..., :pairs], sin[..., :pairs]  # (batch, seq, pairs), A included
        if self.mscales is not None:
            short, long, original_max = self.mscales
            seq_len = int(position_ids.max()) + 1
            factor = (long if seq_len > original_max else short) / rope.attention_factor
            cos, sin = cos * factor, sin * factor
        if self.table_format == "complex":
            return torch.complex(cos.float(), sin.float())
        if self.table_format == "interleaved":
            cos, sin = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
        elif self.table_format == "half":
            cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
        return cos.to(x.dtype), sin.to(x.dtype)


def is_text_rotary(module: nn.Module) -> bool:
    """HF's text rotary contract: ``forward(x, position_ids[, layer_type])``, and not a
    vision tower's ``axial`` rope type (Qwen2-VL's vision rotary shares the signature)."""
    if isinstance(module, HFRotaryAdapter):
        return True
    if isinstance(module, (VisionRotaryAdapter, SequenceRotaryAdapter)):
        return False
    params_of = getattr(module.__dict__.get("config"), "rope_parameters", None)
    if isinstance(params_of, Mapping) and params_of.get("rope_type") == "axial":
        return False
    params = list(inspect.signature(module.forward).parameters)
    return len(params) >= 2 and params[1] in ("position_ids", "position_ids_or_positions")


def rotary_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Every rotary module of ``model`` (name, module): posenc's adapters
    (:class:`HFRotaryAdapter`, :class:`~posenc.integrations.hf.vision.VisionRotaryAdapter`,
    :class:`~posenc.integrations.hf.sequence.SequenceRotaryAdapter`) and every submodule whose
    class name ends with ``RotaryEmbedding`` or ``RotaryPositionalEmbedding`` (HF's naming),
    posenc's own modules (an adapter's rope) excluded."""
    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, _ADAPTERS)
        or (
            type(module).__name__.endswith(("RotaryEmbedding", "RotaryPositionalEmbedding"))
            and not type(module).__module__.startswith("posenc")
        )
    ]


_ADAPTERS = (HFRotaryAdapter, VisionRotaryAdapter, SequenceRotaryAdapter)


def _table_format(
    original: nn.Module, config: Any, pairs: int, layer_type: str | None = None
) -> TableFormat:
    """The format of HF's module's tables, read off one call at positions 0…2 (for
    ``layer_type``, else the first layer type the module holds a table for)."""
    buffers = [b for b in original.buffers() if b.is_floating_point()]
    device = buffers[0].device if buffers else torch.device("cpu")
    x = torch.zeros(1, device=device)
    positions = torch.arange(3, device=device)[None]
    kwargs = {}
    types = rope_layer_types(config)
    if types and "layer_type" in inspect.signature(original.forward).parameters:
        held = [t for t in types if _inv_freq_numel(original, config, t) is not None]
        kwargs["layer_type"] = layer_type or (held or types)[0]
    out = original(x, positions, **kwargs)
    if isinstance(out, Tensor) and out.is_complex():
        return "complex"
    cos = out[0].reshape(-1, out[0].shape[-1])[1].double()  # position 1
    width = cos.shape[-1]
    if width == pairs:
        return "half_width"
    if width >= 4 and torch.isclose(cos[0], cos[1]) and not torch.isclose(cos[0], cos[2]):
        return "interleaved"
    return "half"


def _mrope(
    original: nn.Module, config: Any, read: RopeParameters, layer_type: str | None, axes: int
) -> MultiAxisRotary:
    """posenc's M-RoPE for HF's M-RoPE module: which of t, h, w each frequency pair reads is
    read off one call at t, h, w = 1, 2, 3 (one position per section; each half of each
    pair's sine matched to the axis it rotates by), the frequencies come from the config.
    Consecutive or interleaved sections of ``mrope_section`` (Qwen2-VL, Qwen3-VL, whatever
    ``mrope_interleaved`` says) give :func:`mrope_from_config`; any other map with both
    halves of every pair on one axis (ERNIE-4.5-VL: h and w alternate, then t) gives that
    pair→axis map with the same frequencies. Pairs whose two halves read different axes
    (HunYuan-VL) are not a rotation on image positions: refused. ``axes``: how many
    position rows the module reads (``len(mrope_section)``, else
    :data:`~posenc.integrations.hf.conventions.UNDECLARED_MROPE_AXES`)."""
    from posenc.rotary.multi_axis import mrope_axes

    sections = list(read.mrope[0]) if read.mrope is not None else None
    source = read.rotary_embedding()
    inv_freq = source.inv_freq("cpu")  # (pairs,) float64, scaled
    pairs = inv_freq.numel()
    table_format = _table_format(original, config, pairs, layer_type)
    buffers = [b for b in original.buffers() if b.is_floating_point()]
    device = buffers[0].device if buffers else torch.device("cpu")
    positions = torch.arange(1, axes + 1, device=device).view(axes, 1, 1)
    kwargs = {} if layer_type is None else {"layer_type": layer_type}
    _, sin = original(torch.zeros(1, device=device), positions, **kwargs)
    sin = sin.reshape(-1).double().cpu()
    halves = {"interleaved": (sin[0::2], sin[1::2]), "half": (sin[:pairs], sin[pairs:])}.get(
        table_format,
        (sin[:pairs], sin[:pairs]),  # half-width: one value per pair
    )
    steps = torch.arange(1, axes + 1, dtype=torch.float64)
    candidates = torch.sin(steps[:, None] * inv_freq)  # (axes, pairs)
    candidates = candidates * source.attention_factor
    first, second = ((candidates - h[:pairs]).abs().argmin(dim=0).tolist() for h in halves)
    name = type(original).__name__
    if first != second:
        raise ValueError(
            f"{name} rotates the two halves of its frequency pairs by different axes (first "
            f"halves {first}, second halves {second}, mrope_section {sections}): not a "
            "rotation per pair on image positions, which posenc's M-RoPE is; not patched"
        )
    for interleaved in (False, True):
        if sections is not None and first == mrope_axes(sections, interleaved=interleaved):
            return mrope_from_config(config, layer_type=layer_type, interleaved=interleaved)
    if source.scaling is not None and source.scaling.depends_on_length:
        raise ValueError(
            f"{name} assigns its frequency pairs to the axes {first}, not sections of "
            f"mrope_section {sections}, under a length-dependent rope type: not patched"
        )
    frequencies = torch.zeros(pairs, axes, dtype=torch.float64)  # pair i reads axis first[i]
    frequencies[torch.arange(pairs), torch.tensor(first)] = inv_freq
    return MultiAxisRotary(source.rotary_dim, frequencies, attention_factor=source.attention_factor)


def _inv_freq_numel(original: nn.Module, config: Any, layer_type: str | None = None) -> int | None:
    """How many frequencies HF's module rotates (``{layer_type}_inv_freq`` per layer type;
    ``None`` for a layer type the module holds no table for: no layer of that type)."""
    wanted = "inv_freq" if layer_type is None else f"{layer_type}_inv_freq"
    for name, buffer in original.named_buffers(recurse=False):
        ours = name == wanted or (layer_type is None and name.endswith("_inv_freq"))
        if ours and not name.endswith("original_inv_freq"):
            return buffer.numel()
    return None if layer_type is not None else config_head_dim(config) // 2


def _module_config(module: nn.Module, model: nn.Module) -> Any:
    """The config an HF rotary module was built from: its own ``config`` (per-theta copies,
    sub-models' configs), else the model's text config."""
    own = module.__dict__.get("config")
    if own is not None and hasattr(own, "to_dict"):
        return own
    config = getattr(model, "config", None)
    if config is None:
        raise ValueError("model has no config: pass rope explicitly")
    text = getattr(config, "get_text_config", None)
    return text() if callable(text) else config


def _adapter(module: nn.Module, model: nn.Module, rope: RotaryEmbedding | None) -> HFRotaryAdapter:
    """The adapter replacing one HF rotary module (validated; nothing replaced yet)."""
    original = module.original if isinstance(module, HFRotaryAdapter) else module
    if original is None:
        raise ValueError(f"{type(module).__name__} holds no HF rotary module to patch")
    config = _module_config(original, model) if rope is None or hasattr(model, "config") else None
    layer_ropes: dict[str, RotaryEmbedding] = {}
    types = rope_layer_types(config) if config is not None else []
    keys: list[str | None] = [*types] or [None]  # a flat rope dict: one read, no layer type
    reads = [read_rope_parameters(config, t) for t in keys] if config is not None else []
    mropes: dict[str, MultiAxisRotary] = {}
    undeclared = UNDECLARED_MROPE_AXES.get(str(getattr(config, "model_type", "")))
    if reads and (undeclared or any(r.mrope is not None for r in reads)):
        keyed = list(zip(types, reads, strict=True)) if types else [(None, reads[0])]
        for layer_type, read in keyed:
            if layer_type is not None and _inv_freq_numel(original, config, layer_type) is None:
                continue  # no layer of this type: HF's module holds no table for it
            if read.mrope is None and not undeclared:
                raise ValueError(f"layer type {layer_type!r} has no mrope_section: not patched")
            axes = len(read.mrope[0]) if read.mrope is not None else int(undeclared or 0)
            mropes[layer_type or ""] = _mrope(original, config, read, layer_type, axes)
    mrope = next(iter(mropes.values()), None)
    if rope is None:
        layer_ropes = {t: r.rotary_embedding() for t, r in zip(types, reads, strict=False) if types}
        rope = layer_ropes[types[0]] if types else reads[0].rotary_embedding()
    elif mrope is not None:
        raise ValueError("the model's config is M-RoPE (mrope_section): patch it with rope=None")
    if not isinstance(rope, RotaryEmbedding):
        raise ValueError(f"rope must be a posenc RotaryEmbedding, got {type(rope).__name__}")
    if rope.layout != "half":
        raise ValueError(
            "rope.layout must be 'half': HF attention applies rotate_half; convert an interleaved "
            "checkpoint's q/k weights with posenc.rotary.permute_rotary_weight instead"
        )
    if config is not None and rope.head_dim != config_head_dim(config):
        raise ValueError(
            f"rope.head_dim {rope.head_dim} != the model's head_dim {config_head_dim(config)}"
        )
    checks = list(layer_ropes.items()) if layer_ropes else [(None, rope)]
    for layer_type, r in checks:
        hf_pairs = _inv_freq_numel(original, config, layer_type) if config is not None else None
        if hf_pairs is not None and 2 * hf_pairs != r.rotary_dim:
            raise ValueError(
                f"rope.rotary_dim {r.rotary_dim} != the {2 * hf_pairs} channels the model's "
                "attention rotates"
            )
    held = [r for t, r in checks if t is None or _inv_freq_numel(original, config, t) is not None]
    pairs = (held or [rope])[0].rotary_dim // 2
    table_format = _table_format(original, config, pairs) if config is not None else "half"
    return HFRotaryAdapter(
        rope,
        original,
        layer_ropes=layer_ropes,
        table_format=table_format,
        mscales=reads[0].mscales if reads else None,
        mrope=mrope,
        layer_mropes=mropes if types else None,
    )


def patch_rotary(
    model: nn.Module,
    rope: RotaryEmbedding | None = None,
    *,
    keep_non_text: bool = False,
    vision: bool = False,
) -> nn.Module:
    """Make an HF model use posenc's RoPE in every layer (in place).

    Replaces every text rotary module (see the module docstring: any depth, any attribute
    name) by an :class:`HFRotaryAdapter`, so every attention layer rotates q and k with
    posenc's tables (float64 phases, attention factor applied, ``x.dtype``, HF's format).
    With ``rope=None`` each module's rope comes from the config it was built from
    (:func:`rope_from_config`; one rope per layer type for nested per-layer-type
    ``rope_parameters``): logits then equal the unpatched model's to ≤ 5e-6 in float32 for
    the families listed as equal in ``docs/hf.md``. Undo with :func:`unpatch_rotary`.

    Args:
        model: an HF model with at least one text rotary module.
        rope: one half-layout :class:`RotaryEmbedding` for every text rotary module; its
            ``head_dim`` and ``rotary_dim`` must match the model's. Interleaved ropes raise:
            convert the checkpoint with :func:`posenc.rotary.permute_rotary_weight`.
        keep_non_text: leave rotary modules without the text contract (vision / audio towers)
            to HF instead of refusing the model.
        vision: also replace the axial vision rotaries that have a convention in
            :data:`~posenc.integrations.hf.vision.VISION_CONVENTIONS` (each checked against
            one call of HF's module first; ``rope`` does not apply to them). Off by default:
            the vision towers then keep HF's tables.

    Returns:
        ``model``, patched. Every module is validated before any is replaced.

    Example::

        >>> model = patch_rotary(LlamaForCausalLM(config))  # doctest: +SKIP
    """
    if rope is not None and not isinstance(rope, RotaryEmbedding):
        raise ValueError(f"rope must be a posenc RotaryEmbedding, got {type(rope).__name__}")
    segments = _segments_stand_in(model)
    if segments is not None:
        under = (
            " over patch_rotary's rope" if isinstance(segments.original, HFRotaryAdapter) else ""
        )
        raise ValueError(
            f"model is patched by patch_segments{under} (its rotary module is posenc's identity "
            "stand-in): unpatch_segments(model) first, then patch_rotary, then patch_segments "
            "again"
        )
    found = rotary_modules(model)
    if not found:
        raise ValueError(
            "model has no rotary module (a submodule whose class name ends with "
            "'RotaryEmbedding', HF's naming): nothing to patch"
        )
    if not isinstance(vision, bool):
        raise ValueError(f"vision must be True or False, got {vision!r}")
    axial = [(n, m) for n, m in found if vision and is_vision_rotary(m)]
    sequence = [(n, m) for n, m in found if is_sequence_rotary(m)]
    other = [n for n, m in found if not is_text_rotary(m) and (n, m) not in axial + sequence]
    if other and not keep_non_text:
        hint = "" if vision else "; vision=True replaces the axial vision rotaries posenc knows"
        raise ValueError(
            f"rotary modules {other} do not take (x, position_ids) (vision / audio 2D rotaries, "
            f"not a text RoPE); pass keep_non_text=True to leave them to HF{hint}"
        )
    text = [(name, module) for name, module in found if is_text_rotary(module)]
    if not text and not axial and not sequence:
        raise ValueError(f"model has no text rotary module (found only {other})")
    adapters: dict[int, nn.Module] = {id(m): _adapter(m, model, rope) for _, m in text}
    adapters.update({id(m): vision_adapter(m) for _, m in axial})
    config = getattr(model, "config", None)
    adapters.update({id(m): sequence_adapter(m, config) for _, m in sequence})
    # a module registered under several names (named_modules lists it once) is replaced under
    # every one of them, by one adapter, so the name the model calls it by is patched too
    _replace(model, adapters)
    return model


def _replace(model: nn.Module, by_id: Mapping[int, nn.Module]) -> None:
    """Put ``by_id[id(m)]`` in place of every module ``m`` of ``model`` it names, under every
    name ``m`` is registered by (sharing kept: aliases get the same replacement)."""
    found = [
        (name, by_id[id(module)])
        for name, module in model.named_modules(remove_duplicate=False)
        if id(module) in by_id and name
    ]
    for name, replacement in found:
        parent_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent_name), attr, replacement)


def unpatch_rotary(model: nn.Module) -> nn.Module:
    """Undo :func:`patch_rotary`: put every original HF rotary module back (in place)."""
    segments = _segments_stand_in(model)
    if segments is not None:
        if isinstance(segments.original, HFRotaryAdapter):
            raise ValueError(
                "model is patched by patch_segments over patch_rotary's rope: "
                "unpatch_segments(model) first, then unpatch_rotary(model)"
            )
        raise ValueError(
            "model is not patched by patch_rotary; it is patched by patch_segments "
            "(unpatch_segments(model) undoes that)"
        )
    patched = [m for _, m in model.named_modules() if isinstance(m, _ADAPTERS)]
    if not patched or any(m.original is None for m in patched):
        raise ValueError(
            "model is not patched by patch_rotary (its rotary modules are HF's own): nothing to "
            "undo"
        )
    _replace(model, {id(m): m.original for m in patched if m.original is not None})
    return model


def _segments_stand_in(model: nn.Module) -> RotaryStandIn | None:
    """The rotary stand-in of :func:`~posenc.integrations.hf.segments.patch_segments` in
    ``model``, or None."""
    return next((m for m in model.modules() if isinstance(m, RotaryStandIn)), None)
