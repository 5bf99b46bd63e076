"""Fourier features of continuous coordinates: random Gaussian and learnable.

A token at coordinates ``v ∈ R^M`` (a 1D position, a patch's (row, column), a point's
(x, y, z)) is mapped through sines and cosines of linear projections of ``v``:

* **random Gaussian Fourier features** (Tancik et al. 2020, "Fourier Features Let Networks
  Learn High Frequency Functions in Low Dimensional Domains",
  https://arxiv.org/abs/2006.10739): ``γ(v) = [cos(2π B v) ‖ sin(2π B v)]`` with a fixed
  ``B ∈ R^{m×M}``, ``B_ij ~ N(0, σ²)``; ``σ`` sets the bandwidth (too small blurs, too large
  overfits, the paper's Figure 4);
* **learnable Fourier features** (Li et al. 2021, "Learnable Fourier Features for
  Multi-Dimensional Spatial Positional Encoding", https://arxiv.org/abs/2106.02795,
  Algorithm 1): ``r(v) = F^{-1/2} [cos(v W_rᵀ) ‖ sin(v W_rᵀ)]`` with a learned
  ``W_r ∈ R^{F/2×M}``, then a GELU MLP ``Linear(F, H) → GELU → Linear(H, D/G)``; positions
  come in ``G`` groups (a token with several reference points), each group encoded by the
  same MLP and the ``G`` results concatenated to ``D`` channels.

:func:`fourier_features` is the shared core (``[cos(v Wᵀ) ‖ sin(v Wᵀ)]``). Both modules are
:class:`~posenc.encoding.protocols.AdditiveEncoding`\\ s whose position axes are the coordinates:
``num_axes = M`` (``M·G`` for the learnable one), positions ``(axes, seq)`` or
``(axes, batch, seq)`` as every multi-axis encoding takes them (``(seq,)`` or
``(batch, seq)`` when ``M = 1``), so they plug into a model's additive path; called on a
coordinates tensor ``(..., M)`` through :meth:`encode` they serve coordinate MLPs (NeRF).
Coordinates are used as given: scale them to the range ``σ`` (or ``γ``) was chosen for,
``[0, 1)`` in Tancik et al.
"""

from __future__ import annotations

import math
from typing import Any, Literal, get_args

import torch
from torch import Tensor, nn

from posenc._validate import check_in_choices, check_positive_float, check_positive_int
from posenc.encoding.base import empty_linear
from posenc.encoding.protocols import AdditiveEncoding
from posenc.positions import check_positions

__all__ = [
    "FourierOrder",
    "GaussianFourierFeatures",
    "LearnableFourierFeatures",
    "fourier_features",
]

#: Which half comes first: the papers' formulas put cosines first; Tancik et al.'s notebooks
#: concatenate sines first.
FourierOrder = Literal["cos_sin", "sin_cos"]
_ORDERS: tuple[str, ...] = get_args(FourierOrder)


def fourier_features(coords: Tensor, weight: Tensor, *, order: FourierOrder = "cos_sin") -> Tensor:
    r"""``[cos(v Wᵀ) ‖ sin(v Wᵀ)]`` of coordinates ``v`` and frequencies ``W``.

    .. math::
        \phi(v) = [\cos(v W^\top) \,\|\, \sin(v W^\top)]

    Args:
        coords: ``(..., M)`` floating coordinates.
        weight: ``(m, M)`` frequencies (rows are frequency vectors).
        order: ``"cos_sin"`` (the papers' formulas) or ``"sin_cos"``.

    Shape:
        coords ``(..., M)``, weight ``(m, M)`` → ``(..., 2m)``.

    Example::

        >>> fourier_features(torch.zeros(3, 2), torch.ones(4, 2)).shape
        torch.Size([3, 8])
    """
    check_in_choices("order", order, _ORDERS)
    if weight.dim() != 2 or coords.shape[-1:] != weight.shape[1:]:
        raise ValueError(
            f"coords (..., M) and weight (m, M) must agree on M; got coords "
            f"{tuple(coords.shape)} and weight {tuple(weight.shape)}"
        )
    angles = coords @ weight.transpose(0, 1)
    halves = (angles.cos(), angles.sin())
    return torch.cat(halves if order == "cos_sin" else halves[::-1], dim=-1)


def _coordinates(positions: Tensor, num_axes: int, device: torch.device | None = None) -> Tensor:
    """Positions ``(axes, [batch,] seq)`` (or ``([batch,] seq)`` for one axis) → ``(..., axes)``,
    checked (on ``device`` when given: the parameters')."""
    check_positions(positions, num_axes=num_axes, device=device)
    if num_axes == 1:
        return positions.unsqueeze(-1)
    return positions.movedim(0, -1)


def _check_float_coords(coords: Tensor, in_dim: int, owner: str) -> None:
    if not isinstance(coords, Tensor) or coords.shape[-1:] != (in_dim,):
        shape = tuple(coords.shape) if isinstance(coords, Tensor) else type(coords).__name__
        raise ValueError(f"coords of {owner} must have shape (..., {in_dim}); got {shape}")
    if coords.dtype == torch.bool or coords.is_complex():
        raise ValueError(f"coords must be an integer or floating tensor, got {coords.dtype}")


