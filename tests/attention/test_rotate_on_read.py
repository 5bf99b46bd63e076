"""Keys kept unrotated and rotated when read: length-dependent scalings under a KV cache.

HF (and posenc before) cache keys after rotation, so a dynamic NTK, LongRoPE or dynamic-YaRN
model's cached keys keep the frequencies of the step that stored them (transformers #25104).
An unrotated cache rotates every key with the current step's frequencies: with the
``"query"`` length rule (each query at its own prefix's length) decoding then equals a fresh
forward of the same prefix at every step and every depth; with HF's ``"forward"`` rule it
does in the first layer (deeper layers read states the earlier steps computed with their own
frequencies, a difference no cache can remove: measured and bounded here)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import Attention, KVCache
from posenc.models import DecoderLM, ModelConfig
from posenc.rotary import RotaryEmbedding
from posenc.rotary.scaling import DynamicNTK, LongRoPE, YaRN

LONGROPE = {
    "type": "longrope",
    "short_factor": [1.0 + 0.1 * i for i in range(8)],
    "long_factor": [2.0 + 0.5 * i for i in range(8)],
    "original_max_position_embeddings": 24,
    "factor": 4.0,
}
SCALINGS: dict[str, dict[str, Any]] = {
    "dynamic_ntk": {"type": "dynamic", "factor": 4.0, "max_position_embeddings": 24},
    "longrope": LONGROPE,
    "dynamic_yarn": {
        "type": "yarn",
        "factor": 1.0,
        "original_max_position_embeddings": 24,
        "dynamic": True,
    },
}


def model(scaling: dict[str, Any], rule: str, depth: int = 2, **more: Any) -> DecoderLM:
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=64,
        dim=64,
        depth=depth,
        num_heads=4,
        pos="rope",
        pos_kwargs={"scaling": scaling, "length_rule": rule, **more},
    )
    return DecoderLM(config).eval()


def decode_gaps(net: DecoderLM, tokens: torch.Tensor, prompt: int, cache: list) -> list[float]:
    """Each decoding step's logits against a forward without cache of the same prefix, by a
    second model (its frequencies follow the growing prefixes as a fresh module's would)."""
    fresh = DecoderLM(net.config).eval()
    fresh.load_state_dict(net.state_dict())
    gaps = []
    with torch.no_grad():
        net(tokens[:, :prompt], cache=cache)
        for t in range(prompt, tokens.shape[1]):
            step = net(tokens[:, t : t + 1], cache=cache)[:, -1]
            gaps.append(float((step - fresh(tokens[:, : t + 1])[:, -1]).abs().max()))
    return gaps


@pytest.mark.parametrize("name", SCALINGS)
def test_query_rule_decoding_equals_a_fresh_forward_at_every_step_and_depth(name: str) -> None:
    net = model(SCALINGS[name], "query")
    tokens = torch.randint(0, 64, (2, 48))
    gaps = decode_gaps(net, tokens, 10, net.new_cache())
    assert max(gaps) <= 1e-5  # across the threshold (24) and 2x past it


@pytest.mark.parametrize("name", SCALINGS)
def test_forward_rule_is_exact_in_one_layer_and_a_rotated_cache_is_not(name: str) -> None:
    tokens = torch.randint(0, 64, (1, 48))
    net = model(SCALINGS[name], "forward", depth=1)
    cache = net.new_cache()
    assert max(decode_gaps(net, tokens, 10, cache)) <= 1e-5
    assert cache[0].keys == "unrotated"  # "auto" chose it for a length-dependent scaling
    stale = model(SCALINGS[name], "forward", depth=1)
    gaps = decode_gaps(stale, tokens, 10, [KVCache(keys="rotated")])
    assert max(gaps[:13]) <= 1e-5 and max(gaps[14:]) > 1e-3  # HF's behaviour past 24


def test_forward_rule_deeper_layers_read_states_of_earlier_frequencies() -> None:
    """Two layers, HF's rule: the second layer's keys were computed at earlier steps with
    earlier frequencies, while a fresh forward recomputes them all at the new length."""
    net = model(SCALINGS["dynamic_ntk"], "forward")
    gaps = decode_gaps(net, torch.randint(0, 64, (1, 48)), 10, net.new_cache())
    assert max(gaps[:13]) <= 1e-5 and max(gaps[14:]) > 1e-5


def _reference_query_rule(scaling: Any, x_q: torch.Tensor, x_k: torch.Tensor, v: torch.Tensor):
    """Each query i with the frequencies of a fresh module updated to length i + 1 (float64)."""
    length = x_q.shape[-2]
    out = torch.zeros_like(x_q)
    for i in range(length):
        rope = RotaryEmbedding(x_q.shape[-1], scaling=scaling)
        rope.update(i + 1)
        qr, kr = rope(
            x_q[..., i : i + 1, :], x_k[..., : i + 1, :], torch.tensor([i]), torch.arange(i + 1)
        )
        probs = ((qr @ kr.transpose(-1, -2)) * x_q.shape[-1] ** -0.5).softmax(-1)
        out[..., i : i + 1, :] = probs @ v[..., : i + 1, :]
    return out


@pytest.mark.parametrize(
    "scaling",
    [
        DynamicNTK(4.0, 12),
        LongRoPE(LONGROPE["short_factor"], LONGROPE["long_factor"], 12, factor=4.0),
        YaRN(1.0, 12, dynamic=True),
    ],
    ids=["dynamic_ntk", "longrope", "dynamic_yarn"],
)
@pytest.mark.parametrize("backend", ["sdpa", "chunked"])
def test_query_rule_forward_equals_each_query_at_its_own_length(scaling: Any, backend: str) -> None:
    rope = RotaryEmbedding(16, scaling=scaling, length_rule="query")
    attn = Attention(16, 1, pos=rope, backend=backend).double()
    x = torch.randn(1, 30, 16, dtype=torch.float64)
    with torch.no_grad():
        got = attn(x)
        q = attn.q_proj(x)[:, None]
        k = attn.k_proj(x)[:, None]
        v = attn.v_proj(x)[:, None]
        want = attn.out_proj(_reference_query_rule(scaling, q, k, v)[:, 0])
    assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert rope.rebuilds == 0  # the "query" rule never changes the module's own state


def test_static_rope_reads_its_unrotated_keys_from_the_memo() -> None:
    torch.manual_seed(0)
    attn = Attention(32, 4, pos=RotaryEmbedding(8)).eval()
    x = torch.randn(2, 20, 32)
    with torch.no_grad():
        rotated, unrotated = KVCache(), KVCache(keys="unrotated")
        a = [attn(x[:, :5], cache=rotated)] + [
            attn(x[:, i : i + 1], cache=rotated) for i in range(5, 20)
        ]
        b = [attn(x[:, :5], cache=unrotated)] + [
            attn(x[:, i : i + 1], cache=unrotated) for i in range(5, 20)
        ]
    assert_close(torch.cat(b, 1), torch.cat(a, 1), rtol=1e-6, atol=1e-6)
    assert rotated.keys == "rotated"
    (memo,) = unrotated._memo.values()  # one position map, one frequency state
    assert memo.length == unrotated.length == 20
    assert_close(memo.value, rotated.k)  # the memo holds exactly what the rotated cache holds
    assert not torch.equal(unrotated.k, rotated.k)  # and the cache itself the unrotated keys


def test_length_rule_is_checked() -> None:
    with pytest.raises(ValueError, match="length_rule"):
        RotaryEmbedding(8, length_rule="token")  # type: ignore[arg-type]
