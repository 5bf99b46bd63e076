"""FoPE, Fourier position embedding: each channel pair reads a learned mix of all frequencies.

RoPE rotates channel pair ``d`` of a query or key at position ``t`` by the angle ``t θ_d``.
FoPE (Hua et al. 2024) replaces the pair's ``cos t θ_d`` and ``sin t θ_d`` by Fourier series
over every kept frequency, with learned coefficients per key/value head ``h``:

.. math::
    c_{hd}(t) = \\sum_{D} C_{hDd} \\cos(t θ_D), \\qquad
    s_{hd}(t) = \\sum_{D} S_{hDd} \\sin(t θ_D), \\qquad θ_D = \\text{base}^{-2D/d_h}

    x'_{d} = x_d\\, c_{hd}(t) - x_{d + d_h/2}\\, s_{hd}(t), \\qquad
    x'_{d + d_h/2} = x_{d + d_h/2}\\, c_{hd}(t) + x_d\\, s_{hd}(t)

(the half-split "NeoX" pairing, vLLM's). Frequencies that do not complete one period within
the training length ``L`` (``θ_D ≤ 2π / L``) are dropped: their pairs (the slowest, at the
end of the half) get ``c = 1``, ``s = 0`` and pass unrotated, a zero frequency. With
``C = S = I`` FoPE is RoPE on the kept pairs; with other coefficients ``c`` and ``s`` are no
cosine and sine of one angle, the map is no rotation, and ``q'·k'`` is no function of
``i − j`` alone (``tests/rotary/test_fope.py`` shows both).

The coefficients are module parameters and enter the tables that :meth:`rotary_tables`
builds once per model forward, so gradients reach them through every attention layer.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from posenc._validate import (
    check_floating_dtype,
    check_int,
    check_positive_float,
    check_positive_int,
)
from posenc.encoding.protocols import RotaryEncoding
from posenc.rotary.frequencies import rope_inv_freq

__all__ = ["FourierRotaryEmbedding", "fope_inv_freq", "fope_rotate", "fope_tables"]


def fope_inv_freq(
    head_dim: int,
    base: float = 10000.0,
    *,
    train_length: int | None = None,
    num_frequencies: int | None = None,
) -> Tensor:
    """FoPE's kept frequencies, float64 on the CPU, fastest first.

    RoPE's ``θ_D = base^(−2D/head_dim)``; ``num_frequencies`` keeps the first that many
    (vLLM's ``num_inv_freq``), otherwise those with ``θ_D > 2π / train_length`` (strictly: a
    frequency of exactly one period per ``L`` is dropped, as in vLLM); neither keeps all.

    Example::

        >>> fope_inv_freq(8, train_length=64)  # periods 6.3, 63, 628, 6283: two kept
        tensor([1.0000, 0.1000], dtype=torch.float64)
    """
    _check_head_dim(head_dim)
    inv_freq = rope_inv_freq(head_dim, base)
    if train_length is not None:  # checked even when num_frequencies makes it unused
        train_length = check_positive_int("train_length", train_length)
    if num_frequencies is not None:
        return inv_freq[: _check_num_frequencies(num_frequencies, head_dim)]
    if train_length is None:
        return inv_freq
    kept = inv_freq[inv_freq > 2.0 * math.pi / train_length]
    if kept.numel() == 0:
        raise ValueError(
            f"train_length must be > 2π (6.28) so that FoPE keeps one frequency (θ_0 = 1 has "
            f"period 2π); got {train_length}"
        )
    return kept


def fope_tables(
    positions: Tensor, inv_freq: Tensor, cos_coef: Tensor, sin_coef: Tensor, half: int
) -> tuple[Tensor, Tensor]:
    """The mixed tables ``(c, s)``, each ``([batch,] heads, seq, half)``.

    Phases ``positions · θ`` in float64, their cos and sin rounded once to the coefficients'
    dtype, mixed by ``cos_coef``/``sin_coef`` ``(heads, F, F)`` over the ``F`` kept
    frequencies, then padded to ``half`` pairs with ``c = 1``, ``s = 0`` (the dropped
    frequencies: those pairs stay unrotated).
    """
    angles = positions.to(torch.float64).unsqueeze(-1) * inv_freq.to(positions.device)
    dtype = cos_coef.dtype
    angles = angles.unsqueeze(-3)  # ([batch,] 1, seq, F): one phase table for all heads
    c = angles.cos().to(dtype) @ cos_coef  # ([batch,] heads, seq, F)
    s = angles.sin().to(dtype) @ sin_coef
    pad = half - c.shape[-1]
    if pad:
        c = torch.cat([c, c.new_ones(*c.shape[:-1], pad)], dim=-1)
        s = torch.cat([s, s.new_zeros(*s.shape[:-1], pad)], dim=-1)
    return c, s


def fope_rotate(x: Tensor, c: Tensor, s: Tensor) -> Tensor:
    """``[x₁ c − x₂ s, x₂ c + x₁ s]`` on the halves ``x₁, x₂`` of ``x`` (vLLM's
    ``x · cat(c, c) + rotate_neox(x) · cat(s, s)``).

    Computed in float32 for half-precision ``x`` (float64 stays float64), rounded once to
    ``x``'s dtype; ``c`` and ``s`` ``(…, half)`` broadcast against ``x``'s halves.
    """
    cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
    x1, x2 = x.to(cdt).chunk(2, dim=-1)
    c, s = c.to(cdt), s.to(cdt)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


class FourierRotaryEmbedding(RotaryEncoding):
    """FoPE (Hua et al. 2024): RoPE whose pairs read learned Fourier series of all frequencies.

    .. math::
        c_{hd}(t) = \\sum_D C_{hDd} \\cos(t θ_D), \\quad s_{hd}(t) = \\sum_D S_{hDd}
        \\sin(t θ_D), \\quad (x_1, x_2) \\mapsto (x_1 c - x_2 s,\\; x_2 c + x_1 s)

    Paper: https://arxiv.org/abs/2412.17739 (Fourier Position Embedding: Enhancing
    Attention's Periodic Extension for Length Generalization). Tested against vLLM's
    ``FourierRotaryEmbedding`` (``vllm/model_executor/layers/rotary_embedding/fope.py``)
    re-derived in float64: its frequency selection, its per-KV-head mixing, its padding of
    the dropped pairs and its NeoX rotation.

    Parameters as vLLM's: ``cos_coef`` and ``sin_coef`` ``(num_kv_heads, F, F)`` over the
    ``F`` kept frequencies (``(1, F, F)``, one set for all heads, when ``separate_heads`` is
    False); query head ``n`` uses key/value head ``n // (num_heads / num_kv_heads)``'s.
    Differences, each for a reason:

    * initialisation: vLLM loads the coefficients; the training code that produced them
      (xtuner's ``FourierEmbedding``) draws ``I + xavier_normal_(gain=init_factor)``. Here
      ``I + N(0, init_factor² / F)``: Xavier's std of one ``F × F`` matrix, the same as
      xtuner's for one shared set; xtuner's ``xavier_normal_`` on the 3-D per-head tensor
      counts the heads as fan-out and the last axis as a receptive field, giving
      ``init_factor·√(2 / (F(F + H)))``, which shrinks with the number of heads ``H`` (a
      side effect of torch's fan rule, not a choice the paper states).
    * the coefficients are learned (``requires_grad``); vLLM's are frozen (inference).
    * phases from float64 and any position (fractional, beyond ``train_length``); vLLM
      tabulates float32 phases at integer positions below ``max_position_embeddings``.
    * the rotation runs in float32 for half-precision q/k and rounds once; vLLM rounds the
      tables to the model dtype and rotates in it.
    * ``train_length`` is the clipping length alone (vLLM's ``max_position_embeddings``
      is both it and the table size); full-width rotation only (vLLM's ``rotary_dim``
      below ``head_size`` is not reproduced).

    Served by every attention backend (the rotation happens before the backend: ``sdpa``,
    ``flex``, ``chunked``; ``linear`` maps its feature-mapped q and k with it, the
    numerator's weights then not relative unless ``C = S = I``) and the KV cache (cached
    keys hold their map; the :attr:`rebuilds` token changes with the coefficients, so a
    cache of unmapped keys never reuses keys mapped with old ones).

    Args:
        head_dim: per-head width of q and k (even).
        num_kv_heads: key/value heads (one coefficient set each); it must divide the
            attention's query heads and equal its key heads.
        base: frequency base, ``θ_D = base^(−2D/head_dim)``.
        train_length: ``L``: frequencies with ``θ_D ≤ 2π / L`` are dropped (their pairs do
            not rotate); None keeps all.
        num_frequencies: keep the first this many frequencies instead (vLLM's
            ``num_inv_freq``), in ``[1, head_dim // 2]``; None: by ``train_length``.
        separate_heads: one coefficient set per key/value head (vLLM's ``fope_sep_head``)
            or one for all.
        init_factor: the std factor of the coefficients' noise around the identity
            (vLLM's ``fope_init_factor``), ≥ 0; 0 starts as RoPE on the kept pairs.

    Shape:
        q ``(batch, heads, q_len, head_dim)``, k ``(batch, num_kv_heads, k_len, head_dim)``
        (or one head per query head when ``num_kv_heads`` equals the query heads).

    Example::

        >>> fope = FourierRotaryEmbedding(head_dim=8, num_kv_heads=2, train_length=64)
        >>> fope.cos_coef.shape  # two kept frequencies of four
        torch.Size([2, 2, 2])
        >>> q, k = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8)
        >>> q2, k2 = fope(q, k, torch.arange(5), torch.arange(5))
        >>> q2.shape, k2.shape
        (torch.Size([1, 4, 5, 8]), torch.Size([1, 2, 5, 8]))
    """

    def __init__(
        self,
        head_dim: int,
        num_kv_heads: int,
        *,
        base: float = 10000.0,
        train_length: int | None = None,
        num_frequencies: int | None = None,
        separate_heads: bool = True,
        init_factor: float = 0.5,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        num_kv_heads = check_positive_int("num_kv_heads", num_kv_heads)
        check_positive_float("base", base)
        if not isinstance(separate_heads, bool):
            raise ValueError(f"separate_heads must be True or False, got {separate_heads!r}")
        if isinstance(init_factor, bool) or not isinstance(init_factor, (int, float)):
            raise ValueError(f"init_factor must be a number >= 0, got {init_factor!r}")
        if not math.isfinite(init_factor) or init_factor < 0:
            raise ValueError(f"init_factor must be a finite number >= 0, got {init_factor}")
        check_floating_dtype("dtype", dtype)
        inv_freq = fope_inv_freq(
            head_dim, base, train_length=train_length, num_frequencies=num_frequencies
        )
        self.head_dim, self.num_kv_heads, self.base = head_dim, num_kv_heads, float(base)
        self.train_length, self.num_frequencies = train_length, num_frequencies
        self.separate_heads, self.init_factor = separate_heads, float(init_factor)
        self.num_kept = inv_freq.numel()
        sets = num_kv_heads if separate_heads else 1
        shape = (sets, self.num_kept, self.num_kept)
        self.cos_coef = nn.Parameter(torch.empty(shape, device=device, dtype=dtype))
        self.sin_coef = nn.Parameter(torch.empty(shape, device=device, dtype=dtype))
        self._inv_freq = inv_freq  # float64 on the CPU, not state: it follows the arguments
        self._on_device: dict[torch.device, Tensor] = {}
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``C, S = I + N(0, init_factor² / F)`` per set (see the class docstring)."""
        if self.cos_coef.device.type == "meta":
            return
        std = self.init_factor / math.sqrt(self.num_kept)
        eye = torch.eye(self.num_kept, device=self.cos_coef.device, dtype=self.cos_coef.dtype)
        with torch.no_grad():
            for coef in (self.cos_coef, self.sin_coef):
                coef.normal_(0.0, std).add_(eye)

    @property
    def rebuilds(self) -> int:
        """A token that changes whenever the coefficients do: in-place updates bump a
        tensor's version, ``load_state_dict(assign=True)`` puts in other tensors (a sum of
        versions alone could repeat); a KV cache that maps keys when read keys its memo on
        it. Writes through ``.data`` bypass the version counter and are not seen."""
        cos, sin = self.cos_coef, self.sin_coef
        return hash((id(cos), cos._version, id(sin), sin._version))

    def inv_freq(self, device: torch.device | str | None = None) -> Tensor:
        """The kept ``θ`` ``(F,)`` in float64 on ``device`` (memoised, never a buffer)."""
        device = torch.device("cpu" if device is None else device)
        if device not in self._on_device:
            self._on_device[device] = self._inv_freq.to(device)
        return self._on_device[device]

    def rotary_tables(
        self,
        positions: Tensor,
        dtype: torch.dtype,
        *,
        update: bool = True,
        length: int | None = None,
    ) -> Any:
        """``(c, s)`` ``([batch,] sets, seq, head_dim // 2)`` for ``positions``, mixed in
        float32 (float64 for float64), differentiable in the coefficients."""
        table = torch.float64 if dtype == torch.float64 else torch.float32
        return fope_tables(
            positions,
            self.inv_freq(positions.device),
            self.cos_coef.to(table),
            self.sin_coef.to(table),
            self.head_dim // 2,
        )

    def rotate_qk(
        self, q: Tensor, k: Tensor, q_tables: Any, k_tables: Any, *, inplace: bool = False
    ) -> tuple[Tensor, Tensor]:
        """Map q and k with their tables; query heads take their key/value head's set.
        New tensors (``inplace`` cannot apply: the map reads both halves)."""
        sets = self.cos_coef.shape[0]
        kv = self.num_kv_heads
        # per-head sets (even a single one) belong to that many key heads; a shared set to any
        if self.separate_heads and (k.shape[-3] != kv or q.shape[-3] % kv):
            raise ValueError(
                f"k has {k.shape[-3]} heads and q {q.shape[-3]} but FourierRotaryEmbedding has "
                f"num_kv_heads={kv}: build it with the attention's num_kv_heads "
                "(pos_kwargs={'num_kv_heads': ...}), which must divide q's heads"
            )
        group = q.shape[-3] // sets
        q_c, q_s = (t.repeat_interleave(group, dim=-3) if group > 1 else t for t in q_tables)
        return fope_rotate(q, q_c, q_s), fope_rotate(k, *k_tables)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, num_kv_heads={self.num_kv_heads}, base={self.base}, "
            f"train_length={self.train_length}, num_frequencies={self.num_frequencies}, "
            f"kept={self.num_kept}, separate_heads={self.separate_heads}, "
            f"init_factor={self.init_factor}"
        )


def _check_head_dim(head_dim: int) -> None:
    head_dim = check_positive_int("head_dim", head_dim)
    if head_dim % 2:
        raise ValueError(f"head_dim must be even (channel pairs), got {head_dim}")


def _check_num_frequencies(num_frequencies: int, head_dim: int) -> int:
    """``num_frequencies`` as an int in ``[1, head_dim // 2]`` (None is handled by callers)."""
    return check_int("num_frequencies", num_frequencies, low=1, high=head_dim // 2)
