"""LieRE and ComRoPE (``LearnedRotation``): parity with the formula and with the reference
code's constructions in float64, the (non-)relative property, orthogonality, gradients,
attention backends and the KV cache, errors, meta-device builds, the registry."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import Tensor
from torch.testing import assert_close

from posenc.attention import Attention, Backend, KVCache
from posenc.positions import grid_positions
from posenc.registry import ModelDims, build_encoding
from posenc.rotary import LearnedRotation, MultiAxisRotary

KINDS = ["liere", "comrope_ap", "comrope_ld"]
F64 = torch.float64


def make(kind: str, head_dim: int = 12, num_axes: int = 2, seed: int = 0, **kw: Any) -> Any:
    """A float64 rotation with visible (non-initial) random parameters."""
    torch.manual_seed(seed)
    rot = LearnedRotation(head_dim, num_axes, kind=kind, **kw).double()  # type: ignore[arg-type]
    with torch.no_grad():
        for p in rot.parameters():
            p.normal_(std=0.7)
    return rot


def formula_matrix(rot: LearnedRotation, positions: Tensor) -> Tensor:
    """R(p) written out: the full ``head_dim × head_dim`` generators ``A_a`` (block-diagonal,
    built here from the parameters and the paper's definition of each kind), ``exp(Σ p_a s_a
    A_a)`` in float64. Returns ``(heads, seq, head_dim, head_dim)``; positions ``(N, seq)``."""
    w = rot.weight.detach().double()
    heads, n_axes, b = rot.num_heads, rot.num_axes, rot.block_size
    blocks = rot.num_blocks
    full = torch.zeros(heads, n_axes, rot.head_dim, rot.head_dim, dtype=F64)
    for h in range(heads):
        for a in range(n_axes):
            for j in range(blocks):
                if rot.kind == "liere":
                    block = w[h, a, j] - w[h, a, j].T
                elif rot.kind == "comrope_ap":  # block j belongs to axis j mod N
                    block = (w[h, 0, j] - w[h, 0, j].T) * float(j % n_axes == a)
                else:  # comrope_ld: θ_{a,j} (W_j − W_jᵀ)
                    assert rot.axis_scale is not None
                    theta = rot.axis_scale.detach().double()[a, j]
                    block = theta * (w[h, 0, j] - w[h, 0, j].T)
                full[h, a, j * b : (j + 1) * b, j * b : (j + 1) * b] = block
    scale = torch.tensor(rot.position_scale, dtype=F64)
    coords = positions.double().T * scale  # (seq, N)
    exponent = torch.einsum("sa,haij->hsij", coords, full)
    return torch.linalg.matrix_exp(exponent.contiguous())


def apply(matrix: Tensor, x: Tensor) -> Tensor:
    """``R x`` for x ``(batch, heads, seq, d)`` and R ``(heads, seq, d, d)``."""
    return (matrix @ x[..., None])[..., 0]


def scores(rot: LearnedRotation, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
    q2, k2 = rot(q, k, q_pos, k_pos)
    return q2 @ k2.transpose(-1, -2)


# ---- parity with the formula ---------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("head_dim", "num_axes", "block"), [(12, 2, 3), (16, 3, 4), (8, 1, 2)])
def test_rotation_equals_the_formula_in_float64(
    kind: str, head_dim: int, num_axes: int, block: int
) -> None:
    rot = make(kind, head_dim, num_axes, block_size=block, num_heads=2, position_scale=0.3)
    pos = torch.randn(num_axes, 7, dtype=F64) * 3
    q, k = (torch.randn(2, 2, 7, head_dim, dtype=F64) for _ in range(2))
    want = formula_matrix(rot, pos)
    got_q, got_k = rot(q, k, pos if num_axes > 1 else pos[0], pos if num_axes > 1 else pos[0])
    assert_close(got_q, apply(want, q), rtol=1e-12, atol=1e-12)
    assert_close(got_k, apply(want, k), rtol=1e-12, atol=1e-12)
    assert_close(rot.matrix(pos if num_axes > 1 else pos[0]), want, rtol=1e-12, atol=1e-12)


def test_batched_positions_rotate_each_row_by_its_own() -> None:
    rot = make("liere", 12, 2, block_size=4, num_heads=3)
    pos = torch.randint(0, 9, (2, 2, 5))  # (axes, batch, seq)
    q, k = (torch.randn(2, 3, 5, 12, dtype=F64) for _ in range(2))
    got_q, got_k = rot(q, k, pos, pos)
    for row in range(2):
        want = formula_matrix(rot, pos[:, row])
        assert_close(got_q[row], apply(want, q[row : row + 1])[0], rtol=1e-12, atol=1e-12)
        assert_close(got_k[row], apply(want, k[row : row + 1])[0], rtol=1e-12, atol=1e-12)


# ---- parity with the reference code's constructions ----------------------------------------
# Read: Longin-Yu/ComRoPE model.py (commit 7aeef08): RoPESelfAttentionBase.get_rotation_matrix
# (lnR = Σ_a A_a · (p_a I) per block, torch.matrix_exp, blocks placed on the diagonal by
# block_diag_selector, R applied to q and k), LieREAttention / ComRoPELDAttention /
# ComRoPEAPAttention.get_exponent_matrix (freqs − freqsᵀ; LD times multiplier (1, N,
# blocks, 1, 1); AP times the mask block j ↦ axis j mod N). StanfordMIMI/LieRE
# models/rope_vit.py (commit b27b41b): LierePositionEncoder.forward (triu(raw, 1) − 0.5,
# minus its transpose, Σ_a p_a · bases, matrix_exp) and FlexibleAttention.apply_transforms
# (generators (heads · blocks) viewed as (heads, blocks), R per block times the b-vector).


def comrope_reference(freqs: Tensor, kind: str, positions: Tensor, mult: Tensor | None) -> Tensor:
    """ComRoPE's R, re-derived: freqs ``(heads, 1 or N, blocks, b, b)``, positions ``(bs,
    len, N)`` → ``(bs, len, heads, head_dim, head_dim)``."""
    _, _, blocks, b, _ = freqs.shape
    n_axes = positions.shape[-1]
    a_mat = freqs - freqs.transpose(-1, -2)
    if kind == "comrope_ld":
        assert mult is not None
        a_mat = a_mat * mult  # (1, N, blocks, 1, 1)
    elif kind == "comrope_ap":
        mask = torch.zeros(n_axes, blocks, dtype=F64)
        for i in range(n_axes):
            mask[i, i::n_axes] = 1.0
        a_mat = a_mat.expand(-1, n_axes, -1, -1, -1) * mask.view(1, n_axes, blocks, 1, 1)
    eye = torch.eye(b, dtype=F64)
    pos = positions[..., None, None, None] * eye  # (bs, len, N, 1, b, b)
    ln_r = torch.matmul(a_mat, pos.unsqueeze(2)).sum(dim=3)  # (bs, len, heads, blocks, b, b)
    r = torch.matrix_exp(ln_r)
    selector = torch.kron(torch.eye(blocks, dtype=torch.bool), torch.ones(b, b, dtype=torch.bool))
    full = torch.zeros(*r.shape[:3], blocks * b, blocks * b, dtype=F64)
    full[:, :, :, selector] = r.reshape(*r.shape[:3], -1)
    return full


@pytest.mark.parametrize("kind", KINDS)
def test_comrope_code_construction(kind: str) -> None:
    """ComRoPE's repository implements all three (LieRE as freqs − freqsᵀ per axis)."""
    heads, n_axes, blocks, b = 3, 2, 4, 4
    g = torch.Generator().manual_seed(1)
    freqs = torch.randn(
        heads, n_axes if kind == "liere" else 1, blocks, b, b, generator=g, dtype=F64
    )
    mult = torch.randn(1, n_axes, blocks, 1, 1, generator=g, dtype=F64)
    positions = torch.rand(2, 6, n_axes, generator=g, dtype=F64)  # ComRoPE's (bs, len, N)
    ld = kind == "comrope_ld"
    rot = LearnedRotation(
        b * blocks,
        n_axes,
        kind=kind,  # type: ignore[arg-type]
        block_size=b,
        num_heads=heads,
        weight=freqs,
        axis_scale=mult.view(n_axes, blocks) if ld else None,
        dtype=F64,
    )
    q, k = (torch.randn(2, heads, 6, b * blocks, dtype=F64, generator=g) for _ in range(2))
    r = comrope_reference(freqs, kind, positions, mult if ld else None).transpose(1, 2)
    pos = positions.permute(2, 0, 1)  # posenc's (N, batch, seq)
    got_q, got_k = rot(q, k, pos, pos)
    assert_close(got_q, apply(r, q), rtol=1e-12, atol=1e-12)
    assert_close(got_k, apply(r, k), rtol=1e-12, atol=1e-12)


