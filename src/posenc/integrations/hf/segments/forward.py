"""What runs in each forward of a model patched by
:func:`~posenc.integrations.hf.segments.patch_segments`.

* :class:`IdentityRotary` stands in for the decoder's rotary module: identity tables, so that
  every layer's q and k stay unrotated (and HF's cache stores unrotated keys), and the
  queries' positions recorded for the layers;
* :func:`segment_attention`, registered with HF's ``AttentionInterface`` under
  :data:`ATTENTION_NAME`: :func:`posenc.attention.attend` with the segment method on the
  layer's q, all its cached k and v, their positions and the key padding;
* :func:`key_padding_mask`, registered with ``AttentionMaskInterface`` under the same name:
  the 2-D key padding (HF drops the padding for a name without a mask builder);
* :func:`check_cache`, a forward pre-hook of the decoder: refuses caches that break the key
  positions.

Positions: the queries' are the ``position_ids`` the rotary module is called with (once per
forward), the keys' follow from the cache (the last key is the last query):
``k_pos = q_pos[:, -1:] − (k_len − 1) + arange(k_len)``. Reference: ``transformers`` 5.23
``AttentionInterface``, ``AttentionMaskInterface``, ``masking_utils``, ``cache_utils``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from posenc.attention.functional import attend
from posenc.integrations.hf._common import RotaryStandIn
from posenc.integrations.hf.segments._common import STATE, QueryPositions, SegmentState

__all__ = [
    "ATTENTION_NAME",
    "IdentityRotary",
    "RefusedMask",
    "check_cache",
    "key_padding_mask",
    "segment_attention",
]

#: The name under which the attention function and the mask builder are registered (a hub
#: kernel id would contain "/").
ATTENTION_NAME = "posenc_segments"


class IdentityRotary(RotaryStandIn):
    """Stands in for the decoder's rotary module: the original's tables as cos = 1, sin = 0
    (same shapes and dtype), and the positions recorded for the attention layers."""

    original: nn.Module
    state: SegmentState

    def __init__(self, original: nn.Module, state: SegmentState) -> None:
        super().__init__()
        # Kept out of the module tree: state_dict, .to() and named_modules are unchanged.
        self.__dict__["original"] = original
        self.__dict__["state"] = state

    @torch.no_grad()
    def forward(self, x: Tensor, position_ids: Tensor, *args: Any, **kwargs: Any) -> Any:
        _check_attention_implementation(self.state)
        self.state.positions = _read_positions(position_ids)
        tables = self.original(x, position_ids, *args, **kwargs)
        if not (isinstance(tables, tuple) and len(tables) == 2):
            raise ValueError(
                f"model: its rotary module {type(self.original).__name__} does not return "
                "(cos, sin); patch_segments cannot serve it"
            )
        cos, sin = tables
        return torch.ones_like(cos), torch.zeros_like(sin)


def _check_attention_implementation(state: SegmentState) -> None:
    """The tables are identity: a layer whose attention is not :data:`ATTENTION_NAME` (the
    model's ``set_attn_implementation`` called after patching) would run without RoPE."""
    for module in state.modules:
        config = getattr(module, "config", None)
        chosen = getattr(config, "_attn_implementation", ATTENTION_NAME)
        if chosen != ATTENTION_NAME:
            raise ValueError(
                f"model: its attention implementation is {chosen!r}, but the model is patched by "
                f"patch_segments (attention {ATTENTION_NAME!r}, identity rotary tables): it would "
                "run without RoPE. Call unpatch_segments(model) before set_attn_implementation "
                f"(then patch_segments again if wanted), or set_attn_implementation("
                f"{ATTENTION_NAME!r}) to go back"
            )


def _read_positions(position_ids: Tensor) -> QueryPositions:
    """Validate one forward's ``position_ids`` (one host read) and note default positions."""
    if not isinstance(position_ids, Tensor) or position_ids.dim() != 2:
        shape = getattr(position_ids, "shape", None)
        raise ValueError(
            "position_ids must be (batch, seq); multi-axis positions (M-RoPE, 3-D) are not "
            f"supported by patch_segments, got shape {None if shape is None else tuple(shape)}"
        )
    if position_ids.is_floating_point() or position_ids.numel() == 0:
        raise ValueError(f"position_ids must be non-empty integers, got {position_ids.dtype}")
    pos = position_ids.long()
    steps = pos.diff(dim=-1)
    # a row is consecutive, or left padding (position 0 repeated) then consecutive: steps 0…0 1…1
    valid = ((steps == 0) | (steps == 1)).all() & (steps.diff(dim=-1) >= 0).all()
    default = (steps == 1).all() & (pos == pos[:1]).all()
    is_valid, is_default, first = torch.stack([valid.long(), default.long(), pos[0, 0]]).tolist()
    if not is_valid:
        raise ValueError(
            "position_ids must increase by one along each row (left padding may repeat 0 first); "
            "packed sequences and right-padded generation are not supported by patch_segments"
        )
    return QueryPositions(pos, first if is_default else None)


@dataclass(frozen=True)
class RefusedMask:
    """What the mask builder returns for a mask it cannot serve: a layer that receives it
    raises (models such as Gemma2 build a sliding-window mask even when no layer uses it)."""

    reason: str


def segment_attention(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | RefusedMask | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """The attention function registered as :data:`ATTENTION_NAME` (HF's interface).

    Args:
        module: a patched attention layer (its method and positions hang on it).
        query: unrotated ``(batch, heads, q_len, head_dim)``.
        key, value: unrotated, all cached ``(batch, kv_heads, k_len, head_dim)``.
        attention_mask: the key padding ``(batch, k_len)`` (True = real token) from the
            registered mask builder, or None.
        scaling: the logit scale (default ``head_dim ** -0.5``).
        dropout: on the attention probabilities (HF passes 0 in eval mode).
        kwargs: HF's extras; ``sliding_window``, ``softcap`` and ``s_aux`` raise when set.

    Returns:
        ``(output (batch, q_len, heads, head_dim), None)``: HF's layout; no weights.
    """
    state: SegmentState | None = getattr(module, STATE, None)
    if state is None:
        raise ValueError(
            f"{type(module).__name__} runs attention {ATTENTION_NAME!r} but was not patched: "
            "use posenc.integrations.hf.segments.patch_segments(model)"
        )
    for name in ("sliding_window", "softcap", "s_aux"):
        if kwargs.get(name) is not None:
            raise ValueError(
                f"{name}: {type(module).__name__} asks for {name}={kwargs[name]!r}, which "
                "patch_segments does not serve (sliding windows, logit soft-capping and "
                "attention-sink logits are refused)"
            )
    positions = state.positions
    batch, _, q_len, _ = query.shape
    k_len = key.shape[-2]
    if positions is None or positions.q_pos.shape[-1] != q_len:
        raise ValueError(
            "position_ids: the rotary module was not called with this forward's positions "
            "(is the decoder's rotary_emb still the one patch_segments installed?)"
        )
    q_pos: Tensor | None = None
    k_pos: Tensor | None = None
    if positions.start != k_len - q_len:  # else the default positions: the fastest path
        q_pos = positions.q_pos.to(query.device).expand(batch, q_len)
        k_pos = q_pos[:, -1:] - (k_len - 1) + torch.arange(k_len, device=query.device)
    if isinstance(attention_mask, RefusedMask):
        raise ValueError(attention_mask.reason)
    if attention_mask is not None and attention_mask.dim() != 2:
        raise ValueError(
            "attention_mask: patch_segments takes the 2-D padding mask (batch, seq); got a "
            f"{attention_mask.dim()}-D mask (custom 4-D masks are not supported)"
        )
    out = attend(
        query,
        key,
        value,
        pos=state.method,
        q_pos=q_pos,
        k_pos=k_pos,
        causal=True,
        key_padding_mask=attention_mask,
        scale=scaling,
        dropout_p=dropout,
        backend=state.backend,
    )
    return out.transpose(1, 2).contiguous(), None


def key_padding_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: Any = 0,
    kv_offset: int = 0,
    mask_function: Any = None,
    attention_mask: Tensor | None = None,
    **kwargs: Any,
) -> Tensor | RefusedMask | None:
    """The mask builder registered as :data:`ATTENTION_NAME`: the ``(batch, kv_length)`` bool
    key padding (True = real token), or None when there is none.

    Only HF's plain causal mask is served; for another one (a sliding window, packed
    sequences, a bidirectional mask, a multimodal overlay) the layers that use it raise.
    """
    from transformers.masking_utils import causal_mask_function, prepare_padding_mask

    if mask_function is not causal_mask_function:
        name = getattr(mask_function, "__name__", type(mask_function).__name__)
        return RefusedMask(
            f"attention_mask: patch_segments serves HF's plain causal mask only; this layer "
            f"uses {name} (a sliding window, packed sequences, a bidirectional mask or a "
            "mask overlay)"
        )
    if attention_mask is None:
        return None
    padding = prepare_padding_mask(attention_mask, kv_length, kv_offset)
    assert padding is not None
    padding = padding[:, kv_offset : kv_offset + kv_length].to(torch.bool)
    return None if bool(padding.all()) else padding


def check_cache(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Forward pre-hook of the decoder: only caches whose keys are the last ``k_len`` tokens
    in order (dynamic, not sliding) keep the key positions right."""
    from transformers.cache_utils import Cache, StaticLayer

    for value in (*args, *kwargs.values()):
        if not isinstance(value, Cache):
            continue
        for layer in value.layers:
            if isinstance(layer, StaticLayer) or getattr(layer, "is_sliding", False):
                raise ValueError(
                    f"past_key_values: {type(value).__name__} with {type(layer).__name__} is "
                    "not supported by patch_segments (a static or sliding-window cache "
                    "breaks the key positions); use a DynamicCache (generate's default)"
                )
    state: SegmentState | None = getattr(module, STATE, None)
    if state is not None:
        state.positions = None  # the rotary stand-in sets this forward's
