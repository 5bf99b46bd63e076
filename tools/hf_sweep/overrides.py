"""Per-family fixes of the tiny HF builder (:mod:`tools.hf_sweep.tiny`).

A shrunk default config does not validate or run for every family: some need a value set so
that the tiny model has a text RoPE at all, some a size kept consistent with another one the
generic shrink does not know, some a model class other than the first auto mapping gives,
and some inputs besides the token ids (3-D audio codes, a tiny image). Each entry says why.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

#: Token ids per sample and samples per batch of every tiny model's inputs.
SEQ_LEN = 12
BATCH = 2


def mrope_positions(batch: int = BATCH, seq: int = SEQ_LEN) -> torch.Tensor:
    """``(3, batch, seq)`` t/h/w positions of a 2×3 grid after two text tokens, then text:
    three different rows, the grid's rows and columns far apart (h steps of 400, w of 700) so
    that even the low frequencies that M-RoPE gives h and w tell the sections apart."""
    t = torch.arange(seq)
    h, w = t.clone(), t.clone()
    grid = torch.arange(6)
    h[2:8], w[2:8], t[2:8] = 2 + 400 * (grid // 3), 2 + 700 * (grid % 3), 2
    t[8:] = h[8:] = w[8:] = torch.arange(5, 5 + seq - 8)
    return torch.stack([t, h, w])[:, None].expand(3, batch, seq).clone()


def _vit_stand_in() -> Any:
    """A tiny HF ViT classifier in place of PE Video's per-frame timm backbone (timm is not
    installed, and needs torchvision): the frame features feed the video encoder's rotary
    transformer, which is PE Video's own code; the backbone has no rotary."""
    from transformers import ViTConfig

    config = ViTConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=16,
        patch_size=8,
    )
    config.num_labels = 16  # the classifier's width: the frame features' size
    return config


