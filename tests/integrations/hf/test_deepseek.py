"""DeepSeek's rotaries against transformers 5.23.0 on tiny random configs: DeepSeek-V4's q/k
rotation of both rope types, its value rotation and output de-rotation through a whole HF
attention layer, compressed-entry positions and visibility; MLA's decoupled RoPE against
deepseek_v3's attention (both ``rope_interleave``); the DSA indexer's layout against
deepseek_v32 (NeoX) and glm_moe_dsa (interleaved)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from posenc.attention import attend
from posenc.integrations.hf import (
    deepseek_v4_rope_parameters,
    deepseek_v4_rope_type,
    deepseek_v4_rotary_from_config,
    indexer_rotary_from_config,
    mla_rotary_from_config,
)
from posenc.integrations.hf.deepseek import INDEXER_INTERLEAVED
from posenc.rotary import compressed_positions, compressed_visible, join_decoupled

transformers = pytest.importorskip("transformers")
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as hf_v3  # noqa: E402
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as hf_v4  # noqa: E402

YARN = {
    "rope_type": "yarn",
    "factor": 16.0,
    "original_max_position_embeddings": 64,
    "beta_fast": 32,
    "beta_slow": 1,
}


def _v4_config(**overrides: Any) -> Any:
    settings: dict[str, Any] = dict(
        vocab_size=64,
        hidden_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        head_dim=32,
        q_lora_rank=16,
        o_groups=2,
        o_lora_rank=8,
        partial_rotary_factor=8 / 32,
        sliding_window=128,
        max_position_embeddings=4096,
        layer_types=[
            "sliding_attention",
            "compressed_sparse_attention",
            "heavily_compressed_attention",
        ],
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
        rope_parameters=dict(YARN),
        attn_implementation="eager",
    )
    settings.update(overrides)
    return transformers.DeepseekV4Config(**settings)


def _init(module: torch.nn.Module, seed: int = 0) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)


POSITIONS = torch.tensor([[0, 1, 2, 5, 9, 40, 300, 2000]])


@pytest.mark.parametrize("rope_type", ["main", "compress"])
def test_v4_tables_and_rotation_equal_hf(rope_type: str) -> None:
    config = _v4_config()
    rope = deepseek_v4_rotary_from_config(config, rope_type)  # type: ignore[arg-type]
    hf_rotary = hf_v4.DeepseekV4RotaryEmbedding(config)
    x = torch.randn(1, 3, POSITIONS.shape[1], 32)
    cos, sin = hf_rotary(x, POSITIONS, layer_type=rope_type)
    torch.testing.assert_close(
        rope.inv_freq().float(), getattr(hf_rotary, f"{rope_type}_inv_freq"), rtol=1e-6, atol=0
    )
    c, s = rope.rotary_tables(POSITIONS[0], torch.float32)
    torch.testing.assert_close(c, cos[0])
    torch.testing.assert_close(s, sin[0])
    expected = hf_v4.apply_rotary_pos_emb(x, cos, sin)
    torch.testing.assert_close(rope.rotate(x, POSITIONS), expected)
    assert torch.equal(rope.rotate(x, POSITIONS)[..., :24], x[..., :24])  # leading nope
    # the value rotation is the key's, the output's is its inverse (HF's cos, -sin)
    torch.testing.assert_close(rope.rotate_values_at(x, POSITIONS), expected)
    torch.testing.assert_close(
        rope.derotate_output_at(x, POSITIONS), hf_v4.apply_rotary_pos_emb(x, cos, -sin)
    )


def test_v4_checkpoint_defaults_equal_hf() -> None:
    """The shipped settings (head_dim 512, rope slice 64, compress YaRN 16 over 65 536 at
    θ = 160 000, main θ = 1e4): the frequencies equal HF's init (float32) for both types."""
    config = transformers.DeepseekV4Config(
        num_hidden_layers=2,
        rope_parameters={**YARN, "original_max_position_embeddings": 65536},
    )
    hf_rotary = hf_v4.DeepseekV4RotaryEmbedding(config)
    for rope_type in ("main", "compress"):
        rope = deepseek_v4_rotary_from_config(config, rope_type)
        assert (rope.head_dim, rope.rope_dim) == (512, 64)
        hf_inv_freq = getattr(hf_rotary, f"{rope_type}_inv_freq")
        torch.testing.assert_close(rope.inv_freq().float(), hf_inv_freq, rtol=1e-6, atol=0)
        assert rope.rope.attention_factor == getattr(hf_rotary, f"{rope_type}_attention_scaling")


