"""vLLM ``get_rope`` types that posenc expresses with its own classes, each against vLLM's
formula re-derived from its code in float64 (``vllm/model_executor/layers/rotary_embedding``:
``base.py``/``common.py``, ``linear_scaling_rope.py``, ``llama3_rope.py``,
``dynamic_ntk_alpha_rope.py``, ``dynamic_ntk_scaling_rope.py``, ``telechat3_scaling_rope.py``,
``gemma4_rope.py``, ``llama4_vision_rope.py``). The table is docs/vllm.md."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc.rotary import RotaryEmbedding, YaRN
from posenc.rotary.multi_axis import MultiAxisRotary
from posenc.rotary.scaling import DynamicNTK, Linear, Llama3, NTKAware, Proportional


def _inv_freq(rotary_dim: int, base: float) -> list[float]:
    """vLLM ``RotaryEmbedding._compute_inv_freq``: ``1 / base^(arange(0, d, 2) / d)``."""
    return [1.0 / base ** (i / rotary_dim) for i in range(0, rotary_dim, 2)]


def _vllm_rotate(
    x: torch.Tensor, angles: torch.Tensor, rotary_dim: int, neox: bool
) -> torch.Tensor:
    """vLLM ``apply_rotary_emb_torch`` on the first ``rotary_dim`` channels (the rest pass)."""
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    cos, sin = angles.cos(), angles.sin()
    if neox:
        x1, x2 = rot.chunk(2, dim=-1)
    else:
        x1, x2 = rot[..., ::2], rot[..., 1::2]
    o1, o2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    out = torch.cat((o1, o2), dim=-1) if neox else torch.stack((o1, o2), dim=-1).flatten(-2)
    return torch.cat((out, rest), dim=-1)


@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize(("head_dim", "rotary_dim"), [(64, 64), (64, 32), (80, 40)])
def test_rotation_equals_vllm_neox_and_gptj_styles(
    neox: bool, head_dim: int, rotary_dim: int
) -> None:
    """``is_neox_style`` True = layout ``"half"``, False (GPT-J, Llama-4, GLM, DeepSeek's
    ``rope_interleave``) = ``"interleaved"``; partial rotary keeps the tail."""
    torch.manual_seed(0)
    positions = torch.arange(37) * 3
    q = torch.randn(2, 4, 37, head_dim, dtype=torch.float64)
    layout = "half" if neox else "interleaved"
    rope = RotaryEmbedding(head_dim, rotary_dim=rotary_dim, base=10000.0, layout=layout)
    tables = rope.rotary_tables(positions, torch.float64)
    got, _ = rope.rotate_qk(q, q.clone(), tables, tables)
    inv = torch.tensor(_inv_freq(rotary_dim, 10000.0), dtype=torch.float64)
    angles = positions.to(torch.float64)[:, None] * inv  # (seq, rotary_dim / 2)
    assert_close(got, _vllm_rotate(q, angles, rotary_dim, neox), atol=1e-12, rtol=0)


def test_linear_equals_vllm() -> None:
    """``LinearScalingRotaryEmbedding``: positions ``t / s`` over the plain frequencies."""
    got = Linear(4.0).inv_freq(128, 10000.0).tolist()
    want = [f / 4.0 for f in _inv_freq(128, 10000.0)]
    assert got == pytest.approx(want, rel=1e-14, abs=0)


def test_llama3_equals_vllm() -> None:
    """``Llama3RotaryEmbedding._compute_inv_freq``."""
    s, low, high, original = 8.0, 1.0, 4.0, 8192
    low_wavelen, high_wavelen = original / low, original / high
    want = []
    for f in _inv_freq(128, 500000.0):
        wavelen = 2 * math.pi / f
        smooth = (original / wavelen - low) / (high - low) if low != high else 0
        if wavelen < high_wavelen:
            want.append(f)
        elif wavelen > low_wavelen:
            want.append(f / s)
        else:
            want.append((1 - smooth) * f / s + smooth * f)
    got = Llama3(s, low, high, original).inv_freq(128, 500000.0).tolist()
    assert got == pytest.approx(want, rel=1e-14, abs=0)


@pytest.mark.parametrize("alpha", [1.0, 1000.0, 50.0])
def test_hunyuan_ntk_alpha_is_ntk_aware(alpha: float) -> None:
    """``DynamicNTKAlphaRotaryEmbedding`` (``rope_type="dynamic"`` with ``alpha``, Hunyuan):
    a fixed base ``b · α^(d/(d−2))``, i.e. posenc's ``NTKAware(α)``."""
    d = 128
    want = _inv_freq(d, 10000.0 * alpha ** (d / (d - 2)))
    assert NTKAware(alpha).inv_freq(d, 10000.0).tolist() == pytest.approx(want, rel=1e-13, abs=0)