def test_liere_code_construction_and_initialization() -> None:
    heads, n_axes, blocks, b = 2, 3, 2, 4
    g = torch.Generator().manual_seed(2)
    # LieRE: raw (N, layers=1, heads · blocks, b, b) ~ U[0, 2π)
    raw = torch.rand(n_axes, 1, heads * blocks, b, b, generator=g, dtype=F64) * 2 * math.pi
    upper = torch.triu(raw, diagonal=1) - 0.5
    bases = upper - upper.transpose(-1, -2)
    positions = torch.rand(1, 5, n_axes, generator=g, dtype=F64)
    gen_pos = (positions.reshape(1, 5, n_axes, 1, 1, 1, 1) * bases).sum(dim=-5)
    transforms = torch.matrix_exp(gen_pos)  # (1, tokens, 1, heads · blocks, b, b)
    transforms = transforms.squeeze(2).view(1, 5, heads, blocks, b, b).transpose(1, 2)
    q = torch.randn(1, heads, 5, blocks * b, dtype=F64, generator=g)
    want = (transforms @ q.reshape(1, heads, 5, blocks, b, 1)).flatten(start_dim=-3)
    # posenc: weight[h, a, j] = triu(raw[a, 0, h · blocks + j], 1) (LieRE's initialization)
    weight = raw[:, 0].triu(diagonal=1).view(n_axes, heads, blocks, b, b).transpose(0, 1)
    rot = LearnedRotation.liere(blocks * b, n_axes, block_size=b, num_heads=heads, dtype=F64)
    with torch.no_grad():
        rot.weight.copy_(weight)
    pos = positions[0].T  # (N, seq)
    got, _ = rot(q, q, pos, pos)
    assert_close(got, want, rtol=1e-12, atol=1e-12)
    # initialization: LieRE's U[0, 2π) strict upper triangle, zero elsewhere
    fresh = LearnedRotation.liere(16, 2, block_size=8, num_heads=4)
    w = fresh.weight.detach()
    assert torch.equal(w, w.triu(diagonal=1))
    upper_entries = w[..., 0, 1:]
    assert upper_entries.min() >= 0 and upper_entries.max() < 2 * math.pi
    assert upper_entries.mean().item() == pytest.approx(math.pi, abs=0.6)