#: Config values per model type (else per family folder); a dict into a sub-config is
#: merged into it key by key (``rope_parameters`` is replaced whole).
OVERRIDES: dict[str, dict[str, Any]] = {
    "zamba2": {"use_mem_rope": True},  # off by default: no rotary module
    "recurrent_gemma": {"block_types": ["recurrent", "attention"]},  # 2 layers: one attention
    "esmc": {"num_key_value_heads": 4},  # no grouped-query attention
    "esm": {"position_embedding_type": "rotary", "pad_token_id": 0},  # "absolute" by default
    "granitemoehybrid": {"position_embedding_type": "rope", "layer_types": ["mamba", "attention"]},
    "zaya": {"num_experts_per_tok": 1},
    "pocket_tts": {"flow_head_config": {"condition_dim": 64}},  # = the backbone's hidden size
    "gradium_phonon_tts": {"flow_head_config": {"condition_dim": 64}},
    "deepseek_ocr2": {"text_config": {"mlp_layer_types": ["dense", "sparse"]}},
    "step3p7": {"text_config": {"sliding_window": 6}},
    "chameleon": {"vocabulary_map": {"<image>": 127}},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},
    "dots3_note": {"head_dim": 16},  # its SWA layers: head_dim = nope + rope dims
    "dbrx": {
        "attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0},
        "ffn_config": {"ffn_hidden_size": 128, "moe_num_experts": 4, "moe_top_k": 2},
    },
    # MoE sizes left None by the default config (the model builds experts regardless)
    "dots1": {"n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1},
    "diffusion_gemma": {
        "text_config": {"num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 32}
    },
    # the local encoder/decoder project to the global model's width (2048 by default)
    "blt": {
        "encoder_hash_byte_group_vocab": 1000,  # 500002 rows per hash function by default
        "encoder_config": {"hidden_size_global": 64},
        "decoder_config": {"hidden_size_global": 64},
    },
    # the decoder's cross-attention reads the encoder's width
    "dia": {
        "decoder_config": {
            "cross_hidden_size": 64,
            "cross_num_attention_heads": 4,
            "cross_num_key_value_heads": 4,
            "cross_head_dim": 16,
        }
    },
    # per-layer-type rope dict, empty by default (the rotary then fails on a missing key)
    "cohere_compass": {
        "text_config": {
            "rope_parameters": {
                "full_attention": {
                    "rope_type": "default",
                    "rope_theta": 10000.0,
                    "mrope_section": [4, 2, 2],
                }
            }
        }
    },
    # the text model (the composite's vision tower needs timm); no KV-shared layers in two,
    # and its per-layer-input embedding (262144 × 256 per layer) cut down
    "gemma3n_text": {
        "num_kv_shared_layers": 0,
        "intermediate_size": [128, 128],
        "vocab_size_per_layer_input": 128,
        "hidden_size_per_layer_input": 16,
    },
    # the text decoder is NoPE: its config refuses a rotary part in the DSA layers
    "glm5_next": {"text_config": {"qk_rope_head_dim": 0}},
    "glm5_next_text": {"qk_rope_head_dim": 0},
    # the sparse-attention indexer's sizes are None by default
    "qwen4_exp_text": {
        "indexer_n_heads": 2,
        "indexer_kv_heads": 1,
        "indexer_head_dim": 16,
        "indexer_budget": 8,
        "indexer_compress_ratio": 4,
    },
    # two codebooks of 16 codes; the embedding holds text, codes and the audio pad id last
    "kyutai_speech_to_text": {
        "vocab_size": 128,
        "codebook_vocab_size": 16,
        "num_codebooks": 2,
        "audio_bos_token_id": 15,
        "audio_pad_token_id": 160,
        "bos_token_id": 1,
    },
    "idefics": {"vision_config": {"image_size": 28}},  # 2×2 patches of 14
    # the Window Q-Former projector and deepstack map have no defaults
    "granite4_vision": {
        "downsample_rate": "1/2",
        "deepstack_layer_map": [[-1, 0]],
        "spatial_target_layers": [0, 1, 0, 1],
    },
    # audio-only models: the speaker head reads the (shrunk) audio encoder's width
    "nemotron3_diarization": {"head_config": {"audio_hidden_size": 64}},
    "nemo_speechlm": {
        "audio_config": {"diarization_config": {"head_config": {"audio_hidden_size": 64}}},
        "text_config": {"num_key_value_heads": 4},
    },
    # ERNIE-4.5-VL pairs h with w frequency by frequency: its sections must be [h, w, t], h = w
    "ernie4_5_vl_moe": {
        "text_config": {
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 500000.0,
                "mrope_section": [3, 3, 2],
            }
        }
    },
    # partial factor 0.9: head_dim 20 (hidden 80, 4 heads) rotates an even 18 channels
    "moonshine": {
        "hidden_size": 80,
        "encoder_num_attention_heads": 4,
        "decoder_num_attention_heads": 4,
        "encoder_num_key_value_heads": 4,
        "decoder_num_key_value_heads": 4,
        "encoder_num_hidden_layers": 2,
        "decoder_num_hidden_layers": 2,
    },
    "moonshine_streaming": {"num_key_value_heads": 4},  # read by the decoder, not declared
    # an image matcher: its width must stay the CNN backbone's last stage (256)
    "efficientloftr": {
        "hidden_size": 256,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "intermediate_size": 512,
    },
    "pe_video": {"video_config": {"vision_config": _vit_stand_in}},
    "pe_audio_video": {"audio_video_config": {"video_config": {"vision_config": _vit_stand_in}}},
    # conformers: relative positions by default; "rotary" is the config's RoPE option
    "wav2vec2-bert": {"position_embeddings_type": "rotary"},
    "wav2vec2-conformer": {"position_embeddings_type": "rotary"},
    "seamless_m4t": {
        "position_embeddings_type": "rotary",
        "speech_encoder_layers": 2,
        "speech_encoder_attention_heads": 4,
        "speech_encoder_intermediate_size": 128,
    },
    # 4 × 4 patches of 16; the queries join for the last of the 2 layers
    "eomt_dinov3": {"image_size": 64, "num_blocks": 1, "num_queries": 8},
    # CLVP's rotary is max(projection_dim // (2 · heads), 32) = 32 wide: 2 heads of 64 channels
    # (the first 32 rotate)
    "clvp_encoder": {"hidden_size": 128, "num_attention_heads": 2},
    # SAM 3's ViT: a 4 × 4 patch image in 2 × 2 windows, one global layer
    "sam3_vit_model": {
        "image_size": 56,
        "pretrain_image_size": 56,
        "window_size": 2,
        "global_attn_indexes": [1],
    },
    # the codec's bottleneck reads the acoustic and semantic features side by side (64 + 64)
    "neucodec": {"quantization_dim": 128},
    "xcodec2": {"quantization_dim": 128},
    "emu3": {
        "vocabulary_map": {"<image>": 127, "<|extra_200|>": 126},  # None by default
        # the image VQ-VAE's convolutions (246M parameters at 256 base channels: seconds to
        # initialise); no token input reaches it
        "vq_config": {"base_channels": 32},
    },
}

