"""CAPE: sinusoidal embeddings of continuous, augmented positions (Likhomanenko et al. 2021).

Likhomanenko, Xu, Collobert, Synnaeve and Rogozhnikov, "CAPE: Encoding Relative Positions with
Continuous Augmented Positional Embeddings" (NeurIPS 2021, https://arxiv.org/abs/2106.03143):
an absolute sinusoidal embedding whose positions are perturbed in training so that the model
cannot rely on absolute values, only on relative ones. Each sequence ``b`` draws

.. math::

    Δ_b \\sim U[-Δ_{max}, Δ_{max}], \\quad
    ε_{b,i} \\sim U[-ε_{max}/2, ε_{max}/2], \\quad
    \\log λ_b \\sim U[-\\log λ_{max}, \\log λ_{max}]

and its positions become ``x'_{b,i} = λ_b (x_{b,i} + Δ_b + ε_{b,i})`` (global shift, local
shift, global scaling), after an optional mean-normalization ``x_{b,i} − mean_i x_{b,i}``
(the mean over the sequence's real tokens: attention passes its ``key_padding_mask``, so
padding does not move the real tokens' positions).
In evaluation the positions are used as given (normalized if asked). The draws follow the
reference port (github.com/gcambara/cape ``CAPE1d``, after the authors' flashlight recipe),
against which the distributions are tested; they are made in the order global shift, scaling,
then the local shifts token by token across the rows (the ``j``-th real token of every row,
then the ``j+1``-th), so that padding, on either side and of any width, changes no real
token's draw: a padded row's real tokens get the augmentation they get unpadded with the same
generator state. Its defaults (no shift, no scaling, no normalization) are kept,
which makes the default CAPE the sinusoidal encoding: the paper tunes the three per task and
per unit of position (ASR positions in seconds, images in ``[−1, 1]``), so set them for yours.
Not the "CAPE" that continues DAPE (context-adaptive, a scores reader: the registry's
``dape``).

Positions are augmented per sequence, so :class:`CAPE` does it in the position hook
``transform_positions`` (applied by attention's context before anything reads positions, as
:class:`~posenc.encoding.randomized.RandomizedPositions` does), and ``forward`` is the sinusoid of
whatever continuous positions it gets. A training forward cannot continue a KV cache (each
call draws anew); neither can mean-normalization (a decoding step's mean is not the prefix's).
An additive encoding acts on the token embeddings, before attention: every backend (sdpa,
chunked, flex) serves it as it serves the sinusoidal encoding.
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor

from posenc._validate import check_finite, check_positive_float
from posenc.additive.sinusoidal import check_table_dtype, sinusoidal_encoding
from posenc.encoding.protocols import AdditiveEncoding, PositionTransform
from posenc.positions import check_padding_mask

__all__ = ["CAPE", "cape_augment"]


def _real_number(value: object) -> float | None:
    """``float(value)`` for a real number (Python's, NumPy's, a 0-d tensor), else None."""
    if isinstance(value, Tensor) and value.dim() == 0 and not value.is_complex():
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return float(value)


def _check_non_negative(name: str, value: object) -> float:
    number = _real_number(value)
    if number is None or not math.isfinite(number) or number < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return number


def _check_scaling(value: object) -> float:
    number = _real_number(value)
    if number is None or not (math.isfinite(number) and number >= 1.0):
        raise ValueError(
            f"max_global_scaling must be a number >= 1 (1: no scaling; the scale is drawn "
            f"log-uniformly in [1/λ, λ]), got {value!r}"
        )
    return number


def _check_rows(positions: object) -> Tensor:
    """``positions`` if it is a finite real ``(batch, seq)`` tensor, else ``ValueError``."""
    if (
        not isinstance(positions, Tensor)
        or positions.dim() != 2
        or positions.dtype == torch.bool
        or positions.is_complex()
    ):
        got = (
            f"{tuple(positions.shape)} {positions.dtype}"
            if isinstance(positions, Tensor)
            else type(positions).__name__
        )
        raise ValueError(
            "positions must be a real (batch, seq) tensor, one row per sequence (each row "
            f"draws its own shift and scale; expand (seq,) positions with "
            f"positions.expand(batch, -1)); got {got}"
        )
    check_finite("positions", positions)
    return positions


def _centred(rows: Tensor, real: Tensor | None) -> Tensor:
    """Each row minus the mean of its real positions (of all when ``real`` is None); a row
    with no real token is left as it is."""
    if real is None:
        return rows - rows.mean(dim=-1, keepdim=True)
    weights = real.to(rows.dtype)
    count = weights.sum(dim=-1, keepdim=True)
    mean = (rows * weights).sum(dim=-1, keepdim=True) / count.clamp(min=1)
    return rows - mean


def _real_tokens_first(real: Tensor) -> Tensor:
    """Per row, the rank of each token with the real tokens first: the ``j``-th real token
    gets ``j``, the ``k``-th padding token ``count + k`` (a permutation of ``arange(seq)``)."""
    keep = real.to(torch.long)
    count = keep.sum(dim=-1, keepdim=True)
    return torch.where(real, keep.cumsum(-1) - 1, count + (1 - keep).cumsum(-1) - 1)


def _uniform(
    shape: tuple[int, ...], half_width: float, generator: torch.Generator | None
) -> Tensor:
    """``U[-half_width, half_width]`` in float64 on the CPU (the generator's device)."""
    return (torch.rand(shape, generator=generator, dtype=torch.float64) * 2 - 1) * half_width


def cape_augment(
    positions: Tensor,
    *,
    max_global_shift: float = 0.0,
    max_local_shift: float = 0.0,
    max_global_scaling: float = 1.0,
    generator: torch.Generator | None = None,
    real: Tensor | None = None,
) -> Tensor:
    """CAPE's training augmentation of ``(batch, seq)`` positions (see the module).

    Args:
        positions: ``(batch, seq)``, integer or floating, finite (``(seq,)`` positions:
            ``positions.expand(batch, -1)``).
        max_global_shift: ``Δ_max`` ≥ 0 (one shift per sequence).
        max_local_shift: ``ε_max`` ≥ 0 (one shift per token, in ``[−ε_max/2, ε_max/2]``).
        max_global_scaling: ``λ_max`` ≥ 1 (one scale per sequence, log-uniform).
        generator: for the draws (None: torch's global one). Draws are made on the CPU in the
            order Δ, λ, then ε as ``(seq, batch)`` (token ``j`` of every row before token
            ``j + 1``), and moved to ``positions``' device.
        real: ``(batch, seq)`` bool or 0/1, True for real tokens: the ``j``-th real token of a
            row takes the row's ``j``-th local shift, so padding changes no real token's
            draw; padding takes the draws after the real tokens'. None: every token is real.

    Returns:
        float64 ``(batch, seq)``: ``λ (positions + Δ + ε)``.

    Raises:
        ValueError: naming ``positions`` (not a real ``(batch, seq)`` tensor, or holding NaN
            or inf), ``real`` (not bool or 0/1, or not ``(batch, seq)``) or the range out of
            bounds (a shift < 0 or not finite, a scaling < 1).
    """
    positions = _check_rows(positions)
    max_global_shift = _check_non_negative("max_global_shift", max_global_shift)
    max_local_shift = _check_non_negative("max_local_shift", max_local_shift)
    max_global_scaling = _check_scaling(max_global_scaling)
    batch, seq = positions.shape
    if real is not None:
        real = check_padding_mask(real, "real", (batch, seq))
    delta = _uniform((batch, 1), max_global_shift, generator)
    log_scale = _uniform((batch, 1), math.log(max_global_scaling), generator)
    # (seq, batch) transposed: a row's j-th draw does not depend on seq (on the padding)
    local = _uniform((seq, batch), max_local_shift / 2, generator).T
    if real is not None:
        local = local.gather(-1, _real_tokens_first(real.cpu()))
    device = positions.device
    shifted = positions.to(torch.float64) + delta.to(device) + local.to(device)
    return shifted * log_scale.exp().to(device)


class CAPE(AdditiveEncoding, PositionTransform):
    """Sinusoidal encoding of continuous positions, augmented in training (CAPE).

    Args:
        dim: channels (interleaved ``[sin, cos]`` pairs, as :class:`SinusoidalEncoding`).
        max_global_shift: ``Δ_max`` ≥ 0 (default 0).
        max_local_shift: ``ε_max`` ≥ 0 (default 0).
        max_global_scaling: ``λ_max`` ≥ 1 (default 1: none).
        normalize: subtract each sequence's mean position first (default False).
        base: sinusoid base (> 0).
        dtype: output dtype (default ``torch.get_default_dtype()``).

    Attributes:
        generator: optional ``torch.Generator`` for the draws (None: torch's global one).

    Raises:
        ValueError: naming the argument out of range.

    Example::

        >>> cape = CAPE(8, max_global_shift=5.0, max_local_shift=0.5, max_global_scaling=1.1)
        >>> cape.generator = torch.Generator().manual_seed(0)
        >>> cape.transform_positions(torch.arange(4), batch=2).shape  # training: drawn
        torch.Size([2, 4])
        >>> cape.eval().transform_positions(torch.arange(4), batch=2)  # evaluation: as given
        tensor([0, 1, 2, 3])
    """

    def __init__(
        self,
        dim: int,
        *,
        max_global_shift: float = 0.0,
        max_local_shift: float = 0.0,
        max_global_scaling: float = 1.0,
        normalize: bool = False,
        base: float = 10000.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        sinusoidal_encoding(torch.zeros(1), dim, base)  # dim and base checked by the core
        self.dim = dim
        self.base = check_positive_float("base", base)
        self.max_global_shift = _check_non_negative("max_global_shift", max_global_shift)
        self.max_local_shift = _check_non_negative("max_local_shift", max_local_shift)
        self.max_global_scaling = _check_scaling(max_global_scaling)
        if not isinstance(normalize, bool):
            raise ValueError(f"normalize must be a bool, got {normalize!r}")
        self.normalize = normalize
        self.dtype = check_table_dtype(torch.get_default_dtype() if dtype is None else dtype)
        self.generator: torch.Generator | None = None

    @property
    def augments(self) -> bool:
        """True when some augmentation is set (a shift or a scaling)."""
        return bool(self.max_global_shift or self.max_local_shift or self.max_global_scaling > 1)

    @property
    def randomizing(self) -> bool:
        """True when :meth:`transform_positions` changes positions (a training draw, or the
        mean-normalization): attention then knows them for no token indices."""
        return (self.training and self.augments) or self.normalize

    def transform_positions(
        self,
        positions: Tensor,
        *,
        batch: int,
        continuing: bool = False,
        real: Tensor | None = None,
    ) -> Tensor:
        """The position hook: positions as CAPE sees them (see the module).

        Args:
            positions: ``(seq,)`` or ``(batch, seq)``.
            batch: rows of the forward (each draws its own augmentation).
            continuing: True when the call continues a KV cache.
            real: ``(batch, seq)`` bool or 0/1, True for real tokens (attention passes its
                ``key_padding_mask``); the mean-normalization reads only those and the
                training draws give them the row's first local shifts, so a padded row's
                real tokens get the positions they get unpadded (padding is shifted alike).
                None: every token is real.

        Returns:
            float64 ``(batch, seq)`` when drawing or normalizing, else ``positions``.

        Raises:
            ValueError: naming ``cache`` when a draw or the normalization would continue a
                KV cache, or ``real`` (not bool or 0/1, or not ``(batch, seq)``).
        """
        drawing = self.training and self.augments
        if not (drawing or self.normalize):
            return positions
        if continuing:
            why = "draws new positions every call" if drawing else "normalizes by the mean"
            raise ValueError(
                f"cache: CAPE {why}, so it cannot continue a KV cache; decode with "
                "model.eval() and normalize=False"
            )
        check_finite("positions", positions)
        rows = positions.to(torch.float64).expand(batch, -1) if positions.dim() == 1 else positions
        rows = rows.to(torch.float64)
        if real is not None:
            real = check_padding_mask(real, "real", tuple(rows.shape)).to(rows.device)
        if self.normalize:
            rows = _centred(rows, real)
        if not drawing:
            return rows
        return cape_augment(
            rows,
            max_global_shift=self.max_global_shift,
            max_local_shift=self.max_local_shift,
            max_global_scaling=self.max_global_scaling,
            generator=self.generator,
            real=real,
        )

    def forward(self, positions: Tensor) -> Tensor:
        """The sinusoid of ``positions`` (augment them first with
        :meth:`transform_positions`, as attention's context does)."""
        return sinusoidal_encoding(positions, self.dim, self.base, "interleaved", self.dtype)

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, max_global_shift={self.max_global_shift}, "
            f"max_local_shift={self.max_local_shift}, "
            f"max_global_scaling={self.max_global_scaling}, normalize={self.normalize}"
        )
