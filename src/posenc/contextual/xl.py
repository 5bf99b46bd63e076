"""Transformer-XL relative attention: sinusoidal R_{i-j}, projected per head, with u and v."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posenc._validate import check_positive_float, check_positive_int
from posenc.bias.alibi import relative_distances
from posenc.contextual.shaw import check_head_tensor, expand_index
from posenc.encoding.base import empty_linear
from posenc.encoding.kinds import SinusoidRelative

__all__ = ["TransformerXLRelative", "relative_shift", "xl_sinusoid"]


def xl_sinusoid(distances: Tensor, dim: int, base: float = 10000.0) -> Tensor:
    """Transformer-XL's relative encoding ``R_r = [sin(r ω) ‖ cos(r ω)]``.

    .. math:: \\omega_k = \\text{base}^{-2k/\\text{dim}},\\quad k = 0..\\text{dim}/2 - 1

    Angles are computed in float64 (exact enough at long distances).

    Args:
        distances: ``(n,)`` relative distances ``r = q_pos - k_pos``.
        dim: encoding width (even, ≥ 2).
        base: frequency base (> 0).

    Returns:
        float64 ``(n, dim)``: sines in the first half, cosines in the second.
    """
    dim = check_positive_int("dim", dim)
    if dim % 2:
        raise ValueError(f"dim must be even; got {dim}")
    check_positive_float("base", base)
    exponents = torch.arange(0, dim, 2, device=distances.device, dtype=torch.float64) / dim
    inv_freq = base**-exponents  # (dim/2,)
    angles = distances.to(torch.float64)[:, None] * inv_freq  # (n, dim/2)
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def relative_shift(x: Tensor) -> Tensor:
    """Transformer-XL's relative shift: scores against ``R`` by distance to scores by key.

    ``x[..., i, c]`` holds query ``i``'s score against ``R_r`` with ``r = klen - 1 - c``
    (distances in descending order ``klen - 1 .. 0``). The queries are the last ``qlen``
    of ``klen`` positions (``mlen = klen - qlen`` memory tokens before them). The result's
    ``[..., i, j]`` is the score for distance ``mlen + i - j``, valid on the causal region
    ``j ≤ i + mlen``; entries above it are leftovers that the causal mask must hide.

    Implementation: pad one zero column on the left of ``(..., qlen, klen)``, view as
    ``(..., klen + 1, qlen)``, drop the first row, view back as ``(..., qlen, klen)``.
    Dai et al. 2019, https://arxiv.org/abs/1901.02860 (appendix B); tested against the
    gather used by :class:`TransformerXLRelative` on the causal region.

    Shape:
        ``(..., qlen, klen)`` -> ``(..., qlen, klen)``, ``qlen ≤ klen``.
    """
    *lead, qlen, klen = x.shape
    if qlen > klen:
        raise ValueError(f"x must have qlen <= klen in its last two axes; got {qlen} > {klen}")
    padded = nn.functional.pad(x, (1, 0)).reshape(*lead, klen + 1, qlen)
    return padded[..., 1:, :].reshape(*lead, qlen, klen)


def _phases(positions: Tensor, dim: int, base: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """``sin(p ω)`` and ``cos(p ω)`` in float64, cast to ``dtype``; batched as (B, 1, n, dim/2)."""
    table = xl_sinusoid(positions.reshape(-1), dim, base).to(dtype)
    sin, cos = table.chunk(2, dim=-1)
    if positions.dim() == 2:
        shape = (positions.shape[0], 1, positions.shape[1], dim // 2)
        return sin.reshape(shape), cos.reshape(shape)
    return sin, cos


class TransformerXLRelative(SinusoidRelative):
    """Transformer-XL's relative logits with global biases ``u`` (content) and ``v`` (position).

    .. math::
        A_{ij} = (q_i + u)^\\top k_j + (q_i + v)^\\top W_R R_{q\\_pos_i - k\\_pos_j}

    Attention already adds ``scale · q_i·k_j``; :meth:`logit_term` returns the rest,
    ``scale · (u·k_j + (q_i + v)·W_R R_{i-j})``. ``R`` is non-learned
    (:func:`xl_sinusoid`, width ``dim``) and projected per head by ``W_R``. The position
    part is evaluated once per distinct distance in ``[min r, max r]`` and gathered, the
    job :func:`relative_shift` does in the reference for the standard layout (no
    ``(q, k, head_dim)`` tensor either way). Paper: Dai et al. 2019,
    https://arxiv.org/abs/1901.02860; tested against a per-(i, j) evaluation of the formula
    and against :func:`relative_shift`.

    Args:
        num_heads: number of heads ``H`` (≥ 1).
        head_dim: size of each head ``d`` (≥ 1).
        dim: width of ``R`` (the model dimension in the paper; even).
        base: frequency base of ``R`` (default 10000).
        device, dtype: of the parameters.

    Attributes:
        u, v: ``(num_heads, head_dim)``, initialized ``N(0, 0.02²)`` like the reference's
            training script (zeros would also do: the gradient reaches them through k and R).
        w_r: ``nn.Linear(dim, num_heads * head_dim, bias=False)``, default initialization.

    Shape:
        ``logit_term(q, k, q_pos, k_pos, scale)``: q ``(batch, H, q_len, d)``, k
        ``(batch, H, k_len, d)`` (same heads: expand grouped keys first) ->
        ``(batch, H, q_len, k_len)``. Positions may be fractional (``R_r`` is defined for
        real r).

    Example::

        >>> xl = TransformerXLRelative(4, 8, 32)
        >>> q, k = torch.randn(1, 4, 3, 8), torch.randn(1, 4, 7, 8)  # 4 memory tokens
        >>> xl.logit_term(q, k, torch.arange(4, 7), torch.arange(7), scale=8**-0.5).shape
        torch.Size([1, 4, 3, 7])
    """

    num_heads: int

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        dim: int,
        *,
        base: float = 10000.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.head_dim = check_positive_int("head_dim", head_dim)
        dim = check_positive_int("dim", dim)
        if dim % 2:
            raise ValueError(f"dim must be even; got {dim}")
        self.dim = dim
        self.base = check_positive_float("base", base)
        self.u = nn.Parameter(torch.empty(num_heads, head_dim, device=device, dtype=dtype))
        self.v = nn.Parameter(torch.empty(num_heads, head_dim, device=device, dtype=dtype))
        # drawn once, by reset_parameters
        self.w_r = empty_linear(dim, num_heads * head_dim, bias=False, device=device, dtype=dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.u, std=0.02)
        nn.init.normal_(self.v, std=0.02)
        self.w_r.reset_parameters()

    def distance_terms(self) -> tuple[Tensor, Tensor]:
        """``(u, v)``: the logit term is ``scale · (u·k_j + (q_i + v)·projected(d)_ij)`` with
        ``d = q_pos_i − k_pos_j`` (:meth:`projected`).

        Lets the chunked backend compute the position term once per distance
        (:mod:`posenc.attention.relative`).
        """
        return self.u, self.v

    def projected(self, distances: Tensor) -> Tensor:
        """``W_R R_r`` per head for ``(n,)`` distances: ``(num_heads, n, head_dim)``."""
        table = xl_sinusoid(distances, self.dim, self.base).to(self.w_r.weight.dtype)
        return self.w_r(table).view(-1, self.num_heads, self.head_dim).transpose(0, 1)

    def position_logits(self, q: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        r"""Unscaled ``(q_i + v)·W_R R_{q_pos_i - k_pos_j}``, ``(batch, H, q_len, k_len)``.

        Computed without a per-distance table: with ``W_R = [W_s | W_c]`` (the columns
        acting on the sin and cos halves of ``R``), ``a_i = (q_i + v) W_s`` and
        ``b_i = (q_i + v) W_c``, the angle-difference identities give

        .. math::
            \sum_k a_{ik} \sin((i-j)\omega_k) + b_{ik} \cos((i-j)\omega_k)
            = Q'_i \cdot K'_j,\quad
            Q'_i = [a_i \sin i\omega + b_i \cos i\omega \,\|\,
                    b_i \sin i\omega - a_i \cos i\omega],\quad
            K'_j = [\cos j\omega \,\|\, \sin j\omega]

        one matmul whose shapes depend only on the input shapes (no host sync, no
        data-dependent sizes, so it compiles with inductor) and that is defined for
        fractional positions too. Phases are float64; tested equal to the per-distance
        gather and to :func:`relative_shift`.
        """
        check_head_tensor("q", q, self.head_dim, q_pos.shape[-1], self.num_heads)
        batch = q.shape[0]
        for name, pos in (("q_pos", q_pos), ("k_pos", k_pos)):
            if pos.dim() == 2 and pos.shape[0] not in (1, batch):
                raise ValueError(
                    f"{name} batch size {pos.shape[0]} does not match the tensor batch {batch}"
                )
        half = self.dim // 2
        # W_R split into the columns that act on sin(rω) and on cos(rω): (H, d, dim/2) each.
        weight = self.w_r.weight.view(self.num_heads, self.head_dim, self.dim).to(q.dtype)
        w_sin, w_cos = weight[..., :half], weight[..., half:]
        shifted = q + self.v.to(q.dtype)[:, None]  # (B, H, q, d)
        a = shifted @ w_sin  # (B, H, q, dim/2)
        b = shifted @ w_cos
        q_sin, q_cos = _phases(q_pos, self.dim, self.base, q.dtype)
        k_sin, k_cos = _phases(k_pos, self.dim, self.base, q.dtype)
        q_feat = torch.cat([a * q_sin + b * q_cos, b * q_sin - a * q_cos], dim=-1)
        k_feat = torch.cat([k_cos, k_sin], dim=-1)  # (…, k, dim)
        return q_feat @ k_feat.transpose(-1, -2)

    def position_logits_by_distance(self, q: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """The same as :meth:`position_logits` via one row per distance and a gather.

        The direct reading of the formula (what :func:`relative_shift` does in the
        reference); kept as the tested reference for the factorized form. Needs whole
        positions and a host sync for the distance range.
        """
        r = -relative_distances(q_pos, k_pos, whole=True)  # q_pos_i - k_pos_j
        check_head_tensor("q", q, self.head_dim, q_pos.shape[-1], self.num_heads)
        batch, heads, q_len, _ = q.shape
        if r.numel() == 0:
            return q.new_zeros(batch, heads, q_len, k_pos.shape[-1])
        r_min, r_max = int(r.min()), int(r.max())
        distances = torch.arange(r_min, r_max + 1, device=r.device)
        projected = self.projected(distances).to(q.dtype)  # (H, n, d)
        per_distance = (q + self.v.to(q.dtype)[:, None]) @ projected.transpose(-1, -2)
        return per_distance.gather(-1, expand_index(r - r_min, batch, heads))

    def logit_term_contiguous(
        self, q: Tensor, k: Tensor, q_start: int, k_start: int, scale: float, causal: bool
    ) -> Tensor:
        """:meth:`logit_term` for positions ``q_start + arange(q_len)`` and ``k_start +
        arange(k_len)`` (shared by the batch), by one row per distance and the relative shift.

        ``(q_i + v)`` meets the projected encodings of the distances in descending order in
        one matmul of width about ``q_len + k_len`` (``k_len + 1`` when ``causal``), a head dim
        wide instead of :meth:`position_logits`'s ``dim`` wide; Transformer-XL's relative
        shift is then a flat slice and reshape (cheap to differentiate). With ``causal`` the
        entries of pairs the causal order hides (key after query) are arbitrary finite
        numbers, as in the reference: attention masks them.
        """
        q_len, k_len = q.shape[-2], k.shape[-2]
        top = q_start - k_start + q_len - 1  # the largest distance i − j
        bottom = -1 if causal else q_start - k_start - (k_len - 1)
        bottom = min(bottom, top - k_len)  # at least k_len + 1 columns for the shift
        width = top - bottom + 1
        distances = torch.arange(top, bottom - 1, -1, device=q.device)
        table = self.projected(distances).to(q.dtype)  # (H, width, d)
        product = (q + self.v.to(q.dtype)[:, None]) @ table.transpose(-1, -2)  # (B, H, q, width)
        # Row a needs columns (q_len − 1 − a) + j: in the flattened rows that is a stride of
        # width − 1 from offset q_len − 1.
        flat = product.flatten(-2)[..., q_len - 1 : q_len - 1 + q_len * (width - 1)]
        position = flat.unflatten(-1, (q_len, width - 1))[..., :k_len]
        content = torch.einsum("hd,bhkd->bhk", self.u.to(k.dtype), k)[:, :, None, :]
        return scale * (content + position)

    def logit_term(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, scale: float
    ) -> Tensor:
        """``scale · (u·k_j + (q_i + v)·W_R R_{i-j})``, ``(batch, H, q_len, k_len)``."""
        position = self.position_logits(q, q_pos, k_pos)
        check_head_tensor("k", k, self.head_dim, k_pos.shape[-1], self.num_heads)
        if k.shape[0] != q.shape[0]:
            raise ValueError(f"k must have the batch size of q ({q.shape[0]}); got {k.shape[0]}")
        content = torch.einsum("hd,bhkd->bhk", self.u.to(k.dtype), k)[:, :, None, :]
        return scale * (content + position)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, head_dim={self.head_dim}, dim={self.dim}, "
            f"base={self.base}"
        )
