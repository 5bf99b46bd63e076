"""KERPLE: a learned per-head logarithmic or power decay in the query-key distance."""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from torch import Tensor, nn

from posenc._validate import (
    check_floating_dtype,
    check_in_choices,
    check_positive_float,
    check_positive_int,
)
from posenc.bias.alibi import relative_distances
from posenc.encoding.protocols import BiasEncoding

__all__ = ["KerpleBias", "KerpleKernel", "kerple_bias"]

KerpleKernel = Literal["log", "power"]
_KERNELS: tuple[KerpleKernel, ...] = ("log", "power")
#: The power kernel's exponent must stay in (0, 2] for the kernel to be conditionally
#: positive definite (the paper's condition; the reference clamps it to [eps, 2]).
_MAX_EXPONENT = 2.0


def kerple_bias(
    r1: Tensor, r2: Tensor, q_pos: Tensor, k_pos: Tensor, *, kernel: KerpleKernel = "log"
) -> Tensor:
    """KERPLE bias for arbitrary positions and given per-head parameters, in float64.

    .. math::
        \\text{log: } b_{hij} = -r_{1,h} \\ln(1 + r_{2,h} \\lvert k\\_pos_j - q\\_pos_i \\rvert),
        \\qquad
        \\text{power: } b_{hij} = -r_{1,h} \\lvert k\\_pos_j - q\\_pos_i \\rvert^{r_{2,h}}

    The parameters are used as given (no clamping; :class:`KerpleBias` keeps them in range).

    Args:
        r1, r2: ``(heads,)`` parameters.
        q_pos, k_pos: positions, see :func:`~posenc.bias.alibi.relative_distances`.
        kernel: ``"log"`` or ``"power"``.

    Shape:
        ``(heads, q_len, k_len)`` or ``(batch, heads, q_len, k_len)``, float64.
    """
    check_in_choices("kernel", kernel, _KERNELS)
    distance = relative_distances(q_pos, k_pos).abs().unsqueeze(-3)  # (..., 1, q, k)
    r1, r2 = (r.to(device=distance.device, dtype=torch.float64)[:, None, None] for r in (r1, r2))
    return _kernel(r1, r2, distance, kernel)


def _kernel(r1: Tensor, r2: Tensor, distance: Tensor, kernel: str) -> Tensor:
    """KERPLE from broadcastable parameters and ``|k_pos - q_pos|``, without checks."""
    if kernel == "log":
        return -r1 * torch.log1p(r2 * distance)
    return -r1 * distance.pow(r2)


def _clamp_passing_gradient(value: Tensor, low: float, high: float | None) -> Tensor:
    """``value.clamp(low, high)`` whose gradient is the identity (straight-through).

    Written as ``clamped + (value - value)`` so the value is exactly the clamped one and a
    parameter that left the range still gets gradients that can bring it back.
    """
    return value.clamp(low, high).detach() + (value - value.detach())


