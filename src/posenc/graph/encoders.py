r"""Learned node encodings from precomputed graph encodings, added to node features.

Each encoder is an :class:`~posenc.encoding.protocols.AdditiveEncoding`: its ``position_embedding``
(``forward``) maps a node's precomputed encodings to a ``dim``-wide vector that the model
adds to the node's features. A graph has no sequence order, so its "positions" are these
precomputed encodings, one row per node (flat ``(num_nodes, ...)`` or padded
``(B, N, ...)``):

- :class:`EigenvectorMLP` and :class:`SignNet` read
  :meth:`LaplacianPE.positions() <posenc.graph.LaplacianPE.positions>`, ``(..., k, 2)``
  pairs ``(v_j[i], λ_j)``, NaN in both entries of a padded column (GraphGPS's padding);
- :class:`RandomWalkEncoder` reads :func:`~posenc.graph.random_walk_pe`, ``(..., K)``.

Eigenvectors come with a sign (and, in a repeated eigenvalue, a basis) that means nothing:
:class:`EigenvectorMLP` is not invariant to it and is trained with
:func:`~posenc.graph.random_sign_flip`; :class:`SignNet` is invariant to every sign by
construction. Neither is invariant to the basis of a repeated eigenvalue (BasisNet is).

Inputs are cast to the parameters' device and dtype. ``mask`` (``(...)`` bool, True = a
real node) zeroes the output on padding nodes of a padded batch.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Literal

import torch
from torch import Tensor, nn

from posenc._validate import check_in_choices, check_positive_int, validating_values
from posenc.encoding.base import empty_linear
from posenc.encoding.protocols import AdditiveEncoding

__all__ = ["EigenvectorMLP", "RandomWalkEncoder", "SignNet"]

Pooling = Literal["sum", "mean"]


def _mlp(
    sizes: list[int], device: torch.device | str | None, dtype: torch.dtype | None
) -> nn.Sequential:
    """Linear layers through ``sizes`` with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for index, (n_in, n_out) in enumerate(pairwise(sizes)):
        if index:
            layers.append(nn.ReLU())
        layers.append(empty_linear(n_in, n_out, device=device, dtype=dtype))
    return nn.Sequential(*layers)


def _reset(module: nn.Module) -> None:
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            layer.reset_parameters()


def _parameter_of(module: nn.Module) -> Tensor:
    return next(module.parameters())


def _eigen_inputs(
    owner: nn.Module, positions: object, k: int | None, mask: Tensor | None
) -> tuple[Tensor, Tensor]:
    """Checked positions ``(..., k, 2)`` with padding read as 0, and the ``(..., k)`` mask
    of real columns, on the parameters' device and dtype.

    A padded column is NaN in both entries, as :meth:`LaplacianPE.positions()
    <posenc.graph.LaplacianPE.positions>` writes it; any other NaN or inf on a real node
    (one ``mask`` keeps) is refused, not read as padding."""
    name = type(owner).__name__
    if (
        not isinstance(positions, Tensor)
        or positions.dim() < 3
        or positions.shape[-1] != 2
        or not positions.is_floating_point()
    ):
        got = tuple(positions.shape) if isinstance(positions, Tensor) else type(positions).__name__
        raise ValueError(
            f"positions of {name} must be a floating tensor (..., k, 2) of (eigenvector entry, "
            f"eigenvalue) pairs (LaplacianPE.positions()); got {got}"
        )
    if k is not None and positions.shape[-2] != k:
        raise ValueError(f"positions has {positions.shape[-2]} eigenvectors but {name} has k={k}")
    _check_node_mask(mask, positions.shape[:-2])
    weight = _parameter_of(owner)
    positions = positions.to(device=weight.device, dtype=weight.dtype)
    real = ~torch.isnan(positions).all(-1)  # (..., k): padding is NaN in both entries
    if mask is not None:  # a padding node's entries are not read
        real = real & mask.to(device=real.device, dtype=torch.bool)[..., None]
    if validating_values() and positions.device.type != "meta":
        bad = real[..., None] & ~torch.isfinite(positions)  # (..., k, 2)
        if bool(bad.any()):
            raise ValueError(
                f"positions of {name} must be finite in every real (eigenvector entry, "
                "eigenvalue) pair; got NaN or inf in one. A padded column is NaN in both "
                "entries (LaplacianPE.positions()); nodes outside mask are not read"
            )
    return torch.where(real[..., None], positions, 0.0), real