def test_comrope_initialization_is_the_codes() -> None:
    g = torch.Generator().manual_seed(5)
    rot = LearnedRotation.comrope_ld(64, 2, block_size=8, num_heads=8)
    rot.reset_parameters(g)
    g2 = torch.Generator().manual_seed(5)
    assert torch.equal(rot.weight.detach(), torch.randn(8, 1, 8, 8, 8, generator=g2))
    assert rot.axis_scale is not None
    assert torch.equal(rot.axis_scale.detach(), torch.randn(2, 8, generator=g2))
    ap = LearnedRotation.comrope_ap(64, 2, block_size=8, num_heads=8, init_scale=0.1)
    assert ap.weight.std().item() == pytest.approx(0.1, rel=0.1)


# ---- properties ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["comrope_ap", "comrope_ld"])
def test_comrope_scores_read_only_the_position_difference(kind: str) -> None:
    rot = make(kind, 16, 3, block_size=4, num_heads=2)
    gens = rot.generators().detach()  # (heads, axes, blocks, b, b): every pair commutes
    for a in range(3):
        for c in range(3):
            assert_close(gens[:, a] @ gens[:, c], gens[:, c] @ gens[:, a], rtol=0, atol=1e-12)
    q, k = (torch.randn(1, 2, 8, 16, dtype=F64) for _ in range(2))
    q_pos, k_pos = torch.randn(3, 8, dtype=F64) * 4, torch.randn(3, 8, dtype=F64) * 4
    shift = torch.tensor([[3.5], [-7.0], [11.25]], dtype=F64)
    want = scores(rot, q, k, q_pos, k_pos)
    assert_close(scores(rot, q, k, q_pos + shift, k_pos + shift), want, rtol=1e-10, atol=1e-10)


