"""The built-in sequence encodings: one position per token (the segment methods are
:data:`~posenc.registry.builders.SEGMENT_SPECS`, the multi-axis ones
:mod:`~posenc.registry.catalogue.multi_axis`), in the order ``posenc list`` shows them."""

from __future__ import annotations

from posenc.encoding.base import NoPE
from posenc.registry.builders import (
    DYNAMIC_REACH,
    additive_package,
    bias_package,
    build_dape,
    build_learned_sinks,
    build_softcap,
    contextual_package,
    hope_factory,
    rope_kwargs,
    rotary_package,
    scores_package,
    stick_breaking_class,
    token_state_package,
    vocabulary_size,
)
from posenc.registry.specs import EncodingSpec

__all__ = ["GRAPE_SPEC", "SEQUENCE_SPECS"]

SEQUENCE_SPECS: tuple[EncodingSpec, ...] = (
    EncodingSpec(
        "nope",
        "none",
        "Kazemnejad et al. 2023, https://arxiv.org/abs/2305.19466",
        "no positional information (causal masks still leak order)",
        lambda: NoPE,
        lambda d: {},
    ),
    EncodingSpec(
        "sinusoidal",
        "additive",
        "Vaswani et al. 2017, https://arxiv.org/abs/1706.03762",
        "fixed sin/cos of position added to token embeddings",
        lambda: additive_package().SinusoidalEncoding,
        lambda d: {"dim": d.dim},
    ),
    EncodingSpec(
        "scaled_sinusoidal",
        "additive",
        "Hua et al. 2022, https://arxiv.org/abs/2202.10447",
        "sinusoidal times a learned scalar gain",
        lambda: additive_package().ScaledSinusoidalEncoding,
        lambda d: {"dim": d.dim},
    ),
    EncodingSpec(
        "cape",
        "additive",
        "Likhomanenko et al. 2021 (CAPE), https://arxiv.org/abs/2106.03143",
        "sinusoidal of continuous positions, in training shifted globally and per token and "
        "scaled per sequence (max_global_shift, max_local_shift, max_global_scaling: 0, 0, 1 "
        "by default, the reference's)",
        lambda: additive_package().CAPE,
        lambda d: {"dim": d.dim},
    ),
    EncodingSpec(
        "learned",
        "additive",
        "Gehring et al. 2017, https://arxiv.org/abs/1705.03122; Devlin et al. 2019",
        "a trained table of absolute position vectors (finite length, resizable)",
        lambda: additive_package().LearnedPositionalEmbedding,
        lambda d: {"dim": d.dim, "max_seq_len": d.max_seq_len},
    ),
    EncodingSpec(
        "complex_order",
        "additive",
        "Wang et al. 2020, https://arxiv.org/abs/1912.12333",
        "token embedding r_j·e^{i(ω_j·pos + θ_j)} per token, real view [Re | Im] (replaces "
        "the token embedding)",
        lambda: additive_package().ComplexOrderEmbedding,
        lambda d: {"vocab_size": vocabulary_size("complex_order", d), "dim": d.dim},
    ),
    EncodingSpec(
        "rope",
        "rotary",
        "Su et al. 2021, https://arxiv.org/abs/2104.09864",
        "rotate q and k pairs by position-proportional angles",
        lambda: rotary_package().RotaryEmbedding,
        lambda d: {"head_dim": d.resolved_head_dim},
        convert=rope_kwargs,
    ),
    EncodingSpec(
        "xpos",
        "rotary",
        "Sun et al. 2022, https://arxiv.org/abs/2212.10554",
        "RoPE whose q·k decays as ζ^((n − m)/B) per channel pair (for causal attention)",
        lambda: rotary_package().XPos,
        lambda d: {"head_dim": d.resolved_head_dim},
        causal_only=True,
    ),
    EncodingSpec(
        "pope",
        "rotary",
        "Gopalakrishnan et al. 2025 (PoPE), https://arxiv.org/abs/2509.10534",
        "polar coordinates: softplus(q_c)·softplus(k_c)·cos((i − j)θ_c − δ_hc), magnitudes "
        "from content and phases from position, a learned phase bias per head and channel",
        lambda: rotary_package().PolarEmbedding,
        lambda d: {"head_dim": d.resolved_head_dim, "num_heads": d.num_heads},
    ),
    EncodingSpec(
        "fope",
        "rotary",
        "Hua et al. 2024 (FoPE), https://arxiv.org/abs/2412.17739",
        "Fourier position embedding: each pair's cos and sin are learned per-KV-head mixes of "
        "the cos and sin of all frequencies; those slower than one period per max_seq_len are "
        "dropped (their pairs do not rotate); vLLM's FourierRotaryEmbedding",
        lambda: rotary_package().FourierRotaryEmbedding,
        lambda d: {
            "head_dim": d.resolved_head_dim,
            "num_kv_heads": d.resolved_num_kv_heads,
            "train_length": d.max_seq_len,
        },
    ),
    EncodingSpec(
        "hope",
        "rotary",
        "Chen et al. 2025 (HoPE, ACL), https://arxiv.org/abs/2410.21216",
        "RoPE whose low-frequency pairs (period 2π/θ_i > the training length, max_seq_len) "
        "do not rotate: only high-frequency pairs carry position",
        hope_factory,
        lambda d: {"head_dim": d.resolved_head_dim, "train_length": d.max_seq_len},
    ),
    EncodingSpec(
        "alibi",
        "bias",
        "Press et al. 2022, https://arxiv.org/abs/2108.12409",
        "linear distance penalty with a geometric slope per head",
        lambda: bias_package().AlibiBias,
        lambda d: {"num_heads": d.num_heads, "mode": "causal" if d.causal else "symmetric"},
    ),
    EncodingSpec(
        "grape_additive",
        "bias",
        "Zhang et al. 2026 (GRAPE, ICLR), https://arxiv.org/abs/2512.07805",
        "additive GRAPE: a unipotent action on lifted q and k adds m_h (j - i), learned "
        "slopes from ALiBi's (ALiBi and FoX are its special cases; for causal attention)",
        lambda: bias_package().GrapeAdditiveBias,
        lambda d: {"num_heads": d.num_heads},
        causal_only=True,
    ),
    EncodingSpec(
        "grape_gated",
        "contextual",
        "Zhang et al. 2026 (GRAPE, ICLR), https://arxiv.org/abs/2512.07805",
        "additive GRAPE with its rate gated by query and key: logits += (j - i) ω_h "
        "(softplus(v·q_i) + softplus(u·k_j)) (gate='query' or 'key' for one; for causal "
        "attention)",
        lambda: contextual_package().GrapeGatedBias,
        lambda d: {"num_heads": d.num_heads, "head_dim": d.resolved_head_dim},
        causal_only=True,
    ),
    EncodingSpec(
        "t5",
        "bias",
        "Raffel et al. 2020, https://arxiv.org/abs/1910.10683",
        "learned scalar per head and log-spaced distance bucket, shared by all layers",
        lambda: bias_package().T5RelativeBias,
        lambda d: {"num_heads": d.num_heads, "bidirectional": not d.causal},
    ),
    EncodingSpec(
        "kerple",
        "bias",
        "Chi et al. 2022, https://arxiv.org/abs/2205.09921",
        "learned log (or power) kernel of the distance per head, -r1·ln(1 + r2·|i-j|)",
        lambda: bias_package().KerpleBias,
        lambda d: {"num_heads": d.num_heads},
    ),
    EncodingSpec(
        "sandwich",
        "bias",
        "Chi et al. 2023, https://arxiv.org/abs/2212.10356",
        "parameter-free: the sinusoidal encoding's dot product Σ cos((i-j)ω_k) - d/2, per head",
        lambda: bias_package().SandwichBias,
        lambda d: {"num_heads": d.num_heads, "head_dim": d.resolved_head_dim},
    ),
    EncodingSpec(
        "fire",
        "bias",
        "Li et al. 2023, https://arxiv.org/abs/2310.04418",
        "learned MLP of the progressively normalized log distance ψ(i-j)/ψ(max(i, L·s))",
        lambda: bias_package().FireBias,
        lambda d: {"num_heads": d.num_heads},
    ),
    EncodingSpec(
        "dynamic",
        "bias",
        "x-transformers DynamicPositionBias; Liu et al. 2022 (Swin-v2), "
        "https://arxiv.org/abs/2111.09883",
        "MLP of the (optionally log-scaled) signed distance, one bias per head",
        lambda: bias_package().DynamicPositionBias,
        lambda d: {
            "num_heads": d.num_heads,
            "hidden": max(d.dim // 4, 1),
            # the reach of its distance table, not a training length: the MLP is meant to
            # be evaluated beyond T (test-long sweeps go to 16k)
            "max_seq_len": max(d.max_seq_len, DYNAMIC_REACH),
        },
    ),
    EncodingSpec(
        "shaw",
        "contextual",
        "Shaw et al. 2018, https://arxiv.org/abs/1803.02155",
        "learned relative key and value vectors for clipped distances",
        lambda: contextual_package().ShawRelative,
        lambda d: {"head_dim": d.resolved_head_dim},
    ),
    EncodingSpec(
        "xl",
        "contextual",
        "Dai et al. 2019, https://arxiv.org/abs/1901.02860",
        "Transformer-XL relative attention: u, v and projected sinusoidal R_{i-j}",
        lambda: contextual_package().TransformerXLRelative,
        lambda d: {"num_heads": d.num_heads, "head_dim": d.resolved_head_dim, "dim": d.dim},
    ),
    EncodingSpec(
        "deberta",
        "contextual",
        "He et al. 2021 (DeBERTa), https://arxiv.org/abs/2006.03654",
        "disentangled attention: content-to-position and position-to-content terms over "
        "log-bucketed relative positions, 1/√(3d) (v3 defaults)",
        lambda: contextual_package().DebertaRelative,
        lambda d: {"num_heads": d.num_heads, "head_dim": d.resolved_head_dim, "dim": d.dim},
    ),
    EncodingSpec(
        "cope",
        "scores",
        "Golovneva et al. 2024 (CoPE), https://arxiv.org/abs/2405.18719",
        "contextual positions: a sigmoid gate per key, positions counted over gated keys, "
        "interpolated position embeddings (for causal attention)",
        lambda: scores_package().CoPE,
        lambda d: {"num_heads": d.num_heads, "head_dim": d.resolved_head_dim},
        causal_only=True,
    ),
    EncodingSpec(
        "dape",
        "scores",
        "Zheng et al. 2024 (DAPE), https://arxiv.org/abs/2405.14722",
        "MLP over every pair's logits and static bias across heads, around any bias "
        "(inner: alibi, kerple, fire, ...)",
        lambda: build_dape,
        lambda d: {"dims": d},
    ),
    EncodingSpec(
        "softcap",
        "softmax",
        "Gemma Team 2024 (Gemma 2), https://arxiv.org/abs/2408.00118",
        "tanh soft-capping of the logits, c·tanh(s/c) (c = 50), around any encoding "
        "(inner: rope by default)",
        lambda: build_softcap,
        lambda d: {"dims": d},
    ),
    EncodingSpec(
        "learned_sinks",
        "softmax",
        "OpenAI 2025 (gpt-oss), https://arxiv.org/abs/2508.10925",
        "a learned sink logit per head in every row's softmax, with no value, around any "
        "encoding (inner: rope by default)",
        lambda: build_learned_sinks,
        lambda d: {"dims": d},
    ),
    EncodingSpec(
        "fox",
        "token_state",
        "Lin et al. 2025 (Forgetting Transformer, ICLR), "
        "https://github.com/zhixuan-lin/forgetting-transformer",
        "a forget gate per head and token from the hidden state; logits += Σ log f over the "
        "tokens between key and query (data-dependent ALiBi; for causal attention)",
        lambda: token_state_package().ForgettingGate,
        lambda d: {"dim": d.dim, "num_heads": d.num_heads},
        causal_only=True,
    ),
    EncodingSpec(
        "path",
        "token_state",
        "Yang et al. 2025 (PaTH Attention, NeurIPS), https://arxiv.org/abs/2505.16381",
        "data-dependent Householder-like transforms H = I − β w wᵀ from each token's hidden "
        "state; a key passes through those of every token up to the query (with "
        "forget_gate=True PaTH-FoX; for causal attention)",
        lambda: token_state_package().PathTransform,
        lambda d: {
            "dim": d.dim,
            "num_heads": d.num_heads,
            "num_kv_heads": d.resolved_num_kv_heads,
            "head_dim": d.resolved_head_dim,
        },
        causal_only=True,
    ),
    EncodingSpec(
        "carope",
        "rotary",
        "Veisi et al. 2025 (CARoPE), https://arxiv.org/abs/2507.23083",
        "RoPE whose frequencies come from each token's hidden state, one per head, "
        "f = 1/(softplus(w·x) + 1), phases Σ f^i accumulated over the tokens (one transform "
        "per layer and key head; for causal attention)",
        lambda: rotary_package().ContextAwareRoPE,
        lambda d: {
            "dim": d.dim,
            "num_heads": d.resolved_num_kv_heads,
            "head_dim": d.resolved_head_dim,
        },
        causal_only=True,
    ),
    EncodingSpec(
        "stick_breaking",
        "softmax",
        "Tan et al. 2024 (stick-breaking attention), https://arxiv.org/abs/2410.17980",
        "no softmax and no positions: key j takes σ(q·k) of what the keys between it and the "
        "query left, the rest times a learned vector (for causal attention)",
        stick_breaking_class,
        lambda d: {"num_heads": d.num_heads, "head_dim": d.resolved_head_dim},
        causal_only=True,
    ),
)

#: Multiplicative GRAPE, a sequence method listed after the multi-axis ones.
GRAPE_SPEC = EncodingSpec(
    "grape",
    "rotary",
    "Zhang et al. 2026 (GRAPE, ICLR), https://arxiv.org/abs/2512.07805",
    "multiplicative GRAPE: rotations exp(n Σ ω_i L_i) of rank-2 skew generators with a "
    "learned spectrum from RoPE's (RoPE exactly at initialization; planes='learned' "
    "learns commuting planes too)",
    lambda: rotary_package().GrapeRotation,
    lambda d: {"head_dim": d.resolved_head_dim},
)
