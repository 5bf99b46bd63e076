"""PaTH: data-dependent positions as Householder-like transforms accumulated between key and query.

Each token ``s`` of a head carries a transform read from its hidden state,

.. math::
    H_s = I - \\beta_s w_s w_s^\\top, \\qquad w_s = \\frac{W_w x_s}{\\lVert W_w x_s \\rVert},
    \\qquad \\beta_s = 2\\,\\sigma(w_\\beta^\\top x_s + b_\\beta) \\in (0, 2),

and the logit of a query ``i`` and a key ``j ≤ i`` passes the key through every transform
after it, up to the query's:

.. math::
    \\ell_{ij} = \\text{scale}\\; q_i^\\top H_i H_{i-1} \\cdots H_{j+1}\\, k_j
             \\;(+\\, c_i - c_j \\text{ with PaTH-FoX's forget gates}).

So the logit reads only the tokens between ``j`` and ``i``: it is relative, and with
``β = 0`` (``H = I``) it is plain attention without positions (NoPE).

Paper: Yang et al., "PaTH Attention: Position Encoding via Accumulating Householder
Transformations", NeurIPS 2025, https://arxiv.org/abs/2505.16381; reference code
fla-org/flash-linear-attention (``fla/layers/path_attn.py``, ``fla/ops/path_attn/``, Triton).

The blockwise algorithm (the paper's §3, re-derived here): split the tokens into blocks of
``B``. Inside a block, the UT transform writes the products of its Householders with one unit
lower-triangular ``B × B`` matrix ``N`` (``N_{st} = β_t w_s^\\top w_t`` for ``t < s``):

.. math::
    C = N^{-1}\\,\\mathrm{tril}_{-1}(W K^\\top), \\quad
    A_{\\text{diag}} = Q K^\\top - \\mathrm{tril}_0(Q W^\\top)\\,\\mathrm{diag}(\\beta)\\,C,

    \\hat K = K - C^\\top \\mathrm{diag}(\\beta) W \\;(\\text{each key carried to the block's
    end}), \\qquad R = H_{c} \\cdots H_{e-1} = I - F^\\top W,\\;
    F = \\mathrm{diag}(\\beta) N^{-1} W.

A query block carries its queries backwards, block by block (``Q̃ ← Q̃ Rᵀ``), and meets each
earlier block's carried keys with one product ``Q̃ K̂ᵀ``. Cost ``O(L²d + L²d²/B + L B²)``
time, ``O(B·L)`` logits at a time; nothing of size ``L × L × d`` is formed. A KV cache keeps
keys carried to its newest token: a new token ``t`` applies ``H_t`` to every cached key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._validate import check_floating_dtype, check_layer_input, check_positive_int
from posenc.encoding.protocols import TokenTransformEncoding

__all__ = [
    "PathTransform",
    "path_attention",
    "path_attention_reference",
    "path_carried_keys",
    "path_carry_keys",
    "path_logits_reference",
]

#: ``visible(q_start, q_end, k_start, k_end)``: the visible pairs of a block of queries and
#: keys, bool broadcastable to ``(batch, heads, rows, keys)``, or None when all are.
Visible = Callable[[int, int, int, int], Tensor | None]


def path_logits_reference(q: Tensor, k: Tensor, w: Tensor, beta: Tensor) -> Tensor:
    """The unscaled PaTH logits ``q_iᵀ H_i ⋯ H_{j+1} k_j`` pair by pair (the definition).

    Each key is pushed through the transforms one token at a time, ``O(L²·d)`` per head;
    for tests and plots. Pairs above the diagonal (``j > i``) are 0.

    Shape:
        q, k, w ``(..., seq, d)``; beta ``(..., seq)`` → ``(..., seq, seq)``.
    """
    seq = q.shape[-2]
    logits = q.new_zeros(*q.shape[:-1], seq)
    for j in range(seq):
        key = k[..., j, :]
        for i in range(j, seq):
            if i > j:  # H_i key = key − β_i w_i (w_iᵀ key)
                wi = w[..., i, :]
                key = key - beta[..., i, None] * wi * (wi * key).sum(-1, keepdim=True)
            logits[..., i, j] = (q[..., i, :] * key).sum(-1)
    return logits


def path_attention_reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    w: Tensor,
    beta: Tensor,
    *,
    scale: float,
    key_padding: Tensor | None = None,
    document_ids: Tensor | None = None,
    log_gates: Tensor | None = None,
) -> Tensor:
    """Causal PaTH attention from :func:`path_logits_reference` (all heads given per head).

    ``key_padding`` ``(batch, seq)`` True for real tokens; ``document_ids`` ``(seq,)`` or
    ``(batch, seq)`` contiguous packed documents (a query sees its own document's keys);
    ``log_gates`` ``(batch, heads, seq)`` PaTH-FoX's ``log f_t``. Queries that see no key
    get zeros. Padding tokens should carry ``β = 0`` (the caller's, as
    :meth:`PathTransform.token_transforms` does).
    """
    seq = q.shape[-2]
    logits = scale * path_logits_reference(q, k, w, beta)
    if log_gates is not None:
        c = log_gates.cumsum(-1)
        logits = logits + c[..., :, None] - c[..., None, :]
    allowed = torch.ones(seq, seq, dtype=torch.bool, device=q.device).tril()
    allowed = allowed.expand(q.shape[0], 1, seq, seq)
    if key_padding is not None:
        allowed = allowed & key_padding[:, None, None, :]
    if document_ids is not None:
        docs = document_ids.expand(q.shape[0], seq)
        allowed = allowed & (docs[:, None, :, None] == docs[:, None, None, :])
    logits = logits.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(logits, dim=-1).nan_to_num(0.0)
    return probs @ v


def _ut_parts(k: Tensor, w: Tensor, beta: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """One block's UT transform: ``(βC, K̂, F)`` (see the module docstring).

    Shape:
        k, w ``(..., B, d)``, beta ``(..., B)`` → βC ``(..., B, B)``, K̂ ``(..., B, d)``,
        F ``(..., B, d)``.
    """
    size = w.shape[-2]
    eye = torch.eye(size, dtype=w.dtype, device=w.device)
    n = eye + (w @ w.transpose(-1, -2) * beta[..., None, :]).tril(-1)  # (..., B, B)
    wk = (w @ k.transpose(-1, -2)).tril(-1)
    solved = torch.linalg.solve_triangular(
        n, torch.cat([wk, w], dim=-1), upper=False, unitriangular=True
    )
    c, n_inv_w = solved[..., :size], solved[..., size:]
    beta_c = beta[..., None] * c
    carried = k - beta_c.transpose(-1, -2) @ w
    return beta_c, carried, beta[..., None] * n_inv_w


def path_carry_keys(keys: Tensor, w: Tensor, beta: Tensor, *, block_size: int = 64) -> Tensor:
    """``keys`` (rows, each a key carried to just before these tokens) carried through the
    transforms of ``w, beta`` in order: each becomes ``H_n ⋯ H_1 k``.

    Shape:
        keys ``(..., m, d)``; w ``(..., n, d)``; beta ``(..., n)`` → ``(..., m, d)``.
    """
    for start in range(0, w.shape[-2], block_size):
        wb, bb = w[..., start : start + block_size, :], beta[..., start : start + block_size]
        _, _, f = _ut_parts(wb, wb, bb)
        keys = keys - (keys @ f.transpose(-1, -2)) @ wb
    return keys


def path_carried_keys(k: Tensor, w: Tensor, beta: Tensor, *, block_size: int = 64) -> Tensor:
    """Each key carried to the last token: ``H_n ⋯ H_{j+1} k_j`` (what a KV cache holds).

    Shape:
        k, w ``(..., n, d)``; beta ``(..., n)`` → ``(..., n, d)``.
    """
    carried = k[..., :0, :]
    for start in range(0, k.shape[-2], block_size):
        end = start + block_size
        wb, bb = w[..., start:end, :], beta[..., start:end]
        _, block_keys, f = _ut_parts(k[..., start:end, :], wb, bb)
        carried = torch.cat([carried - (carried @ f.transpose(-1, -2)) @ wb, block_keys], -2)
    return carried


def _repeat_heads(x: Tensor, groups: int) -> Tensor:
    """Each key head's tensor for the ``groups`` query heads that share it."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def path_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    w: Tensor,
    beta: Tensor,
    *,
    scale: float,
    prefix_keys: Tensor | None = None,
    visible: Visible | None = None,
    q_states: Tensor | None = None,
    k_states: Tensor | None = None,
    dropout_p: float = 0.0,
    block_size: int = 64,
) -> Tensor:
    """Causal PaTH attention, blockwise (the UT transform per block; no value checks).

    The new tokens are the queries and the last keys; ``prefix_keys`` are earlier keys
    already carried to just before them (a KV cache's). Grouped heads: ``k``, ``v``, ``w``,
    ``beta`` and ``prefix_keys`` have ``kv_heads`` dividing ``q``'s heads.

    Args:
        q: ``(batch, heads, n, d)``; k, w ``(batch, kv_heads, n, d)``; v ``(batch,
            kv_heads, p + n, v_dim)`` (the prefix's values first); beta ``(batch, kv_heads,
            n)`` (0 on padding tokens).
        scale: multiplies ``q_iᵀ P k_j``.
        prefix_keys: ``(batch, kv_heads, p, d)`` or None.
        visible: the mask beyond causal order (key padding, documents), over keys
            ``0 … p + n − 1``; None when only causal order hides keys.
        q_states, k_states: PaTH-FoX's cumulative log gates ``(batch, heads, n)`` and
            ``(batch, heads, p + n)``: the logit gains ``c_i − c_j``; None for none.
        dropout_p: attention-probability dropout.
        block_size: tokens per UT block and queries per block of logits.

    Returns:
        ``(batch, heads, n, v_dim)``; queries that see no key get zeros.
    """
    seq = q.shape[-2]
    if seq == 0:
        return q.new_zeros(*q.shape[:-1], v.shape[-1])
    groups = q.shape[1] // k.shape[1]
    k, v, w = _repeat_heads(k, groups), _repeat_heads(v, groups), _repeat_heads(w, groups)
    beta = _repeat_heads(beta, groups)
    prefix = None if prefix_keys is None else _repeat_heads(prefix_keys, groups)
    p = 0 if prefix is None else prefix.shape[-2]
    size = block_size
    pad = -seq % size
    blocks = (seq + pad) // size

    def blocked(x: Tensor) -> Tensor:  # (..., n, ·) → (..., blocks, size, ·)
        x = F.pad(x, (0, 0, 0, pad)) if pad else x
        return x.unflatten(-2, (blocks, size))

    wb, kb = blocked(w), blocked(k)
    bb = (F.pad(beta, (0, pad)) if pad else beta).unflatten(-1, (blocks, size))
    beta_c, carried, f = _ut_parts(kb, wb, bb)
    qb = blocked(q)
    lower = torch.ones(size, size, dtype=torch.bool, device=q.device).tril()
    outputs = []
    for i in range(blocks):
        qi, wi = qb[..., i, :, :], wb[..., i, :, :]
        qw = (qi @ wi.transpose(-1, -2)).masked_fill(~lower, 0.0)  # tril₀(Q Wᵀ)
        parts = [qi @ kb[..., i, :, :].transpose(-1, -2) - qw @ beta_c[..., i, :, :]]
        carried_q = qi - qw @ f[..., i, :, :]  # H_a ⋯ H_i q_i
        for j in range(i - 1, -1, -1):
            parts.append(carried_q @ carried[..., j, :, :].transpose(-1, -2))
            carried_q = (
                carried_q - (carried_q @ wb[..., j, :, :].transpose(-1, -2)) @ f[..., j, :, :]
            )
        if prefix is not None:
            parts.append(carried_q @ prefix.transpose(-1, -2))
        q_start, q_end = i * size, min((i + 1) * size, seq)
        rows = q_end - q_start
        logits = torch.cat(parts[::-1], dim=-1)[..., :rows, : p + q_end] * scale
        if q_states is not None and k_states is not None:
            logits = logits + (
                q_states[..., q_start:q_end, None] - k_states[..., None, : p + q_end]
            )
        key_index = torch.arange(p + q_end, device=q.device)
        allowed = key_index <= (torch.arange(q_start, q_end, device=q.device) + p)[:, None]
        extra = None if visible is None else visible(q_start, q_end, 0, p + q_end)
        allowed = allowed if extra is None else allowed & extra
        logits = logits.masked_fill(~allowed, torch.finfo(logits.dtype).min)
        probs = torch.softmax(logits, dim=-1) * allowed  # rows that see nothing: zeros
        if dropout_p > 0.0:
            probs = F.dropout(probs, dropout_p)
        outputs.append(probs.to(v.dtype) @ v[..., : p + q_end, :])
    return torch.cat(outputs, dim=-2)