def test_liere_scores_are_not_relative() -> None:
    rot = make("liere", 16, 2, block_size=4, num_heads=2)
    gens = rot.generators().detach()
    assert not torch.allclose(gens[:, 0] @ gens[:, 1], gens[:, 1] @ gens[:, 0], atol=1e-3)
    q, k = (torch.randn(1, 2, 8, 16, dtype=F64) for _ in range(2))
    q_pos, k_pos = torch.randn(2, 8, dtype=F64), torch.randn(2, 8, dtype=F64)
    shift = torch.tensor([[2.0], [-3.0]], dtype=F64)
    moved = scores(rot, q, k, q_pos + shift, k_pos + shift)
    assert (moved - scores(rot, q, k, q_pos, k_pos)).abs().max() > 1e-2
    assert not rot.relative and LearnedRotation.liere(8, 1).relative  # one axis commutes
    # one axis: a single generator commutes with itself, so LieRE is relative there
    one = make("liere", 8, 1, block_size=4)
    p1, p2 = torch.randn(8, dtype=F64), torch.randn(8, dtype=F64)
    q1, k1 = q[:, :1, :, :8], k[:, :1, :, :8]
    assert_close(scores(one, q1, k1, p1 + 5, p2 + 5), scores(one, q1, k1, p1, p2))


@pytest.mark.parametrize("kind", KINDS)
def test_rotation_is_orthogonal_and_the_identity_at_zero(kind: str) -> None:
    rot = make(kind, 16, 3, block_size=8 if kind != "comrope_ap" else 4, num_heads=2)
    pos = torch.randn(3, 6, dtype=F64) * 5
    r = rot.matrix(pos)  # (heads, seq, d, d)
    eye = torch.eye(16, dtype=F64)
    assert_close(r.transpose(-1, -2) @ r, eye.expand_as(r), rtol=0, atol=1e-12)
    x = torch.randn(2, 2, 6, 16, dtype=F64)
    got, _ = rot(x, x, pos, pos)
    assert_close(got.norm(dim=-1), x.norm(dim=-1), rtol=1e-12, atol=1e-12)
    zero = torch.zeros(3, 6, dtype=torch.long)
    assert torch.equal(rot.matrix(zero), eye.expand(2, 6, 16, 16))
    assert torch.equal(rot(x, x, zero, zero)[0], x)