def test_v4_config_reading() -> None:
    config = _v4_config()
    assert [deepseek_v4_rope_type(config, i) for i in range(3)] == ["main", "compress", "compress"]
    main = deepseek_v4_rotary_from_config(config, "main")
    compress = deepseek_v4_rotary_from_config(config, "compress")
    assert (main.base, main.scaling, main.rope_dim) == (10000.0, None, 8)
    assert compress.base == 160000.0 and compress.rope_dim == 8
    assert compress.scaling is not None and compress.rope.attention_factor == 1.0
    # a checkpoint's config.json (legacy keys) reads as HF's __post_init__ converts it
    raw = {
        "head_dim": 32,
        "qk_rope_head_dim": 8,
        "rope_theta": 10000.0,
        "compress_rope_theta": 160000.0,
        "max_position_embeddings": 4096,
        "rope_scaling": {k if k != "rope_type" else "type": v for k, v in YARN.items()},
    }
    assert deepseek_v4_rope_parameters(raw)["rope_parameters"] == config.rope_parameters
    from_raw = deepseek_v4_rotary_from_config(raw, "compress")
    torch.testing.assert_close(from_raw.inv_freq(), compress.inv_freq(), rtol=0, atol=0)
    with pytest.raises(ValueError, match="rope_type must be one of"):
        deepseek_v4_rotary_from_config(config, "sliding")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="layer_idx must be in"):
        deepseek_v4_rope_type(config, 3)


def _pooled(compressor: Any, x: torch.Tensor, ratio: int) -> torch.Tensor:
    """HF's compressed entries before their rotation: each closed window of ``ratio`` tokens
    pooled by its gates, ``(batch, 1, windows, head_dim)``."""
    batch, seq, _ = x.shape
    windows = seq // ratio
    kv = compressor.kv_proj(x)[:, : windows * ratio].view(batch, windows, ratio, -1)
    gate = compressor.gate_proj(x)[:, : windows * ratio].view(batch, windows, ratio, -1)
    gate = gate + compressor.position_bias
    return compressor.kv_norm((kv * gate.softmax(dim=2)).sum(dim=2))[:, None]


@pytest.mark.parametrize("layer_idx", [0, 2])
def test_v4_attention_layer_equals_hf(layer_idx: int) -> None:
    """A whole HF DeepSeek-V4 attention layer (q/k rotation, K = V, output rotated back by -i)
    against posenc's attend with the V4 rotary; the sinks set to -inf so the softmax is plain.
    Layer 0 slides with the "main" rope; layer 2 (HCA, m = 8) uses the "compress" rope and
    also attends to compressed entries at w·m, visible once w < (t + 1) // m."""
    config = _v4_config()
    layer = hf_v4.DeepseekV4Attention(config, layer_idx)
    _init(layer)
    with torch.no_grad():
        layer.sinks.fill_(float("-inf"))
    batch, seq = 2, 19
    x = torch.randn(batch, seq, 64, generator=torch.Generator().manual_seed(1))
    position_ids = torch.arange(seq)[None].expand(batch, -1)
    hf_rotary = hf_v4.DeepseekV4RotaryEmbedding(config)
    tables = {t: hf_rotary(x, position_ids, layer_type=t) for t in ("main", "compress")}
    causal = torch.full((seq, seq), float("-inf")).triu(1).expand(batch, 1, seq, seq)
    with torch.no_grad():
        expected, _ = layer(x, tables, position_ids, causal)
        rope = deepseek_v4_rotary_from_config(config, deepseek_v4_rope_type(config, layer_idx))
        q = layer.q_b_proj(layer.q_a_norm(layer.q_a_proj(x)))
        q = layer.q_b_norm(q.view(batch, seq, 4, 32).transpose(1, 2))
        kv = layer.kv_norm(layer.kv_proj(x)).view(batch, seq, 1, 32).transpose(1, 2)
        k_pos = position_ids
        allowed = torch.ones(seq, seq, dtype=torch.bool).tril()
        if layer.compressor is not None:
            ratio = layer.compressor.compress_rate
            entries = _pooled(layer.compressor, x, ratio)
            kv = torch.cat([kv, entries], dim=2)
            entry_pos = compressed_positions(entries.shape[2], ratio)
            k_pos = torch.cat([position_ids, entry_pos.expand(batch, -1)], dim=-1)
            seen = compressed_visible(position_ids[0], entries.shape[2], ratio)
            allowed = torch.cat([allowed, seen], dim=-1)
        q, k = rope(q, kv, position_ids, k_pos)
        v = rope.rotate_values_at(kv, k_pos)  # K = V: the same rotated latent
        torch.testing.assert_close(v, k)
        out = attend(
            q, k, v, pos=rope, q_pos=position_ids, k_pos=k_pos, causal=False, attn_mask=allowed
        )
        grouped = out.transpose(1, 2).reshape(batch, seq, config.o_groups, -1)
        got = layer.o_b_proj(layer.o_a_proj(grouped).flatten(2))
    torch.testing.assert_close(got, expected)


