"""FIRE: a learned function of the progressively interpolated distance (Li et al. 2023)."""

from __future__ import annotations

from typing import Any, ClassVar, cast

import torch
from torch import Tensor, nn

from posenc._validate import check_floating_dtype, check_positive_float, check_positive_int
from posenc.encoding.base import empty_linear
from posenc.encoding.protocols import BiasEncoding

__all__ = ["FireBias", "fire_log", "fire_normalized_distance"]


def fire_log(x: Tensor, c: Tensor) -> Tensor:
    """FIRE's log transform ``ψ(x) = ln(1 + |c·x|)``, elementwise and broadcastable."""
    return torch.log1p((c * x).abs())


def fire_normalized_distance(
    distance: Tensor, query: Tensor, c: Tensor, threshold: Tensor, eps: float
) -> Tensor:
    """The MLP input of FIRE: the log distance over the log of the thresholded query position.

    .. math::
        x_{ij} = \\frac{\\psi(i - j)}{\\psi(\\max(i, \\tau)) + \\varepsilon},\\qquad
        \\psi(x) = \\ln(1 + \\lvert c x \\rvert)

    For a causal pair (``0 ≤ j ≤ i``) and ``c ≠ 0``, ``x ∈ [0, 1)``: ψ is increasing in
    ``|x|`` and ``i − j ≤ max(i, τ)``. Below the threshold (``i ≤ τ``) the denominator is a
    constant, so ``x`` depends on ``i − j`` only; above it the farthest key ``j = 0`` maps to
    ``ψ(i) / (ψ(i) + ε) ≈ 1`` whatever ``i`` is (progressive interpolation).

    Broadcastable tensor ops only, no checks (it runs inside ``bias_at``).

    Args:
        distance: ``i − j`` (query minus key position), floating.
        query: the query position ``i``, same dtype.
        c: the log-transform scale (0-dim).
        threshold: ``τ = |L·s|`` (0-dim).
        eps: added to the denominator.
    """
    return fire_log(distance, c) / (fire_log(torch.maximum(query, threshold), c) + eps)


