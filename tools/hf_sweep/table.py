# ruff: noqa: E501
"""The conformance sweep's table (transformers 5.23.0): every RoPE family whose status is not
``equal``, with the status and the reason. ``tests/integrations/hf/test_sweep.py`` asserts each
family's status against it and ``docs/hf.md`` shows it. Generated from the JSON of
``python -m tools.hf_sweep --json FILE``; a family not listed must be ``equal``.
"""

from __future__ import annotations

NOT_EQUAL: dict[str, tuple[str, str]] = {
    "clvp": (
        "refused",
        "its text encoder's rotary (ClvpRotaryPositionalEmbedding.forward(hidden_states), phases for 0…seq-1) lacks HF's (x, position_ids) → (cos, sin) contract: ValueError: model has no rotary module (a submodule whose class name ends with 'RotaryEmbedding', HF's naming): nothing to patch",
    ),
    "edgetam_video": ("not text RoPE", "EdgeTamVideoModel.forward takes no input_ids"),
    "efficientloftr": ("not text RoPE", "EfficientLoFTRModel.forward takes no input_ids"),
    "eomt_dinov3": (
        "not text RoPE",
        "image segmentation (EoMT on DINOv3): its rotary is the ViT's 2-D patch rotary (EomtDinov3RotaryEmbedding), pixel inputs only",
    ),
    "esmfold2": (
        "not text RoPE",
        "its rotary (EsmFold2RotaryEmbedding) rotates by atoms' 3-D reference positions and space ids in the atom encoder, not by token index",
    ),
    "glm5_next": ("not text RoPE", "rotaries only in ['Glm5NextVisionRotaryEmbedding']"),
    "hunyuan_vl": (
        "refused",
        "ValueError: HunYuanVLRotaryEmbedding rotates the two halves of its frequency pairs by different axes (first halves [0, 0, 0, 0, 0, 0, 0, 0], second halves [1, 1, 1, 1, 2, 2, 2, 2], mrope_section [4, 2, 2]): not a rotation per pair on image positions, which posenc's M-RoPE is; not patched",
    ),
    "inkling2": (
        "not text RoPE",
        "its only rotary is the vision tower's 2D one (Inkling2VisionRotaryEmbedding)",
    ),
    "lasr": (
        "not text RoPE",
        "LasrForCTC.forward takes no input_ids; LasrEncoder.forward takes no input_ids",
    ),
    "mimi": (
        "not text RoPE",
        "audio codec: the rotary is in the codec's encoder/decoder transformers, no tokens",
    ),
    "mlcd": (
        "not text RoPE",
        "MLCDVisionModel.forward takes no input_ids; MLCDVisionModel.forward takes no input_ids",
    ),
    "muse_glimmer_assistant": (
        "not text RoPE",
        "MuseGlimmerAssistantModel.forward takes no input_ids",
    ),
    "nemotron3_5_transcribe": (
        "not text RoPE",
        "text decoder Nemotron-H is NoPE; rotaries only in the ASR audio encoder (input_features) and the word-timestamp head over audio frames",
    ),
    "nemotron3_diarization": (
        "not text RoPE",
        "Nemotron3DiarizationModel.forward takes no input_ids; Nemotron3DiarizationAudioModel.forward takes no input_ids",
    ),
    "neucodec": ("not text RoPE", "NeuCodecModel.forward takes no input_ids"),
    "pixtral": ("not text RoPE", "PixtralVisionModel.forward takes no input_ids"),
    "pocket_tts_audio_tokenizer": (
        "not text RoPE",
        "audio codec (tokenizer of audio), no token inputs",
    ),
    "sam2_video": ("not text RoPE", "Sam2VideoModel.forward takes no input_ids"),
    "sam3": ("not text RoPE", "rotaries only in ['Sam3ViTRotaryEmbedding']"),
    "sam3_tracker_video": ("not text RoPE", "Sam3TrackerVideoModel.forward takes no input_ids"),
    "seamless_m4t": (
        "not text RoPE",
        "rotary only in the speech encoder's conformer (SeamlessM4TConformerRotaryPositionalEmbedding, forward(hidden_states))",
    ),
    "timesfm2_5": ("not text RoPE", "TimesFm2_5Model.forward takes no input_ids"),
    "vjepa2": ("not text RoPE", "VJEPA2Model.forward takes no input_ids"),
    "wav2vec2_bert": ("not text RoPE", "Wav2Vec2BertModel.forward takes no input_ids"),
    "wav2vec2_conformer": ("not text RoPE", "Wav2Vec2ConformerModel.forward takes no input_ids"),
    "xcodec2": ("not text RoPE", "Xcodec2Model.forward takes no input_ids"),
    "youtu": ("mismatch", "max diff 5.2e-06"),
}