class KerpleBias(BiasEncoding):
    """KERPLE: a per-head conditionally positive definite kernel of the distance, learned.

    .. math::
        \\text{log: } b_{hij} = -r_{1,h} \\ln\\big(1 + r_{2,h} \\lvert i - j \\rvert\\big),
        \\qquad
        \\text{power: } b_{hij} = -r_{1,h} \\lvert i - j \\rvert^{r_{2,h}},
        \\quad r_1, r_2 > 0,\\ r_2 \\le 2 \\text{ (power)}

    with ``i - j = q_pos - k_pos``. Paper: Chi et al. 2022, https://arxiv.org/abs/2205.09921
    (the log kernel is the one it recommends). Follows the reference ``chijames/KERPLE``
    (``megatron/mpu/layers.py``: ``ParallelKerpleLog``, ``ParallelKerplePower`` with
    ``pos_emb = kerple_power_ap_``); its names map as follows:

    ========  ==========================  ============================  ============
    kernel    reference form              here                          init
    ========  ==========================  ============================  ============
    log       ``-p·log(1 + a·|m-n|)``     ``r1 = p``, ``r2 = a``        p ~ U(0, 2),
                                                                        a ~ U(0, 1)
    power     ``-a·|m-n|^p``              ``r1 = a``, ``r2 = p``        the same
    ========  ==========================  ============================  ============

    **Keeping the parameters in range.** The reference clamps the stored values in place
    (``param.data.clamp(min=eps)``, the power exponent also ``max=2``) at the start of every
    forward, i.e. projected gradient descent. Here the stored parameters are clamped once at
    initialization, and the bias reads ``clamp(r)`` with a straight-through gradient: the
    value read is the reference's clamp of the stored parameter and the gradient is the one
    the reference's forward gives, but no forward mutates a parameter (so :meth:`bias_at`
    stays pure for FlexAttention, ``torch.compile`` and checkpointing). The two differ only
    once an update pushes a parameter out of range: the reference restarts from the bound,
    here the raw value stays outside until gradients bring it back (a plain ``clamp`` would
    pass none and leave it stuck). Call :meth:`clamp_parameters_` after each optimizer step
    to reproduce the reference's projected updates exactly.

    Only ``|i - j|`` enters, so one form serves causal and bidirectional attention: the
    reference zeroes future distances (``tril``), which the causal mask hides anyway. The
    bias is added to the scaled logits ``q·k/√d``, as in the reference. As in the reference,
    one instance (one set of ``r1``, ``r2``) serves every layer (``shared_across_layers``):
    gpt-neox builds one module and hands it to every layer (``GPT2ModelPipe.init_specs``);
    build one per layer and pass each to its attention for per-layer kernels. Tested against
    a float64 evaluation of the paper's kernels with the reference's clamped values, the
    reference's ``tril`` layout and KV-cache row, and its initialization draw.

    Args:
        num_heads: number of attention heads (≥ 1).
        kernel: ``"log"`` (default) or ``"power"``.
        eps: lower bound of both parameters (default ``1e-2``, the reference's); must be
            ``< 2`` for the power kernel, whose exponent is also bounded by 2.
        generator: optional ``torch.Generator`` for the initialization (drawn on its device).
        device, dtype: of the parameters; the bias is computed in at least float32 and
            returned in the requested dtype (default: the parameters').

    Attributes:
        r1: ``(num_heads,)`` scale (log) or coefficient (power), stored values.
        r2: ``(num_heads,)`` distance scale (log) or exponent (power), stored values.

    Shape:
        ``bias(q_pos, k_pos)``: ``(num_heads, q_len, k_len)`` for 1-D positions, else
        ``(batch, num_heads, q_len, k_len)``. Positions may be fractional.

    Example::

        >>> kerple = KerpleBias(4, generator=torch.Generator().manual_seed(0))
        >>> kerple.bias(torch.arange(3, 5), torch.arange(5)).shape  # 2 new tokens, cache of 5
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
        kernel: KerpleKernel = "log",
        eps: float = 1e-2,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = check_positive_int("num_heads", num_heads)
        check_in_choices("kernel", kernel, _KERNELS)
        self.kernel: KerpleKernel = kernel
        self.eps = check_positive_float("eps", eps)
        if kernel == "power" and self.eps >= _MAX_EXPONENT:
            raise ValueError(
                f"eps must be in (0, {_MAX_EXPONENT}) for kernel='power' (the exponent lies in "
                f"[eps, {_MAX_EXPONENT}]); got {eps!r}"
            )
        check_floating_dtype("dtype", dtype)
        self.r1 = nn.Parameter(torch.empty(num_heads, device=device, dtype=dtype))
        self.r2 = nn.Parameter(torch.empty(num_heads, device=device, dtype=dtype))
        self.reset_parameters(generator)

    @property
    def r2_max(self) -> float | None:
        """Upper bound of ``r2``: 2 for the power kernel's exponent, None for the log kernel."""
        return _MAX_EXPONENT if self.kernel == "power" else None

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """The reference's initialization, clamped: ``p ~ U(0, 2)``, ``a ~ U(0, 1)`` per head."""
        draw_device = generator.device if generator is not None else "cpu"
        p = 2.0 * torch.rand(self.num_heads, generator=generator, device=draw_device)
        a = torch.rand(self.num_heads, generator=generator, device=draw_device)
        r1, r2 = (p, a) if self.kernel == "log" else (a, p)
        with torch.no_grad():
            self.r1.copy_(r1)
            self.r2.copy_(r2)
        self.clamp_parameters_()

    @torch.no_grad()
    def clamp_parameters_(self) -> None:
        """Clamp the stored parameters in place to ``[eps, ∞)`` (``r2``: ``[eps, 2]`` for
        the power kernel), as the reference does before every forward."""
        self.r1.clamp_(min=self.eps)
        self.r2.clamp_(min=self.eps, max=self.r2_max)

    def bias_at(self, head: Tensor, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        """``-r1 ln(1 + r2 |k_pos - q_pos|)`` or ``-r1 |k_pos - q_pos|^r2`` of ``head``."""
        compute = torch.promote_types(torch.promote_types(self.r1.dtype, dtype), torch.float32)
        if q_pos.is_floating_point() or k_pos.is_floating_point():
            # Exact differences of fractional positions (PI), then one rounding.
            q_pos, k_pos = q_pos.to(torch.float64), k_pos.to(torch.float64)
        distance = (k_pos - q_pos).abs().to(compute)
        r1 = _clamp_passing_gradient(self.r1[head].to(compute), self.eps, None)
        r2 = _clamp_passing_gradient(self.r2[head].to(compute), self.eps, self.r2_max)
        return _kernel(r1, r2, distance, self.kernel).to(dtype)

    def bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype | None = None) -> Tensor:
        """``(num_heads, q_len, k_len)`` or ``(batch, num_heads, q_len, k_len)`` bias.

        ``dtype`` defaults to the parameters'.
        """
        return super().bias(q_pos, k_pos, dtype or self.r1.dtype)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, kernel={self.kernel!r}, eps={self.eps}"