def test_dynamic_factor_as_vllm_builds_it_once() -> None:
    """``DynamicNTKScalingRotaryEmbedding`` builds one table at start-up, at ``max_len = s ·
    L0``, with ``b · (s · max_len / L0 − (s − 1))^(d/(d−2))`` (vLLM until PR #41277, 2026;
    issues #3488, #5093): posenc's ``DynamicNTK(mode="fixed", target_length=s · L0)``."""
    s, original, d = 4.0, 2048, 64
    max_len = original * s
    base = 10000.0 * (s * max_len / original - (s - 1)) ** (d / (d - 2))
    ours = DynamicNTK(s, original, mode="fixed", target_length=int(max_len))
    assert ours.inv_freq(d, 10000.0).tolist() == pytest.approx(_inv_freq(d, base), rel=1e-13)


def test_telechat3_is_yarn_with_its_attention_factor() -> None:
    """``TeleChat3RoPEScaledRotaryEmbedding``: YaRN's frequencies, ``mscale = 0.07 ln s + 1``
    (times ``attn_factor``): ``YaRN(..., attention_factor_override=0.07 ln s + 1)``."""
    s = 8.0
    ours = YaRN(s, 4096, attention_factor_override=0.07 * math.log(s) + 1.0)
    assert ours.attention_factor == 0.07 * math.log(s) + 1.0
    assert torch.equal(ours.inv_freq(128, 1e6), YaRN(s, 4096).inv_freq(128, 1e6))