def _check_node_mask(mask: Tensor | None, nodes: torch.Size) -> None:
    if mask is not None and (not isinstance(mask, Tensor) or mask.shape != nodes):
        raise ValueError(f"mask must be a bool tensor of the node shape {tuple(nodes)}")


def _mask_nodes(out: Tensor, mask: Tensor | None) -> Tensor:
    if mask is None:
        return out
    # masked_fill, not a product: a padding node's NaN must not survive as NaN · 0
    return out.masked_fill(~mask.to(device=out.device, dtype=torch.bool)[..., None], 0.0)


class EigenvectorMLP(AdditiveEncoding):
    r"""A plain per-eigenvector MLP, pooled over the eigenvectors (GraphGPS's ``LapPE``
    ``DeepSet`` encoder).

    .. math:: P(i) = \operatorname{pool}_{j \le k,\ \text{real}}\ \phi(v_j[i], \lambda_j)

    with ``φ`` an MLP shared by the ``k`` columns, padded columns left out, ``pool`` a sum
    (GraphGPS) or a mean. Not sign invariant: train with
    :func:`~posenc.graph.random_sign_flip`. Paper: Kreuzer et al. 2021,
    https://arxiv.org/abs/2106.03893 (learned Laplacian PE); reference GraphGPS's
    ``LapPENodeEncoder`` (``graphgps/encoder/laplace_pos_encoder.py``), tested against
    an explicit loop over the columns and by float64 ``gradcheck``.

    Args:
        dim: output width.
        hidden: width of φ's hidden layers (default ``dim``).
        layers: linear layers of φ (≥ 1), ReLU between them.
        pooling: ``"sum"`` or ``"mean"`` over the real columns.
        device, dtype: of the parameters.

    Shape:
        positions ``(..., k, 2)`` (:meth:`LaplacianPE.positions()
        <posenc.graph.LaplacianPE.positions>`), mask ``(...)`` → ``(..., dim)``.

    Example::

        >>> from posenc.graph import Graph, laplacian_pe
        >>> g = Graph(torch.tensor([[0, 1, 2], [1, 2, 3]]), num_nodes=4)
        >>> EigenvectorMLP(8)(laplacian_pe(g, k=3).positions()).shape
        torch.Size([4, 8])
    """

    def __init__(
        self,
        dim: int,
        *,
        hidden: int | None = None,
        layers: int = 2,
        pooling: Pooling = "sum",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.dim = check_positive_int("dim", dim)
        self.hidden = check_positive_int("hidden", dim if hidden is None else hidden)
        self.layers = check_positive_int("layers", layers)
        check_in_choices("pooling", pooling, ("sum", "mean"))
        self.pooling = pooling
        self.phi = _mlp([2, *[self.hidden] * (layers - 1), dim], device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw every linear layer as ``nn.Linear`` does."""
        _reset(self.phi)

    def forward(self, positions: Tensor, *, mask: Tensor | None = None) -> Tensor:
        x, real = _eigen_inputs(self, positions, None, mask)
        out = self.phi(x) * real[..., None]  # (..., k, dim), padded columns 0
        pooled = out.sum(-2)
        if self.pooling == "mean":
            pooled = pooled / real.sum(-1, keepdim=True).clamp(min=1)
        return _mask_nodes(pooled, mask)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, hidden={self.hidden}, layers={self.layers}, pooling={self.pooling}"


class SignNet(AdditiveEncoding):
    r"""SignNet: a node encoding invariant to the sign of every eigenvector.

    .. math::
        P = \rho\big(\,[\phi(v_1, \lambda_1) + \phi(-v_1, \lambda_1),\ \ldots,\
            \phi(v_k, \lambda_k) + \phi(-v_k, \lambda_k)]\,\big)

    ``φ`` maps one eigenvector (with its eigenvalue on every node) to ``hidden`` features per
    node; it is shared by the ``k`` columns, whose outputs are concatenated (padded columns
    as 0) and read by the MLP ``ρ``. Paper: Lim et al. 2022, "Sign and Basis Invariant
    Networks for Spectral Graph Representation Learning", https://arxiv.org/abs/2202.13013;
    reference GraphGPS's ``GINDeepSigns`` (``graphgps/encoder/signnet_pos_encoder.py``),
    whose φ is a GIN over the graph and ρ an MLP over the concatenation.

    ``φ`` here is ``phi_layers`` GIN layers ``h ← MLP((1 + ε) h + A h)`` (ε = 0, ReLU
    between layers, no batch norm: batch statistics would mix the columns and break the
    exact invariance) when ``adjacency`` is given. Without it each node is read alone
    (``A = 0``): then ``φ(v) + φ(−v)`` depends on ``|v[i]|`` only and the relative signs of
    the nodes are lost, which is why the paper passes the graph to φ. The additive hook
    ``position_embedding(positions)`` is that graph-free form; call the module with
    ``adjacency`` for the paper's.

    Sign invariance is exact in floating point: ``φ(v)`` and ``φ(−v)`` are two calls on
    tensors of the same shape, so flipping a column swaps two bitwise-equal terms of a sum.

    Args:
        k: eigenvectors read (the width of ``positions``).
        dim: output width.
        hidden: width of φ and of ρ's hidden layer (default ``dim``).
        phi_layers: GIN layers of φ (≥ 1), each a two-layer MLP.
        rho_layers: linear layers of ρ (≥ 1).
        device, dtype: of the parameters.

    Shape:
        positions ``(..., N, k, 2)`` (:meth:`LaplacianPE.positions()
        <posenc.graph.LaplacianPE.positions>`), adjacency ``(..., N, N)`` (``A[i, j]``, the
        weights φ aggregates with; a batch's block diagonal for flat nodes), mask
        ``(..., N)`` → ``(..., N, dim)``.

    Example::

        >>> from posenc.graph import Graph, laplacian_pe
        >>> g = Graph(torch.tensor([[0, 1, 2], [1, 2, 3]]), num_nodes=4)
        >>> net = SignNet(k=3, dim=8)
        >>> net(laplacian_pe(g, k=3).positions(), g.adjacency(torch.float32)[0]).shape
        torch.Size([4, 8])
    """

    def __init__(
        self,
        k: int,
        dim: int,
        *,
        hidden: int | None = None,
        phi_layers: int = 2,
        rho_layers: int = 2,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.k = check_positive_int("k", k)
        self.dim = check_positive_int("dim", dim)
        self.hidden = check_positive_int("hidden", dim if hidden is None else hidden)
        self.phi_layers = check_positive_int("phi_layers", phi_layers)
        self.rho_layers = check_positive_int("rho_layers", rho_layers)
        h = self.hidden
        self.phi = nn.ModuleList(
            _mlp([2 if index == 0 else h, h, h], device, dtype) for index in range(phi_layers)
        )
        self.rho = _mlp([k * h, *[h] * (rho_layers - 1), dim], device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw every linear layer of φ and ρ as ``nn.Linear`` does."""
        _reset(self.phi)
        _reset(self.rho)

    def phi_of(self, x: Tensor, adjacency: Tensor | None) -> Tensor:
        """φ on every column: ``(..., N, k, c)`` → ``(..., N, k, hidden)``."""
        for index, layer in enumerate(self.phi):
            if index:
                x = torch.relu(x)
            if adjacency is not None:
                x = x + torch.einsum("...ij,...jkc->...ikc", adjacency, x)
            x = layer(x)
        return x

    def forward(
        self, positions: Tensor, adjacency: Tensor | None = None, *, mask: Tensor | None = None
    ) -> Tensor:
        x, real = _eigen_inputs(self, positions, self.k, mask)
        if adjacency is not None:
            nodes = x.shape[:-2]
            if not isinstance(adjacency, Tensor) or adjacency.shape != (*nodes, nodes[-1]):
                raise ValueError(
                    f"adjacency must be a tensor (..., N, N) = {(*nodes, nodes[-1])} matching "
                    f"positions {tuple(x.shape)}"
                )
            adjacency = adjacency.to(device=x.device, dtype=x.dtype)
        flipped = x * x.new_tensor([-1.0, 1.0])  # (-v, λ): the eigenvalue keeps its sign
        # (..., N, k, hidden); padded columns are 0 before ρ
        signless = (self.phi_of(x, adjacency) + self.phi_of(flipped, adjacency)) * real[..., None]
        out = self.rho(signless.flatten(-2))  # (..., N, k·hidden) → (..., N, dim)
        return _mask_nodes(out, mask)

    def extra_repr(self) -> str:
        return (
            f"k={self.k}, dim={self.dim}, hidden={self.hidden}, phi_layers={self.phi_layers}, "
            f"rho_layers={self.rho_layers}"
        )


class RandomWalkEncoder(AdditiveEncoding):
    r"""A linear map of the random-walk structural encodings (GraphGPS's ``RWSE`` encoder
    with ``model: linear``).

    .. math:: P(i) = W\,\big((M)_{ii}, \ldots, (M^K)_{ii}\big) + b

    Reference GraphGPS's ``KernelPENodeEncoder`` (``graphgps/encoder/kernel_pos_encoder.py``).

    Args:
        steps: ``K``, the width of the encodings (:func:`~posenc.graph.random_walk_pe`).
        dim: output width.
        device, dtype: of the parameters.

    Shape:
        positions ``(..., steps)``, mask ``(...)`` → ``(..., dim)``.

    Example::

        >>> from posenc.graph import Graph, random_walk_pe
        >>> g = Graph(torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=3)
        >>> RandomWalkEncoder(4, 8)(random_walk_pe(g, 4)).shape
        torch.Size([3, 8])
    """

    def __init__(
        self,
        steps: int,
        dim: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.steps = check_positive_int("steps", steps)
        self.dim = check_positive_int("dim", dim)
        self.linear = empty_linear(steps, dim, device=device, dtype=dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw the linear layer as ``nn.Linear`` does."""
        self.linear.reset_parameters()

    def forward(self, positions: Tensor, *, mask: Tensor | None = None) -> Tensor:
        if (
            not isinstance(positions, Tensor)
            or positions.dim() < 1
            or positions.shape[-1] != self.steps
            or not positions.is_floating_point()
        ):
            got = tuple(positions.shape) if isinstance(positions, Tensor) else type(positions)
            raise ValueError(
                f"positions must be a floating tensor (..., steps={self.steps}) of random-walk "
                f"encodings; got {got}"
            )
        _check_node_mask(mask, positions.shape[:-1])
        if validating_values() and positions.device.type != "meta":
            bad = ~torch.isfinite(positions)  # (..., steps)
            if mask is not None:
                bad = bad & mask.to(device=bad.device, dtype=torch.bool)[..., None]
            if bool(bad.any()):
                raise ValueError(
                    "positions of RandomWalkEncoder must be finite on every real node (nodes "
                    "outside mask are not read); got NaN or inf"
                )
        weight = self.linear.weight
        positions = positions.to(device=weight.device, dtype=weight.dtype)
        if mask is not None:  # a padding node's entries are not read, not even as NaN · 0
            keep = mask.to(device=positions.device, dtype=torch.bool)[..., None]
            positions = positions.masked_fill(~keep, 0.0)
        out = self.linear(positions)
        return _mask_nodes(out, mask)

    def extra_repr(self) -> str:
        return f"steps={self.steps}, dim={self.dim}"
