"""CoPE: contextual positions, counted by gates on the attention logits (a scores reader)."""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._validate import (
    check_bool_mask,
    check_floating_dtype,
    check_floating_tensor,
    check_in_choices,
    check_positive_float,
    check_positive_int,
)
from posenc.encoding.kinds import AdditiveScores
from posenc.positions import check_device

__all__ = ["CoPE", "CoPEInterpolation", "cope_bias", "cope_positions"]

CoPEInterpolation = Literal["linear", "soft_onehot"]
_INTERPOLATIONS: tuple[CoPEInterpolation, ...] = ("linear", "soft_onehot")


_SCORES = ("batch", "heads", "q_len", "k_len")
_QUERIES = ("batch", "heads", "q_len", "head_dim")


def _check_scores(name: str, scores: object) -> Tensor:
    return check_floating_tensor(name, scores, _SCORES)


def cope_positions(
    logits: Tensor,
    allowed: Tensor | None = None,
    *,
    max_pos: int,
    mixing: Tensor | None = None,
) -> Tensor:
    """CoPE's contextual positions: gated counts of the visible keys from each key onwards.

    .. math::
        g_{ij} = \\sigma(\\ell_{ij})\\,[\\text{allowed}_{ij}], \\qquad
        p_{ij} = \\min\\Big(\\sum_{t \\ge j} g_{it},\\ p_{\\max} - 1\\Big)

    The sum runs over the key axis in order (a reverse cumulative sum). Under a causal
    mask the visible keys ``t ≥ j`` of row ``i`` are the keys ``j..i``: the paper's
    ``p_ij = Σ_{t=j}^{i} g_it``. Without causal order it counts to the last visible key.

    Args:
        logits: ``(batch, heads, q_len, k_len)`` gate logits (in CoPE: the scaled scores).
        allowed: bool, broadcastable to ``logits``, True where a key is visible; hidden keys
            get gate 0. None: every key is visible.
        max_pos: ``p_max`` (≥ 1); positions are capped at ``p_max − 1``.
        mixing: optional ``(heads, heads)`` talking-heads matrix ``W``: the gates then read
            ``ℓ'_{h} = Σ_g W_{hg} ℓ_{g}`` (x-transformers' ``cope_talking_heads``).

    Returns:
        Positions in ``[0, max_pos − 1]``, the shape and dtype of ``logits``.
    """
    _check_scores("logits", logits)
    max_pos = check_positive_int("max_pos", max_pos)
    check_bool_mask("allowed", allowed, "logits", logits)
    if mixing is not None:
        heads = logits.shape[1]
        if not isinstance(mixing, Tensor) or tuple(mixing.shape) != (heads, heads):
            got = tuple(mixing.shape) if isinstance(mixing, Tensor) else type(mixing).__name__
            raise ValueError(f"mixing must be ({heads}, {heads}) for {heads} heads; got {got}")
    return _positions(logits, allowed, max_pos, mixing)


def _positions(
    logits: Tensor, allowed: Tensor | None, max_pos: int, mixing: Tensor | None
) -> Tensor:
    """:func:`cope_positions` without checks."""
    if mixing is not None:
        logits = torch.einsum("hg,bgij->bhij", mixing.to(logits.dtype), logits)
    gates = torch.sigmoid(logits)
    if allowed is not None:  # in place unless autograd keeps the sigmoid's output
        hidden = ~allowed
        gates = (
            gates.masked_fill(hidden, 0.0)
            if gates.requires_grad
            else gates.masked_fill_(hidden, 0.0)
        )
    counts = gates.flip(-1).cumsum_(-1).flip(-1)  # visible gated keys at or after each key
    return counts.clamp_(max=max_pos - 1)


