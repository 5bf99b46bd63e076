"""RoPE settings of published models, as values: ``LLAMA_3_1_8B.rope()`` builds the module.

Each preset copies the rotary fields of the model's published ``config.json`` (head or
rotary dim, ``rope_theta``, ``rope_scaling``, ``max_position_embeddings``); the source is in
``preset.source``. They are tested against HF ``ROPE_INIT_FUNCTIONS`` for the equivalent
config and against the anchors of the research notes (gpt-oss correction range and ``A``,
DeepSeek-V3 ``A = 1``, Llama-3.1's 29/29/6 split).

Phi-3-mini-128k (LongRoPE) is not here: its 48-entry ``short_factor``/``long_factor`` lists
could not be retrieved in full from a verifiable copy of the published config, and the
preset will not carry invented numbers. Build it with
:class:`~posenc.rotary.scaling.LongRoPE` from the config (head_dim 96, base 1e4,
``original_max_position_embeddings`` 4096, ``max_position_embeddings`` 131072).

Example::

    >>> rope = LLAMA_3_1_8B.rope()
    >>> rope.head_dim, rope.base
    (128, 500000.0)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posenc.rotary.rope import Layout, RotaryEmbedding
from posenc.rotary.scaling import Llama3, Scaling, YaRN

__all__ = ["DEEPSEEK_V3", "GPT_OSS_20B", "LLAMA_3_1_8B", "PRESETS", "QWEN2_7B", "RopePreset"]


@dataclass(frozen=True)
class RopePreset:
    """A model's RoPE settings.

    Args:
        name: the model id (Hugging Face Hub name).
        head_dim: channels per head that RoPE sees (DeepSeek: ``qk_rope_head_dim``).
        base: ``rope_theta``.
        scaling: the context-extension scaling, or None.
        rotary_dim: rotated channels when partial (None: ``head_dim``).
        max_position_embeddings: the model's context length.
        layout: ``"half"`` (HF rotate_half) or ``"interleaved"`` (DeepSeek-V3's
            ``rope_interleave``).
        source: where the numbers come from.
    """

    name: str
    head_dim: int
    base: float
    scaling: Scaling | None
    rotary_dim: int | None = None
    max_position_embeddings: int | None = None
    layout: Layout = "half"
    source: str = ""

    def rope(
        self, *, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> RotaryEmbedding:
        """The :class:`~posenc.rotary.rope.RotaryEmbedding` of this preset."""
        return RotaryEmbedding(
            self.head_dim,
            rotary_dim=self.rotary_dim,
            base=self.base,
            layout=self.layout,
            scaling=self.scaling,
            device=device,
            dtype=dtype,
        )


LLAMA_3_1_8B = RopePreset(
    name="meta-llama/Llama-3.1-8B",
    head_dim=128,
    base=500000.0,
    scaling=Llama3(
        factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192
    ),
    max_position_embeddings=131072,
    source="https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json "
    "(hidden 4096 / 32 heads; rope_scaling llama3 8/1/4/8192)",
)

QWEN2_7B = RopePreset(
    name="Qwen/Qwen2-7B-Instruct",
    head_dim=128,
    base=1000000.0,
    scaling=YaRN(factor=4.0, original_max_position_embeddings=32768),
    max_position_embeddings=131072,
    source="https://huggingface.co/Qwen/Qwen2-7B-Instruct (config.json: hidden 3584 / 28 "
    "heads, rope_theta 1e6; README 'Processing Long Texts': rope_scaling "
    '{"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768} for 128k)',
)

GPT_OSS_20B = RopePreset(
    name="openai/gpt-oss-20b",
    head_dim=64,
    base=150000.0,
    scaling=YaRN(
        factor=32.0,
        original_max_position_embeddings=4096,
        beta_fast=32.0,
        beta_slow=1.0,
        truncate=False,
    ),
    max_position_embeddings=131072,
    source="https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json "
    "(head_dim 64, rope_theta 150000, yarn 32 over 4096, truncate false)",
)

DEEPSEEK_V3 = RopePreset(
    name="deepseek-ai/DeepSeek-V3",
    head_dim=64,
    base=10000.0,
    scaling=YaRN(
        factor=40.0,
        original_max_position_embeddings=4096,
        beta_fast=32.0,
        beta_slow=1.0,
        mscale=1.0,
        mscale_all_dim=1.0,
    ),
    max_position_embeddings=163840,
    layout="interleaved",
    source="https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json "
    "(qk_rope_head_dim 64, rope_theta 1e4, yarn 40 over 4096, mscale = mscale_all_dim = 1; "
    "the softmax scale also gets get_mscale(40, 1)^2, outside RoPE)",
)

PRESETS: dict[str, RopePreset] = {
    preset.name: preset for preset in (LLAMA_3_1_8B, QWEN2_7B, GPT_OSS_20B, DEEPSEEK_V3)
}