def test_v4_compressed_entries_equal_hf() -> None:
    """Positions and visibility of compressed entries: HF's HCA compressor rotates entry w at
    w·m (its rope slice) and hides it from queries with (t + 1) // m <= w."""
    config = _v4_config()
    compressor = hf_v4.DeepseekV4HCACompressor(config)
    _init(compressor, seed=2)
    ratio, seq = 8, 27
    x = torch.randn(1, seq, 64, generator=torch.Generator().manual_seed(3))
    position_ids = torch.arange(seq)[None]
    with torch.no_grad():
        entries, block_bias = compressor(x, None, position_ids, None, 2)
        pooled = _pooled(compressor, x, ratio)  # the same entries, unrotated
    windows = pooled.shape[2]
    rope = deepseek_v4_rotary_from_config(config, "compress")
    positions = compressed_positions(windows, ratio)
    assert positions.tolist() == [0, 8, 16]
    torch.testing.assert_close(rope.rotate(pooled, positions), entries)
    visible = compressed_visible(position_ids[0], windows, ratio)
    assert torch.equal(visible, block_bias[0, 0] == 0)
    assert compressed_positions(2, ratio, first_entry=3).tolist() == [24, 32]


@pytest.mark.parametrize("interleave", [True, False])
def test_mla_equals_deepseek_v3_attention(interleave: bool) -> None:
    config = transformers.DeepseekV3Config(
        vocab_size=64,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=16,
        kv_lora_rank=16,
        qk_nope_head_dim=8,
        qk_rope_head_dim=8,
        v_head_dim=8,
        rope_interleave=interleave,
        max_position_embeddings=4096,
        rope_parameters={**YARN, "rope_theta": 10000.0, "mscale": 1.0, "mscale_all_dim": 1.0},
        attn_implementation="eager",
    )
    layer: Any = hf_v3.DeepseekV3Attention(config, 0)
    _init(layer, seed=4)
    batch, seq = 2, 9
    x = torch.randn(batch, seq, 64, generator=torch.Generator().manual_seed(5))
    position_ids = torch.arange(seq)[None].expand(batch, -1) + 100
    cos, sin = hf_v3.DeepseekV3RotaryEmbedding(config)(x, position_ids)
    causal = torch.full((seq, seq), float("-inf")).triu(1)[None, None]
    rope = mla_rotary_from_config(config)
    assert rope.layout == ("interleaved" if interleave else "half")
    with torch.no_grad():
        expected, _ = layer(x, (cos, sin), causal)
        q = layer.q_b_proj(layer.q_a_layernorm(layer.q_a_proj(x)))
        q = q.view(batch, seq, 4, 16).transpose(1, 2)
        latent, k_rope = layer.kv_a_proj_with_mqa(x).split([16, 8], dim=-1)
        kv = layer.kv_b_proj(layer.kv_a_layernorm(latent)).view(batch, seq, 4, 16).transpose(1, 2)
        k_nope, v = kv.split([8, 8], dim=-1)
        q_joined, k_joined = join_decoupled(
            q[..., :8], q[..., 8:], k_nope, k_rope.view(batch, 1, seq, 8)
        )
        q_rot, k_rot = rope(q_joined, k_joined, position_ids, position_ids)
        # HF's rotated parts, for the layout check
        rotate = hf_v3.apply_rotary_pos_emb_interleave if interleave else hf_v3.apply_rotary_pos_emb
        hf_q, hf_k = rotate(q[..., 8:], k_rope.view(batch, 1, seq, 8), cos, sin)
        # HF's interleaved function writes the rotated pairs de-interleaved (a's, then b's)
        order = _deinterleaved(8) if interleave else torch.arange(8)
        torch.testing.assert_close(q_rot[..., 8:][..., order], hf_q)
        torch.testing.assert_close(k_rot[:, :1, :, 8:][..., order], hf_k)
        out = attend(q_rot, k_rot, v, causal=True, scale=layer.scaling)
        got = layer.o_proj(out.transpose(1, 2).reshape(batch, seq, -1))
    torch.testing.assert_close(got, expected)