@pytest.mark.parametrize("partial", [1.0, 0.25])
def test_gemma4_is_proportional(partial: float) -> None:
    """``Gemma4RotaryEmbedding._compute_inv_freq``: ``base^(−2j/head_dim)`` for the first
    ``rotary_dim / 2`` pairs, zeros for the rest."""
    head_dim = 256
    rope_angles = int(head_dim * partial) // 2
    want = [1.0 / 1e6 ** (2 * j / head_dim) for j in range(rope_angles)]
    want += [0.0] * (head_dim // 2 - rope_angles)
    got = Proportional(partial).inv_freq(head_dim, 1e6).tolist()
    assert got == pytest.approx(want, rel=1e-14, abs=0)


def test_llama4_vision_is_axial_2d_at_positions_plus_one() -> None:
    """``Llama4VisionRotaryEmbedding``: patch ``(x, y) = (i mod n, ⌊i / n⌋)``, pairs
    ``[0, d/4)`` at ``(x + 1) θ_p`` and ``[d/4, d/2)`` at ``(y + 1) θ_p`` with ``θ_p =
    b^(−2p/(d/2))``, complex (interleaved) pairs, the CLS token unrotated: posenc's
    ``MultiAxisRotary.axial(d, 2, axis_order=(0, 1))`` at positions ``(x + 1, y + 1)``, CLS
    at ``(0, 0)``."""
    head_dim, side, base = 16, 3, 10000.0
    patches = side * side
    inv = torch.tensor(_inv_freq(head_dim // 2, base), dtype=torch.float64)  # d/4 entries
    index = torch.arange(patches)
    x, y = index % side, index // side
    angles = torch.cat([(x + 1)[:, None] * inv, (y + 1)[:, None] * inv], dim=-1)
    angles = torch.cat([angles, torch.zeros(1, head_dim // 2, dtype=torch.float64)])  # CLS
    torch.manual_seed(1)
    q = torch.randn(1, 2, patches + 1, head_dim, dtype=torch.float64)
    want = _vllm_rotate(q, angles.double(), head_dim, neox=False)
    rope = MultiAxisRotary.axial(head_dim, 2, base=base, axis_order=(0, 1))
    zero = torch.zeros(1, dtype=torch.long)
    positions = torch.stack([torch.cat([x + 1, zero]), torch.cat([y + 1, zero])])  # (2, seq)
    tables = rope.rotary_tables(positions, torch.float64)
    got, _ = rope.rotate_qk(q, q.clone(), tables, tables)
    assert_close(got, want, atol=1e-12, rtol=0)


@pytest.mark.parametrize("neox", [True, False])
def test_hw_interleaved_t_tail_mrope_is_a_frequency_matrix(neox: bool) -> None:
    """``BailingMRotaryEmbedding.select_cos_sin`` and ``Ernie4_5_VLRotaryEmbedding`` (sections
    ``(h, w, t)``, ``h = w``): pair ``p`` reads height for even ``p < h + w``, width for odd,
    time for the tail, at the plain ``θ_p``: ``MultiAxisRotary`` with that ``(pairs, axes)``
    frequency matrix (axes ``(t, h, w)``)."""
    head_dim, base, spatial = 32, 10000.0, 12  # sections t = 4, h = w = 6 (pairs)
    inv = torch.tensor(_inv_freq(head_dim, base), dtype=torch.float64)
    pairs = head_dim // 2
    axis = [(1 if p % 2 == 0 else 2) if p < spatial else 0 for p in range(pairs)]
    frequencies = torch.zeros(pairs, 3, dtype=torch.float64)
    frequencies[torch.arange(pairs), torch.tensor(axis)] = inv
    rope = MultiAxisRotary(head_dim, frequencies, layout="half" if neox else "interleaved")
    torch.manual_seed(2)
    positions = torch.randint(0, 50, (3, 11))  # (t, h, w) per token
    q = torch.randn(1, 2, 11, head_dim, dtype=torch.float64)
    angles = positions.T.to(torch.float64)[:, torch.tensor(axis)] * inv  # vLLM's cos row choice
    tables = rope.rotary_tables(positions, torch.float64)
    got, _ = rope.rotate_qk(q, q.clone(), tables, tables)
    assert_close(got, _vllm_rotate(q, angles, head_dim, neox), atol=1e-12, rtol=0)


def _axis_rope(axis: list[int], inv: torch.Tensor, num_axes: int, neox: bool) -> MultiAxisRotary:
    """``MultiAxisRotary`` whose pair ``p`` reads axis ``axis[p]`` at frequency ``inv[p]``."""
    frequencies = torch.zeros(len(axis), num_axes, dtype=torch.float64)
    frequencies[torch.arange(len(axis)), torch.tensor(axis)] = inv
    return MultiAxisRotary(2 * len(axis), frequencies, layout="half" if neox else "interleaved")


def _check_axis_rope(axis: list[int], inv: torch.Tensor, num_axes: int, neox: bool) -> None:
    """posenc's rotation equals vLLM's (each pair's cos/sin row taken from its axis)."""
    head_dim = 2 * len(axis)
    rope = _axis_rope(axis, inv, num_axes, neox)
    torch.manual_seed(3)
    positions = torch.randint(0, 60, (num_axes, 9))
    q = torch.randn(1, 2, 9, head_dim, dtype=torch.float64)
    angles = positions.T.to(torch.float64)[:, torch.tensor(axis)] * inv
    tables = rope.rotary_tables(positions, torch.float64)
    got, _ = rope.rotate_qk(q, q.clone(), tables, tables)
    assert_close(got, _vllm_rotate(q, angles, head_dim, neox), atol=1e-12, rtol=0)


@pytest.mark.parametrize("neox", [True, False])
def test_hunyuan_xdrope_is_a_frequency_matrix_at_the_alpha_base(neox: bool) -> None:
    """``XDRotaryEmbedding`` (``"xdrope"``, Hunyuan-VL): 4 axes (P, W, H, T), pairs in
    contiguous ``xdrope_section`` blocks read axis ``k`` of block ``k``, frequencies at the
    NTK-α base ``b · α^(d/(d−2))`` (its parent ``DynamicNTKAlphaRotaryEmbedding``)."""
    sections, d, alpha = [4, 4, 4, 4], 32, 1000.0
    inv = torch.tensor(_inv_freq(d, 10000.0 * alpha ** (d / (d - 2))), dtype=torch.float64)
    axis = [k for k, size in enumerate(sections) for _ in range(size)]
    assert_close(NTKAware(alpha).inv_freq(d, 10000.0), inv, atol=0, rtol=1e-13)
    _check_axis_rope(axis, inv, 4, neox)


def _pangu_axes(t: int, h: int, w: int) -> list[int]:
    """openPangu's ``get_mrope_interleaved_id_list(t, h, w, force_last=True)``: greedily the
    axis least placed relative to its count, never the same twice in a row while another is
    left (ties to the lower axis); the last pair is forced to axis 0 (time)."""
    counts = {0: t - 1, 1: h, 2: w}
    placed, left, order, last = dict.fromkeys(counts, 0), dict(counts), [], None
    for _ in range(sum(counts.values())):
        candidates = [a for a in left if left[a] > 0 and a != last] or [
            a for a in left if left[a] > 0
        ]
        best = min(candidates, key=lambda a: (placed[a] / counts[a], a))
        order.append(best)
        placed[best] += 1
        left[best] -= 1
        last = best
    return [*order, 0]


@pytest.mark.parametrize("neox", [True, False])
def test_openpangu_interleaved_mrope_is_a_frequency_matrix(neox: bool) -> None:
    """``MRotaryEmbeddingInterleaved`` (``"openpangu"``): pair ``p`` reads the axis of the
    openPangu id list; not Qwen3-VL's ``t h w t h w`` order, a frequency matrix of its own."""
    axis = _pangu_axes(4, 6, 6)
    assert len(axis) == 16 and axis[-1] == 0 and axis.count(0) == 4
    inv = torch.tensor(_inv_freq(32, 10000.0), dtype=torch.float64)
    _check_axis_rope(axis, inv, 3, neox)