def test_comrope_ld_with_2x2_blocks_on_one_axis_is_rope() -> None:
    """b = 2, one axis: block j is θ_j (w01 − w10) [[0, 1], [−1, 0]], whose exponential is
    RoPE's rotation of pair j at frequency θ_j (w10 − w01) (adjacent pairs)."""
    rot = make("comrope_ld", 12, 1, block_size=2)
    w, theta = rot.weight.detach()[0, 0], rot.axis_scale.detach()[0]
    freqs = (theta * (w[:, 1, 0] - w[:, 0, 1]))[:, None]  # (pairs, 1 axis)
    rope = MultiAxisRotary(12, freqs, layout="interleaved")
    q, k = (torch.randn(2, 3, 9, 12, dtype=F64) for _ in range(2))
    pos = torch.arange(9)
    for got, want in zip(rot(q, k, pos, pos), rope(q, k, pos, pos), strict=True):
        assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_gradcheck_through_the_generators(kind: str) -> None:
    rot = make(kind, 8, 2, block_size=4, num_heads=2)
    q, k = (torch.randn(1, 2, 3, 8, dtype=F64) for _ in range(2))
    pos = torch.randn(2, 3, dtype=F64)
    names = [name for name, _ in rot.named_parameters()]

    def rotated(*params: Tensor) -> tuple[Tensor, Tensor]:
        state = dict(zip(names, params, strict=True))
        return torch.func.functional_call(rot, state, (q, k, pos, pos))

    inputs = tuple(p.detach().clone().requires_grad_() for p in rot.parameters())
    assert torch.autograd.gradcheck(rotated, inputs)


def test_float32_and_bfloat16_inputs_rotate_in_float32() -> None:
    rot = make("comrope_ld", 16, 2, block_size=4).float()
    pos = grid_positions(3, 4)
    x = torch.randn(1, 1, 12, 16)
    want = apply(formula_matrix(rot, pos), x.double())
    got32, _ = rot(x, x, pos, pos)
    assert got32.dtype == torch.float32 and rot.rotary_tables(pos, x.dtype).dtype == torch.float32
    assert_close(got32.double(), want, rtol=1e-5, atol=1e-5)
    got16, _ = rot(x.bfloat16(), x.bfloat16(), pos, pos)
    assert got16.dtype == torch.bfloat16
    # one rounding of the float32 result (not a bf16 rotation)
    assert torch.equal(got16, rotate_in_float32(rot, x.bfloat16(), pos))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("base", [2**14, 2**18, 2**20])
def test_float32_rotations_are_exact_at_large_positions(kind: str, base: int) -> None:
    """The exponent ``p·A`` and its matrix exponential are computed in float64 and the
    rotation cast once (as RoPE's tables are): in float32 throughout, ComRoPE-LD at
    positions near 2^18 was 4.7 off the float64 formula (the generators at their drawn
    initialization, ``|x| ≈ 4``)."""
    torch.manual_seed(0)
    rot = LearnedRotation(16, 2, kind=kind, block_size=4)  # float32, drawn as the references
    line = torch.arange(base - 8, base + 8)
    pos = torch.stack([line, line.flip(0)])
    x = torch.randn(1, 1, 16, 16)
    want = apply(formula_matrix(rot, pos), x.double())
    got, _ = rot(x, x, pos, pos)
    assert got.dtype == torch.float32
    assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def rotate_in_float32(rot: LearnedRotation, x: Tensor, pos: Tensor) -> Tensor:
    r = rot.rotary_tables(pos, torch.float32)
    b = rot.block_size
    parts = x.float().unflatten(-1, (-1, b))[..., None]
    return (r @ parts)[..., 0].flatten(-2).to(x.dtype)


def test_training_moves_the_generators() -> None:
    rot = LearnedRotation.comrope_ap(8, 2, block_size=2, num_heads=2)
    before = rot.weight.detach().clone()
    opt = torch.optim.SGD(rot.parameters(), lr=0.1)
    q, k = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    pos = grid_positions(2, 3)
    q2, k2 = rot(q, k, pos, pos)
    (q2 @ k2.transpose(-1, -2)).square().sum().backward()
    opt.step()
    assert not torch.equal(rot.weight.detach(), before)


# ---- attention backends and the KV cache ---------------------------------------------------

DIM, HEADS = 24, 2


