"""The gated delta rule: a linear-attention mixer whose state is corrected, not only summed.

Gated DeltaNet (Yang, Kautz and Hatamizadeh 2024, https://arxiv.org/abs/2412.06464, eq. 10)
keeps per head a state ``S ∈ R^{d_k × d_v}`` (here the transpose of the paper's ``d_v × d_k``)
and updates it once per token::

    S_t = α_t (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ,      o_t = S_tᵀ q_t

``α_t ∈ (0, 1]`` forgets (Mamba-2's gate), ``β_t ∈ [0, 1]`` is the delta rule's step: the
value stored under ``k_t`` moves towards ``v_t`` (``S_tᵀ k_t = α_t(1 − β_t) S_{t−1}ᵀ k_t + β_t
v_t`` for a unit ``k_t``). Order comes from the recurrence, so the layer takes no positional
encoding (Qwen3-Next and Kimi Linear mix three such layers per softmax layer).

* :func:`gated_delta_rule_recurrent`: the recurrence token by token (the reference; float64
  in the tests).
* :func:`gated_delta_rule`: the same in chunks of ``C`` tokens (the WY form of Yang et al.
  2024, https://arxiv.org/abs/2406.06484, with the gate's cumulative decays): within a chunk,
  with ``γ_r = Π_{s ≤ r} α_s`` and ``S_0`` the state entering it, the corrections
  ``u_r = β_r (v_r − α_r S_{r−1}ᵀ k_r)`` solve the unit lower-triangular system
  ``(I + diag(β) A) U = diag(β) (V − diag(γ) K S_0)``, ``A_{rs} = (γ_r / γ_s) k_rᵀ k_s`` for
  ``s < r``; then ``O = diag(γ) Q S_0 + (Γ ⊙ Q Kᵀ) U`` (``Γ_{rs} = γ_r / γ_s``, ``s ≤ r``)
  and the chunk leaves ``S_C = γ_C S_0 + Kᵀ diag(γ_C / γ) U``. Equal to the recurrence
  (tested in float64, with gradients).
* :class:`GatedDeltaNet`: the layer (projections, gates, output norm and gate) with a
  :class:`DeltaState` for decoding; a KV-cache step equals the full forward.

Not reproduced from the paper's layer: the short causal convolutions on q, k and v.
Reference implementation: flash-linear-attention's ``chunk_gated_delta_rule`` /
``fused_recurrent_gated_delta_rule`` (the same recurrence; its kernels are GPU-only).

Example::

    >>> q, k, v = (torch.randn(1, 2, 10, 4, dtype=torch.float64) for _ in range(3))
    >>> k = torch.nn.functional.normalize(k, dim=-1)
    >>> log_alpha, beta = -torch.rand(1, 2, 10).double(), torch.rand(1, 2, 10).double()
    >>> out, state = gated_delta_rule(q, k, v, log_alpha, beta, chunk_size=4)
    >>> ref, ref_state = gated_delta_rule_recurrent(q, k, v, log_alpha, beta)
    >>> torch.allclose(out, ref) and torch.allclose(state, ref_state)
    True
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._validate import check_positive_int
from posenc.attention.context import AttentionContext

__all__ = [
    "DeltaState",
    "GatedDeltaNet",
    "gated_delta_rule",
    "gated_delta_rule_recurrent",
]

#: Tokens per chunk of :func:`gated_delta_rule` (flash-linear-attention's is 64).
DEFAULT_CHUNK = 64


def _check_inputs(
    q: Tensor, k: Tensor, v: Tensor, log_alpha: Tensor, beta: Tensor, state: Tensor | None
) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 4 or not t.is_floating_point():
            raise ValueError(f"{name} must be a floating tensor (batch, heads, seq, dim)")
    if q.shape != k.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"q and k must have one shape and v their (batch, heads, seq); got q "
            f"{tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    for name, t in (("log_alpha", log_alpha), ("beta", beta)):
        if not isinstance(t, Tensor) or t.shape != q.shape[:3]:
            got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(
                f"{name} must have shape (batch, heads, seq) = {tuple(q.shape[:3])}; got {got}"
            )
    if state is not None:
        expected = (*q.shape[:2], q.shape[-1], v.shape[-1])
        if not isinstance(state, Tensor) or tuple(state.shape) != expected:
            got = tuple(state.shape) if isinstance(state, Tensor) else type(state).__name__
            raise ValueError(
                f"state must have shape (batch, heads, d_k, d_v) = {expected}; got {got}"
            )


def gated_delta_rule_recurrent(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_alpha: Tensor,
    beta: Tensor,
    state: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The gated delta rule token by token (see the module docstring): the reference.

    Args:
        q, k: ``(batch, heads, seq, d_k)``; k unit-norm for a contracting update (the layer
            L2-normalizes it), not checked.
        v: ``(batch, heads, seq, d_v)``.
        log_alpha: ``ln α_t ≤ 0``, ``(batch, heads, seq)``.
        beta: ``β_t ∈ [0, 1]``, ``(batch, heads, seq)``.
        state: ``S`` before the first token, ``(batch, heads, d_k, d_v)``, or None (zeros).

    Returns:
        ``(out, state)``: ``o_t`` ``(batch, heads, seq, d_v)`` and the last ``S``.
    """
    _check_inputs(q, k, v, log_alpha, beta, state)
    batch, heads, seq, d_k = q.shape
    s = q.new_zeros(batch, heads, d_k, v.shape[-1]) if state is None else state
    outs = []
    for t in range(seq):
        k_t, v_t, q_t = k[:, :, t], v[:, :, t], q[:, :, t]  # (batch, heads, d)
        alpha_t, beta_t = log_alpha[:, :, t].exp()[..., None, None], beta[:, :, t, None, None]
        projected = k_t[..., :, None] * (k_t[..., None, :] @ s)  # k kᵀ S
        s = alpha_t * (s - beta_t * projected) + beta_t * k_t[..., :, None] * v_t[..., None, :]
        outs.append((q_t[..., None, :] @ s)[..., 0, :])  # Sᵀ q as qᵀ S
    return torch.stack(outs, dim=2), s