#: The model type built per family whose first type has no rotary the sweep can run: the
#: vision tower holding the family's only rotaries (its text decoder is NoPE, or the composite
#: does not build shrunk).
MODEL_TYPE: dict[str, str] = {
    "inkling2": "inkling2_vision",  # the composite does not build shrunk; its text model is NoPE
    "glm5_next": "glm5_next_vision",  # NoPE text decoder (see glm5_next above)
    "sam3": "sam3_vit_model",  # the rotary is the ViT backbone's; the detector reads prompts
    # CLVP's text encoder (its rotary rotates text tokens); the composite scores text against
    # speech ids its decoder generates, beyond the shrunk vocabularies
    "clvp": "clvp_encoder",
}

#: Model class per family where the first auto mapping's class does not take the family's
#: default (composite) config, or has no rotary.
MODEL_CLASS: dict[str, str] = {
    "seamless_m4t": "SeamlessM4TForSpeechToText",  # the rotary is the speech encoder's
    "clvp_encoder": "ClvpEncoder",  # no auto mapping
    "eomt_dinov3": "EomtDinov3ForUniversalSegmentation",  # no auto mapping
    # vision towers without an auto mapping (built by the tests of posenc's vision conventions)
    "step3p5_vision": "Step3p7VisionModel",
    "minimax_m3_vl_vision": "MiniMaxM3VLVisionModel",
    "emu3": "Emu3ForConditionalGeneration",  # Emu3ForCausalLM takes the text config only
}


def _dia(model: nn.Module, inputs: dict[str, Any], gen: torch.Generator) -> None:
    """Dia's decoder reads audio codes, one per channel: ``(batch, seq, num_channels)``."""
    config: Any = model.config
    batch, seq = inputs["decoder_input_ids"].shape
    codes = (batch, seq, config.decoder_config.num_channels)
    inputs["decoder_input_ids"] = torch.randint(0, 1024, codes, generator=gen)


def _kyutai(model: nn.Module, inputs: dict[str, Any], gen: torch.Generator) -> None:
    """Kyutai STT reads one text token and one code per codebook per step:
    ``(batch, seq, 1 + num_codebooks)``."""
    config: Any = model.config
    batch, seq = inputs["input_ids"].shape
    shape = (batch, seq, config.num_codebooks)
    codes = torch.randint(0, config.codebook_vocab_size - 1, shape, generator=gen)
    inputs["input_ids"] = torch.cat([inputs["input_ids"][..., None], codes], dim=-1)


def _idefics(model: nn.Module, inputs: dict[str, Any], gen: torch.Generator) -> None:
    """IDEFICS cross-attends to images: one tiny image per sample, seen by every token."""
    config: Any = model.config
    size = config.vision_config.image_size
    batch, seq = inputs["input_ids"].shape
    inputs["pixel_values"] = torch.randn(batch, 1, 3, size, size, generator=gen)
    inputs["image_attention_mask"] = torch.ones(batch, seq, 1, dtype=torch.long)


def _voxtral_realtime(model: nn.Module, inputs: dict[str, Any], gen: torch.Generator) -> None:
    """Voxtral Realtime adds one audio frame per token (``downsample_factor`` encoder steps
    each): the encoder's input embeddings, ``(batch, seq · downsample_factor, audio hidden)``."""
    config: Any = model.config
    batch, seq = inputs["input_ids"].shape
    shape = (batch, seq * config.downsample_factor, config.audio_config.hidden_size)
    inputs["encoder_inputs_embeds"] = torch.randn(shape, generator=gen)