def _dsa_config(model_type: str, **overrides: Any) -> Any:
    cls = transformers.AutoConfig.for_model(model_type).__class__
    settings: dict[str, Any] = dict(
        hidden_size=64,
        num_attention_heads=4,
        q_lora_rank=16,
        kv_lora_rank=16,
        qk_nope_head_dim=8,
        qk_rope_head_dim=8,
        v_head_dim=8,
        index_head_dim=16,
        index_n_heads=2,
        max_position_embeddings=4096,
    )
    settings.update(overrides)
    return cls(**settings)


def _deinterleaved(width: int) -> torch.Tensor:
    """Channel order of HF's interleaved functions' output: each pair's first channels, then
    their second ones."""
    return torch.cat([torch.arange(0, width, 2), torch.arange(1, width, 2)])


def _indexer_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return torch.einsum("bhsd,btd->bhst", q, k)


@pytest.mark.parametrize(
    ("model_type", "interleaved"), [("deepseek_v32", False), ("glm_moe_dsa", True)]
)
def test_indexer_rotary_equals_hf(model_type: str, interleaved: bool) -> None:
    """The indexer's rope (leading slice of each indexer head) as HF's indexer applies it:
    deepseek_v32's half-split apply_rotary_pos_emb, glm_moe_dsa's interleaved one; then the
    other layout gives other scores (the vllm#28968 / sglang#13530 bug)."""
    module = __import__(f"transformers.models.{model_type}.modeling_{model_type}", fromlist=["x"])
    config = _dsa_config(model_type)
    rotary_cls = next(v for k, v in vars(module).items() if k.endswith("RotaryEmbedding"))
    batch, seq = 1, 12
    position_ids = torch.arange(seq)[None] * 37
    generator = torch.Generator().manual_seed(6)
    q = torch.randn(batch, seq, 2, 16, generator=generator)  # (batch, seq, heads, dim) as HF
    k = torch.randn(batch, seq, 1, 16, generator=generator)
    cos, sin = rotary_cls(config)(q, position_ids)
    apply = module.apply_rotary_pos_emb_interleave if interleaved else module.apply_rotary_pos_emb
    hf_q_rot, hf_k_rot = apply(q[..., :8], k[..., :8], cos, sin, unsqueeze_dim=2)
    hf_q = torch.cat([hf_q_rot, q[..., 8:]], dim=-1).transpose(1, 2)
    hf_k = torch.cat([hf_k_rot, k[..., 8:]], dim=-1).squeeze(2)
    rope = indexer_rotary_from_config(config)
    assert rope.layout == ("interleaved" if interleaved else "half")
    assert (rope.head_dim, rope.rotary_dim) == (16, 8)
    got_q, got_k = rope(q.transpose(1, 2), k.transpose(1, 2), position_ids, position_ids)
    order = torch.cat([_deinterleaved(8), torch.arange(8, 16)])
    if not interleaved:
        order = torch.arange(16)
    torch.testing.assert_close(got_q[..., order], hf_q)
    torch.testing.assert_close(got_k[:, 0][..., order], hf_k)
    expected = _indexer_scores(hf_q, hf_k)
    torch.testing.assert_close(_indexer_scores(got_q, got_k[:, 0]), expected)
    # the other layout: fluent numbers, other scores
    wrong = indexer_rotary_from_config(config, interleaved=not interleaved)
    bad_q, bad_k = wrong(q.transpose(1, 2), k.transpose(1, 2), position_ids, position_ids)
    assert (_indexer_scores(bad_q, bad_k[:, 0]) - expected).abs().max() > 0.1


