"""Learned attention sinks (gpt-oss): a per-head logit that joins every row's softmax.

.. math::
    p_{ij} = \\frac{e^{s_{ij}}}{e^{\\sigma_h} + \\sum_{j'} e^{s_{ij'}}}, \\qquad
    o_i = \\sum_j p_{ij} v_j

Each head ``h`` has a learned logit ``σ_h``: a key with no value that every query sees, so a
row may put weight on "nothing" instead of on some real key (StreamingLLM's sink tokens,
learned). OpenAI, "gpt-oss-120b & gpt-oss-20b Model Card" (2025,
https://arxiv.org/abs/2508.10925); tested against Hugging Face's
``transformers.models.gpt_oss.modeling_gpt_oss.eager_attention_forward`` (softmax over
``[scores, σ_h]``, the sink column then dropped). Not to be confused with StreamingLLM's
``sinks`` (:class:`posenc.segments.AttentionSinks`: the first tokens kept in a rolling
cache).

Backends:

* ``sdpa`` and ``chunked``: the sink is one more column of each row's explicit scores (a key
  of logit ``σ_h`` and zero value), dropped after the softmax
  (:func:`posenc.attention.rows.softmax_with_sinks`); exact, with gradients for
  ``σ_h``. (SDPA's own kernels return no log-sum-exp, and an extra zero key would need the
  causal mask materialized with it, so the rows are written out.)
* ``flex``: a log-sum-exp correction, ``o_i = o_i^{keys} · σ(LSE_i − σ_h)``, FlexAttention
  returning each row's LSE; forward only on the CPU, as every flex call. Compiled
  FlexAttention on the CPU returns no LSE (torch 2.13), so there only
  ``Backend("flex", compile=False)`` (its eager reference) serves sinks; the compiled default
  refuses them with a ``ValueError`` naming the backend.
* the KV cache: nothing to keep; each decoding step's row gets the sink.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posenc._validate import check_positive_int
from posenc.encoding.base import PositionalEncoding
from posenc.encoding.protocols import SinkLogits
from posenc.encoding.resolve import hooks_of
from posenc.softmax.wrapping import SoftmaxWrapper

__all__ = ["LearnedSinks"]


class LearnedSinks(SoftmaxWrapper, SinkLogits):
    """An encoding whose attention rows each get a learned sink logit per head (gpt-oss).

    Args:
        num_heads: query heads (one ``σ_h`` each).
        encoding: the encoding inside (RoPE for gpt-oss; any bias, additive, contextual or
            scores-reader encoding; None: none). Its hooks act as without sinks.
        init_std: standard deviation of the initial ``σ_h ~ N(0, init_std²)`` (default 0.02:
            Hugging Face's ``initializer_range`` for gpt-oss); 0 starts every sink at 0.

    Attributes:
        sinks: the ``(num_heads,)`` parameter ``σ``.

    Raises:
        ValueError: naming ``num_heads`` (not a positive int, or not the encoding's
            ``num_heads``), ``init_std`` (negative or not finite) or ``encoding`` (a segment
            method, or one that already has sinks).

    Example::

        >>> from posenc.rotary import RotaryEmbedding
        >>> pe = LearnedSinks(4, RotaryEmbedding(16))
        >>> pe.sink_logits(torch.float32, torch.device("cpu")).shape
        torch.Size([4])
    """

    @property
    def shared_across_layers(self) -> bool:  # type: ignore[override]
        return False  # each layer learns its own sinks

    def __init__(
        self,
        num_heads: int,
        encoding: PositionalEncoding | None = None,
        *,
        init_std: float = 0.02,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        num_heads = check_positive_int("num_heads", num_heads)
        if (
            isinstance(init_std, bool)
            or not isinstance(init_std, (int, float))
            or not 0.0 <= init_std < float("inf")
        ):
            raise ValueError(f"init_std must be a finite number >= 0, got {init_std!r}")
        super().__init__(encoding, "sinks")
        heads = hooks_of(self.encoding).num_heads
        if isinstance(heads, int) and heads != num_heads:
            raise ValueError(
                f"num_heads ({num_heads}) must equal the encoding's num_heads ({heads})"
            )
        self.num_heads = num_heads
        self.init_std = float(init_std)
        self.sinks = nn.Parameter(torch.empty(num_heads, device=device, dtype=dtype))
        self.reset_own_parameters()

    def reset_own_parameters(self) -> None:
        """``σ ~ N(0, init_std²)`` (Hugging Face's gpt-oss initialization)."""
        with torch.no_grad():
            nn.init.normal_(self.sinks, std=self.init_std)

    def sink_logits(self, dtype: torch.dtype, device: torch.device) -> Tensor:
        """The sink hook: ``σ`` as ``(heads,)`` in ``dtype`` on ``device``."""
        return self.sinks.to(device=device, dtype=dtype)

    def rewrap(self, encoding: PositionalEncoding) -> LearnedSinks:
        return LearnedSinks(
            self.num_heads,
            encoding,
            init_std=self.init_std,
            device=self.sinks.device,
            dtype=self.sinks.dtype,
        )

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, init_std={self.init_std}"
