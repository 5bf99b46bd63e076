"""The ``flex`` backend of a segment method: one FlexAttention call per segment, merged.

Each segment's call gets its rotated queries and keys and a block mask whose ``mask_mod`` is
the segment's region (on the tokens' positions) and the attention mask; FlexAttention returns
each call's log-sum-exp, and the outputs merge exactly:

.. math:: O_i = \\sum_s e^{\\ell_{s,i} - L_i} O_{s,i}, \\qquad L_i = \\log \\sum_s e^{\\ell_{s,i}}.

Forward only on the CPU (FlexAttention has no CPU backward in torch 2.13). The block masks are
built once per forward and shared by the layers.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from posenc.attention.context import AttentionContext
from posenc.attention.flex import compiled_flex
from posenc.attention.flex_mask import block_mask_by_rows

__all__ = ["flex_segments"]


def flex_segments(
    rotated: list[Any], v: Tensor, *, context: AttentionContext, scale: float, compile: bool
) -> Tensor:
    """Attention of the segments ``rotated`` (:class:`~posenc.attention.segmented.Rotated`)
    over ``v`` with FlexAttention, merged by log-sum-exp; rows that see no key are zero."""
    from torch.nn.attention.flex_attention import AuxRequest, flex_attention

    first = rotated[0]
    needs_grad = torch.is_grad_enabled() and (
        v.requires_grad or any(r.q.requires_grad or r.k.requires_grad for r in rotated)
    )
    if first.q.device.type == "cpu" and needs_grad:
        raise ValueError(
            "backend 'flex' runs forward only on the CPU (FlexAttention has no CPU backward in "
            f"torch {torch.__version__}); use backend='chunked' or 'auto' to train on the CPU, "
            "or call under torch.no_grad()"
        )
    mask = context.mask
    q_pos, k_pos = context.q_pos, context.k_pos
    visible = mask.mask_mod()

    def lookup(positions: Tensor, b: Tensor, index: Tensor) -> Tensor:
        return positions[b, index] if positions.dim() == 2 else positions[index]

    run: Any = compiled_flex() if compile else flex_attention
    outs, lses = [], []
    for index, part in enumerate(rotated):
        region = part.region

        def mask_mod(
            b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor, region: Any = region
        ) -> Tensor:
            inside = region.contains(lookup(q_pos, b, q_idx), lookup(k_pos, b, kv_idx))
            return inside & visible(b, h, q_idx, kv_idx)

        def build(mask_mod: Any = mask_mod) -> Any:
            return block_mask_by_rows(
                mask_mod, mask.batch, None, mask.q_len, mask.k_len, mask.device
            )

        block_mask = context.cached(("segment-flex-mask", index, region), build)
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the eager reference warns that it is slow
            out, aux = run(
                part.q,
                part.k,
                v,
                block_mask=block_mask,
                scale=scale,
                enable_gqa=part.k.shape[1] != part.q.shape[1],
                return_aux=AuxRequest(lse=True),
            )
        outs.append(out)
        lses.append(aux.lse)
    lse = torch.stack(lses).to(torch.float32 if first.q.dtype != torch.float64 else torch.float64)
    total = torch.logsumexp(lse, dim=0)
    seen = torch.isfinite(total)
    weights = torch.where(seen, (lse - total).exp(), torch.zeros_like(lse))
    merged = sum(
        (o.to(weights.dtype) * w.unsqueeze(-1) for o, w in zip(outs, weights, strict=True)),
        torch.zeros_like(outs[0], dtype=weights.dtype),
    )
    return merged.to(first.q.dtype)