def gated_delta_rule(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_alpha: Tensor,
    beta: Tensor,
    state: Tensor | None = None,
    *,
    chunk_size: int = DEFAULT_CHUNK,
) -> tuple[Tensor, Tensor]:
    """The gated delta rule in chunks of ``chunk_size`` tokens (the WY form of the module
    docstring): one triangular solve and a few matrix products per chunk, equal to
    :func:`gated_delta_rule_recurrent` (same arguments and returns).

    A sequence that is not a multiple of ``chunk_size`` is padded with tokens that change
    nothing (``α = 1``, ``β = 0``).
    """
    _check_inputs(q, k, v, log_alpha, beta, state)
    size = check_positive_int("chunk_size", chunk_size)
    batch, heads, seq, d_k = q.shape
    d_v = v.shape[-1]
    s = q.new_zeros(batch, heads, d_k, d_v) if state is None else state
    pad = -seq % size
    if pad:
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        log_alpha, beta = F.pad(log_alpha, (0, pad)), F.pad(beta, (0, pad))
    chunks = (seq + pad) // size
    # (batch, heads, chunks, size, ·): chunk c holds tokens [c·size, (c+1)·size)
    q, k, v = (t.reshape(batch, heads, chunks, size, -1) for t in (q, k, v))
    log_alpha = log_alpha.reshape(batch, heads, chunks, size)
    beta = beta.reshape(batch, heads, chunks, size)
    log_gamma = log_alpha.cumsum(dim=-1)  # ln γ_r within each chunk
    rows = torch.arange(size, device=q.device)
    lower = rows[:, None] >= rows[None, :]  # s ≤ r
    strict = rows[:, None] > rows[None, :]  # s < r
    # Γ_{rs} = γ_r / γ_s where s ≤ r, 0 elsewhere (masked before exp: no overflow)
    diff = log_gamma[..., :, None] - log_gamma[..., None, :]
    decay = torch.where(lower, diff, diff.new_full((), -math.inf)).exp()
    eye = torch.eye(size, dtype=q.dtype, device=q.device)
    system = eye + beta[..., :, None] * (decay * strict) * (k @ k.transpose(-1, -2))
    qk = decay * (q @ k.transpose(-1, -2))  # Γ ⊙ Q Kᵀ
    gamma = log_gamma.exp()[..., None]  # (…, size, 1)
    last = log_gamma[..., -1:]  # ln γ_C
    tail = (last - log_gamma).exp()[..., None]  # γ_C / γ_r
    outs = []
    for c in range(chunks):
        k_c = k[:, :, c]
        rhs = beta[:, :, c, :, None] * (v[:, :, c] - gamma[:, :, c] * (k_c @ s))
        u = torch.linalg.solve_triangular(system[:, :, c], rhs, upper=False, unitriangular=True)
        outs.append(gamma[:, :, c] * (q[:, :, c] @ s) + qk[:, :, c] @ u)
        s = last[:, :, c, :, None].exp() * s + k_c.transpose(-1, -2) @ (tail[:, :, c] * u)
    out = torch.cat(outs, dim=2) if chunks > 1 else outs[0]
    return out[:, :, :seq], s