def test_indexer_flag_and_refusals() -> None:
    config = _dsa_config("deepseek_v32")
    as_dict = {**config.to_dict(), "indexer_rope_interleave": True}
    assert indexer_rotary_from_config(as_dict).layout == "interleaved"
    as_dict["indexer_rope_interleave"] = False
    assert indexer_rotary_from_config(as_dict).layout == "half"
    as_dict["indexer_rope_interleave"] = "yes"
    with pytest.raises(ValueError, match="indexer_rope_interleave must be a bool"):
        indexer_rotary_from_config(as_dict)
    with pytest.raises(ValueError, match="no known indexer layout"):
        indexer_rotary_from_config({**config.to_dict(), "model_type": "llama"})
    with pytest.raises(ValueError, match="index_head_dim"):
        indexer_rotary_from_config({"qk_rope_head_dim": 8, "qk_nope_head_dim": 8})
    with pytest.raises(ValueError, match=r"qk_rope_head_dim \(32\) must be at most"):
        indexer_rotary_from_config({**config.to_dict(), "qk_rope_head_dim": 32, "head_dim": 32})
    with pytest.raises(ValueError, match="qk_nope_head_dim"):
        mla_rotary_from_config({"qk_rope_head_dim": 8})


@pytest.mark.parametrize("model_type", ["deepseek_v32", "glm_moe_dsa"])
def test_indexer_module_top_k_equals_hf(model_type: str) -> None:
    """HF's whole indexer (its projections, ReLU scores, head weights, top-k) picks the keys
    posenc's indexer rotary picks; the other layout picks other keys."""
    module = __import__(f"transformers.models.{model_type}.modeling_{model_type}", fromlist=["x"])
    config = _dsa_config(model_type, index_topk=6)
    indexer_cls = next(v for k, v in vars(module).items() if k.endswith("Indexer"))
    rotary_cls = next(v for k, v in vars(module).items() if k.endswith("RotaryEmbedding"))
    indexer: Any = indexer_cls(config, 0)
    _init(indexer, seed=7)
    batch, seq = 2, 24
    generator = torch.Generator().manual_seed(8)
    x = torch.randn(batch, seq, 64, generator=generator)
    q_resid = torch.randn(batch, seq, 16, generator=generator)
    position_ids = (torch.arange(seq) * 53)[None].expand(batch, -1)
    everything = torch.ones(batch, seq, seq, dtype=torch.bool)  # no ties among hidden keys
    with torch.no_grad():
        cos, sin = rotary_cls(config)(x, position_ids)
        expected = indexer(x, q_resid, (cos, sin), everything, position_ids)

        def top_k(interleaved: bool | None) -> torch.Tensor:
            rope = indexer_rotary_from_config(config, interleaved=interleaved)
            q = indexer.wq_b(q_resid).view(batch, seq, 2, 16).transpose(1, 2)
            k = indexer.k_norm(indexer.wk(x))[:, None]
            q, k = rope(q, k, position_ids, position_ids)
            scores = torch.relu(q @ k.transpose(-1, -2) * indexer.softmax_scale)
            weights = indexer.weights_proj(x) * 2**-0.5  # (batch, seq, heads)
            index_scores = torch.einsum("bsh,bhst->bst", weights, scores)
            return index_scores.topk(6, dim=-1).indices.to(torch.int32)

        assert torch.equal(top_k(None), expected)
        wrong = top_k(not INDEXER_INTERLEAVED[model_type])
    assert not torch.equal(wrong.sort(-1).values, expected.sort(-1).values)
