"""Sliding-window attention (``Attention(window=)``) and gated attention's output gate
(``Attention(output_gate=True)``) against dense references written out here."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import Attention, KVCache, module, output_gate
from posenc.attention import window as window_module
from posenc.rotary import RotaryEmbedding


def reference(attn: Attention, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Softmax attention of ``attn``'s projections under the boolean ``allowed`` (q, k), with
    its rotary encoding if any and its gate if any."""
    batch, seq, _ = x.shape
    heads, width = attn.num_heads, attn.head_dim

    def split(t: torch.Tensor) -> torch.Tensor:
        return t.view(batch, seq, heads, width).transpose(1, 2)

    q, k, v = split(attn.q_proj(x)), split(attn.k_proj(x)), split(attn.v_proj(x))
    if attn.pos is not None:
        tables = attn.pos.rotary_tables(torch.arange(seq), q.dtype)  # type: ignore[operator]
        q, k = attn.pos.rotate_qk(q, k, tables, tables)  # type: ignore[operator]
    scores = (q @ k.transpose(-1, -2) / math.sqrt(width)).masked_fill(~allowed, -math.inf)
    out = scores.softmax(dim=-1) @ v
    if attn.gate is not None:
        gate = torch.sigmoid(x @ attn.gate.proj.weight.T).view(batch, seq, heads, width)
        out = out * gate.transpose(1, 2)
    return attn.out_proj(out.transpose(1, 2).reshape(batch, seq, heads * width))


def window_mask(seq: int, window: int, causal: bool) -> torch.Tensor:
    distance = torch.arange(seq)[:, None] - torch.arange(seq)[None, :]
    if causal:
        return (distance >= 0) & (distance < window)
    return distance.abs() < window


@pytest.mark.parametrize(
    "backend", ["sdpa", "chunked", pytest.param("flex", marks=pytest.mark.slow)]
)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("gated", [False, True])
def test_window_and_gate_equal_the_dense_reference(backend: str, causal: bool, gated: bool) -> None:
    torch.manual_seed(0)
    rope = RotaryEmbedding(8)
    dtype = torch.float32 if backend == "flex" else torch.float64  # flex: no float64 on CPU
    attn = Attention(16, 2, pos=rope, window=3, backend=backend, causal=causal, output_gate=gated)
    attn = attn.to(dtype)
    x = torch.randn(2, 9, 16, dtype=dtype)
    with torch.no_grad():  # flex has no CPU backward
        got = attn(x)
        want = reference(attn, x, window_mask(9, 3, causal))
    if dtype == torch.float64:
        assert_close(got, want, atol=1e-12, rtol=0)
    else:
        assert_close(got, want)  # float32's default tolerances


def test_window_at_least_the_length_is_global_attention() -> None:
    torch.manual_seed(1)
    windowed = Attention(16, 2, window=9).double()
    plain = Attention(16, 2).double()
    plain.load_state_dict(windowed.state_dict())
    x = torch.randn(1, 9, 16, dtype=torch.float64)
    assert_close(windowed(x), plain(x), atol=1e-12, rtol=0)


def test_window_decoding_with_a_kv_cache_equals_the_full_forward() -> None:
    torch.manual_seed(2)
    attn = Attention(16, 2, pos=RotaryEmbedding(8), window=4, output_gate=True).double()
    x = torch.randn(2, 12, 16, dtype=torch.float64)
    padding = torch.ones(2, 12, dtype=torch.bool)
    padding[1, :2] = False
    with torch.no_grad():
        full = attn(x, key_padding_mask=padding)
        cache = KVCache()
        steps = [attn(x[:, :5], key_padding_mask=padding[:, :5], cache=cache)]
        for t in range(5, 12):
            steps.append(attn(x[:, t : t + 1], key_padding_mask=padding[:, t : t + 1], cache=cache))
    got = torch.cat(steps, dim=1)
    assert_close(got[padding], full[padding], atol=1e-12, rtol=0)


def test_output_gate_is_the_elementwise_sigmoid_of_the_input() -> None:
    out, x = torch.randn(2, 3, 4, 5, dtype=torch.float64), torch.randn(2, 4, 6, dtype=torch.float64)
    weight = torch.randn(15, 6, dtype=torch.float64)
    gated = output_gate(out, x, weight)
    for h in range(3):
        gate = torch.sigmoid(x @ weight[h * 5 : (h + 1) * 5].T)  # (batch, seq, head_dim)
        assert_close(gated[:, h], out[:, h] * gate, atol=1e-14, rtol=0)


def test_the_gate_draws_after_the_projections_and_resets_as_built() -> None:
    torch.manual_seed(3)
    plain = Attention(16, 2)
    torch.manual_seed(3)
    gated = Attention(16, 2, output_gate=True)
    for name, tensor in plain.state_dict().items():
        assert torch.equal(gated.state_dict()[name], tensor), name
    with torch.device("meta"):
        meta = Attention(16, 2, output_gate=True)
    meta.to_empty(device="cpu")
    torch.manual_seed(3)
    meta.reset_parameters()
    for name, tensor in gated.state_dict().items():
        assert torch.equal(meta.state_dict()[name], tensor), name


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"window": 0}, "window"),
        ({"window": 2.5}, "window"),
        ({"window": 4, "chunk_size": 4}, "chunk_size"),
        ({"window": 4, "backend": "linear"}, "linear"),
        ({"output_gate": 1}, "output_gate"),
    ],
)
def test_bad_options_raise(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        Attention(16, 2, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("window", [5, 70])
def test_the_banded_path_over_several_blocks_equals_the_dense_reference(
    window: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """150 tokens: blocks of max(window, 64) queries, each over the keys its windows reach;
    with grouped-query heads, and decoding (queries after cached keys) in steps of 40."""
    calls: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(1)
        return window_module.banded_attention(*args, **kwargs)

    monkeypatch.setattr(module, "banded_attention", counted)
    torch.manual_seed(4)
    attn = Attention(16, 4, num_kv_heads=2, pos=RotaryEmbedding(4), window=window).double()
    x = torch.randn(1, 150, 16, dtype=torch.float64)
    batch, seq = 1, 150

    def split(t: torch.Tensor, heads: int) -> torch.Tensor:
        return t.view(batch, seq, heads, 4).transpose(1, 2)

    q, k, v = split(attn.q_proj(x), 4), split(attn.k_proj(x), 2), split(attn.v_proj(x), 2)
    rope: Any = attn.pos
    tables = rope.rotary_tables(torch.arange(seq), q.dtype)
    q, k = rope.rotate_qk(q, k, tables, tables)
    k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    scores = (q @ k.transpose(-1, -2) / 2.0).masked_fill(~window_mask(seq, window, True), -math.inf)
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, seq, 16)
    want = attn.out_proj(out)
    assert_close(attn(x), want, atol=1e-12, rtol=0)
    cache = KVCache()
    with torch.no_grad():
        steps = [attn(x[:, t : t + 40], cache=cache) for t in range(0, seq, 40)]
    assert_close(torch.cat(steps, dim=1), want.detach(), atol=1e-12, rtol=0)
    assert len(calls) == 1 + 4  # the full forward and each step took the band