class PathTransform(TokenTransformEncoding):
    """PaTH (Yang et al., NeurIPS 2025): keys pass through data-dependent Householder-like
    transforms of every token between them and the query.

    .. math::
        \\ell_{ij} = \\text{scale}\\; q_i^\\top H_i \\cdots H_{j+1} k_j, \\quad
        H_s = I - \\beta_s w_s w_s^\\top, \\quad w_s = \\frac{u_s}{\\lVert u_s\\rVert},
        \\quad u_s = \\mathrm{SiLU}\\big(\\textstyle\\sum_{m=0}^{K-1} c_m \\odot
        W_w x_{s-K+1+m}\\big),
        \\quad \\beta_s = 2\\sigma(w_\\beta^\\top x_s + b_\\beta)

    and with ``forget_gate=True`` (PaTH-FoX) ``+ Σ_{j<t≤i} log σ(w_f^\\top x_t + b_f)``.

    Paper: https://arxiv.org/abs/2505.16381; reference code fla-org/flash-linear-attention's
    ``PaTHAttention`` (``w`` per key head, ``β = 2σ(·)`` so that ``H`` may have a negative
    eigenvalue, a short convolution over time before ``w`` is normalized); tested against
    :func:`path_attention_reference`, a float64 per-pair evaluation of the formula.

    The transforms read the hidden states: the encoding implements the **token transform**
    hook (:class:`~posenc.encoding.protocols.TokenTransformEncoding`). Attention hands it the
    layer's input; padding tokens get ``β = 0`` (``H = I``) and the convolution reads no
    padding and no other document, so they change nothing between real tokens. Backends
    ``sdpa`` and ``chunked`` (both run :func:`path_attention`); the KV cache holds the keys
    carried to its newest token and the last ``K − 1`` tokens' inputs. Causal only.

    Args:
        dim: the model width (the transforms read ``x`` of that width).
        num_heads: query heads (one forget gate per head).
        num_kv_heads: key heads (one ``w``, ``β`` per key head); default ``num_heads``.
        head_dim: per-head width of q and k; default ``dim // num_heads``.
        forget_gate: add FoX's forget gates (PaTH-FoX).
        conv_size: ``K``, the width of the short causal convolution over time before ``w``
            is normalized (fla's default 3, with SiLU); 1 for none (``w_s ∝ W_w x_s``).
        block_size: tokens per UT block.

    Shape:
        ``forward(x)``: x ``(batch, seq, dim)`` → ``(w, beta)``: ``(batch, kv_heads, seq,
        head_dim)`` and ``(batch, kv_heads, seq)``.

    Example::

        >>> path = PathTransform(dim=16, num_heads=2)
        >>> w, beta = path(torch.randn(1, 5, 16))
        >>> w.shape, beta.shape
        (torch.Size([1, 2, 5, 8]), torch.Size([1, 2, 5]))
    """

    causal_only: ClassVar[bool] = True

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
        forget_gate: bool = False,
        conv_size: int = 3,
        block_size: int = 64,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        dim = check_positive_int("dim", dim)
        num_heads = check_positive_int("num_heads", num_heads)
        kv_heads = check_positive_int(
            "num_kv_heads", num_heads if num_kv_heads is None else num_kv_heads
        )
        if num_heads % kv_heads:
            raise ValueError(
                f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({kv_heads})"
            )
        if head_dim is None:
            if dim % num_heads:
                raise ValueError(
                    f"dim ({dim}) must be divisible by num_heads ({num_heads}), or give head_dim"
                )
            head_dim = dim // num_heads
        head_dim = check_positive_int("head_dim", head_dim)
        if not isinstance(forget_gate, bool):
            raise ValueError(f"forget_gate must be a bool, got {forget_gate!r}")
        if isinstance(conv_size, bool) or not isinstance(conv_size, int) or conv_size < 1:
            raise ValueError(
                f"conv_size must be an int >= 1 (1: no convolution), got {conv_size!r}"
            )
        self.conv_size, self.history = conv_size, conv_size - 1
        self.block_size = check_positive_int("block_size", block_size)
        check_floating_dtype("dtype", dtype)
        self.dim, self.num_heads, self.num_kv_heads = dim, num_heads, kv_heads
        self.head_dim, self.forget_gate, self.has_gates = head_dim, forget_gate, forget_gate
        factory = {"device": device, "dtype": dtype}
        self.w_weight = nn.Parameter(torch.empty(kv_heads * head_dim, dim, **factory))  # type: ignore[arg-type]
        self.beta_weight = nn.Parameter(torch.empty(kv_heads, dim, **factory))  # type: ignore[arg-type]
        self.beta_bias = nn.Parameter(torch.empty(kv_heads, **factory))  # type: ignore[arg-type]
        self.conv_weight: nn.Parameter | None = None
        if conv_size > 1:  # depthwise over time, one filter per channel of w
            self.conv_weight = nn.Parameter(
                torch.empty(kv_heads * head_dim, conv_size, **factory)  # type: ignore[arg-type]
            )
        self.gate_weight: nn.Parameter | None = None
        self.gate_bias: nn.Parameter | None = None
        if forget_gate:
            self.gate_weight = nn.Parameter(torch.empty(num_heads, dim, **factory))  # type: ignore[arg-type]
            self.gate_bias = nn.Parameter(torch.empty(num_heads, **factory))  # type: ignore[arg-type]
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``nn.Linear``'s initialization of the projections (``w``, then ``β``, then the
        gates), the forget gates' bias at 5 (``σ(5) ≈ 0.993``, x-transformers' FoX)."""
        if self.w_weight.device.type == "meta":
            return
        bound = self.dim**-0.5
        for weight in (self.w_weight, self.beta_weight):
            nn.init.kaiming_uniform_(weight, a=5**0.5)
        nn.init.uniform_(self.beta_bias, -bound, bound)
        if self.conv_weight is not None:  # nn.Conv1d's, fan-in = conv_size (depthwise)
            nn.init.kaiming_uniform_(self.conv_weight, a=5**0.5)
        if self.gate_weight is not None and self.gate_bias is not None:
            nn.init.kaiming_uniform_(self.gate_weight, a=5**0.5)
            nn.init.constant_(self.gate_bias, 5.0)

    def transform_inputs(self, x: Tensor, real: Tensor | None) -> Tensor:
        """``[W_w x, w_βᵀ x + b_β]`` of each token, ``(batch, seq, kv_heads · (head_dim +
        1))``, in float32 (float64 for float64 ``x``); zeros where ``real`` is False (the
        convolution reads no padding)."""
        cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
        weight = torch.cat([self.w_weight, self.beta_weight]).to(cdt)
        bias = F.pad(self.beta_bias.to(cdt), (self.w_weight.shape[0], 0))
        inputs = F.linear(x.to(cdt), weight, bias)
        return inputs if real is None else inputs.masked_fill(~real[..., None], 0.0)

    def token_transforms(
        self, inputs: Tensor, real: Tensor | None, same_document: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """The token-transform hook: ``(w, beta)`` of the last ``seq`` tokens of ``inputs``.

        ``w = normalize(SiLU(Σ_m c_m ⊙ u_{t−K+1+m}))`` over the window of ``K = conv_size``
        tokens of the same document (fla's short convolution; ``K = 1``: ``normalize(u_t)``,
        no activation), ``β = 2σ(·)``, 0 where ``real`` is False.

        Shape:
            inputs ``(batch, history + seq, channels)`` → w ``(batch, kv_heads, seq,
            head_dim)``, beta ``(batch, kv_heads, seq)``.
        """
        batch, window, _ = inputs.shape
        seq = window - self.history
        width = self.w_weight.shape[0]
        u, beta_logits = inputs[..., :width], inputs[..., self.history :, width:]
        if self.conv_weight is None:
            w = u
        else:
            taps = self.conv_weight.to(u.dtype)
            w = u.new_zeros(batch, seq, width)
            for m in range(self.conv_size):
                term = u[:, m : m + seq] * taps[:, m]
                if same_document is not None:
                    term = term * same_document[..., m, None]
                w = w + term
            w = F.silu(w)
        w = F.normalize(w.view(batch, seq, self.num_kv_heads, self.head_dim), dim=-1)
        beta = 2.0 * torch.sigmoid(beta_logits)
        if real is not None:
            beta = beta.masked_fill(~real[..., None], 0.0)
        return w.transpose(1, 2), beta.transpose(1, 2)

    def transforms_of(self, x: Tensor, real: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(w, beta)`` of one whole sequence ``x`` (no tokens before it, one document)."""
        inputs = self.transform_inputs(x, real)
        return self.token_transforms(F.pad(inputs, (0, 0, self.history, 0)), real, None)

    def gate_states(self, x: Tensor, previous: Tensor | None, real: Tensor | None) -> Tensor | None:
        """PaTH-FoX's cumulative log gates ``(batch, heads, seq)`` continuing ``previous``
        (the last cached key's), 0 for padding; None without forget gates."""
        if self.gate_weight is None or self.gate_bias is None:
            return None
        cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
        logits = F.linear(x.to(cdt), self.gate_weight.to(cdt), self.gate_bias.to(cdt))
        log_gates = F.logsigmoid(logits).transpose(1, 2)
        if real is not None:
            log_gates = log_gates.masked_fill(~real.unsqueeze(1), 0.0)
        c = log_gates.cumsum(dim=-1)
        return c if previous is None else c + previous.to(c.dtype)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The validated :meth:`token_transforms` of ``x`` ``(batch, seq, dim)``.

        Raises:
            ValueError: naming ``x`` unless it is a floating ``(batch, seq, dim)`` tensor on
                the projections' device.
        """
        check_layer_input(x, self.dim, type(self).__name__, self.w_weight.device)
        return self.transforms_of(x)

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
            f"head_dim={self.head_dim}, forget_gate={self.forget_gate}, "
            f"conv_size={self.conv_size}"
        )