def _mlp_at(x: Tensor, head: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> Tensor:
    """``(W2 relu(W1 x + b1) + b2)[head]`` for a scalar input per element, one hidden unit at
    a time.

    Unrolled over the hidden units (a fixed Python loop, not a branch on values) so that it is
    elementwise: FlexAttention's compiled ``score_mod`` lowers only pointwise ops (a sum over
    a hidden axis fails there), and the same ops in the same order give the materialized grid
    and the scalar ``score_mod`` identical bits.
    """
    out = b2[head]
    for unit in range(w1.shape[0]):
        # addcmul: one pass over the (heads, q, k) grid per unit instead of two.
        out = torch.addcmul(out, w2[head, unit], torch.relu(x * w1[unit] + b1[unit]))
    return out


#: Hidden activations per slice of :meth:`FireBias.bias_grid` (2 MiB in float32: the slice
#: stays in cache between the ReLU and the matmul).
GRID_SLICE_ELEMENTS = 1 << 19


def _mlp_rows(x: Tensor, inner: Tensor, w2: Tensor, b2: Tensor) -> Tensor:
    """``W2 relu(w1 x + b1) + b2`` for every element of ``x (q, k)`` as ``(q, heads, k)``.

    ``inner = [w1 b1]`` is ``(hidden, 2)``; ``w2 (heads, hidden)``, ``b2 (heads, 1)``.
    """
    hidden, heads = inner.shape[0], w2.shape[0]
    q_len, k_len = x.shape
    rows = max(1, GRID_SLICE_ELEMENTS // max(1, hidden * k_len))
    lifted = torch.stack([x, torch.ones_like(x)])  # (2, q, k): [x; 1]
    weights = w2.expand(min(rows, q_len), heads, hidden)
    if torch.is_grad_enabled() and (lifted.requires_grad or w2.requires_grad):
        pieces = []  # autograd: a list joined once
        for start in range(0, q_len, rows):
            part = lifted[:, start : start + rows].reshape(2, -1)
            act = torch.mm(inner, part).relu_().view(hidden, -1, k_len)
            count = act.shape[1]
            pieces.append(torch.baddbmm(b2, weights[:count], act.transpose(0, 1)))
        return torch.cat(pieces)
    out = x.new_empty(q_len, heads, k_len)
    buffer = x.new_empty(hidden, min(rows, q_len) * k_len)
    for start in range(0, q_len, rows):
        part = lifted[:, start : start + rows]
        count = part.shape[1]
        act = buffer[:, : count * k_len]
        torch.mm(inner, part.reshape(2, -1), out=act).relu_()
        act3 = act.view(hidden, count, k_len).transpose(0, 1)
        torch.baddbmm(b2, weights[:count], act3, out=out[start : start + count])
    return out


class FireBias(BiasEncoding):
    """FIRE: a per-layer MLP of the log distance, normalized by the (thresholded) query position.

    .. math::
        b_h(i, j) = f_\\theta\\Big(\\frac{\\psi(i - j)}{\\psi(\\max(i, \\lvert L s \\rvert))
        + \\varepsilon}\\Big)_h,\\qquad \\psi(x) = \\ln(1 + \\lvert c x \\rvert),\\qquad
        f_\\theta = \\text{Linear}(\\text{hidden}, H) \\circ \\text{ReLU} \\circ
        \\text{Linear}(1, \\text{hidden})

    with ``i = q_pos`` the query position and ``j = k_pos`` the key position (causal: ``i ≥
    j``). ``c`` (init ``c_init = 0.1``) and the threshold multiplier ``s`` (init 1) are
    learned; ``L = max_len = 512`` is fixed; ``ε = 1e-6``. The bias is added to the scaled
    logits as is. Paper: Li et al. 2023, "Functional Interpolation for Relative Positions
    Improves Long Context Transformers", https://arxiv.org/abs/2310.04418.

    Followed: the paper's appendix implementation as reproduced by others (read in
    ``mcleish7/arithmetic`` ``cramming/architectures/embeddings.py`` class ``FIRE``, commit
    55af9d5, and identical copies; there without its randomized positions):
    threshold ``|s·L|``, ``ψ`` with ``|c·x|`` for both numerator and normalizer, ε added
    after ψ of the normalizer, the normalizer read at the *query* position, MLP
    ``Linear(1, 32) → ReLU → Linear(32, H)`` with PyTorch's default init. Tested against an
    independent float64 evaluation of this formula. Not confirmed from the paper's own text
    (it could not be retrieved): whether the paper shares FIRE across layers (here one
    instance per layer, ``shared_across_layers = False``), and how it treats future keys
    without a causal mask: the code's ``|c·(i − j)|`` gives them the bias of the past key at
    the same distance, which is what this class does.

    Positions may be fractional (position interpolation). The MLP is evaluated per score
    element (no table), so ``bias_at`` is elementwise and serves FlexAttention's compiled
    ``score_mod`` (per element about ``4·hidden`` flops and two logs). The materialized
    ``sdpa``/``chunked`` paths take :meth:`bias_grid`, the same MLP as a matmul over slices
    of query rows (``relu(w1 x + b1)`` of a slice, then ``W2 ·`` it, heads first): 8 heads,
    256 × 2048, one thread, 17 ms against 186 ms for ``hidden`` passes of ``bias_at`` over
    the grid. The two agree to rounding (the sum over hidden units is ordered differently).

    Args:
        num_heads: number of attention heads H (≥ 1).
        hidden: hidden width of the MLP (≥ 1; paper 32).
        c_init: initial ``c`` (a finite number > 0; paper 0.1).
        max_len: ``L``, the threshold below which the normalizer is constant (> 0; paper
            512, the training length).
        eps: ``ε`` added to the normalizer (> 0; paper 1e-6).
        device, dtype: of the parameters; the bias has the parameters' dtype by default.

    Attributes:
        mlp: ``nn.Sequential(Linear(1, hidden), ReLU(), Linear(hidden, num_heads))``.
        c: learnable scalar of the log transform.
        threshold_multiplier: learnable scalar ``s``; the threshold is ``|s·L|``.

    Shape:
        ``bias(q_pos, k_pos)``: ``(num_heads, q_len, k_len)`` for 1-D positions, else
        ``(batch, num_heads, q_len, k_len)``.

    Example::

        >>> fire = FireBias(4)
        >>> fire.bias(torch.tensor([9]), torch.arange(10)).shape  # one decoding step
        torch.Size([4, 1, 10])
    """

    shared_across_layers: ClassVar[bool] = False

    def __init__(
        self,
        num_heads: int,
        *,
        hidden: int = 32,
        c_init: float = 0.1,
        max_len: float = 512,
        eps: float = 1e-6,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.hidden = check_positive_int("hidden", hidden)
        self.c_init = check_positive_float("c_init", c_init)
        self.max_len = check_positive_float("max_len", max_len)
        self.eps = check_positive_float("eps", eps)
        check_floating_dtype("dtype", dtype)
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        self.mlp = nn.Sequential(  # drawn once, by reset_parameters
            empty_linear(1, hidden, **factory),
            nn.ReLU(),
            empty_linear(hidden, num_heads, **factory),
        )
        self.c = nn.Parameter(torch.empty((), **factory))
        self.threshold_multiplier = nn.Parameter(torch.empty((), **factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's default ``nn.Linear`` init (as the reference), ``c = c_init``, ``s = 1``."""
        for layer in self.mlp:
            if isinstance(layer, nn.Linear):
                layer.reset_parameters()
        with torch.no_grad():
            self.c.fill_(self.c_init)
            self.threshold_multiplier.fill_(1.0)

    def normalized_distance(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        """The MLP input :func:`fire_normalized_distance` at broadcastable positions, no checks."""
        if q_pos.is_floating_point() or k_pos.is_floating_point():
            # Exact differences of fractional positions (PI), then one rounding.
            q_pos, k_pos = q_pos.to(torch.float64), k_pos.to(torch.float64)
        distance = (q_pos - k_pos).to(dtype)  # i − j; integer differences are exact
        threshold = (self.threshold_multiplier.to(dtype) * self.max_len).abs()
        return fire_normalized_distance(
            distance, q_pos.to(dtype), self.c.to(dtype), threshold, self.eps
        )

    def bias_at(self, head: Tensor, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        """``MLP(ψ(i − j) / (ψ(max(i, |L s|)) + ε))[head]`` in ``dtype``.

        Computed in the wider of ``dtype`` and the parameters' dtype, rounded once.
        """
        first = cast(nn.Linear, self.mlp[0])
        second = cast(nn.Linear, self.mlp[2])
        wide = torch.promote_types(first.weight.dtype, dtype)
        x = self.normalized_distance(q_pos, k_pos, wide)
        out = _mlp_at(
            x,
            head,
            first.weight.to(wide)[:, 0],
            first.bias.to(wide),
            second.weight.to(wide),
            second.bias.to(wide),
        )
        return out.to(dtype)

    def distance_only_up_to(self, position: float) -> bool:
        """True when queries at positions up to ``position`` all read the constant normalizer
        ``ψ(|L s|)``: the bias is then a function of ``q − k`` alone (and attention serves it
        from one table of distances). With a relative margin of 1e-6 below the threshold, so
        that the answer holds in every dtype the bias is computed in. Reads ``s`` (a host
        sync on an accelerator; attention asks on the CPU only)."""
        threshold = abs(float(self.threshold_multiplier.detach()) * self.max_len)
        return position < threshold * (1.0 - 1e-6)

    def bias_grid(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        """:meth:`bias_at` on the grid of ``q_pos (..., q)`` × ``k_pos (..., k)``:
        ``(heads, q, k)`` for 1-D positions, else ``(batch, heads, q, k)``.

        The MLP as two matmuls over a slice of query rows at a time (about
        :data:`GRID_SLICE_ELEMENTS` hidden activations each): ``[w1 b1] · [x; 1]``, ReLU,
        then ``W2 ·`` per row. The grid is stored row-major ``(..., q, heads, k)`` (each
        row's heads written by one matmul) and returned as a view in the documented order;
        differentiable.
        """
        first = cast(nn.Linear, self.mlp[0])
        second = cast(nn.Linear, self.mlp[2])
        wide = torch.promote_types(first.weight.dtype, dtype)
        x = self.normalized_distance(q_pos[..., :, None], k_pos[..., None, :], wide)
        inner = torch.stack([first.weight.to(wide)[:, 0], first.bias.to(wide)], dim=1)
        outer = (second.weight.to(wide), second.bias.to(wide)[:, None])
        if x.dim() == 2:
            return _mlp_rows(x, inner, *outer).transpose(0, 1).to(dtype)
        grids = [_mlp_rows(each, inner, *outer) for each in x]  # a batch of position rows
        return torch.stack(grids).transpose(1, 2).to(dtype)

    def bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype | None = None) -> Tensor:
        """``(num_heads, q_len, k_len)`` or ``(batch, num_heads, q_len, k_len)`` bias.

        ``dtype`` defaults to the parameters'.
        """
        return super().bias(q_pos, k_pos, dtype or self.c.dtype)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, hidden={self.hidden}, c_init={self.c_init}, "
            f"max_len={self.max_len:g}, eps={self.eps:g}"
        )