def _neomme(model: nn.Module, inputs: dict[str, Any], gen: torch.Generator) -> None:
    """NeoMME's rotary reads (row, column) positions, ``(2, batch, seq)``: the h and w rows of
    :func:`mrope_positions`, so that the two axes differ."""
    inputs["position_ids"] = mrope_positions(*inputs["input_ids"].shape)[1:]


def _audio(samples: int) -> Callable[[nn.Module, dict[str, Any], torch.Generator], None]:
    """Speech encoder-decoders (Moonshine): the encoder reads ``samples`` of raw audio per
    sample, ``input_values (batch, samples)``; the tokens go to the decoder."""

    def add(model: nn.Module, inputs: dict[str, Any], gen: torch.Generator) -> None:
        batch = inputs["decoder_input_ids"].shape[0]
        inputs["input_values"] = torch.randn(batch, samples, generator=gen)

    return add


def _pe_audio(model: nn.Module, inputs: dict[str, Any], gen: torch.Generator) -> None:
    """PE Audio pairs the text with a clip: raw mono audio ``(batch, 1, samples)`` into its
    DAC codec (2048 samples: four hops of 512)."""
    batch = inputs["input_ids"].shape[0]
    inputs["input_values"] = torch.randn(batch, 1, 2048, generator=gen)


def _pe_video(model: nn.Module, inputs: dict[str, Any], gen: torch.Generator) -> None:
    """PE Video pairs the text with a clip: 4 frames of 16×16 RGB, ``(batch, 4, 3, 16, 16)``
    (the stand-in backbone's image size); PE Audio-Video adds the audio of PE Audio."""
    batch = inputs["input_ids"].shape[0]
    inputs["pixel_values_videos"] = torch.randn(batch, 4, 3, 16, 16, generator=gen)
    if "pe_audio_video" in type(model).__module__:
        _pe_audio(model, inputs, gen)


def _transcribe(model: nn.Module, inputs: dict[str, Any], gen: torch.Generator) -> None:
    """Nemotron 3.5 Transcribe: the text decoder is NoPE, the rotaries are the audio tower's
    (ASR encoder, diarization encoder). The first half of each sample's tokens are audio
    placeholders, one per 8 spectrogram frames (the encoder's subsampling)."""
    config: Any = model.config
    batch, seq = inputs["input_ids"].shape
    audio = seq // 2
    inputs["input_ids"][:, :audio] = config.audio_token_id
    inputs["input_features"] = torch.randn(batch, 8 * audio, 128, generator=gen)  # 128 mels
    inputs["input_features_mask"] = torch.ones(batch, 8 * audio, dtype=torch.long)


def _seamless(model: nn.Module, inputs: dict[str, Any], gen: torch.Generator) -> None:
    """SeamlessM4T speech-to-text: the speech encoder (the conformer with the rotary) reads
    ``input_features (batch, frames, 160)``; the tokens go to the decoder."""
    batch = inputs["decoder_input_ids"].shape[0]
    inputs["input_features"] = torch.randn(batch, 2 * FRAMES, 160, generator=gen)


#: Inputs besides the token ids, per family: each function edits the inputs in place.
EXTRA_INPUTS: dict[str, Callable[[nn.Module, dict[str, Any], torch.Generator], None]] = {
    "dia": _dia,
    "kyutai_speech_to_text": _kyutai,
    "idefics": _idefics,
    "voxtral_realtime": _voxtral_realtime,
    "neomme": _neomme,
    "pe_audio": _pe_audio,
    "pe_video": _pe_video,
    "pe_audio_video": _pe_video,
    "nemotron3_5_transcribe": _transcribe,
    "seamless_m4t": _seamless,
    "moonshine": _audio(4000),  # 1/4 s at 16 kHz
    "moonshine_streaming": _audio(1280),  # 16 frames of 5 ms
}


#: Frames (audio features, codec latents, time-series patches) of every non-text tiny input:
#: as many as the token ids, so that the rotary runs over a sequence of the same length.
FRAMES = SEQ_LEN


def _features(model: nn.Module, gen: torch.Generator) -> dict[str, Any]:
    """Speech encoders (LASR, Nemotron diarization): a log-mel spectrogram,
    ``input_features (batch, frames · 4, num_mel_bins)`` (the subsampling keeps ``frames``)."""
    config: Any = model.config
    towers = [config, *(getattr(config, k, None) for k in ("encoder_config", "audio_config"))]
    mels = next(n for c in towers if (n := getattr(c, "num_mel_bins", None)))
    return {"input_features": torch.randn(BATCH, 4 * FRAMES, mels, generator=gen)}


