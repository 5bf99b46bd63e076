"""RoPE settings of published models, as values: ``LLAMA_3_1_8B.rope()`` builds the module.

Each preset copies the rotary fields of the model's published ``config.json`` (head or
rotary dim, ``rope_theta``, ``rope_scaling``, ``max_position_embeddings``); the source is in
``preset.source``. They are tested against HF ``ROPE_INIT_FUNCTIONS`` for the equivalent
config and against the anchors of the research notes (gpt-oss correction range and ``A``,
DeepSeek-V3 ``A = 1``, Llama-3.1's 29/29/6 split).

The Phi-3 128k preset is Phi-3-vision-128k-instruct's LongRoPE (its 48-entry
``short_factor``/``long_factor`` lists were checked against a stored copy of the published
config). Phi-3-mini-128k-instruct shares the shape (head_dim 96, base 1e4,
``original_max_position_embeddings`` 4096, ``max_position_embeddings`` 131072) but has its
own searched lists, which could not be retrieved in full offline; this module carries no
invented numbers, so build it with :func:`posenc.integrations.hf.rope_from_config` from
that model's config.

Example::

    >>> rope = LLAMA_3_1_8B.rope()
    >>> rope.head_dim, rope.base
    (128, 500000.0)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posenc.rotary.layouts import Layout
from posenc.rotary.rope import RotaryEmbedding
from posenc.rotary.scaling import Llama3, LongRoPE, Scaling, YaRN

__all__ = [
    "DEEPSEEK_V3",
    "GPT_OSS_20B",
    "LLAMA_3_1_8B",
    "PHI_3_VISION_128K",
    "PRESETS",
    "QWEN2_7B",
    "RopePreset",
]


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

_PHI_3_VISION_SHORT = (
    1.05,
    1.05,
    1.05,
    1.1,
    1.1,
    1.1,
    1.2500000000000002,
    1.2500000000000002,
    1.4000000000000004,
    1.4500000000000004,
    1.5500000000000005,
    1.8500000000000008,
    1.9000000000000008,
    2.000000000000001,
    2.000000000000001,
    2.000000000000001,
    2.000000000000001,
    2.000000000000001,
    2.000000000000001,
    2.000000000000001,
    2.000000000000001,
    2.000000000000001,
    2.000000000000001,
    2.000000000000001,
    2.000000000000001,
    2.000000000000001,
    2.000000000000001,
    2.000000000000001,
    2.000000000000001,
    2.000000000000001,
    2.000000000000001,
    2.000000000000001,
    2.1000000000000005,
    2.1000000000000005,
    2.2,
    2.3499999999999996,
    2.3499999999999996,
    2.3499999999999996,
    2.3499999999999996,
    2.3999999999999995,
    2.3999999999999995,
    2.6499999999999986,
    2.6999999999999984,
    2.8999999999999977,
    2.9499999999999975,
    3.049999999999997,
    3.049999999999997,
    3.049999999999997,
)
_PHI_3_VISION_LONG = (
    1.0299999713897705,
    1.0499999523162842,
    1.0499999523162842,
    1.0799999237060547,
    1.2299998998641968,
    1.2299998998641968,
    1.2999999523162842,
    1.4499999284744263,
    1.5999999046325684,
    1.6499998569488525,
    1.8999998569488525,
    2.859999895095825,
    3.68999981880188,
    5.419999599456787,
    5.489999771118164,
    5.489999771118164,
    9.09000015258789,
    11.579999923706055,
    15.65999984741211,
    15.769999504089355,
    15.789999961853027,
    18.360000610351562,
    21.989999771118164,
    23.079999923706055,
    30.009998321533203,
    32.35000228881836,
    32.590003967285156,
    35.56000518798828,
    39.95000457763672,
    53.840003967285156,
    56.20000457763672,
    57.95000457763672,
    59.29000473022461,
    59.77000427246094,
    59.920005798339844,
    61.190006256103516,
    61.96000671386719,
    62.50000762939453,
    63.3700065612793,
    63.48000717163086,
    63.48000717163086,
    63.66000747680664,
    63.850006103515625,
    64.08000946044922,
    64.760009765625,
    64.80001068115234,
    64.81001281738281,
    64.81001281738281,
)

PHI_3_VISION_128K = RopePreset(
    name="microsoft/Phi-3-vision-128k-instruct",
    head_dim=96,
    base=10000.0,
    scaling=LongRoPE(
        short_factor=_PHI_3_VISION_SHORT,
        long_factor=_PHI_3_VISION_LONG,
        original_max_position_embeddings=4096,
        max_position_embeddings=131072,
    ),
    max_position_embeddings=131072,
    source="https://huggingface.co/microsoft/Phi-3-vision-128k-instruct/blob/main/config.json "
    '(hidden 3072 / 32 heads, rope_theta 1e4, rope_scaling type "su" = longrope, '
    "original_max_position_embeddings 4096, max_position_embeddings 131072)",
)

PRESETS: dict[str, RopePreset] = {
    preset.name: preset
    for preset in (LLAMA_3_1_8B, QWEN2_7B, PHI_3_VISION_128K, GPT_OSS_20B, DEEPSEEK_V3)
}
