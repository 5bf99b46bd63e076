"""DAPE (CAPE): an MLP over the heads of the attention logits and a positional bias."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils import skip_init

from posenc._validate import check_floating_dtype, check_positive_int, validating_values
from posenc.encoding.base import state_device
from posenc.encoding.kinds import AdditiveScores
from posenc.encoding.protocols import (
    BiasEncoding,
    ContextualEncoding,
    ScoresReader,
    materialize_bias,
)
from posenc.positions import check_device, check_positions

__all__ = ["DapeBias", "dape_scores"]

#: LeakyReLU's slope for negative inputs: ``nn.LeakyReLU()``'s default, as the reference.
NEGATIVE_SLOPE = 0.01

#: Hidden activations per slice of pairs in :func:`dape_scores` (2 MiB in float32: the
#: slice stays in cache between the MLP's two products).
PAIR_SLICE_ELEMENTS = 1 << 19


def dape_scores(
    scores: Tensor,
    bias: Tensor | Callable[[int, int], Tensor] | None,
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
    *,
    allowed: Tensor | None = None,
    include_scores: bool = True,
) -> Tensor:
    """DAPE's scores ``A + B + f([A; B])``, ``f`` a two-layer MLP across heads, per pair.

    .. math::
        \\text{DAPE}(A, B)_{:, ij} = A_{:, ij} + B_{:, ij}
        + W_2\\, \\text{LeakyReLU}\\big(W_1 [A_{:, ij}; B_{:, ij}] + b_1\\big) + b_2

    with ``A_{:, ij} ∈ R^H`` the scaled logits of all heads at one (query, key) pair and
    ``B_{:, ij}`` the positional bias there (``[·; ·]`` stacks them to ``2H`` channels,
    logits first). Without a bias (``bias=None``): ``A + W_2 LeakyReLU(W_1 A + b_1) + b_2``
    over ``H`` channels. LeakyReLU's negative slope is 0.01.

    ``f`` acts on each pair on its own, so a pair's result depends on that pair's values
    only. Pairs that ``allowed`` hides from every head are zeroed before the MLP (their
    result is whatever ``f`` gives for zeros: finite, and masked afterwards by the attention),
    so a masked or non-finite logit never enters it; every visible pair is unchanged by that.

    Computed in the wider of ``scores``' and ``w1``'s dtype, returned in ``scores``' dtype.
    No checks (hot path); :class:`DapeBias` validates at its public boundary.

    Args:
        scores: ``A``, ``(batch, H, q_len, k_len)`` scaled logits.
        bias: ``B``, ``(H, q_len, k_len)`` or ``(batch, H, q_len, k_len)``; or a function
            of ``(start, stop)`` giving those query rows of it (built a slice at a time, in
            cache: the attention's path); or None.
        w1: ``(hidden, 2H)`` (``(hidden, H)`` without a bias); b1: ``(hidden,)``.
        w2: ``(H, hidden)``; b2: ``(H,)``.
        allowed: visible pairs, bool broadcastable to ``(batch, H, q_len, k_len)``, or None.
        include_scores: False gives ``B + f([A; B])``, what is added to ``A`` (the scores
            hook's term: a kernel that computes ``A`` itself takes the rest as its mask).

    Returns:
        ``(batch, H, q_len, k_len)`` in ``scores``' dtype.
    """
    batch, heads, q_len, k_len = scores.shape
    wide = torch.promote_types(scores.dtype, w1.dtype)
    a = scores.to(wide)
    rows_of = None if isinstance(bias, Tensor) else bias  # B built a slice of rows at a time
    b = bias.to(wide).expand(batch, heads, q_len, k_len) if isinstance(bias, Tensor) else None
    hides: Tensor | None = None
    if allowed is not None:
        # A pair hidden from every head: no head's result is read, so zeros are exact.
        visible = allowed.any(dim=-3, keepdim=True) if allowed.dim() >= 3 else allowed
        hides = torch.broadcast_to(~visible, (batch, 1, q_len, k_len))[:, 0]
    w1, b1, w2, b2 = (t.to(wide) for t in (w1, b1, w2, b2))
    with_bias = bias is not None
    w1a, w1b = (w1[:, :heads], w1[:, heads:]) if with_bias else (w1, None)
    width = w1.shape[0]
    # Slices of query rows whose (hidden, rows · keys) activations stay in cache between the
    # two products; the second writes each row's heads together, so the result is stored
    # (batch, q_len, H, k_len) and returned as a view in the documented order.
    step = max(1, PAIR_SLICE_ELEMENTS // (width * k_len))
    grad = torch.is_grad_enabled() and (
        rows_of is not None
        or any(t is not None and t.requires_grad for t in (a, b, w1, b1, w2, b2))
    )
    out = None if grad else a.new_empty(batch, q_len, heads, k_len)
    weights = w2.expand(min(step, q_len), heads, width)
    offset = b2.view(1, heads, 1)
    # Without autograd: activations in one buffer with a row of ones, so that the second
    # product [W2 b2] · [h; 1] writes W2 h + b2 straight into the result.
    buffer = None
    if out is not None:
        buffer = a.new_empty(width + 1, min(step, q_len) * k_len)
        buffer[width] = 1.0
        weights = torch.cat([w2, b2[:, None]], dim=1).expand(min(step, q_len), heads, width + 1)
    # split, not slicing: its backward joins the slices' gradients once.
    slices_a = [a[row].split(step, dim=-2) for row in range(batch)]  # (H, rows, k_len) each
    slices_b = None if b is None else [b[row].split(step, dim=-2) for row in range(batch)]
    slices_h = None if hides is None else [hides[row].split(step, dim=-2) for row in range(batch)]
    pieces: list[list[Tensor]] = [[] for _ in range(batch)]
    for index, start in enumerate(range(0, q_len, step)):
        stop = min(q_len, start + step)
        built = None
        if rows_of is not None:
            built = rows_of(start, stop).to(wide).expand(batch, heads, stop - start, k_len)
        for row in range(batch):
            xa = slices_a[row][index]
            xb = slices_b[row][index] if slices_b is not None else None
            if built is not None:
                xb = built[row]
            if slices_h is not None:
                hide = slices_h[row][index]
                xa = xa.masked_fill(hide, 0.0)
                xb = None if xb is None else xb.masked_fill(hide, 0.0)
            rows = stop - start
            if buffer is None:
                hidden = torch.mm(w1a, xa.reshape(heads, -1))
            else:
                hidden = torch.mm(w1a, xa.reshape(heads, -1), out=buffer[:width, : rows * k_len])
            if xb is not None and w1b is not None:  # W1 [A; B]: two products, one output
                hidden = hidden.addmm_(w1b, xb.reshape(heads, -1))
            hidden = F.leaky_relu(hidden.add_(b1[:, None]), NEGATIVE_SLOPE, inplace=True)
            if out is None:
                per_row = hidden.view(width, rows, k_len).transpose(0, 1)
                value = torch.baddbmm(offset, weights[:rows], per_row)  # (rows, H, k_len)
                pieces[row].append(value)
            else:
                assert buffer is not None
                lifted = buffer[:, : rows * k_len].view(width + 1, rows, k_len).transpose(0, 1)
                value = out[row, start:stop]
                torch.bmm(weights[:rows], lifted, out=value)
            if include_scores:
                value.add_(xa.transpose(0, 1))
            if xb is not None:
                value.add_(xb.transpose(0, 1))
    result = torch.stack([torch.cat(each) for each in pieces]) if out is None else out
    return result.transpose(1, 2).to(scores.dtype)


class DapeBias(AdditiveScores):
    """DAPE: a per-layer MLP that rewrites each pair's logits from all heads' logits and bias.

    .. math::
        \\text{scores}_{:, ij} = A_{:, ij} + B_{:, ij}
        + f\\big([A_{:, ij}; B_{:, ij}]\\big),\\qquad
        f = \\text{Linear}(\\text{hidden}, H) \\circ \\text{LeakyReLU}
        \\circ \\text{Linear}(2H, \\text{hidden})

    where ``A = scale · q kᵀ`` are the scaled logits of the ``H`` heads and ``B`` the bias
    of ``inner`` (ALiBi, KERPLE, FIRE, T5, … any pointwise posenc bias) at the same (query,
    key) pair; without ``inner``, ``A + f(A)`` with ``f`` reading ``H`` channels. The mask
    is applied after (the attention does it). Paper: Zheng et al. 2024, "DAPE: Data-Adaptive
    Positional Encoding for Length Extrapolation" (NeurIPS 2024; first called CAPE),
    https://arxiv.org/abs/2405.14722. Follows the reference ``chuanyang-Zheng/DAPE``
    (``megatron/model/positional_embeddings.py``: ``AliBi_C``, ``ParallelKerpleLog_C``,
    ``FIRE_C``, ``Nope_C``; the same classes as ``*_DAPE`` in ``DAPE.py``): the MLP reads
    ``cat((x, tile(bias)), dim=heads)``, logits first, where ``x`` is the *scaled*,
    *unmasked* ``q·k/√d`` (gpt-neox masks in its softmax afterwards); ``mlp_width = 32`` in
    every configuration; ``nn.LeakyReLU()`` (slope 0.01); PyTorch's default ``nn.Linear``
    init; output ``x + bias + mlp(...)``; one module per attention layer (its MLP, and its
    KERPLE parameters, belong to that layer). Tested against a float64 loop over pairs of
    this formula, and against the reference's layout (its ``tril``-ed bias, its KV-cache row
    ``bias[:, k-1]``) on visible pairs.

    Differences from the reference, none affecting a visible pair: pairs hidden from every
    head (causal future, padding) are zeroed before the MLP rather than fed raw (see
    :func:`dape_scores`), and the inner bias is posenc's (ALiBi ``m_h (j − i)`` on every
    pair where the reference writes 0 above the diagonal).

    **Hooks.** A scores reader (``transform_scores``): it needs every head of each pair, so
    it runs on the ``sdpa`` (reference) and ``chunked`` backends, not ``flex``
    (``score_mod`` sees one head at a time). ``inner`` is not added as a bias by the
    attention: its bias is materialized here, per block under ``chunked``. ``num_heads`` and
    ``num_axes`` are ``inner``'s, positions are checked by ``inner``'s checks
    (``validate_positions`` at the attention boundary, ``check_bias_positions`` in
    :meth:`forward`), and ``inner``'s parameters are a submodule's: they train with the MLP.
    ``shared_across_layers`` is False whatever ``inner`` is (the reference builds one MLP,
    and one KERPLE, per layer); to share one inner bias, pass the same instance to each
    layer's ``DapeBias``.

    Cost: the MLP's hidden activations are ``hidden / H`` times the scores (``(batch,
    hidden, q, k)``), so the ``chunked`` backend's blocks hold that much more than the
    scores it sizes them by; pass a smaller ``block_size`` if that matters.

    Args:
        num_heads: number of attention heads H (≥ 1); must equal ``inner.num_heads``.
        inner: a pointwise bias (``bias_at`` and an integer ``num_heads``; no other logit
            hook), or None for DAPE on the logits alone (the reference's ``Nope_C``).
        hidden: hidden width of the MLP (≥ 1; the reference's ``mlp_width = 32``).
        generator: optional ``torch.Generator`` for the MLP's initialization.
        device, dtype: of the MLP's parameters (``inner`` keeps its own).

    Attributes:
        mlp: ``nn.Sequential(Linear(2H or H, hidden), LeakyReLU(), Linear(hidden, H))``
            (the reference's ``mlp2``).
        inner: the bias module, or None.

    Shape:
        ``forward(scores, q_pos, k_pos)``: scores ``(batch, H, q_len, k_len)`` → the same.

    Example::

        >>> from posenc.attention import attend
        >>> from posenc.bias import KerpleBias
        >>> dape = DapeBias(4, inner=KerpleBias(4))
        >>> q, k, v = (torch.randn(2, 4, 10, 8) for _ in range(3))
        >>> attend(q, k, v, pos=dape, causal=True, backend="chunked").shape
        torch.Size([2, 4, 10, 8])
    """

    shared_across_layers: ClassVar[bool] = False

    def __init__(
        self,
        num_heads: int,
        inner: BiasEncoding | None = None,
        *,
        hidden: int = 32,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.hidden = check_positive_int("hidden", hidden)
        check_floating_dtype("dtype", dtype)
        _check_inner(inner, num_heads)
        self.inner = inner
        self.num_axes = 1 if inner is None else inner.num_axes
        channels = num_heads if inner is None else 2 * num_heads
        # skip_init: nn.Linear would draw once here and reset_parameters again below.
        factory: dict[str, Any] = {"device": device or torch.get_default_device(), "dtype": dtype}
        self.mlp = nn.Sequential(
            skip_init(nn.Linear, channels, hidden, **factory),
            nn.LeakyReLU(NEGATIVE_SLOPE),
            skip_init(nn.Linear, hidden, num_heads, **factory),
        )
        self._reset_mlp(generator)  # inner drew its own parameters when it was built

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """PyTorch's default ``nn.Linear`` init (as the reference), drawn from ``generator``
        (the global generator when None, then equal to ``nn.Linear``'s draw): every weight
        and bias ``~ U(−1/√fan_in, 1/√fan_in)``, first layer first, weight before bias.
        ``inner``'s parameters first (its ``reset_parameters()``, global generator), as the
        registry builds it before this module."""
        if self.inner is not None:
            self.inner.reset_parameters()
        self._reset_mlp(generator)

    def _reset_mlp(self, generator: torch.Generator | None) -> None:
        for layer in (self.mlp[0], self.mlp[2]):
            linear = cast(nn.Linear, layer)
            nn.init.kaiming_uniform_(linear.weight, a=math.sqrt(5), generator=generator)
            bound = 1.0 / math.sqrt(linear.in_features)
            nn.init.uniform_(linear.bias, -bound, bound, generator=generator)

    def validate_positions(self, positions: Tensor, name: str) -> None:
        """``inner``'s value checks of positions (whole numbers, table ranges), if any."""
        if self.inner is not None:
            self.inner.validate_positions(positions, name)

    def inner_bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor | None:
        """``inner``'s bias ``([batch,] H, q_len, k_len)`` in ``dtype``, unchecked (None
        without ``inner``); :func:`~posenc.encoding.protocols.materialize_bias` runs its
        ``prepare_bias``."""
        if self.inner is None:
            return None
        return materialize_bias(cast(Any, self.inner), q_pos, k_pos.to(q_pos.device), dtype)

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
        """The scores-reader hook: ``A + B + f([A; B])`` of these rows (q and k unused).

        ``scores`` are ``scale · q kᵀ`` of all heads, unmasked; ``allowed`` the visible
        pairs. Raises ``ValueError`` if ``scores`` has other than ``num_heads`` heads (a
        shape check, no host sync).
        """
        return self._scores(scores, q_pos, k_pos, allowed, include_scores=True)

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
        """What :meth:`transform_scores` adds to ``scores``: ``B + f([A; B])``."""
        return self._scores(scores, q_pos, k_pos, allowed, include_scores=False)

    def _scores(
        self,
        scores: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        allowed: Tensor | None,
        *,
        include_scores: bool,
    ) -> Tensor:
        if scores.shape[1] != self.num_heads:
            raise ValueError(
                f"DapeBias has num_heads={self.num_heads} but the attention has "
                f"{scores.shape[1]} heads; they must match"
            )
        bias: Callable[[int, int], Tensor] | None = None
        if self.inner is not None:
            dtype = scores.dtype

            def bias(start: int, stop: int) -> Tensor:
                out = self.inner_bias(q_pos[..., start:stop], k_pos, dtype)
                assert out is not None
                return out

        first, second = cast(nn.Linear, self.mlp[0]), cast(nn.Linear, self.mlp[2])
        return dape_scores(
            scores,
            bias,
            first.weight,
            first.bias,
            second.weight,
            second.bias,
            allowed=allowed,
            include_scores=include_scores,
        )

    def forward(
        self, scores: Tensor, q_pos: Tensor | None = None, k_pos: Tensor | None = None
    ) -> Tensor:
        """DAPE's scores for ``scores`` ``(batch, H, q_len, k_len)``, validated.

        Positions default to the attention's: queries are the last ``q_len`` of ``k_len``
        keys at ``arange(k_len)``. They are checked by ``inner`` (ignored without one).
        """
        if (
            not isinstance(scores, Tensor)
            or scores.dim() != 4
            or not scores.is_floating_point()
            or scores.shape[1] != self.num_heads
        ):
            got = tuple(scores.shape) if isinstance(scores, Tensor) else type(scores).__name__
            raise ValueError(
                f"scores must be a floating tensor (batch, num_heads={self.num_heads}, q_len, "
                f"k_len); got {got}"
            )
        batch, _, q_len, k_len = scores.shape
        if q_pos is None:
            q_pos = torch.arange(k_len - q_len, k_len, device=scores.device)
        if k_pos is None:
            k_pos = torch.arange(k_len, device=scores.device)
        check_device("scores", scores, state_device(self), "the device of DAPE's parameters")
        for name, positions in (("q_pos", q_pos), ("k_pos", k_pos)):
            if isinstance(positions, Tensor):
                check_device(name, positions, scores.device, "the device of scores")
        if self.inner is not None:
            self._check_positions(q_pos, k_pos, batch, q_len, k_len)
        return self.transform_scores(
            scores, q=scores, k=scores, q_pos=q_pos, k_pos=k_pos, allowed=None
        )

    def _check_positions(
        self, q_pos: Tensor, k_pos: Tensor, batch: int, q_len: int, k_len: int
    ) -> None:
        if self.inner is not None:
            self.inner.check_bias_positions(q_pos, k_pos)
        else:
            check_positions(q_pos, "q_pos", num_axes=self.num_axes)
            check_positions(k_pos, "k_pos", num_axes=self.num_axes)
        for name, positions, length in (("q_pos", q_pos, q_len), ("k_pos", k_pos, k_len)):
            rows = positions.shape[-2] if positions.dim() == (2 if self.num_axes == 1 else 3) else 1
            if positions.shape[-1] != length or rows not in (1, batch):
                raise ValueError(
                    f"{name} must have {length} positions in its last axis and a batch of "
                    f"{batch} (or none); got shape {tuple(positions.shape)}"
                )
        if validating_values():
            self.validate_positions(q_pos, "q_pos")
            self.validate_positions(k_pos, "k_pos")

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, hidden={self.hidden}"


def _check_inner(inner: object, num_heads: int) -> None:
    """``inner`` must be None or a pointwise bias module with ``num_heads`` heads."""
    if inner is None:
        return
    name = type(inner).__name__
    if not isinstance(inner, BiasEncoding):
        raise ValueError(
            f"inner must be a pointwise bias (a posenc.encoding.BiasEncoding, e.g. AlibiBias, "
            f"KerpleBias) or None; got {name}"
        )
    others = [
        place
        for place, protocol in (
            ("logit_term", ContextualEncoding),
            ("transform_scores", ScoresReader),
        )
        if isinstance(inner, protocol)
    ]
    if others:
        raise ValueError(
            f"inner must be a pointwise bias only; {name} also has {', '.join(others)}, which "
            "DapeBias would not apply"
        )
    heads = inner.num_heads
    if isinstance(heads, bool) or not isinstance(heads, int) or heads != num_heads:
        raise ValueError(
            f"inner must have num_heads={num_heads} (DapeBias's num_heads); got {name} with "
            f"num_heads={heads!r}"
        )