def cope_bias(
    q: Tensor,
    pos_emb: Tensor,
    positions: Tensor,
    *,
    interpolation: CoPEInterpolation = "linear",
    temperature: float = 0.05,
) -> Tensor:
    """CoPE's logit term ``q_i · e[p_ij]`` at fractional positions.

    .. math::
        z_i[p] = q_i \\cdot e[p] \\ (p = 0..p_{\\max} - 1), \\qquad
        \\text{linear: } b_{ij} = (p_{ij} - \\lfloor p_{ij} \\rfloor)\\, z_i[\\lceil p_{ij} \\rceil]
            + (1 - p_{ij} + \\lfloor p_{ij} \\rfloor)\\, z_i[\\lfloor p_{ij} \\rfloor]

    ``"soft_onehot"`` weighs every integer position instead:
    ``b_ij = Σ_p softmax_p(−|p_ij − p| / temperature) z_i[p]`` (x-transformers'
    ``cope_soft_onehot_pos``); it builds a ``(batch, heads, q_len, k_len, max_pos)`` tensor.

    Args:
        q: ``(batch, heads, q_len, head_dim)`` queries, unscaled.
        pos_emb: ``(max_pos, head_dim)`` position embeddings ``e``, shared across heads.
        positions: ``(batch, heads, q_len, k_len)`` from :func:`cope_positions`, in
            ``[0, max_pos − 1]`` (not checked: reading values needs a host sync).
        interpolation: ``"linear"`` (the paper's) or ``"soft_onehot"``.
        temperature: of ``"soft_onehot"`` (> 0).

    Returns:
        ``(batch, heads, q_len, k_len)`` in q's dtype.
    """
    check_in_choices("interpolation", interpolation, _INTERPOLATIONS)
    check_positive_float("temperature", temperature)
    check_floating_tensor("q", q, _QUERIES)
    if not isinstance(pos_emb, Tensor) or pos_emb.dim() != 2 or pos_emb.shape[1] != q.shape[-1]:
        got = tuple(pos_emb.shape) if isinstance(pos_emb, Tensor) else type(pos_emb).__name__
        raise ValueError(f"pos_emb must be (max_pos, {q.shape[-1]}) for q's head_dim; got {got}")
    _check_scores("positions", positions)
    if positions.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"positions {tuple(positions.shape)} must be (batch, heads, q_len, k_len) with "
            f"q's {tuple(q.shape[:3])}"
        )
    return _bias(q, pos_emb, positions, interpolation, temperature)


def _bias(
    q: Tensor,
    pos_emb: Tensor,
    positions: Tensor,
    interpolation: str,
    temperature: float,
    capped_prefix: bool = False,
) -> Tensor:
    """:func:`cope_bias` without checks.

    ``capped_prefix``: ``positions`` are CoPE's counts (non-increasing along each row,
    clamped at ``p_max − 1``). The leading keys where every row sits at the cap then read
    ``z[p_max − 1]`` (one broadcast write) and only the rest is interpolated: past a few
    dozen keys before a query the count is capped, so most pairs of a long row are (eager
    CPU only: finding them reads one number).
    """
    per_position = q @ pos_emb.to(q.dtype).T  # (batch, heads, q_len, max_pos): small
    positions = positions.to(q.dtype)
    cap = pos_emb.shape[0] - 1
    if (
        capped_prefix
        and interpolation == "linear"
        and positions.device.type == "cpu"
        and not torch.compiler.is_compiling()  # a length read from values: no graph
    ):
        lowest = positions.amin(dim=tuple(range(positions.dim() - 1)))  # per key, all rows
        prefix = int((lowest >= cap).sum())  # keys capped in every row: a prefix
        if prefix > 0:
            far = per_position[..., cap : cap + 1].expand(*positions.shape[:-1], prefix)
            near = _interpolate(per_position, positions[..., prefix:])
            return torch.cat([far, near], dim=-1)
    if interpolation == "soft_onehot":
        grid = torch.arange(pos_emb.shape[0], device=q.device, dtype=q.dtype)
        distance = (positions[..., None] - grid).abs()  # (batch, heads, q_len, k_len, max_pos)
        weights = torch.softmax(-distance / temperature, dim=-1)
        return torch.einsum("bhijp,bhip->bhij", weights, per_position)
    return _interpolate(per_position, positions)


def _interpolate(per_position: Tensor, positions: Tensor) -> Tensor:
    """The linear interpolation of ``z = per_position`` at ``positions`` (in ``[0, p_max−1]``).

    ``z[⌊p⌋] + w (z[⌊p⌋ + 1] − z[⌊p⌋])``, ``w = p − ⌊p⌋``: the paper's
    ``w z[⌈p⌉] + (1 − w) z[⌊p⌋]`` (``⌈p⌉ = ⌊p⌋ + 1`` unless p is whole, where w = 0) in five
    passes over the pairs instead of eleven; the step past the last position is 0.
    """
    step = F.pad(per_position.diff(dim=-1), (0, 1))  # (batch, heads, q_len, max_pos)
    floor = positions.long()  # positions ≥ 0: truncation is the floor
    w = positions.frac()  # the gradient reaches the gates through w only
    return torch.addcmul(per_position.gather(-1, floor), w, step.gather(-1, floor))


