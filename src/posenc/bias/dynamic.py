"""Dynamic position bias: an MLP of the (optionally log-scaled) query-key distance."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._validate import (
    check_floating_dtype,
    check_in_choices,
    check_integer_valued,
    check_positive_int,
    validating_values,
)
from posenc.encoding.base import empty_linear
from posenc.encoding.protocols import BiasEncoding

__all__ = ["DynamicMode", "DynamicPositionBias", "dynamic_distance_feature"]

DynamicMode = Literal["signed", "symmetric"]
_MODES: tuple[DynamicMode, ...] = ("signed", "symmetric")


def dynamic_distance_feature(
    distance: Tensor, *, log_distance: bool = False, mode: DynamicMode = "signed"
) -> Tensor:
    """The MLP input for a relative distance ``r = i − j`` (query minus key position).

    .. math::
        u = r \\text{ (signed) or } \\lvert r \\rvert \\text{ (symmetric)};\\qquad
        \\text{log\\_distance: } u \\mapsto \\operatorname{sign}(u) \\ln(1 + \\lvert u \\rvert)

    The sign-preserving log is x-transformers' ``log_distance`` and Swin-v2's log-spaced
    coordinates (Swin-v2 first rescales ``r`` to ``[-8, 8]`` by the window size and uses
    ``log2(1 + |r|) / log2(8)``; here natural log and no rescaling, as x-transformers).

    Args:
        distance: floating tensor of ``i − j``.
        log_distance: apply the sign-preserving log.
        mode: ``"signed"`` (past and future keys differ) or ``"symmetric"`` (``|r|``).
    """
    check_in_choices("mode", mode, _MODES)
    u = distance.abs() if mode == "symmetric" else distance
    if log_distance:
        u = torch.sign(u) * torch.log1p(u.abs())
    return u


class DynamicPositionBias(BiasEncoding):
    """An MLP of the relative distance, evaluated once per distance and gathered.

    .. math::
        b_h(i, j) = \\text{MLP}(u(i - j))_h,\\qquad \\text{MLP} = \\text{Linear}(d, H) \\circ
        \\big[\\text{SiLU} \\circ \\text{LN}? \\circ \\text{Linear}(d, d)\\big]^{\\text{depth}-1}
        \\circ \\text{SiLU} \\circ \\text{LN}? \\circ \\text{Linear}(1, d)

    with ``u`` from :func:`dynamic_distance_feature` (``i = q_pos``, ``j = k_pos``), the
    LayerNorms only with ``norm=True``. The architecture, the distance convention (``i − j``,
    positive for past keys, every sign allowed: one module serves causal and bidirectional
    attention) and the ``log_distance`` feature follow x-transformers'
    ``DynamicPositionBias(dim, heads, depth, log_distance, norm)`` (x_transformers 2.31,
    ``x_transformers.py``), against which it is tested with copied weights. The idea of a
    small MLP over log-spaced relative coordinates is Swin Transformer v2's continuous
    position bias (Liu et al. 2022, https://arxiv.org/abs/2111.09883; 2-D, ReLU, then
    ``16·sigmoid``, none of which is used here).

    Differences from x-transformers: ``hidden`` is given directly (x-transformers passes
    ``dim // 4`` of the model width); the first LayerNorm has a bias (zero-initialized; the
    reference's first norm has none, its later ones do); ``mode="symmetric"`` (an MLP of
    ``|i − j|``) is an addition; distances are limited to the table below. Like
    x-transformers, one instance serves every layer (``shared_across_layers``).

    The MLP runs over every distance ``−(max_seq_len − 1) … max_seq_len − 1`` in
    :meth:`prepare_bias`, which attention calls once per call (so the table follows the
    parameters and carries their gradients); :meth:`bias_at` is a gather from that table,
    so FlexAttention's ``score_mod`` serves it like T5's table (a per-element MLP of depth 2
    would cost ``hidden²`` flops per score). The table costs ``(2·max_seq_len − 1)·hidden²``
    multiply-adds per call. Positions must be whole numbers in ``[0, max_seq_len)``;
    anything else raises.

    Args:
        num_heads: number of attention heads H (≥ 1).
        hidden: MLP width d (≥ 1; x-transformers uses the model width // 4).
        depth: number of ``Linear → [LayerNorm] → SiLU`` blocks (≥ 1; default 2).
        log_distance: feed ``sign(u)·ln(1 + |u|)`` instead of ``u``.
        norm: LayerNorm after each hidden Linear.
        mode: ``"signed"`` (default, x-transformers) or ``"symmetric"``.
        max_seq_len: positions lie in ``[0, max_seq_len)``; the table has
            ``2·max_seq_len − 1`` rows (≥ 1).
        device, dtype: of the parameters; the bias has the parameters' dtype by default.

    Attributes:
        mlp: the ``nn.Sequential`` above (PyTorch's default init, as x-transformers).

    Shape:
        ``bias(q_pos, k_pos)``: ``(num_heads, q_len, k_len)`` for 1-D positions, else
        ``(batch, num_heads, q_len, k_len)``.

    Example::

        >>> dpb = DynamicPositionBias(4, hidden=16, log_distance=True)
        >>> dpb.bias(torch.arange(3, 5), torch.arange(5)).shape  # 2 new tokens, cache of 5
        torch.Size([4, 2, 5])
    """

    shared_across_layers: ClassVar[bool] = True
    #: ``bias_at(h, q, k)`` is a function of ``q − k`` alone (attention serves it from one
    #: table of the forward's distances: :mod:`posenc.attention.structured`).
    depends_on_distance_only: ClassVar[bool] = True

    def __init__(
        self,
        num_heads: int,
        *,
        hidden: int = 64,
        depth: int = 2,
        log_distance: bool = False,
        norm: bool = False,
        mode: DynamicMode = "signed",
        max_seq_len: int = 2048,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.hidden = check_positive_int("hidden", hidden)
        self.depth = check_positive_int("depth", depth)
        self.max_seq_len = check_positive_int("max_seq_len", max_seq_len)
        check_in_choices("mode", mode, _MODES)
        self.mode: DynamicMode = mode
        self.log_distance = bool(log_distance)
        self.norm = bool(norm)
        check_floating_dtype("dtype", dtype)
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        layers: list[nn.Module] = []
        width = 1
        for _ in range(depth):
            layers.append(empty_linear(width, hidden, **factory))  # drawn by reset_parameters
            if norm:
                layers.append(nn.LayerNorm(hidden, **factory))
            layers.append(nn.SiLU())
            width = hidden
        layers.append(empty_linear(hidden, num_heads, **factory))
        self.mlp = nn.Sequential(*layers)
        self.reset_parameters()
        # Per-call tables with their autograd graph: rebuilt by every prepare_bias, never
        # copied or pickled (see __getstate__).
        self._tables: dict[tuple[torch.device, torch.dtype], Tensor] = {}

    def reset_parameters(self) -> None:
        """PyTorch's default ``nn.Linear`` / ``nn.LayerNorm`` init, as x-transformers."""
        for layer in self.mlp:
            if isinstance(layer, (nn.Linear, nn.LayerNorm)):
                layer.reset_parameters()

    def distance_table(
        self, device: torch.device | str, dtype: torch.dtype, *, span: int | None = None
    ) -> Tensor:
        """``MLP(u(r))`` for ``r = −S … S``: ``(2S + 1, H)``, ``S = span`` (default
        ``max_seq_len − 1``, the whole table).

        Row ``r + S`` holds distance ``r = i − j``. Computed in the wider of ``dtype`` and the
        parameters' dtype, rounded once to ``dtype``; differentiable.
        """
        param_dtype = next(self.parameters()).dtype
        wide = torch.promote_types(param_dtype, dtype)
        span = self.max_seq_len - 1 if span is None else span
        r = torch.arange(-span, span + 1, device=device, dtype=wide)
        x = dynamic_distance_feature(r, log_distance=self.log_distance, mode=self.mode)[:, None]
        for layer in self.mlp:
            if isinstance(layer, nn.Linear):
                x = F.linear(x, layer.weight.to(wide), layer.bias.to(wide))
            elif isinstance(layer, nn.LayerNorm):
                weight, bias = layer.weight.to(wide), layer.bias.to(wide)
                x = F.layer_norm(x, layer.normalized_shape, weight, bias, layer.eps)
            else:
                x = layer(x)
        return x.to(dtype)

    def prepare_bias(
        self, device: torch.device, dtype: torch.dtype, *, reach: int | None = None
    ) -> None:
        """Evaluate the MLP over the distances :meth:`bias_at` may read (:meth:`distance_table`):
        ``|i − j| < reach`` when attention knows the call needs no more (its ``k_len`` at
        default positions), else every distance of the table.

        Rebuilt on every call: the parameters may have changed since the last one, and a
        table from an earlier forward may have had its graph freed by ``backward``.
        """
        span = self.max_seq_len - 1 if reach is None else min(reach, self.max_seq_len) - 1
        self._tables[(torch.device(device), dtype)] = self.distance_table(
            device, dtype, span=max(span, 0)
        )

    def bias_at(self, head: Tensor, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        """``table[i − j + S, head]`` (positions are whole, in range; ``S`` the table's span)."""
        table = self._tables[(head.device, dtype)]  # filled by prepare_bias
        index = (q_pos - k_pos).to(torch.long) + (table.shape[0] - 1) // 2
        return table[index, head]

    def check_bias_positions(self, q_pos: Tensor, k_pos: Tensor) -> None:
        super().check_bias_positions(q_pos, k_pos)
        self.validate_positions(q_pos, "q_pos")
        self.validate_positions(k_pos, "k_pos")

    def validate_positions(self, positions: Tensor, name: str) -> None:
        """Raise ``ValueError`` naming ``name`` unless positions are whole numbers in
        ``[0, max_seq_len)`` (the range of the distance table)."""
        check_integer_valued(name, positions)
        if not validating_values() or positions.numel() == 0:
            return
        low, high = positions.min().item(), positions.max().item()
        if low < 0 or high >= self.max_seq_len:
            raise ValueError(
                f"{name} must lie in [0, max_seq_len) = [0, {self.max_seq_len}); got values in "
                f"[{low:g}, {high:g}]"
            )

    def bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype | None = None) -> Tensor:
        """``(num_heads, q_len, k_len)`` or ``(batch, num_heads, q_len, k_len)`` bias.

        ``dtype`` defaults to the parameters'.
        """
        return super().bias(q_pos, k_pos, dtype or next(self.parameters()).dtype)

    def __getstate__(self) -> dict[str, Any]:
        # The tables hold autograd graphs (deepcopy refuses non-leaf tensors) and are
        # rebuilt by the next prepare_bias anyway.
        state = self.__dict__.copy()
        state["_tables"] = {}
        return state

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, hidden={self.hidden}, depth={self.depth}, "
            f"log_distance={self.log_distance}, norm={self.norm}, mode={self.mode!r}, "
            f"max_seq_len={self.max_seq_len}"
        )
