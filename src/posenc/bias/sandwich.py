"""Sandwich: the inner product of two sinusoidal embeddings as a parameter-free bias.

Formula verified against NeMo's ``SandwichRelativePositionEmbedding`` (``NVIDIA/NeMo``,
``nemo/collections/nlp/modules/common/megatron/position_embedding/
sandwich_relative_position_embedding.py``) and the paper's head scale (Chi et al. 2023,
https://arxiv.org/abs/2212.10356, ALiBi figure: ``h = n · 8/H``, ``n = 1..H``). Where the
sources differ:

* NeMo's causal path zeroes future distances with ``torch.tril`` of the
  ``[-q_len:, -k_len:]`` slice; for ``q_len < k_len`` (a KV cache) that ``tril`` is not
  aligned to the last query and also zeroes past keys. Here every pair gets the bias of
  ``|k_pos - q_pos|`` (the causal mask hides the future), which equals NeMo's bidirectional
  bias and its causal bias on every visible pair when ``q_len == k_len``.
* NeMo takes ``d'`` = ``kv_channels`` (the per-head size, ``hidden_size // heads``); the paper
  writes a separate ``d̄``. ``head_dim`` here is that ``d'``: any even number may be given.
* NeMo computes ``Σ cos − d'/2`` in float32, which cancels near the diagonal; here the same
  value is computed as ``−2 Σ sin²(·/2)`` (no cancellation) from float64 frequencies.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from posenc._validate import check_floating_dtype, check_positive_float, check_positive_int
from posenc.bias.alibi import relative_distances
from posenc.encoding.protocols import BiasEncoding

__all__ = ["SandwichBias", "sandwich_bias", "sandwich_frequencies", "sandwich_head_scales"]


def sandwich_frequencies(head_dim: int, base: float = 10000.0) -> Tensor:
    """Sandwich's frequencies ``ω_k = base^(-2k/d')`` for ``k = 1..d'/2``, float64.

    Note the range: ``k`` starts at 1 (NeMo, and the paper's sum), one step off the
    Transformer's and RoPE's ``k = 0..d'/2 - 1``.

    Args:
        head_dim: ``d'``, a positive even integer.
        base: the sinusoid base (default 10000), > 0.

    Returns:
        float64 tensor ``(head_dim // 2,)``.
    """
    _check_head_dim(head_dim)
    base = check_positive_float("base", base)
    k = torch.arange(1, head_dim // 2 + 1, dtype=torch.float64)
    return base ** (-2.0 * k / head_dim)


def sandwich_head_scales(num_heads: int) -> Tensor:
    """The divisors ``8h/H`` of heads ``h = 1..H`` (ALiBi's exponents), float64 ``(H,)``."""
    num_heads = check_positive_int("num_heads", num_heads)
    return 8.0 * torch.arange(1, num_heads + 1, dtype=torch.float64) / num_heads


def sandwich_bias(
    q_pos: Tensor, k_pos: Tensor, *, num_heads: int, head_dim: int, base: float = 10000.0
) -> Tensor:
    """Sandwich bias for arbitrary positions, computed in float64.

    .. math::
        b_{hij} = \\frac{\\sum_{k=1}^{d'/2} \\cos\\big((k\\_pos_j - q\\_pos_i)\\,\\omega_k\\big)
        - d'/2}{8h/H}, \\qquad \\omega_k = \\text{base}^{-2k/d'}

    Shape:
        ``(num_heads, q_len, k_len)`` or ``(batch, num_heads, q_len, k_len)``, float64.
    """
    half = sandwich_frequencies(head_dim, base) / 2
    coefficients = -2.0 / sandwich_head_scales(num_heads)
    distance = relative_distances(q_pos, k_pos).unsqueeze(-3)  # (..., 1, q, k)
    half, coefficients = half.to(distance.device), coefficients.to(distance.device)
    return _sandwich(coefficients[:, None, None], half, distance)


def _sandwich(coefficients: Tensor, half_frequencies: Tensor, distance: Tensor) -> Tensor:
    """``c_h Σ_k sin²(d ω_k / 2)`` with broadcastable ``c_h`` and ``d``, without checks.

    ``Σ_k (cos(d ω_k) − 1) = −2 Σ_k sin²(d ω_k / 2)``: the same value without the
    cancellation of ``Σ cos − d'/2`` near ``d = 0``. The sum runs over the ``d'/2``
    frequencies one at a time, elementwise only: compiled FlexAttention lowers a
    ``score_mod`` as a pointwise subgraph, and a reduction over a trailing frequency
    dimension inside it failed to lower ("Buffers cannot be created while lowering a
    pointwise subgraph") or, in a simpler ``score_mod``, gave wrong scores (torch 2.13, CPU).
    The loop has a fixed length (``d'/2``) and is unrolled at trace time.
    """
    total = torch.sin(distance * half_frequencies[0]).square()
    for k in range(1, half_frequencies.shape[0]):
        total = total + torch.sin(distance * half_frequencies[k]).square()
    return coefficients * total


def _check_head_dim(head_dim: object) -> int:
    head_dim = check_positive_int("head_dim", head_dim)
    assert isinstance(head_dim, int)
    if head_dim % 2:
        raise ValueError(
            f"head_dim must be a positive even integer (d'/2 frequencies), got {head_dim}"
        )
    return head_dim


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half-precision biases are computed in float32 and rounded once."""
    return torch.promote_types(dtype, torch.float32)


class SandwichBias(BiasEncoding):
    """Sandwich: a parameter-free, log-like decaying bias from sinusoidal inner products.

    .. math::
        b_{hij} = \\frac{1}{8h/H}\\Big(\\sum_{k=1}^{d'/2} \\cos\\big((i - j)\\,\\omega_k\\big)
        - \\frac{d'}{2}\\Big)
        = -\\frac{H}{4h} \\sum_{k=1}^{d'/2} \\sin^2\\frac{(i - j)\\,\\omega_k}{2},
        \\qquad \\omega_k = \\text{base}^{-2k/d'},\\ h = 1..H

    with ``i - j = q_pos - k_pos``: ``p_i·p_j`` of the sinusoidal embeddings with ``d'``
    channels, shifted to 0 on the diagonal and divided by ALiBi's head exponents ``8h/H``
    (head 1 decays fastest). It is even in ``i - j``, so one form serves causal and
    bidirectional attention. Paper: Chi et al. 2023 ("Dissecting Transformer Length
    Extrapolation via the Lens of Receptive Field Analysis"), https://arxiv.org/abs/2212.10356.
    Follows NeMo's ``SandwichRelativePositionEmbedding`` (see the module docstring for where
    the sources differ); tested against a float64 evaluation of the formula above.

    The frequencies ``ω_k/2`` and head coefficients ``−H/(4h)`` are computed in float64 and
    rounded once per (device, dtype); the bias is evaluated in the score dtype (float32 for
    half-precision requests, then rounded once). Positions may be fractional. One instance
    serves every layer (``shared_across_layers``).

    Args:
        num_heads: number of attention heads H (≥ 1).
        head_dim: ``d'``, the sinusoid's width, a positive even integer; NeMo uses the
            per-head size.
        base: the sinusoid base (default 10000, NeMo's and the paper's).
        device: accepted for a uniform constructor signature (nothing is stored on it).
        dtype: default dtype of :meth:`bias` (float32 when None).

    Shape:
        ``bias(q_pos, k_pos)``: ``(num_heads, q_len, k_len)`` for 1-D positions, else
        ``(batch, num_heads, q_len, k_len)``.

    Example::

        >>> sandwich = SandwichBias(8, 64)
        >>> sandwich.bias(torch.arange(3, 5), torch.arange(5)).shape  # 2 new tokens, cache of 5
        torch.Size([8, 2, 5])
    """

    shared_across_layers: ClassVar[bool] = True
    #: ``bias_at(h, q, k)`` is a function of ``q − k`` alone (attention serves it from one
    #: table of the forward's distances: :mod:`posenc.attention.structured`).
    depends_on_distance_only: ClassVar[bool] = True

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        *,
        base: float = 10000.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.head_dim = _check_head_dim(head_dim)
        self.base = check_positive_float("base", base)
        check_floating_dtype("dtype", dtype)
        self.dtype = dtype
        # float64 on the CPU, outside state_dict and _apply (module casts cannot round them),
        # on the CPU under a meta-device build too (constants, not state)
        with torch.device("cpu"):
            self._half_frequencies = sandwich_frequencies(head_dim, base) / 2
            self._coefficients = -2.0 / sandwich_head_scales(num_heads)
        self._memo: dict[tuple[torch.device, torch.dtype], tuple[Tensor, Tensor]] = {}

    def prepare_bias(
        self, device: torch.device, dtype: torch.dtype, *, reach: int | None = None
    ) -> None:
        """Round the frequencies and head coefficients once to the compute dtype on
        ``device`` (memoised for :meth:`bias_at`)."""
        compute = _compute_dtype(dtype)
        key = (torch.device(device), compute)
        if key not in self._memo:
            half_frequencies = self._half_frequencies.to(compute).to(device)
            self._memo[key] = (half_frequencies, self._coefficients.to(compute).to(device))

    def bias_at(self, head: Tensor, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        """``−H/(4h) Σ_k sin²((k_pos − q_pos) ω_k / 2)`` of ``head``, in ``dtype``."""
        compute = _compute_dtype(dtype)
        if q_pos.is_floating_point() or k_pos.is_floating_point():
            # Exact differences of fractional positions (PI), then one rounding.
            q_pos, k_pos = q_pos.to(torch.float64), k_pos.to(torch.float64)
        distance = (k_pos - q_pos).to(compute)
        half_frequencies, coefficients = self._memo[(head.device, compute)]  # prepare_bias
        return _sandwich(coefficients[head], half_frequencies, distance).to(dtype)

    def bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype | None = None) -> Tensor:
        """``(num_heads, q_len, k_len)`` or ``(batch, num_heads, q_len, k_len)`` bias.

        ``dtype`` defaults to the constructor's (float32 when that is None).
        """
        return super().bias(q_pos, k_pos, dtype or self.dtype or torch.float32)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, head_dim={self.head_dim}, base={self.base}"