def _waveform(samples_per_frame: int) -> Callable[[nn.Module, torch.Generator], dict[str, Any]]:
    """Audio codecs' encoders (Mimi, Pocket TTS): raw mono audio ``input_values (batch, 1,
    samples)``, ``samples_per_frame`` per latent frame."""

    def build(model: nn.Module, gen: torch.Generator) -> dict[str, Any]:
        samples = samples_per_frame * FRAMES
        return {"input_values": torch.randn(BATCH, 1, samples, generator=gen)}

    return build


def _semantic_codec(model: nn.Module, gen: torch.Generator) -> dict[str, Any]:
    """NeuCodec / X-Codec 2: 16 kHz audio (320 samples per frame, the acoustic encoder's
    stride) and its 160-wide semantic features, one per frame; the rotary is the acoustic
    decoder's, over the decoded frames."""
    audio = torch.randn(BATCH, 1, 320 * FRAMES, generator=gen)
    return {"input_values": audio, "input_features": torch.randn(BATCH, FRAMES, 160, generator=gen)}


def _speech_features(model: nn.Module, gen: torch.Generator) -> dict[str, Any]:
    """Wav2Vec2-BERT: 160-wide stacked filter-bank features, ``input_features (batch, frames,
    160)``."""
    return {"input_features": torch.randn(BATCH, FRAMES, 160, generator=gen)}


def _raw_speech(model: nn.Module, gen: torch.Generator) -> dict[str, Any]:
    """Wav2Vec2-Conformer: 16 kHz audio, ``input_values (batch, samples)``: the convolutional
    feature encoder (stride 320, receptive field 400) gives ``frames`` frames."""
    return {"input_values": torch.randn(BATCH, 320 * FRAMES + 80, generator=gen)}


def _time_series(model: nn.Module, gen: torch.Generator) -> dict[str, Any]:
    """TimesFM 2.5: a univariate history, ``past_values (batch, frames · patch_length)``."""
    config: Any = model.config
    return {"past_values": torch.randn(BATCH, FRAMES * config.patch_length, generator=gen)}


def _draft_block(model: nn.Module, gen: torch.Generator) -> dict[str, Any]:
    """MUSE Glimmer's DFlash draft model: a block of noise embeddings after the target model's
    hidden states of a few accepted tokens (one width per target layer read), one mask over
    both (the rotary runs over context and block)."""
    config: Any = model.config
    context, block = FRAMES // 2, config.block_size
    width = config.hidden_size * len(config.target_layer_ids)
    return {
        "noise_embeds": torch.randn(BATCH, block, config.hidden_size, generator=gen),
        "context_hidden_states": torch.randn(BATCH, context, width, generator=gen),
        "attention_mask": torch.ones(BATCH, context + block, dtype=torch.long),
    }


def _image(model: nn.Module, gen: torch.Generator) -> dict[str, Any]:
    """Image encoders of any image size (Pixtral, MLCD): ``pixel_values (batch, 3, 4 · patch,
    3 · patch)``, a 4 × 3 grid of patches."""
    config: Any = model.config
    patch = config.patch_size
    return {"pixel_values": torch.randn(BATCH, 3, 4 * patch, 3 * patch, generator=gen)}


def _square_image(model: nn.Module, gen: torch.Generator) -> dict[str, Any]:
    """Image models whose positions or mask heads fix the image size (SAM 3's ViT, EoMT):
    ``pixel_values (batch, 3, image_size, image_size)`` (4 × 4 patches, see OVERRIDES)."""
    config: Any = model.config
    size = config.image_size
    return {"pixel_values": torch.randn(BATCH, 3, size, size, generator=gen)}


def _image_pair(model: nn.Module, gen: torch.Generator) -> dict[str, Any]:
    """EfficientLoFTR matches two images: ``pixel_values (batch, 2, 3, 128, 96)``; its coarse
    map (stride 8, 16 × 12) is aggregated by 4 × 4 windows into the 4 × 3 grid of rows and
    columns the rotary reads."""
    return {"pixel_values": torch.randn(BATCH, 2, 3, 128, 96, generator=gen)}