class DeltaState:
    """The recurrent state of one :class:`GatedDeltaNet` layer while decoding (its KV cache).

    Attributes:
        state: ``S`` ``(batch, heads, d_k, d_v)`` after the tokens seen, or None (none yet).
        length: tokens seen (padding included), for the model's positions.
    """

    def __init__(self) -> None:
        self.state: Tensor | None = None
        self.length = 0


class GatedDeltaNet(nn.Module):
    """A gated delta-rule layer (Gated DeltaNet's token mixer) in place of attention.

    .. math::

        q_t, k_t = \\frac{\\mathrm{silu}(W_{q,k} x_t)}{\\lVert\\cdot\\rVert_2}, \\quad
        v_t = \\mathrm{silu}(W_v x_t), \\quad
        \\ln α_t = −e^{A}\\,\\mathrm{softplus}(W_a x_t + b_a), \\quad
        β_t = σ(W_β x_t)

    per head; the rule (:func:`gated_delta_rule`) on ``q_t / \\sqrt{d_k}``, ``k_t``, ``v_t``;
    then a per-head RMS norm, the output gate ``⊙ silu(W_g x_t)`` and the output projection
    (Gated DeltaNet §3.3; Qwen3-Next's ``Qwen3NextGatedDeltaNet`` without its short
    convolutions). No positional encoding: order is the recurrence's.

    Args:
        dim: model width.
        num_heads: heads (``head_dim = dim / num_heads`` for keys and values).
        chunk_size: tokens per chunk of the chunked form (:func:`gated_delta_rule`).

    Shape:
        x ``(batch, seq, dim)`` → ``(batch, seq, dim)``. With ``cache`` (a
        :class:`DeltaState`) the state continues from the tokens before; padded tokens
        (``key_padding_mask`` False, or the model's context) leave it unchanged.

    Example::

        >>> layer = GatedDeltaNet(dim=16, num_heads=2)
        >>> layer(torch.randn(2, 5, 16)).shape
        torch.Size([2, 5, 16])
    """

    pos = None  # the layer takes no positional encoding (a model's encodings() reads it)

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        chunk_size: int = DEFAULT_CHUNK,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        dim = check_positive_int("dim", dim)
        num_heads = check_positive_int("num_heads", num_heads)
        if dim % num_heads:
            raise ValueError(f"dim ({dim}) must be divisible by num_heads ({num_heads})")
        self.chunk_size = check_positive_int("chunk_size", chunk_size)
        self.dim, self.num_heads, self.head_dim = dim, num_heads, dim // num_heads
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        self.q_proj = nn.Linear(dim, dim, bias=False, **factory)
        self.k_proj = nn.Linear(dim, dim, bias=False, **factory)
        self.v_proj = nn.Linear(dim, dim, bias=False, **factory)
        self.a_proj = nn.Linear(dim, num_heads, bias=True, **factory)
        self.b_proj = nn.Linear(dim, num_heads, bias=False, **factory)
        self.g_proj = nn.Linear(dim, dim, bias=False, **factory)
        self.out_proj = nn.Linear(dim, dim, bias=False, **factory)
        self.norm = nn.RMSNorm(self.head_dim, **factory)
        self.A_log = nn.Parameter(torch.empty(num_heads, **factory))
        self._reset_decay()

    def _reset_decay(self) -> None:
        # A ~ U(1, 16) as Mamba-2 and Gated DeltaNet: per-head forgetting from fast to slow
        with torch.no_grad():
            self.A_log.copy_(torch.empty_like(self.A_log).uniform_(1.0, 16.0).log())

    def reset_parameters(self) -> None:
        """Re-draw every parameter in the constructor's order (after ``to_empty``)."""
        for proj in (
            self.q_proj,
            self.k_proj,
            self.v_proj,
            self.a_proj,
            self.b_proj,
            self.g_proj,
            self.out_proj,
        ):
            proj.reset_parameters()
        self.norm.reset_parameters()
        self._reset_decay()

    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        cache: DeltaState | None = None,
        context: AttentionContext | None = None,
    ) -> Tensor:
        """Mix ``x`` causally; ``positions`` are not read (accepted as attention's are).

        Raises:
            ValueError: naming the argument: ``x`` not ``(batch, seq, dim)``; a
                ``key_padding_mask`` not ``(batch, seq)`` or given with ``context``; a
                context with packed documents or a user mask (the recurrence has no pairs
                to mask); ``cache`` not a :class:`DeltaState` or another batch's.
        """
        if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != self.dim:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x must have shape (batch, seq, {self.dim}); got {got}")
        batch, seq, _ = x.shape
        real = self._real_tokens(key_padding_mask, context, batch, seq)
        if cache is not None and not isinstance(cache, DeltaState):
            raise ValueError(
                f"cache must be a DeltaState for a GatedDeltaNet layer, got {type(cache).__name__}"
            )
        state = None if cache is None else cache.state
        if state is not None and state.shape[0] != batch:
            raise ValueError(f"cache holds a state of batch {state.shape[0]}; x has {batch}")

        def heads(t: Tensor) -> Tensor:
            return t.view(batch, seq, self.num_heads, -1).transpose(1, 2)

        q = F.normalize(heads(F.silu(self.q_proj(x))), dim=-1) / math.sqrt(self.head_dim)
        k = F.normalize(heads(F.silu(self.k_proj(x))), dim=-1)
        v = heads(F.silu(self.v_proj(x)))
        log_alpha = -self.A_log.exp() * F.softplus(self.a_proj(x))  # (batch, seq, heads)
        beta = torch.sigmoid(self.b_proj(x))
        if real is not None:  # a padded token neither forgets nor writes
            keep = real[..., None].to(log_alpha.dtype)
            log_alpha, beta = log_alpha * keep, beta * keep
        out, new_state = gated_delta_rule(
            q,
            k,
            v,
            log_alpha.transpose(1, 2),
            beta.transpose(1, 2),
            state,
            chunk_size=self.chunk_size,
        )
        if cache is not None:
            cache.state, cache.length = new_state, cache.length + seq
        gate = F.silu(heads(self.g_proj(x)))
        out = (self.norm(out) * gate).transpose(1, 2).reshape(batch, seq, self.dim)
        return self.out_proj(out)

    @staticmethod
    def _real_tokens(
        key_padding_mask: Tensor | None, context: AttentionContext | None, batch: int, seq: int
    ) -> Tensor | None:
        """``(batch, seq)`` bool, True for a real new token, or None when all are real."""
        if context is not None:
            if key_padding_mask is not None:
                raise ValueError("give either context or key_padding_mask, not both")
            mask = context.mask
            if mask.q_documents is not None or mask.predicate is not None or mask.dense is not None:
                raise ValueError(
                    "GatedDeltaNet reads causal order and key padding only; packed documents "
                    "(document_ids) and attn_mask need attention's pairs"
                )
            if not mask.causal:
                raise ValueError("GatedDeltaNet is causal: its context must be causal")
            padding = mask.key_padding
            return None if padding is None else padding[:, -seq:]
        if key_padding_mask is None:
            return None
        if not isinstance(key_padding_mask, Tensor) or tuple(key_padding_mask.shape) != (
            batch,
            seq,
        ):
            raise ValueError(f"key_padding_mask must have shape (batch, seq) = {(batch, seq)}")
        return key_padding_mask.to(torch.bool)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, num_heads={self.num_heads}, chunk_size={self.chunk_size}"
