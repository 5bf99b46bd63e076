"""ALiBi: a per-head linear penalty on the query-key distance (Press et al. 2022).

Also home of :func:`relative_distances`, the validated ``k_pos - q_pos`` matrix that every
bias in this package (ALiBi, T5, Shaw, Transformer-XL) is a function of.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

import torch
from torch import Tensor

from posenc._validate import (
    check_finite,
    check_floating_dtype,
    check_in_choices,
    check_integer_valued,
    check_positive_int,
)
from posenc.encoding.kinds import LinearBias
from posenc.positions import check_positions

__all__ = ["AlibiBias", "AlibiMode", "alibi_bias", "alibi_slopes", "relative_distances"]

AlibiMode = Literal["causal", "symmetric"]
_MODES: tuple[AlibiMode, ...] = ("causal", "symmetric")


def relative_distances(q_pos: Tensor, k_pos: Tensor, *, whole: bool = False) -> Tensor:
    """Validated relative distances ``k_pos[j] - q_pos[i]``.

    .. math:: D_{ij} = k\\_pos_j - q\\_pos_i

    Everything is defined by positions, not indices: under a KV cache ``q_pos`` holds the
    positions of the new tokens (the last ones) and ``k_pos`` all of them.

    Args:
        q_pos: query positions ``(q_len,)`` or ``(batch, q_len)``, integer or floating.
        k_pos: key positions ``(k_len,)`` or ``(batch, k_len)``, on the same device.
        whole: require whole-number positions (T5, Shaw, Transformer-XL index tables by
            distance) and return ``int64``; otherwise return ``float64`` (exact for int64
            positions below 2**53 and for every float32 position).

    Shape:
        ``(q_len, k_len)`` when both are 1-D, else ``(batch, q_len, k_len)``; a batch of 1
        broadcasts against the other tensor's batch.

    Raises:
        ValueError: naming ``q_pos`` or ``k_pos`` for a bad shape, dtype, device, non-finite
            or (``whole=True``) fractional values, or mismatched batch sizes.

    Example::

        >>> relative_distances(torch.tensor([2, 3]), torch.arange(4), whole=True)
        tensor([[-2, -1,  0,  1],
                [-3, -2, -1,  0]])
    """
    check_positions(q_pos, "q_pos")
    check_positions(k_pos, "k_pos")
    if q_pos.device != k_pos.device:
        raise ValueError(
            f"q_pos and k_pos must be on one device; got {q_pos.device} and {k_pos.device}"
        )
    if q_pos.dim() == 2 and k_pos.dim() == 2:
        qb, kb = q_pos.shape[0], k_pos.shape[0]
        if qb != kb and 1 not in (qb, kb):
            raise ValueError(
                f"q_pos and k_pos must have the same batch size (or 1); got {qb} and {kb}"
            )
    if whole:
        check_integer_valued("q_pos", q_pos)
        check_integer_valued("k_pos", k_pos)
        q, k = q_pos.to(torch.long), k_pos.to(torch.long)
    else:
        q, k = q_pos.to(torch.float64), k_pos.to(torch.float64)
    return k[..., None, :] - q[..., :, None]


def _power_of_two_slopes(n: int) -> list[float]:
    return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]


def alibi_slopes(num_heads: int) -> Tensor:
    """ALiBi head slopes, the reference schedule (not sorted).

    .. math::
        m_h = 2^{-8h/n},\\ h = 1..n \\quad (n = 2^a);\\qquad
        \\text{else } c = 2^{\\lfloor \\log_2 n \\rfloor}:\\ m = m(c) \\,\\|\\,
        m(2c)[0::2][:n - c]

    Paper: https://arxiv.org/abs/2108.12409. Tested against ``x_transformers``'
    ``AlibiPositionalBias`` (same schedule as ofirpress/attention_with_linear_biases).

    Args:
        num_heads: number of heads n (≥ 1).

    Returns:
        float64 tensor ``(num_heads,)``.

    Example::

        >>> (-alibi_slopes(6).log2()).tolist()
        [2.0, 4.0, 6.0, 8.0, 1.0, 3.0]
    """
    num_heads = check_positive_int("num_heads", num_heads)
    closest = 1 << (num_heads.bit_length() - 1)  # 2**floor(log2 n)
    slopes = _power_of_two_slopes(closest)
    if closest != num_heads:
        slopes += _power_of_two_slopes(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float64)


def alibi_bias(
    slopes: Tensor, q_pos: Tensor, k_pos: Tensor, *, mode: AlibiMode = "causal"
) -> Tensor:
    """ALiBi bias for arbitrary positions, computed in float64.

    .. math::
        \\text{causal: } b_{hij} = m_h (k\\_pos_j - q\\_pos_i), \\qquad
        \\text{symmetric: } b_{hij} = -m_h \\lvert q\\_pos_i - k\\_pos_j \\rvert

    Args:
        slopes: ``(heads,)`` slopes ``m_h`` (zeros give unbiased heads).
        q_pos, k_pos: positions, see :func:`relative_distances`.
        mode: ``"causal"`` or ``"symmetric"``.

    Shape:
        ``(heads, q_len, k_len)`` or ``(batch, heads, q_len, k_len)``, float64.
    """
    check_in_choices("mode", mode, _MODES)
    dist = relative_distances(q_pos, k_pos)  # (..., q_len, k_len) float64
    m = slopes.to(device=dist.device, dtype=torch.float64)[:, None, None]
    return _linear_bias(m, dist.unsqueeze(-3), mode)


def _linear_bias(slopes: Tensor, distance: Tensor, mode: str) -> Tensor:
    """ALiBi from broadcastable slopes and ``k_pos - q_pos``: ``m·d`` or ``-m·|d|``."""
    return slopes * (-distance.abs() if mode == "symmetric" else distance)


class AlibiBias(LinearBias):
    """Attention with Linear Biases: a fixed per-head slope times the query-key distance.

    .. math::
        \\text{causal: } b_{hij} = m_h (k\\_pos_j - q\\_pos_i) = -m_h (i - j), \\qquad
        \\text{symmetric: } b_{hij} = -m_h \\lvert i - j \\rvert

    The reference (Press et al. 2022, https://arxiv.org/abs/2108.12409) adds the
    row-constant ``m_h j``; it differs from the causal form by ``m_h i`` in every row, so the
    two give the same softmax under a causal mask (and only there). ``"symmetric"`` is the
    encoder form (data2vec 2.0, MosaicBERT). Tested against ``x_transformers``'
    ``AlibiPositionalBias`` (slopes and the symmetric bias with right-aligned queries) and
    against the reference's row-constant form after a causal softmax.

    The slopes are kept in float64 outside ``state_dict`` and ``_apply`` (like RoPE's
    frequencies), so ``model.to(torch.bfloat16)`` cannot round them; the bias is evaluated in
    the dtype attention computes scores in (float32 for half-precision inputs). One instance
    serves every layer (``shared_across_layers``).

    Args:
        num_heads: number of attention heads (≥ 1).
        mode: ``"causal"`` (default) or ``"symmetric"``.
        num_biased_heads: if given, only the first ``num_biased_heads`` heads get the slopes
            ``alibi_slopes(num_biased_heads)``; the others get zero bias (x-transformers'
            ``alibi_num_heads``). Must be in ``[1, num_heads]``.
        slopes: explicit slopes, a tensor or sequence of ``num_heads`` finite numbers;
            overrides the schedule (not combinable with ``num_biased_heads``).
        device: accepted for a uniform constructor signature (nothing is stored on it).
        dtype: default dtype of :meth:`bias` (float32 when None).

    Shape:
        ``bias(q_pos, k_pos)``: ``(num_heads, q_len, k_len)`` for 1-D positions, else
        ``(batch, num_heads, q_len, k_len)``.

    Example::

        >>> alibi = AlibiBias(8)
        >>> alibi.bias(torch.arange(3, 5), torch.arange(5)).shape  # 2 new tokens, cache of 5
        torch.Size([8, 2, 5])
    """

    shared_across_layers: ClassVar[bool] = True

    def __init__(
        self,
        num_heads: int,
        *,
        mode: AlibiMode = "causal",
        num_biased_heads: int | None = None,
        slopes: Tensor | Sequence[float] | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = check_positive_int("num_heads", num_heads)
        check_in_choices("mode", mode, _MODES)
        self.mode: AlibiMode = mode
        check_floating_dtype("dtype", dtype)
        self.dtype = dtype
        if slopes is not None:
            if num_biased_heads is not None:
                raise ValueError("give at most one of slopes and num_biased_heads")
            with torch.device("cpu"):  # a list becomes a CPU tensor under a meta build too
                values = torch.as_tensor(slopes, dtype=torch.float64).detach().cpu()
            if values.shape != (num_heads,):
                raise ValueError(
                    f"slopes must have shape ({num_heads},) = (num_heads,); "
                    f"got {tuple(values.shape)}"
                )
            check_finite("slopes", values)
            num_biased_heads = num_heads
        else:
            if num_biased_heads is None:
                num_biased_heads = num_heads
            num_biased_heads = check_positive_int("num_biased_heads", num_biased_heads)
            if num_biased_heads > num_heads:
                raise ValueError(
                    f"num_biased_heads must be in [1, num_heads={num_heads}]; "
                    f"got {num_biased_heads}"
                )
            with torch.device("cpu"):  # a constant: on the CPU under a meta-device build too
                values = torch.zeros(num_heads, dtype=torch.float64)
                values[:num_biased_heads] = alibi_slopes(num_biased_heads)
        self.num_biased_heads = num_biased_heads
        self._slopes = values
        self._memo: dict[tuple[torch.device, torch.dtype], Tensor] = {}

    @property
    def slopes(self) -> Tensor:
        """The slopes ``m_h``, float64 on the CPU."""
        return self._slopes

    def prepare_bias(
        self, device: torch.device, dtype: torch.dtype, *, reach: int | None = None
    ) -> None:
        """Round the slopes once to ``dtype`` on ``device`` (memoised for :meth:`bias_at`)."""
        key = (torch.device(device), dtype)
        if key not in self._memo:
            self._memo[key] = self._slopes.to(dtype).to(device)

    def slopes_on(self, device: torch.device, dtype: torch.dtype) -> Tensor:
        """The slopes rounded once to ``dtype`` on ``device``."""
        self.prepare_bias(device, dtype)
        return self._memo[(torch.device(device), dtype)]

    #: ``bias_at(h, q, k)`` is a function of ``q − k`` alone in both modes (attention serves
    #: a bidirectional call from one table of the forward's distances; causal calls take the
    #: linear plan: :mod:`posenc.attention.structured`).
    depends_on_distance_only: ClassVar[bool] = True

    def linear_bias_slopes(self) -> Tensor | None:
        """The slopes when ``bias_at == m_h · (k_pos − q_pos)`` (causal mode), else None.

        Lets the chunked backend split the bias into row constants and key vectors
        (:mod:`posenc.attention.structured`).
        """
        return self._slopes if self.mode == "causal" else None

    def bias_at(self, head: Tensor, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        """``m_h (k_pos - q_pos)`` (causal) or ``-m_h |k_pos - q_pos|`` (symmetric)."""
        if q_pos.is_floating_point() or k_pos.is_floating_point():
            # Exact differences of fractional positions (PI), then one rounding.
            q_pos, k_pos = q_pos.to(torch.float64), k_pos.to(torch.float64)
        distance = (k_pos - q_pos).to(dtype)  # integer differences are exact
        slopes = self._memo[(head.device, dtype)]  # filled by prepare_bias
        return _linear_bias(slopes[head], distance, self.mode)

    def bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype | None = None) -> Tensor:
        """``(num_heads, q_len, k_len)`` or ``(batch, num_heads, q_len, k_len)`` bias.

        ``dtype`` defaults to the constructor's (float32 when that is None).
        """
        return super().bias(q_pos, k_pos, dtype or self.dtype or torch.float32)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, mode={self.mode!r}, "
            f"num_biased_heads={self.num_biased_heads}"
        )
