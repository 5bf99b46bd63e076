"""Complex-order embeddings: each token is a complex wave over positions (Wang et al. 2020).

The encoding depends on the token ids, not only on positions, so it does not add to a token
embedding: it *is* the token embedding. A model uses its real view ``[Re ‖ Im]`` in place of
``embed(tokens)`` through the token-embedding hook ``embed_tokens(tokens, positions)`` (see
:mod:`posenc.encoding.resolve`).

:func:`complex_order_embedding` is the complex function of the paper,
:func:`complex_order_real_view` its real view; :class:`ComplexOrderEmbedding` holds the three
per-token tables.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._validate import (
    check_floating_dtype,
    check_positive_float,
    check_positive_int,
    validating_values,
)
from posenc.additive.sinusoidal import sinusoidal_inv_freq
from posenc.encoding.base import state_device
from posenc.encoding.protocols import TokenEmbedding
from posenc.positions import check_device, check_positions

__all__ = [
    "ComplexOrderEmbedding",
    "complex_order_embedding",
    "complex_order_real_view",
]


def _check_tables(amplitude: object, frequency: object, phase: object) -> tuple[int, int]:
    """``(vocab_size, complex_dim)`` of three floating ``(vocab_size, complex_dim)`` tables."""
    shape = None
    for name, table in (("amplitude", amplitude), ("frequency", frequency), ("phase", phase)):
        if not isinstance(table, Tensor) or table.dim() != 2 or not table.is_floating_point():
            raise ValueError(f"{name} must be a floating tensor (vocab_size, complex_dim)")
        if shape is None:
            shape = tuple(table.shape)
        elif tuple(table.shape) != shape:
            raise ValueError(
                f"{name} has shape {tuple(table.shape)} but amplitude has shape {shape}; the "
                "three tables must have the same (vocab_size, complex_dim)"
            )
    assert shape is not None
    return shape[0], shape[1]


def _check_tokens(tokens: object, vocab_size: int) -> Tensor:
    """Integer ids ``(seq,)`` or ``(batch, seq)`` in ``[0, vocab_size)``; errors name tokens."""
    if (
        not isinstance(tokens, Tensor)
        or tokens.dim() not in (1, 2)
        or tokens.is_floating_point()
        or tokens.is_complex()
        or tokens.dtype == torch.bool
    ):
        got = (
            f"{tokens.dtype} {tuple(tokens.shape)}"
            if isinstance(tokens, Tensor)
            else type(tokens).__name__
        )
        raise ValueError(f"tokens must be an integer tensor (seq,) or (batch, seq); got {got}")
    if validating_values() and tokens.numel() > 0:
        low, high = torch.stack(torch.aminmax(tokens)).tolist()  # one host sync
        if low < 0 or high >= vocab_size:
            raise ValueError(
                f"tokens must be ids in [0, vocab_size) = [0, {vocab_size}); got values from "
                f"{low} to {high}"
            )
    return tokens


def _check_call(
    tokens: Tensor, positions: Tensor, vocab_size: int, device: torch.device | None = None
) -> None:
    """Validate tokens and positions of one call (on ``device`` when given); their shapes
    must broadcast."""
    _check_tokens(tokens, vocab_size)
    check_device("tokens", tokens, device, "the device of the encoding's parameters")
    check_positions(positions, "positions", device=tokens.device)
    if positions.shape[-1] != tokens.shape[-1]:
        raise ValueError(
            f"positions has {positions.shape[-1]} entries but tokens has seq {tokens.shape[-1]}"
        )
    if tokens.dim() == 2 and positions.dim() == 2:
        tb, pb = tokens.shape[0], positions.shape[0]
        if tb != pb and 1 not in (tb, pb):
            raise ValueError(f"positions has batch {pb} but tokens has batch {tb}")


def _parts(
    amplitude: Tensor, frequency: Tensor, phase: Tensor, tokens: Tensor, positions: Tensor
) -> tuple[Tensor, Tensor]:
    """``(Re, Im)`` of ``r_j exp(i(ω_j·pos + θ_j))``, each ``(..., seq, complex_dim)``.

    No checks. The angle is formed and its cos/sin taken in float64 (float32 where the device
    has no float64), then rounded once to the compute dtype (the amplitude's, at least
    float32): large positions keep their phase exact.
    """
    device = amplitude.device
    compute = torch.promote_types(amplitude.dtype, torch.float32)
    wide = torch.float32 if device.type == "mps" else torch.float64
    ids = tokens.to(device=device, dtype=torch.long)
    radius = F.embedding(ids, amplitude).to(compute)  # (..., seq, complex_dim)
    omega = F.embedding(ids, frequency).to(wide)
    theta = F.embedding(ids, phase).to(wide)
    angle = omega * positions.to(device=device, dtype=wide).unsqueeze(-1) + theta
    return radius * angle.cos().to(compute), radius * angle.sin().to(compute)


def complex_order_embedding(
    amplitude: Tensor, frequency: Tensor, phase: Tensor, tokens: Tensor, positions: Tensor
) -> Tensor:
    r"""The complex-order embedding of token ids at positions (Wang et al. 2020).

    .. math::
        f(j, \text{pos}) = r_j \odot e^{\,i(\omega_j \cdot \text{pos} + \theta_j)},
        \qquad f(j, \text{pos})_k = r_{j,k}\big(\cos(\omega_{j,k}\,\text{pos} + \theta_{j,k})
        + i \sin(\omega_{j,k}\,\text{pos} + \theta_{j,k})\big)

    with per-token amplitude ``r_j``, frequency ``ω_j`` and initial phase ``θ_j``, vectors of
    the complex width. Paper: "Encoding word order in complex embeddings", ICLR 2020,
    https://arxiv.org/abs/1912.12333 (Theorem 1). Tested against a float64 evaluation of the
    formula with :mod:`cmath`.

    Args:
        amplitude, frequency, phase: ``(vocab_size, complex_dim)`` floating tables, one row
            per token id (``r``, ``ω``, ``θ``).
        tokens: integer ids ``(seq,)`` or ``(batch, seq)`` in ``[0, vocab_size)``.
        positions: ``(seq,)`` or ``(batch, seq)``, integer or floating, finite; broadcast
            against ``tokens`` (a batch of 1 or none serves every row).

    Returns:
        complex tensor ``(..., seq, complex_dim)``: complex128 for float64 tables, complex64
        otherwise, on the tables' device.

    Raises:
        ValueError: naming the argument for malformed tables, ids outside the vocabulary, or
            bad positions.

    Example::

        >>> r, w, t = torch.ones(5, 2), torch.tensor([[0.5, 1.0]]).repeat(5, 1), torch.zeros(5, 2)
        >>> complex_order_embedding(r, w, t, torch.tensor([3, 3]), torch.tensor([0, 1])).shape
        torch.Size([2, 2])
    """
    vocab_size, _ = _check_tables(amplitude, frequency, phase)
    _check_call(tokens, positions, vocab_size)
    real, imag = _parts(amplitude, frequency, phase, tokens, positions)
    return torch.complex(real, imag)


def complex_order_real_view(
    amplitude: Tensor, frequency: Tensor, phase: Tensor, tokens: Tensor, positions: Tensor
) -> Tensor:
    """The real view ``[Re f ‖ Im f]`` of :func:`complex_order_embedding`.

    Channels ``0 .. complex_dim - 1`` are the real parts, channels ``complex_dim ..
    2·complex_dim - 1`` the imaginary parts of the same complex channels, in the amplitude's
    dtype (computed in at least float32, the angle in float64; see
    :func:`complex_order_embedding` for the arguments).

    Shape:
        ``(..., seq, 2 · complex_dim)``.
    """
    vocab_size, _ = _check_tables(amplitude, frequency, phase)
    _check_call(tokens, positions, vocab_size)
    real, imag = _parts(amplitude, frequency, phase, tokens, positions)
    return torch.cat([real, imag], dim=-1).to(amplitude.dtype)


class ComplexOrderEmbedding(TokenEmbedding):
    r"""Complex-order token embeddings, consumed by a real model through their real view.

    .. math::
        f(j, \text{pos}) = r_j \odot e^{\,i(\omega_j \cdot \text{pos} + \theta_j)}
        \in \mathbb{C}^{d/2}, \qquad
        x(j, \text{pos}) = \big[\,\operatorname{Re} f \;\|\; \operatorname{Im} f\,\big]
        \in \mathbb{R}^{d}

    Each token ``j`` has its own amplitude ``r_j`` (the ordinary word embedding), frequency
    ``ω_j`` and initial phase ``θ_j``, vectors of the complex width ``d/2``. Paper: Wang et
    al., "Encoding word order in complex embeddings", ICLR 2020,
    https://arxiv.org/abs/1912.12333. It proves this is the general bounded embedding whose
    offset transformation ``f(j, pos + n) = e^{iω_j n} ⊙ f(j, pos)`` does not depend on
    ``pos`` (Properties 1 and 2: ``|f(j, pos)| = |r_j|``); the Transformer's sinusoidal
    encoding is the special case of shared, fixed frequencies (``r = 1``, ``θ = 0``,
    ``ω_k = base^{-2k/d}`` gives ``[cos ‖ sin]`` of :func:`~posenc.additive.sinusoidal_encoding`).

    **Real view.** ``dim`` is the width the model sees: ``dim / 2`` complex channels, laid
    out as ``[Re ‖ Im]`` (channel ``k`` and ``k + dim/2`` are one complex number). The model
    uses it in place of its token embedding (hook ``embed_tokens``); the rest of the network
    is real-valued.

    **Reference.** Follows the authors' code (``iclr-complex-order/complex-order``, mirrored
    as ``FreedomIntelligence/complex-order``: ``TEXT CLASSIFICATION/Transformer/
    model_transformer/Complex_order.py`` and ``LANGUAGE MODELING/pytorch-complex/
    complex_mem_transformer.py``, schema 0) for the initialization: amplitudes are an
    ``nn.Embedding`` drawn from ``N(0, 1)``; every token's frequencies start at the
    sinusoidal frequencies and are learned. Differences: (1) the reference feeds the real and
    imaginary parts to complex-valued layers; here a real transformer reads ``[Re ‖ Im]``.
    (2) The reference has no initial-phase table (θ = 0) and its frequencies repeat in pairs
    (``10000^{-2⌊k/2⌋/d}``, a leftover of the sin/cos table code); here ``θ_j`` is the
    paper's learned per-token phase, starting at 0 (so the initial embedding is the
    reference's), and the ``d/2`` complex channels take the ``d/2`` distinct frequencies
    ``base^{-2k/d}``. Freeze a table with ``requires_grad_(False)`` (the translation code
    freezes the frequencies). (3) Positions are the model's (0-based, continuing a KV cache);
    the reference counts from 1 (language model, translation) or backwards (classification).

    Args:
        vocab_size: number of token ids (≥ 1).
        dim: width of the real view (even, ≥ 2): ``dim // 2`` complex channels.
        base: base of the initial frequencies ``base^{-2k/dim}`` (> 0; 10000).
        init_std: standard deviation of the amplitudes' normal initialization (> 0; 1, as
            ``nn.Embedding`` and the reference).
        generator: optional ``torch.Generator`` for the amplitudes (drawn on its device).
        device, dtype: of the tables; the output has the tables' dtype (computed in at least
            float32, the angle ``ω·pos + θ`` in float64).

    Attributes:
        amplitude, frequency, phase: ``nn.Parameter`` tables ``(vocab_size, dim // 2)``.

    Shape:
        tokens ``(seq,)`` or ``(batch, seq)``, positions ``(seq,)`` or ``(batch, seq)`` →
        ``(..., seq, dim)`` (:meth:`forward`) or complex ``(..., seq, dim // 2)``
        (:meth:`complex_embedding`).

    Example::

        >>> emb = ComplexOrderEmbedding(vocab_size=100, dim=8)
        >>> emb(torch.tensor([[5, 7, 5]]), torch.arange(3)).shape
        torch.Size([1, 3, 8])
    """

    #: One table for the whole model (it replaces the token embedding).
    shared_across_layers: ClassVar[bool] = True

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        *,
        base: float = 10000.0,
        init_std: float = 1.0,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        dim = check_positive_int("dim", dim)
        if dim % 2:
            raise ValueError(
                f"dim must be even (the real view [Re ‖ Im] of dim // 2 complex channels); "
                f"got {dim}"
            )
        self.dim = dim
        self.complex_dim = dim // 2
        self.base = check_positive_float("base", base)
        self.init_std = check_positive_float("init_std", init_std)
        check_floating_dtype("dtype", dtype)
        shape = (vocab_size, self.complex_dim)
        self.amplitude = nn.Parameter(torch.empty(shape, device=device, dtype=dtype))
        self.frequency = nn.Parameter(torch.empty(shape, device=device, dtype=dtype))
        self.phase = nn.Parameter(torch.empty(shape, device=device, dtype=dtype))
        self.reset_parameters(generator)

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Amplitudes ``~ N(0, init_std²)``; frequencies ``base^{-2k/dim}`` for every token;
        phases 0."""
        draw_device = generator.device if generator is not None else "cpu"
        draw = torch.randn(self.amplitude.shape, generator=generator, device=draw_device)
        self.amplitude.copy_(draw * self.init_std)
        inv_freq = sinusoidal_inv_freq(self.dim, self.base)  # (dim // 2,) float64
        self.frequency.copy_(inv_freq.expand(self.vocab_size, -1))
        self.phase.zero_()

    def _check(self, tokens: Tensor, positions: Tensor) -> None:
        _check_call(tokens, positions, self.vocab_size, state_device(self))

    def forward(self, tokens: Tensor, positions: Tensor) -> Tensor:
        """The real view ``[Re f ‖ Im f]`` ``(..., seq, dim)`` of tokens at positions."""
        self._check(tokens, positions)
        return self.embed_tokens(tokens, positions)

    def embed_tokens(self, tokens: Tensor, positions: Tensor) -> Tensor:
        """The token-embedding hook: :meth:`forward` without checks (the model validated
        ``tokens`` against its vocabulary, no larger than this one, and ``positions``)."""
        real, imag = _parts(self.amplitude, self.frequency, self.phase, tokens, positions)
        return torch.cat([real, imag], dim=-1).to(self.amplitude.dtype)

    def complex_embedding(self, tokens: Tensor, positions: Tensor) -> Tensor:
        """The complex embedding ``f(tokens, positions)`` ``(..., seq, dim // 2)``."""
        self._check(tokens, positions)
        real, imag = _parts(self.amplitude, self.frequency, self.phase, tokens, positions)
        return torch.complex(real, imag)

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, dim={self.dim}, base={self.base:g}"
