"""T5 relative position bias: a learned scalar per (log-bucketed distance, head)."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor, nn

from posenc._validate import check_integer_valued, check_positive_int
from posenc.bias.alibi import relative_distances
from posenc.encoding.protocols import BiasEncoding

__all__ = ["T5RelativeBias", "check_t5_buckets", "t5_bucket"]


def check_t5_buckets(num_buckets: object, max_distance: object, bidirectional: bool) -> None:
    """Validate T5 bucket hyperparameters; each error names the field.

    Allowed: causal ``num_buckets ≥ 2``; bidirectional ``num_buckets`` even and ``≥ 4``
    (each direction gets half, and each half needs at least one exact and one log bucket);
    ``max_distance`` an integer ``> max_exact``, where ``max_exact = num_buckets // 2``
    (causal) or ``num_buckets // 4`` (bidirectional): the log formula divides by
    ``log(max_distance / max_exact)``, so it must be positive.
    """
    num_buckets = check_positive_int("num_buckets", num_buckets)
    max_distance = check_positive_int("max_distance", max_distance)
    assert isinstance(num_buckets, int) and isinstance(max_distance, int)
    if bidirectional:
        if num_buckets < 4 or num_buckets % 2:
            raise ValueError(
                f"num_buckets must be an even integer >= 4 when bidirectional; got {num_buckets}"
            )
        max_exact = num_buckets // 4
    else:
        if num_buckets < 2:
            raise ValueError(f"num_buckets must be >= 2; got {num_buckets}")
        max_exact = num_buckets // 2
    if max_distance <= max_exact:
        raise ValueError(
            f"max_distance must be > max_exact = {max_exact} for num_buckets={num_buckets} "
            f"(bidirectional={bidirectional}); got {max_distance}"
        )


def t5_bucket(
    relative_position: Tensor,
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> Tensor:
    """Map relative positions ``k_pos - q_pos`` to T5's log-spaced buckets.

    .. math::
        n = \\lvert r \\rvert \\text{ (bidirectional; } + B/2 \\text{ if } r > 0) \\text{ or }
        \\max(-r, 0) \\text{ (causal)};\\quad
        \\text{bucket}(n) = n \\text{ if } n < E \\text{ else }
        \\min\\Big(B' - 1,\\ E + \\Big\\lfloor \\frac{\\ln(n / E)}{\\ln(D / E)} (B' - E)
        \\Big\\rfloor\\Big)

    with ``B' = B/2`` (bidirectional) or ``B``, ``E = B'/2`` exact buckets and ``D =
    max_distance``. The log is taken in float32 and truncated toward zero, exactly as the
    reference, so bucket boundaries match bit for bit; causal attention sends every future
    key (``r > 0``) to bucket 0.

    Paper: Raffel et al. 2020, https://arxiv.org/abs/1910.10683. Tested against HF
    ``T5Attention._relative_position_bucket`` on every ``r`` in ``[-1000, 1000]``.

    Args:
        relative_position: integer (or whole-valued float) tensor of ``k_pos - q_pos``.
        bidirectional: encoder (True) or causal decoder (False) bucketing.
        num_buckets: total number of buckets B (see :func:`check_t5_buckets`).
        max_distance: distances ``≥ max_distance`` share the last bucket.

    Returns:
        int64 tensor of the same shape, values in ``[0, num_buckets)``.

    Example::

        >>> t5_bucket(torch.tensor([-200, -16, -1, 0, 1, 16]))
        tensor([15, 10,  1,  0, 17, 26])
    """
    check_t5_buckets(num_buckets, max_distance, bidirectional)
    if relative_position.dtype == torch.bool or relative_position.is_complex():
        raise ValueError(
            f"relative_position must be an integer tensor, got {relative_position.dtype}"
        )
    check_integer_valued("relative_position", relative_position)
    return _bucket(relative_position.to(torch.long), bidirectional, num_buckets, max_distance)


def _bucket(rel: Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> Tensor:
    """:func:`t5_bucket` of int64 ``rel`` without checks (the per-forward path)."""
    if bidirectional:
        num_buckets //= 2
        offset = (rel > 0).to(torch.long) * num_buckets
        n = rel.abs()
    else:
        offset = torch.zeros_like(rel)
        n = (-rel).clamp(min=0)
    max_exact = num_buckets // 2
    # float32 log and truncation toward zero, as the reference; n < max_exact is masked below.
    scaled = torch.log(n.float() / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (scaled * (num_buckets - max_exact)).to(torch.long)
    large = large.clamp(max=num_buckets - 1)
    return offset + torch.where(n < max_exact, n, large)


class T5RelativeBias(BiasEncoding):
    """T5's bucketed relative position bias: ``bias[h, i, j] = weight[bucket(j - i), h]``.

    .. math:: b_{hij} = W_{\\text{bucket}(k\\_pos_j - q\\_pos_i),\\, h}

    The bias is added to the logits as is, without a ``1/√d`` factor (T5 folds the scale
    into its initialization and does not scale ``q·k`` either). T5 computes the bias in the
    first layer and reuses it in all layers, so ``shared_across_layers`` is True: the
    model passes one instance to every layer. Paper: Raffel et al. 2020,
    https://arxiv.org/abs/1910.10683; tested against HF ``T5Attention.compute_bias``
    (encoder, decoder and KV-cache calls).

    Args:
        num_heads: number of heads (≥ 1).
        num_buckets: number of buckets (default 32; see :func:`check_t5_buckets`).
        max_distance: distance from which all keys share the last bucket (default 128).
        bidirectional: True for encoders (separate buckets for past and future keys), False
            for causal decoders.
        device, dtype: of the table; the bias has the table's dtype.

    Attributes:
        weight: learnable table ``(num_buckets, num_heads)``, initialized ``N(0, 1)`` like
            ``nn.Embedding`` (the layout of HF's ``relative_attention_bias.weight``).

    Shape:
        ``bias(q_pos, k_pos)``: ``(num_heads, q_len, k_len)`` for 1-D positions, else
        ``(batch, num_heads, q_len, k_len)``. Positions must be whole numbers.

    Example::

        >>> t5 = T5RelativeBias(4, bidirectional=False)
        >>> t5.bias(torch.tensor([9]), torch.arange(10)).shape  # one decoding step
        torch.Size([4, 1, 10])
    """

    shared_across_layers: ClassVar[bool] = True
    #: ``bias_at(h, q, k)`` is a function of ``q − k`` alone (attention serves it from one
    #: table of the forward's distances: :mod:`posenc.attention.structured`).
    depends_on_distance_only: ClassVar[bool] = True

    def __init__(
        self,
        num_heads: int,
        *,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = check_positive_int("num_heads", num_heads)
        check_t5_buckets(num_buckets, max_distance, bidirectional)
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bool(bidirectional)
        self.weight = nn.Parameter(torch.empty(num_buckets, num_heads, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight)

    def buckets(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Bucket index ``(q_len, k_len)`` or ``(batch, q_len, k_len)`` of every pair."""
        rel = relative_distances(q_pos, k_pos, whole=True)
        return t5_bucket(
            rel,
            bidirectional=self.bidirectional,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )

    def bias_at(self, head: Tensor, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        """``weight[bucket(k_pos - q_pos), head]`` in ``dtype`` (positions are whole)."""
        rel = (k_pos - q_pos).to(torch.long)
        bucket = _bucket(rel, self.bidirectional, self.num_buckets, self.max_distance)
        return self.weight[bucket, head].to(dtype)

    def check_bias_positions(self, q_pos: Tensor, k_pos: Tensor) -> None:
        super().check_bias_positions(q_pos, k_pos)
        self.validate_positions(q_pos, "q_pos")
        self.validate_positions(k_pos, "k_pos")

    def validate_positions(self, positions: Tensor, name: str) -> None:
        """Raise ``ValueError`` naming ``name`` unless positions are whole numbers."""
        check_integer_valued(name, positions)

    def bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype | None = None) -> Tensor:
        """``(num_heads, q_len, k_len)`` or ``(batch, num_heads, q_len, k_len)`` bias.

        ``dtype`` defaults to the table's.
        """
        return super().bias(q_pos, k_pos, dtype or self.weight.dtype)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, num_buckets={self.num_buckets}, "
            f"max_distance={self.max_distance}, bidirectional={self.bidirectional}"
        )