def _patches(model: nn.Module, gen: torch.Generator) -> dict[str, Any]:
    """Qwen2-VL-style towers taking flattened patches and a grid: two images of 2 × 3 merged
    tokens (4 × 6 patches). GLM-5-Next reads ``hidden_states (patches, 3 · T · P · P)`` and
    ``grid_thw``, MiniMax-M3-VL the same as ``pixel_values``; Inkling 2 ``pixel_values (tokens,
    P · merge, P · merge, 3)`` and ``image_grid_thw`` in merged tokens."""
    config: Any = model.config
    merge, patch = config.spatial_merge_size, config.patch_size
    params = inspect.signature(model.forward).parameters
    if "image_grid_thw" in params:  # Inkling 2
        grid = torch.tensor([[1, 2, 3]] * BATCH)
        side = patch * merge
        pixels = torch.randn(int(grid.prod(-1).sum()), side, side, 3, generator=gen)
        return {"pixel_values": pixels, "image_grid_thw": grid}
    grid = torch.tensor([[1, 2 * merge, 3 * merge]] * BATCH)
    width = 3 * config.temporal_patch_size * patch * patch
    states = torch.randn(int(grid.prod(-1).sum()), width, generator=gen)
    name = "hidden_states" if "hidden_states" in params else "pixel_values"
    return {name: states, "grid_thw": grid}


def _kimi_patches(model: nn.Module, gen: torch.Generator) -> dict[str, Any]:
    """Kimi-K2.5's vision tower: one ``(3, P, P)`` patch per row, two images of 4 × 6."""
    config: Any = model.config
    patch = config.patch_size
    grid = torch.tensor([[1, 4, 6]] * BATCH)
    pixels = torch.randn(int(grid.prod(-1).sum()), 3, patch, patch, generator=gen)
    return {"pixel_values": pixels, "grid_thw": grid}


def _gemma4_patches(model: nn.Module, gen: torch.Generator) -> dict[str, Any]:
    """Gemma 4's vision tower: flattened patches ``(batch, patches, 3 · P · P)`` of a grid of
    2 × 3 pooling windows, and their ``(x, y)`` positions ``(batch, patches, 2)``."""
    config: Any = model.config
    window = config.pooling_kernel_size
    rows, cols = torch.meshgrid(torch.arange(2 * window), torch.arange(3 * window), indexing="ij")
    positions = torch.stack([cols.flatten(), rows.flatten()], dim=-1)
    pixels = torch.randn(BATCH, positions.shape[0], 3 * config.patch_size**2, generator=gen)
    return {"pixel_values": pixels, "pixel_position_ids": positions.expand(BATCH, -1, -1)}


#: The main input, per family whose model takes no token ids but whose rotary has HF's
#: ``(x, position_ids)`` contract: built from the tiny config, in place of the token ids.
MAIN_INPUTS: dict[str, Callable[[nn.Module, torch.Generator], dict[str, Any]]] = {
    "lasr": _features,
    "nemotron3_diarization": _features,
    # the full codec's decoder does not build shrunk: the encoder model (its transformer holds
    # the rotary the decoder's shares); 1920 samples per frame (24 kHz at 12.5 Hz)
    "mimi": _waveform(1920),
    "pocket_tts_audio_tokenizer": _waveform(1920),
    "neucodec": _semantic_codec,
    "xcodec2": _semantic_codec,
    "wav2vec2_bert": _speech_features,
    "wav2vec2_conformer": _raw_speech,
    "timesfm2_5": _time_series,
    "muse_glimmer_assistant": _draft_block,
    "pixtral": _image,
    "mlcd": _image,
    "sam3": _square_image,
    "eomt_dinov3": _square_image,
    "efficientloftr": _image_pair,
    "inkling2": _patches,
    "glm5_next": _patches,
    # vision towers of VL families, by model type (the tests of posenc's vision conventions)
    "kimi_k25_vision": _kimi_patches,
    "step3p5_vision": _image,
    "minimax_m3_vl_vision": _patches,
    "gemma4_vision": _gemma4_patches,
}
