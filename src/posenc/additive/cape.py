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
shift, global scaling), after an optional mean-normalization ``x_{b,i} − mean_i x_{b,i}``.
In evaluation the positions are used as given (normalized if asked). The draws and their
order (global shift, local shift, scaling) follow the reference port
(github.com/gcambara/cape ``CAPE1d``, after the authors' flashlight recipe), against which
the distributions are tested; its defaults (no shift, no scaling, no normalization) are kept,
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

import torch
from torch import Tensor

from posenc._validate import check_positive_float
from posenc.additive.sinusoidal import check_table_dtype, sinusoidal_encoding
from posenc.encoding.protocols import AdditiveEncoding, PositionTransform

__all__ = ["CAPE", "cape_augment"]


def _check_non_negative(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


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
) -> Tensor:
    """CAPE's training augmentation of ``(batch, seq)`` positions (see the module).

    Args:
        positions: ``(batch, seq)`` floating.
        max_global_shift: ``Δ_max`` ≥ 0 (one shift per sequence).
        max_local_shift: ``ε_max`` ≥ 0 (one shift per token, in ``[−ε_max/2, ε_max/2]``).
        max_global_scaling: ``λ_max`` ≥ 1 (one scale per sequence, log-uniform).
        generator: for the draws (None: torch's global one). Draws are made on the CPU in the
            order Δ, ε, λ and moved to ``positions``' device.

    Returns:
        float64 ``(batch, seq)``: ``λ (positions + Δ + ε)``.
    """
    batch, seq = positions.shape
    delta = _uniform((batch, 1), max_global_shift, generator)
    local = _uniform((batch, seq), max_local_shift / 2, generator)
    log_scale = _uniform((batch, 1), math.log(max_global_scaling), generator)
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
        scaling = max_global_scaling
        if isinstance(scaling, bool) or not isinstance(scaling, (int, float)):
            raise ValueError(f"max_global_scaling must be a number >= 1, got {scaling!r}")
        if not (math.isfinite(scaling) and scaling >= 1.0):
            raise ValueError(f"max_global_scaling must be a number >= 1, got {scaling!r}")
        self.max_global_scaling = float(scaling)
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
        self, positions: Tensor, *, batch: int, continuing: bool = False
    ) -> Tensor:
        """The position hook: positions as CAPE sees them (see the module).

        Args:
            positions: ``(seq,)`` or ``(batch, seq)``.
            batch: rows of the forward (each draws its own augmentation).
            continuing: True when the call continues a KV cache.

        Returns:
            float64 ``(batch, seq)`` when drawing or normalizing, else ``positions``.

        Raises:
            ValueError: naming ``cache`` when a draw or the normalization would continue a
                KV cache.
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
        rows = positions.to(torch.float64).expand(batch, -1) if positions.dim() == 1 else positions
        rows = rows.to(torch.float64)
        if self.normalize:
            rows = rows - rows.mean(dim=-1, keepdim=True)
        if not drawing:
            return rows
        return cape_augment(
            rows,
            max_global_shift=self.max_global_shift,
            max_local_shift=self.max_local_shift,
            max_global_scaling=self.max_global_scaling,
            generator=self.generator,
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