def attention_reference(
    attn: Attention, rot: LearnedRotation, x: Tensor, pos: Tensor, causal: bool
) -> Tensor:
    """softmax(q' k'ᵀ / √d) v with q', k' rotated by the formula's matrices."""
    batch, seq, _ = x.shape
    split = lambda t: t.view(batch, seq, HEADS, -1).transpose(1, 2)  # noqa: E731
    q, k, v = split(attn.q_proj(x)), split(attn.k_proj(x)), split(attn.v_proj(x))
    r = formula_matrix(rot, pos)
    q, k = apply(r, q), apply(r, k)
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        logits = logits.masked_fill(torch.ones(seq, seq).triu(1).bool(), float("-inf"))
    out = logits.softmax(-1) @ v
    return attn.out_proj(out.transpose(1, 2).reshape(batch, seq, DIM))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("backend", ["sdpa", "chunked", "flex"])
@pytest.mark.parametrize("causal", [False, True])
def test_every_backend_equals_the_written_out_softmax(
    kind: str, backend: str, causal: bool
) -> None:
    """float64 to 1e-10 (flex eager, as tests/attention/test_backends.py: compiling it
    on the CPU takes a minute and float32 only)."""
    rot = make(kind, DIM // HEADS, 2, block_size=4, num_heads=HEADS)
    torch.manual_seed(1)
    chosen = Backend(backend, block_size=4, compile=False)  # type: ignore[arg-type]
    attn = Attention(DIM, HEADS, pos=rot, causal=causal, backend=chosen).double()
    x = torch.randn(2, 12, DIM, dtype=F64)
    pos = grid_positions(3, 4)
    with torch.no_grad():  # flex on the CPU is forward only
        got = attn(x, positions=pos)
        want = attention_reference(attn, rot, x, pos, causal)
    assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("backend", ["sdpa", "chunked"])
def test_kv_cache_decoding_equals_the_full_forward(kind: str, backend: str) -> None:
    rot = make(kind, DIM // HEADS, 3, block_size=4, num_heads=HEADS)
    attn = Attention(DIM, HEADS, pos=rot, causal=True, backend=Backend(backend, block_size=4))  # type: ignore[arg-type]
    attn = attn.double()
    x = torch.randn(2, 8, DIM, dtype=F64)
    pos = torch.stack((torch.arange(8) // 4, torch.arange(8) // 2 % 2, torch.arange(8) % 2))
    with torch.no_grad():
        full = attn(x, positions=pos)
        cache = KVCache()
        steps = [attn(x[:, :3], positions=pos[:, :3], cache=cache)]
        steps += [
            attn(x[:, t : t + 1], positions=pos[:, t : t + 1], cache=cache) for t in range(3, 8)
        ]
    assert cache.length == 8
    assert_close(torch.cat(steps, dim=1), full, rtol=1e-12, atol=1e-12)


# ---- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"block_size": 5}, "block_size must be at least 2 and divide head_dim"),
        ({"block_size": 1}, "block_size must be at least 2"),
        ({"block_size": 0}, "block_size"),
        ({"num_axes": 0}, "num_axes"),
        ({"num_heads": 0}, "num_heads"),
        ({"kind": "rope"}, "kind"),
        ({"init_scale": -1.0}, "init_scale"),
        ({"position_scale": (1.0, 2.0, 3.0)}, "position_scale must be one value or one per axis"),
        ({"position_scale": 0.0}, r"position_scale\[0\]"),
        ({"weight": torch.zeros(1, 2, 3, 4, 4)}, r"weight must have shape \(1, 1, 3, 4, 4\)"),
        ({"weight": torch.zeros(1, 1, 3, 4, 4, dtype=torch.long)}, "weight must be a floating"),
        ({"axis_scale": torch.zeros(3, 3)}, r"axis_scale must have shape \(2, 3\)"),
        ({"kind": "comrope_ap", "axis_scale": torch.zeros(2, 3)}, "axis_scale is ComRoPE-LD's"),
        ({"kind": "comrope_ap", "num_axes": 4, "block_size": 4}, "comrope_ap gives each axis"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, Any], match: str) -> None:
    args = {"head_dim": 12, "num_axes": 2, "block_size": 4} | kwargs
    with pytest.raises(ValueError, match=match):
        LearnedRotation(**args)


@pytest.mark.parametrize("name", ["weight", "axis_scale"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_starting_tensors_are_refused(name: str, bad: float) -> None:
    shapes = {"weight": (1, 1, 3, 4, 4), "axis_scale": (2, 3)}
    value = torch.zeros(shapes[name])
    value.view(-1)[1] = bad
    with pytest.raises(ValueError, match=rf"^{name} must be finite"):
        LearnedRotation(12, 2, block_size=4, **{name: value})


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_parameters_are_refused_by_the_validated_call(kind: str, bad: float) -> None:
    """A parameter that became NaN or inf (a diverged step, a bad checkpoint) would give NaN
    rotations silently; the validated call (``forward``) names it."""
    rot = LearnedRotation(12, 2, kind=kind, block_size=4)
    parameter = "axis_scale" if kind == "comrope_ld" else "weight"
    with torch.no_grad():
        getattr(rot, parameter).view(-1)[0] = bad
    x = torch.randn(1, 1, 6, 12)
    pos = grid_positions(2, 3)
    with pytest.raises(ValueError, match=rf"^{parameter} must be finite"):
        rot(x, x, pos, pos)


def test_bad_inputs_are_named() -> None:
    rot = LearnedRotation.comrope_ld(8, 2, block_size=4, num_heads=2)
    x = torch.randn(1, 2, 4, 8)
    pos = grid_positions(2, 2)
    with pytest.raises(ValueError, match=r"q_pos must have shape \(2, seq\)"):
        rot(x, x, torch.arange(4), pos)
    with pytest.raises(ValueError, match="k_pos must have shape"):
        rot(x, x, pos, torch.zeros(3, 4))
    with pytest.raises(ValueError, match="q must be a floating tensor"):
        rot(x.long(), x, pos, pos)
    with pytest.raises(ValueError, match="k has last dim 6"):
        rot(x, torch.randn(1, 2, 4, 6), pos, pos)
    with pytest.raises(
        ValueError, match="q has 3 heads but this LearnedRotation has generators for 2"
    ):
        rot(torch.randn(1, 3, 4, 8), x, pos, pos)
    with pytest.raises(ValueError, match="k_pos must be an integer or floating"):
        rot(x, x, pos, pos.bool())
    with pytest.raises(ValueError, match="q_pos must be finite"):
        rot(x, x, torch.full((2, 4), float("nan")), pos)


# ---- state ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_meta_build_then_reset_equals_a_normal_build(kind: str) -> None:
    torch.manual_seed(3)
    normal = LearnedRotation(16, 3, kind=kind, num_heads=2)  # type: ignore[arg-type]
    with torch.device("meta"):
        meta = LearnedRotation(16, 3, kind=kind, num_heads=2)  # type: ignore[arg-type]
    assert meta.weight.is_meta
    meta.to_empty(device="cpu")
    torch.manual_seed(3)
    meta.reset_parameters()
    for (name, a), (_, b) in zip(normal.named_parameters(), meta.named_parameters(), strict=True):
        assert torch.equal(a, b), name
    g = torch.Generator().manual_seed(9)
    meta.reset_parameters(g)
    normal.reset_parameters(torch.Generator().manual_seed(9))
    assert torch.equal(meta.weight, normal.weight)


def test_given_weights_are_restored_by_reset_and_survive_a_meta_build() -> None:
    weight = torch.randn(2, 1, 2, 4, 4)
    theta = torch.randn(3, 2)
    with torch.device("meta"):
        rot = LearnedRotation(
            8, 3, kind="comrope_ld", block_size=4, num_heads=2, weight=weight, axis_scale=theta
        )
    rot.to_empty(device="cpu")
    rot.reset_parameters()
    assert torch.equal(rot.weight.detach(), weight)
    assert rot.axis_scale is not None and torch.equal(rot.axis_scale.detach(), theta)


@pytest.mark.parametrize("kind", KINDS)
def test_state_dict_round_trip(kind: str) -> None:
    a = make(kind, 16, 2, seed=1, num_heads=2)
    b = make(kind, 16, 2, seed=2, num_heads=2)
    pos = grid_positions(3, 4)
    x = torch.randn(1, 2, 12, 16, dtype=F64)
    assert not torch.equal(a(x, x, pos, pos)[0], b(x, x, pos, pos)[0])
    b.load_state_dict(a.state_dict())
    assert sorted(a.state_dict()) == (
        ["axis_scale", "weight"] if kind == "comrope_ld" else ["weight"]
    )
    assert torch.equal(a(x, x, pos, pos)[0], b(x, x, pos, pos)[0])


# ---- the registry --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_registry_builds_each_preset_on_a_video_grid_and_it_trains(kind: str) -> None:
    dims = ModelDims(dim=64, num_heads=4, grid=(2, 4, 4), causal=False)
    rot = build_encoding(kind, dims)
    assert isinstance(rot, LearnedRotation) and rot.kind == kind
    assert (rot.num_axes, rot.num_heads, rot.head_dim) == (3, 4, 16)
    assert rot.position_scale == (0.5, 0.25, 0.25)
    assert not rot.shared_across_layers
    attn = Attention(64, 4, pos=rot, causal=False)
    x = torch.randn(2, 32, 64)
    attn(x, positions=grid_positions(2, 4, 4)).square().mean().backward()
    assert rot.weight.grad is not None and rot.weight.grad.abs().sum() > 0
    image = build_encoding(kind, ModelDims(dim=32, num_heads=2, grid=(4, 4)), block_size=2)
    assert (image.num_axes, image.block_size) == (2, 2)


def test_registry_refuses_a_sequence_model_and_names_unknown_arguments() -> None:
    with pytest.raises(ValueError, match="grid"):
        build_encoding("liere", ModelDims(dim=32, num_heads=2))
    with pytest.raises(ValueError, match="unknown argument"):
        build_encoding("comrope_ld", ModelDims(dim=32, num_heads=2, grid=(4, 4)), base=10.0)


def test_grouped_query_attention_needs_shared_generators() -> None:
    """A query head and its key head must rotate alike: per-head generators refuse GQA."""
    rot = LearnedRotation.comrope_ld(DIM // 4, 2, block_size=3, num_heads=4)
    with pytest.raises(ValueError, match=r"num_kv_heads\): grouped-query attention needs"):
        Attention(DIM, 4, num_kv_heads=2, pos=rot)
    Attention(DIM, 4, pos=rot)  # one key head per query head: fine
    shared = LearnedRotation.comrope_ld(DIM // 4, 2, block_size=3, num_heads=1)
    attn = Attention(DIM, 4, num_kv_heads=2, pos=shared, causal=False)  # one set: GQA too
    x = torch.randn(2, 6, DIM)
    assert attn(x, grid_positions(2, 3)).shape == x.shape
    with pytest.raises(ValueError, match=r"^pos: LearnedRotation has num_heads=2 but"):
        Attention(DIM, 4, pos=LearnedRotation.comrope_ld(DIM // 4, 2, block_size=3, num_heads=2))


def test_compiles_without_graph_breaks() -> None:
    torch._dynamo.reset()
    rot = LearnedRotation.comrope_ld(16, 2, num_heads=2)
    q = torch.randn(1, 2, 12, 16)
    pos = grid_positions(3, 4)
    compiled = torch.compile(rot, fullgraph=True)
    for got, want in zip(compiled(q, q, pos, pos), rot(q, q, pos, pos), strict=True):
        assert_close(got, want, rtol=1e-5, atol=1e-5)