class GaussianFourierFeatures(AdditiveEncoding):
    r"""Random Gaussian Fourier features (Tancik et al. 2020), fixed after construction.

    .. math::
        \gamma(v) = [\cos(2\pi B v) \,\|\, \sin(2\pi B v)], \qquad
        B \in \mathbb{R}^{m \times M},\; B_{ij} \sim \mathcal{N}(0, \sigma^2)

    ``B`` is drawn from ``seed`` (float64, rounded once to float32 values) and kept as a
    constant outside ``state_dict`` and ``Module._apply``, as RoPE's frequencies: a dtype cast
    cannot round it and a ``meta``-device build needs nothing restored; it is rebuilt from the
    constructor's arguments (a state dict of an earlier version that saved it as the buffer
    ``frequencies`` still loads: the value is checked against the rebuilt one). Angles are
    computed in float64 as ``(2π v) Bᵀ`` (the reference notebook's order of operations) and
    rounded once to the output dtype. Paper: https://arxiv.org/abs/2006.10739 (Section 6:
    ``m = 256``, ``σ`` chosen per task from 1–100 with coordinates in ``[0, 1)``). Tested
    against the formula in float64 and by its properties (stationary kernel: ``γ(u)·γ(v)``
    depends only on ``u − v``).

    Args:
        in_dim: ``M``, coordinates per token (the position axes).
        num_features: ``m``, frequencies; the output has ``2m`` channels.
        sigma: ``σ`` (> 0), the standard deviation of ``B``.
        seed: seed of ``B`` (a private generator; the global RNG is untouched).
        order: ``"cos_sin"`` (the paper's formula, default) or ``"sin_cos"`` (the notebooks').
        dtype: output dtype (default ``torch.get_default_dtype()`` at construction).

    Shape:
        ``forward(positions)``: ``(M, seq)`` or ``(M, batch, seq)`` (``(seq,)`` or
        ``(batch, seq)`` when ``M = 1``) → ``(seq, 2m)`` or ``(batch, seq, 2m)``.
        :meth:`encode`: ``(..., M)`` → ``(..., 2m)``.

    Example::

        >>> ff = GaussianFourierFeatures(in_dim=2, num_features=16, sigma=10.0)
        >>> ff(torch.rand(2, 5)).shape
        torch.Size([5, 32])
    """

    def __init__(
        self,
        in_dim: int,
        num_features: int,
        *,
        sigma: float = 10.0,
        seed: int = 0,
        order: FourierOrder = "cos_sin",
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_axes = check_positive_int("in_dim", in_dim)
        self.num_features = check_positive_int("num_features", num_features)
        self.sigma = check_positive_float("sigma", sigma)
        check_in_choices("order", order, _ORDERS)
        self.order: FourierOrder = order
        self.dim = 2 * num_features
        self.dtype = dtype or torch.get_default_dtype()
        generator = torch.Generator().manual_seed(int(seed))
        frequencies = torch.randn(
            num_features, in_dim, generator=generator, dtype=torch.float64, device="cpu"
        )
        # B, (m, M): float32 values held in float64 on the CPU (a constant, not a buffer);
        # the angles are computed from them in float64
        self.frequencies = (frequencies * self.sigma).float().double()
        self._memo: dict[torch.device, Tensor] = {}

    frequencies: Tensor

    def _frequencies_on(self, device: torch.device) -> Tensor:
        """``B`` in float64 on ``device``, memoised (MPS: float32, it has no float64)."""
        if device not in self._memo:
            dtype = torch.float32 if device.type == "mps" else torch.float64
            self._memo[device] = self.frequencies.to(device=device, dtype=dtype)
        return self._memo[device]

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        # Earlier versions saved B as a buffer: accept it when it is this module's B.
        saved = state_dict.pop(prefix + "frequencies", None)
        if saved is not None and not torch.equal(saved.double().cpu(), self.frequencies):
            raise ValueError(
                f"state_dict: {prefix}frequencies is not the B this GaussianFourierFeatures "
                "draws from its seed and sigma; build it with the seed and sigma it was saved with"
            )
        super()._load_from_state_dict(state_dict, prefix, *args)

    def encode(self, coords: Tensor) -> Tensor:
        """``γ(coords)`` for coordinates ``(..., M)``."""
        _check_float_coords(coords, self.num_axes, type(self).__name__)
        angle_input = coords.to(torch.float64) * (2 * math.pi)
        weight = self._frequencies_on(coords.device).to(angle_input.dtype)
        features = fourier_features(angle_input, weight, order=self.order)
        return features.to(self.dtype)

    def forward(self, positions: Tensor) -> Tensor:
        """``γ`` of each token's coordinates (the position axes)."""
        return self.encode(_coordinates(positions, self.num_axes))

    def extra_repr(self) -> str:
        return (
            f"in_dim={self.num_axes}, num_features={self.num_features}, sigma={self.sigma}, "
            f"order={self.order!r}"
        )


class LearnableFourierFeatures(AdditiveEncoding):
    r"""Learnable Fourier features with an MLP (Li et al. 2021, Algorithm 1).

    .. math::
        r(v) = \tfrac{1}{\sqrt{F}} [\cos(v W_r^\top) \,\|\, \sin(v W_r^\top)], \qquad
        P(v) = \text{Linear}_{H \to D/G}(\text{GELU}(\text{Linear}_{F \to H}(r(v))))

    for each of the ``G`` position groups of a token, concatenated over the groups to ``D``
    channels (one MLP shared by the groups). ``W_r ∈ R^{F/2×M}`` is initialized from
    ``N(0, γ⁻²)``: variance ``γ⁻²``, standard deviation ``1/γ``, the paper's notation. The
    widely copied port (willGuimont/learnable_fourier_positional_encoding) draws with standard
    deviation ``γ⁻²``; its initialization is this one's with ``gamma = γ²``. Paper:
    https://arxiv.org/abs/2106.02795 (Section 3; γ is a hyperparameter, ``F = 384`` and
    ``H = 32`` in their ViT experiments). Tested against the algorithm restated in the tests.

    Args:
        in_dim: ``M``, coordinates per position group.
        dim: ``D``, output channels (divisible by ``groups``).
        num_features: ``F``, Fourier channels (even).
        hidden_dim: ``H``, the MLP's hidden width.
        groups: ``G``, position groups per token; position axis ``g·M + i`` is coordinate
            ``i`` of group ``g``.
        gamma: ``γ`` (> 0) of the initialization of ``W_r``.
        order: ``"cos_sin"`` (the paper's, default) or ``"sin_cos"``.
        device, dtype: of the parameters.

    Shape:
        ``forward(positions)``: ``(G·M, seq)`` or ``(G·M, batch, seq)`` (``(seq,)`` /
        ``(batch, seq)`` when ``G·M = 1``) → ``(seq, D)`` or ``(batch, seq, D)``.
        :meth:`encode`: ``(..., G, M)`` → ``(..., D)``.

    Example::

        >>> lff = LearnableFourierFeatures(in_dim=2, dim=64, num_features=32, hidden_dim=16)
        >>> lff(torch.rand(2, 4, 9)).shape
        torch.Size([4, 9, 64])
    """

    def __init__(
        self,
        in_dim: int,
        dim: int,
        *,
        num_features: int = 384,
        hidden_dim: int = 32,
        groups: int = 1,
        gamma: float = 1.0,
        order: FourierOrder = "cos_sin",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.in_dim = check_positive_int("in_dim", in_dim)
        self.dim = check_positive_int("dim", dim)
        self.num_features = check_positive_int("num_features", num_features)
        hidden_dim = check_positive_int("hidden_dim", hidden_dim)
        self.groups = check_positive_int("groups", groups)
        self.gamma = check_positive_float("gamma", gamma)
        check_in_choices("order", order, _ORDERS)
        if num_features % 2:
            raise ValueError(f"num_features must be even (cos and sin halves), got {num_features}")
        if dim % groups:
            raise ValueError(f"dim must be divisible by groups ({groups}), got {dim}")
        self.order: FourierOrder = order
        self.num_axes = in_dim * groups
        self.wr = nn.Parameter(  # W_r
            torch.empty(num_features // 2, in_dim, device=device, dtype=dtype)
        )
        self.mlp = nn.Sequential(  # drawn once, by reset_parameters
            empty_linear(num_features, hidden_dim, device=device, dtype=dtype),
            nn.GELU(),
            empty_linear(hidden_dim, dim // groups, device=device, dtype=dtype),
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``W_r ~ N(0, γ⁻²)``; the MLP keeps :class:`torch.nn.Linear`'s initialization."""
        nn.init.normal_(self.wr, mean=0.0, std=1.0 / self.gamma)
        for layer in self.mlp:
            if isinstance(layer, nn.Linear):
                layer.reset_parameters()

    def encode(self, coords: Tensor) -> Tensor:
        """``P`` of coordinates ``(..., G, M)`` → ``(..., D)``."""
        _check_float_coords(coords, self.in_dim, type(self).__name__)
        if coords.dim() < 2 or coords.shape[-2] != self.groups:
            raise ValueError(
                f"coords must have shape (..., {self.groups}, {self.in_dim}) (groups, in_dim); "
                f"got {tuple(coords.shape)}"
            )
        coords = coords.to(self.wr.dtype)
        features = fourier_features(coords, self.wr, order=self.order)
        features = features / math.sqrt(self.num_features)  # (..., G, F)
        return self.mlp(features).flatten(-2)  # (..., G · D/G)

    def forward(self, positions: Tensor) -> Tensor:
        """``P`` of each token's position groups (the position axes, ``G·M`` of them)."""
        coords = _coordinates(positions, self.num_axes, self.wr.device)  # (..., G·M)
        return self.encode(coords.unflatten(-1, (self.groups, self.in_dim)))

    def extra_repr(self) -> str:
        return (
            f"in_dim={self.in_dim}, dim={self.dim}, num_features={self.num_features}, "
            f"groups={self.groups}, gamma={self.gamma}, order={self.order!r}"
        )