class CoPE(AdditiveScores):
    """Contextual position encoding: positions count the keys that gates let through.

    .. math::
        g_{ij} = \\sigma(s_{ij}), \\quad
        p_{ij} = \\min\\Big(\\sum_{t=j}^{i} g_{it},\\ p_{\\max} - 1\\Big), \\quad
        s'_{ij} = s_{ij} + w_{ij}\\, q_i \\cdot e[\\lceil p_{ij} \\rceil]
            + (1 - w_{ij})\\, q_i \\cdot e[\\lfloor p_{ij} \\rfloor], \\quad
        w_{ij} = p_{ij} - \\lfloor p_{ij} \\rfloor

    where ``s = scale · q kᵀ (+ any bias)`` are the scores of one head (the gates read
    the scaled logits; ``q`` enters the position term unscaled), and the sum runs over the
    visible keys of row ``i``: hidden keys (causal order, padding, other documents) have
    gate 0. ``e`` (``max_pos × head_dim``) is shared by the heads. Paper: Golovneva et al.
    2024, https://arxiv.org/abs/2405.18719 (appendix B code); tested against
    x-transformers' ``CoPE`` and ``Attention(use_cope=True)`` and a float64 loop over the
    formula. Implemented as a scores reader (:meth:`transform_scores`): attention applies
    the mask after it, so backends ``sdpa`` and ``chunked`` serve it (their rows are
    complete) and ``flex`` cannot (the position of a pair reads its whole row).

    **Causal attention.** The paper and x-transformers (which asserts ``causal``) define
    CoPE for decoders. The module cannot see whether the mask is causal (a decoding step
    legitimately has no mask; reading the mask would cost a host sync per layer), so it
    always computes the row form ``p_ij = Σ_{t ≥ j, visible} g_it``: under a causal mask,
    including a KV cache, padding and packed documents, this is exactly the paper's count
    from key ``j`` to query ``i``. With a bidirectional mask it runs but counts from ``j`` to
    the end of the visible row, i.e. a contextual distance to the last key, not to the
    query; use CoPE with causal attention. ``q_pos`` and ``k_pos`` are not read: CoPE's
    positions come from the gates (keep packed documents apart with document ids).

    **Options.** ``scale_term=True`` divides the position term by ``√head_dim`` as the
    official code does by default (facebookresearch/RAM ``projects/cope``, without
    ``--cope-nodiv``: ``(q·k + q·e[p]) / √d``); the default adds it unscaled, as the paper's
    appendix and x-transformers. ``max_pos`` defaults to x-transformers' 16 (the official
    code uses ``block_size + 1``). ``talking_heads`` mixes the heads' logits before the
    gates (x-transformers' ``cope_talking_heads``); x-transformers mixes the already masked
    logits, so a key hidden by padding can get gate 1 there, while here every hidden key
    has gate 0 (equal under a causal mask alone).

    Args:
        num_heads: attention heads (≥ 1); the scores must have this many.
        head_dim: size of each head (≥ 1).
        max_pos: ``p_max`` (≥ 1, default 16): positions are capped at ``p_max − 1``.
        interpolation: ``"linear"`` (default, the paper's) or ``"soft_onehot"``
            (see :func:`cope_bias`).
        temperature: of ``"soft_onehot"`` (> 0, default 0.05, x-transformers').
        talking_heads: learn a ``(num_heads, num_heads)`` mixing of the gate logits.
        scale_term: divide the position term by ``√head_dim`` (official code's default).
        generator: optional ``torch.Generator`` for the talking-heads initialization.
        device, dtype: of the parameters; the term is computed in the scores' dtype.

    Attributes:
        pos_emb: ``(max_pos, head_dim)`` position embeddings ``e``, initialized to zero as
            in the paper and x-transformers (at initialization CoPE changes nothing). Same
            name and layout as x-transformers' ``CoPE.pos_emb``.
        talking_heads: ``(num_heads, num_heads)`` or None; initialized as x-transformers'
            ``nn.Conv2d(heads, heads, 1)`` weight, ``U(−1/√heads, 1/√heads)``.

    Shape:
        ``transform_scores(scores, q=q, ...)``: scores ``(batch, num_heads, q_len, k_len)``,
        q ``(batch, num_heads, q_len, head_dim)`` → scores' shape and dtype.

    Example::

        >>> cope = CoPE(num_heads=2, head_dim=4, max_pos=8)
        >>> q, k = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
        >>> scores = q @ k.transpose(-1, -2) / 2.0
        >>> causal = torch.ones(5, 5, dtype=torch.bool).tril()
        >>> cope.positions(scores, causal).shape
        torch.Size([1, 2, 5, 5])
        >>> from posenc.attention import attend
        >>> attend(q, k, k, pos=cope, causal=True).shape  # sdpa; chunked too, not flex
        torch.Size([1, 2, 5, 4])
    """

    head_dim: int

    talking_heads: nn.Parameter | None
    #: Positions count gates over the keys before the query: bidirectional attention
    #: refuses it.
    causal_only: ClassVar[bool] = True

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        *,
        max_pos: int = 16,
        interpolation: CoPEInterpolation = "linear",
        temperature: float = 0.05,
        talking_heads: bool = False,
        scale_term: bool = False,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.max_pos = check_positive_int("max_pos", max_pos)
        check_in_choices("interpolation", interpolation, _INTERPOLATIONS)
        self.interpolation: CoPEInterpolation = interpolation
        self.temperature = check_positive_float("temperature", temperature)
        for name, flag in (("talking_heads", talking_heads), ("scale_term", scale_term)):
            if not isinstance(flag, bool):
                raise ValueError(f"{name} must be a bool, got {flag!r}")
        self.scale_term = scale_term
        check_floating_dtype("dtype", dtype)
        factory = {"device": device, "dtype": dtype}
        self.pos_emb = nn.Parameter(torch.empty(max_pos, head_dim, **factory))  # type: ignore[arg-type]
        if talking_heads:
            self.talking_heads = nn.Parameter(torch.empty(num_heads, num_heads, **factory))  # type: ignore[arg-type]
        else:
            self.register_parameter("talking_heads", None)
        self.reset_parameters(generator)

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """``e = 0``; talking heads as ``nn.Conv2d``'s default (``U(±1/√num_heads)``)."""
        nn.init.zeros_(self.pos_emb)
        if self.talking_heads is not None:
            nn.init.kaiming_uniform_(self.talking_heads, a=math.sqrt(5), generator=generator)

    def _check(self, scores: Tensor, q: Tensor | None = None) -> None:
        """Shapes and devices only (no value reads): errors name the argument."""
        _check_scores("scores", scores)
        check_device("scores", scores, self.pos_emb.device, "the device of CoPE's parameters")
        if scores.shape[1] != self.num_heads:
            raise ValueError(
                f"scores must have num_heads={self.num_heads} heads in axis 1; "
                f"got {scores.shape[1]}"
            )
        if q is None:
            return
        check_floating_tensor("q", q, _QUERIES)
        check_device("q", q, scores.device, "the device of scores")
        if q.shape[-1] != self.head_dim:
            raise ValueError(
                f"q must have head_dim {self.head_dim} in its last axis; got {q.shape[-1]}"
            )
        if q.shape[:3] != scores.shape[:3]:
            raise ValueError(
                f"q {tuple(q.shape)} must match scores {tuple(scores.shape)} in batch, heads "
                "and q_len"
            )

    def positions(self, scores: Tensor, allowed: Tensor | None = None) -> Tensor:
        """Contextual positions ``p`` of ``scores`` (:func:`cope_positions`), validated."""
        self._check(scores)
        return cope_positions(scores, allowed, max_pos=self.max_pos, mixing=self.talking_heads)

    def forward(self, q: Tensor, scores: Tensor, allowed: Tensor | None = None) -> Tensor:
        """The position term to add to ``scores`` (validated; x-transformers' ``CoPE(q, logits)``
        with the mask given as ``allowed`` instead of folded into the logits)."""
        self._check(scores, q)
        if isinstance(allowed, Tensor):
            check_device("allowed", allowed, scores.device, "the device of scores")
        positions = self.positions(scores, allowed)
        return self._term(q, positions)

    def _term(self, q: Tensor, positions: Tensor) -> Tensor:
        term = _bias(
            q, self.pos_emb, positions, self.interpolation, self.temperature, capped_prefix=True
        )
        return term * self.head_dim**-0.5 if self.scale_term else term

    def transform_scores(
        self,
        scores: Tensor,
        *,
        q: Tensor,
        k: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        allowed: Tensor | None,
    ) -> Tensor:
        """The scores hook: ``scores + q_i · e[p_ij]`` on complete rows (k and positions unused)."""
        return scores + self.scores_term(
            scores, q=q, k=k, q_pos=q_pos, k_pos=k_pos, allowed=allowed
        )

    def scores_term(
        self,
        scores: Tensor,
        *,
        q: Tensor,
        k: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        allowed: Tensor | None,
    ) -> Tensor:
        """What :meth:`transform_scores` adds to ``scores``: ``q_i · e[p_ij]``."""
        self._check(scores, q)
        positions = _positions(scores, allowed, self.max_pos, self.talking_heads)
        return self._term(q.to(scores.dtype), positions)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, head_dim={self.head_dim}, max_pos={self.max_pos}, "
            f"interpolation={self.interpolation!r}, "
            f"talking_heads={self.talking_heads is not None}, scale_term={self.scale_term}"
        )
