"""CoPE: x-transformers parity, counting properties, the formula by loops, backends, cache."""

from __future__ import annotations

import functools
import math
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.testing import assert_close

from posenc.attention import Attention, Backend, KVCache, attend, hooks_of
from posenc.attention.mask import causal_mask
from posenc.scores.cope import CoPE, cope_bias, cope_positions
from tests.attention.test_backends import BACKENDS, HEAD_DIM, HEADS, MASKS, inputs, mask_case, run
from tests.attention.test_flash import record_plans

VARIANTS: list[dict[str, Any]] = [
    {},
    {"talking_heads": True},
    {"interpolation": "soft_onehot"},
    {"scale_term": True},
]


def variant_id(kwargs: dict[str, Any]) -> str:
    return "-".join(f"{k}={v}" for k, v in kwargs.items()) or "default"


def trained(cope: CoPE, seed: int = 0, std: float = 0.5) -> CoPE:
    """Random (non-zero) parameters: a trained CoPE is not at its zero init."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in cope.parameters():
            p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64) * std)
    return cope


def direct_cope(
    q: Tensor,
    scores: Tensor,
    allowed: Tensor,
    pos_emb: Tensor,
    *,
    max_pos: int,
    interpolation: str = "linear",
    temperature: float = 0.05,
    mixing: Tensor | None = None,
    scale_term: bool = False,
) -> Tensor:
    """The term by the paper's formulas, one pair at a time, in Python floats (float64)."""
    batch, heads, rows, keys = scores.shape
    head_dim = q.shape[-1]
    s, qs, e = scores.tolist(), q.tolist(), pos_emb.tolist()
    visible = allowed.expand(batch, heads, rows, keys).tolist()
    w = mixing.tolist() if mixing is not None else None
    out = torch.zeros(batch, heads, rows, keys, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            for i in range(rows):
                logit = [
                    sum(w[h][g] * s[b][g][i][t] for g in range(heads)) if w else s[b][h][i][t]
                    for t in range(keys)
                ]
                gate = [
                    1.0 / (1.0 + math.exp(-logit[t])) if visible[b][h][i][t] else 0.0
                    for t in range(keys)
                ]
                z = [sum(qs[b][h][i][d] * e[p][d] for d in range(head_dim)) for p in range(max_pos)]
                for j in range(keys):
                    p = min(sum(gate[j:]), max_pos - 1)
                    if interpolation == "linear":
                        lo, hi = math.floor(p), math.ceil(p)
                        value = (p - lo) * z[hi] + (1 - (p - lo)) * z[lo]
                    else:
                        weights = [math.exp(-abs(p - n) / temperature) for n in range(max_pos)]
                        value = sum(a * zn for a, zn in zip(weights, z, strict=True)) / sum(weights)
                    out[b, h, i, j] = value / math.sqrt(head_dim) if scale_term else value
    return out


def random_case(
    batch: int, heads: int, rows: int, keys: int, head_dim: int, seed: int
) -> tuple[Tensor, Tensor, Tensor]:
    """q, scores ``scale · q kᵀ`` and a causal + key padding ``allowed``, float64."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, rows, head_dim, generator=generator, dtype=torch.float64)
    k = torch.randn(batch, heads, keys, head_dim, generator=generator, dtype=torch.float64)
    scores = q @ k.transpose(-1, -2) * head_dim**-0.5
    padding = torch.ones(batch, keys, dtype=torch.bool)
    padding[0, 1] = False  # a hidden key between visible keys and the queries
    allowed = causal_mask(rows, keys) & padding[:, None, None, :]
    return q, scores, allowed


# ----------------------------------------------------------------------------- the formula


@pytest.mark.parametrize("kwargs", VARIANTS, ids=variant_id)
@pytest.mark.parametrize(("rows", "keys"), [(6, 6), (3, 7)])  # self-attention, a KV-cache step
def test_matches_direct_loops(kwargs: dict[str, Any], rows: int, keys: int) -> None:
    cope = trained(CoPE(3, 4, max_pos=4, dtype=torch.float64, **kwargs), std=1.0)
    q, scores, allowed = random_case(2, 3, rows, keys, 4, seed=rows)
    scores = scores * 4  # gates near 0 and 1 as well as in between; positions reach the cap
    got = cope(q, scores, allowed)
    want = direct_cope(
        q,
        scores,
        allowed,
        cope.pos_emb.detach(),
        max_pos=4,
        interpolation=cope.interpolation,
        mixing=None if cope.talking_heads is None else cope.talking_heads.detach(),
        scale_term=cope.scale_term,
    )
    assert_close(got, want)
    positions = cope.positions(scores, allowed)
    assert bool((positions == 3).any()) and bool(((positions > 0) & (positions < 3)).any())
    k_pos = torch.arange(keys)  # not read: CoPE's positions come from the gates
    hooked = cope.transform_scores(
        scores, q=q, k=q, q_pos=k_pos[-rows:], k_pos=k_pos, allowed=allowed
    )
    assert_close(hooked, scores + got)


def test_functional_core_matches_the_module() -> None:
    cope = trained(CoPE(3, 4, max_pos=5, talking_heads=True, dtype=torch.float64))
    q, scores, allowed = random_case(2, 3, 5, 5, 4, seed=7)
    assert cope.talking_heads is not None
    positions = cope_positions(scores, allowed, max_pos=5, mixing=cope.talking_heads)
    assert_close(positions, cope.positions(scores, allowed), rtol=0, atol=0)
    assert_close(cope_bias(q, cope.pos_emb, positions), cope(q, scores, allowed), rtol=0, atol=0)


# ---------------------------------------------------------------------------- properties


def gated_logits(pattern: Tensor) -> Tensor:
    """±1e4 in float64: σ gives exactly 1 where ``pattern`` is True and exactly 0 elsewhere."""
    return torch.where(pattern, 1e4, -1e4).to(torch.float64)


@pytest.mark.parametrize("max_pos", [3, 64])
def test_positions_count_the_gated_visible_keys_between_key_and_query(max_pos: int) -> None:
    generator = torch.Generator().manual_seed(0)
    batch, heads, length = 2, 3, 12
    gated = torch.rand(batch, heads, length, length, generator=generator) < 0.6
    padding = torch.ones(batch, length, dtype=torch.bool)
    padding[1, 4:7] = False
    allowed = causal_mask(length, length) & padding[:, None, None, :]
    positions = cope_positions(gated_logits(gated), allowed, max_pos=max_pos)
    counts = torch.zeros(batch, heads, length, length, dtype=torch.float64)
    for b, h, i, j in torch.cartesian_prod(*(torch.arange(n) for n in counts.shape)).tolist():
        # Keys after the query (j > i) have no visible key at or after them: position 0.
        counts[b, h, i, j] = sum(bool(gated[b, h, i, t] and padding[b, t]) for t in range(j, i + 1))
    assert float(counts.max()) > 2  # the cap at max_pos = 3 is reached
    assert_close(positions, counts.clamp(max=max_pos - 1), rtol=0, atol=0)


def test_hidden_keys_contribute_nothing() -> None:
    cope = trained(CoPE(3, 4, max_pos=8, talking_heads=True, dtype=torch.float64))
    q, scores, allowed = random_case(2, 3, 6, 6, 4, seed=1)
    noise = torch.randn(
        scores.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64
    )
    changed = scores + 50.0 * noise.masked_fill(allowed, 0.0)  # only hidden pairs change
    assert_close(cope.positions(changed, allowed), cope.positions(scores, allowed), rtol=0, atol=0)
    assert_close(cope(q, changed, allowed), cope(q, scores, allowed), rtol=0, atol=0)


def test_bidirectional_rows_count_to_the_last_visible_key() -> None:
    # The documented row form without causal order: keys after the query count too.
    gated = torch.rand(1, 2, 5, 7, generator=torch.Generator().manual_seed(3)) < 0.5
    positions = cope_positions(gated_logits(gated), None, max_pos=100)
    want = gated.flip(-1).cumsum(-1).flip(-1).to(torch.float64)
    assert_close(positions, want, rtol=0, atol=0)


def test_integer_positions_read_one_embedding() -> None:
    cope = trained(CoPE(2, 4, max_pos=6, dtype=torch.float64))
    gated = torch.rand(1, 2, 6, 6, generator=torch.Generator().manual_seed(4)) < 0.7
    q = torch.randn(1, 2, 6, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    causal = causal_mask(6, 6)
    positions = cope.positions(gated_logits(gated), causal).long()
    table = q @ cope.pos_emb.detach().T  # z_i[p]
    assert_close(cope(q, gated_logits(gated), causal), table.gather(-1, positions), rtol=0, atol=0)


def test_zero_init_changes_nothing() -> None:
    cope = CoPE(4, 8, talking_heads=True)
    assert_close(cope.pos_emb.detach(), torch.zeros(16, 8), rtol=0, atol=0)
    q, k, v = inputs(torch.float32, 40, 4)
    scores = q @ k.transpose(-1, -2)
    pos = torch.arange(40)
    same = cope.transform_scores(scores, q=q, k=k, q_pos=pos, k_pos=pos, allowed=None)
    assert_close(same, scores, rtol=0, atol=0)
    with torch.no_grad():
        assert_close(attend(q, k, v, pos=cope, causal=True), attend(q, k, v, causal=True))


def test_scale_term_divides_the_position_term_by_sqrt_head_dim() -> None:
    # The official code's default: logits = (q·k + q·e[p]) / √d.
    plain = trained(CoPE(4, 8, dtype=torch.float64))
    scaled = CoPE(4, 8, scale_term=True, dtype=torch.float64)
    scaled.load_state_dict(plain.state_dict())
    q, k, v = inputs(torch.float64, 40, 4)
    scores = q @ k.transpose(-1, -2) / math.sqrt(8)
    causal = causal_mask(40, 40)
    term = plain(q, scores, causal)
    assert_close(scaled(q, scores, causal), term / math.sqrt(8))
    logits = (q @ k.transpose(-1, -2) + term) / math.sqrt(8)
    manual = logits.masked_fill(~causal, float("-inf")).softmax(-1) @ v
    assert_close(attend(q, k, v, pos=scaled, causal=True), manual)


# ------------------------------------------------------------------------ x-transformers


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    ("talking_heads", "padding"),
    # Not talking heads with padding: x-transformers mixes the masked logits and re-masks
    # causal order only, so a padded key can get gate 1 there (see CoPE's docstring).
    [(False, False), (False, True), (True, False)],
)
def test_matches_x_transformers_cope_module(
    talking_heads: bool, padding: bool, dtype: torch.dtype
) -> None:
    xt = pytest.importorskip("x_transformers.x_transformers")
    heads, head_dim, max_pos = 4, 8, 6
    reference = xt.CoPE(head_dim, heads, max_pos, talking_heads=talking_heads).to(dtype)
    with torch.no_grad():
        reference.pos_emb.normal_(generator=torch.Generator().manual_seed(0))
    cope = CoPE(heads, head_dim, max_pos=max_pos, talking_heads=talking_heads, dtype=dtype)
    with torch.no_grad():
        cope.pos_emb.copy_(reference.pos_emb)
        if cope.talking_heads is not None:
            cope.talking_heads.copy_(reference.talking_heads.weight[:, :, 0, 0])
    q, scores, allowed = random_case(2, heads, 12, 12, head_dim, seed=8)
    q, scores = q.to(dtype), (scores * 3).to(dtype)
    if not padding:  # causal order only
        allowed = causal_mask(12, 12).expand(2, 1, 12, 12)
    # x-transformers reads the masked logits (Attend fills hidden pairs before calling CoPE).
    masked = scores.masked_fill(~allowed, -torch.finfo(dtype).max)
    # Equal to rounding, not bit for bit: the interpolation is computed as
    # z[⌊p⌋] + w (z[⌊p⌋ + 1] − z[⌊p⌋]) instead of w z[⌈p⌉] + (1 − w) z[⌊p⌋] (fewer passes).
    assert_close(cope(q, scores, allowed), reference(q, masked))


def copy_attention(reference: nn.Module, ours: Attention) -> None:
    with torch.no_grad():
        for mine, theirs in [
            ("q_proj", "to_q"),
            ("k_proj", "to_k"),
            ("v_proj", "to_v"),
            ("out_proj", "to_out"),
        ]:
            getattr(ours, mine).weight.copy_(getattr(reference, theirs).weight)
        cope = reference.attend.cope
        cope.pos_emb.normal_(generator=torch.Generator().manual_seed(1))
        ours.hooks.encoding.pos_emb.copy_(cope.pos_emb)
        if cope.talking_heads is not None:
            ours.hooks.encoding.talking_heads.copy_(cope.talking_heads.weight[:, :, 0, 0])


@pytest.mark.parametrize("talking_heads", [False, True])
@pytest.mark.parametrize(
    ("backend", "dtype"),
    [("sdpa", torch.float32), ("sdpa", torch.float64), ("chunked", torch.float64)],
)
def test_matches_x_transformers_attention(
    talking_heads: bool, dtype: torch.dtype, backend: str
) -> None:
    xt = pytest.importorskip("x_transformers.x_transformers")
    torch.manual_seed(0)
    # x-transformers takes the softmax in float32; in float64 give it a float64 softmax.
    softmax = functools.partial(torch.softmax, dim=-1) if dtype == torch.float64 else None
    reference = xt.Attention(
        32,
        dim_head=8,
        heads=4,
        causal=True,
        use_cope=True,
        cope_max_pos=6,
        cope_talking_heads=talking_heads,
        custom_attn_fn=softmax,
    ).to(dtype)
    cope = CoPE(4, 8, max_pos=6, talking_heads=talking_heads, dtype=dtype)
    chosen = Backend("chunked", block_size=5) if backend == "chunked" else Backend("sdpa")
    ours = Attention(32, 4, head_dim=8, pos=cope, causal=True, backend=chosen, dtype=dtype)
    copy_attention(reference, ours)
    x = torch.randn(2, 12, 32, generator=torch.Generator().manual_seed(2), dtype=dtype)
    padding = torch.ones(2, 12, dtype=torch.bool)
    padding[0, :3] = False  # left padding
    padding[1, 9:] = False  # right padding
    for mask in (None, padding):
        for module in (reference, ours):
            module.zero_grad()
        want = reference(x, mask=mask)
        got = ours(x, key_padding_mask=mask)
        if mask is not None:  # x-transformers also zeroes the outputs of padded queries
            got = got.masked_fill(~mask[..., None], 0.0)
        assert_close(got, want)
        weights = torch.linspace(-1, 1, want.numel(), dtype=dtype).view_as(want)
        (want * weights).sum().backward()
        (got * weights).sum().backward()
        assert_close(cope.pos_emb.grad, reference.attend.cope.pos_emb.grad)
        assert_close(ours.q_proj.weight.grad, reference.to_q.weight.grad)
        if cope.talking_heads is not None:
            assert_close(
                cope.talking_heads.grad, reference.attend.cope.talking_heads.weight.grad[:, :, 0, 0]
            )


def test_talking_heads_init_is_x_transformers_conv_draw() -> None:
    torch.manual_seed(11)
    conv = nn.Conv2d(4, 4, 1, bias=False)  # x-transformers' talking heads
    torch.manual_seed(11)
    cope = CoPE(4, 8, talking_heads=True)
    assert cope.talking_heads is not None
    assert_close(cope.talking_heads.detach(), conv.weight.detach()[:, :, 0, 0], rtol=0, atol=0)
    a = CoPE(4, 8, talking_heads=True, generator=torch.Generator().manual_seed(3))
    b = CoPE(4, 8, talking_heads=True, generator=torch.Generator().manual_seed(3))
    assert_close(a.talking_heads, b.talking_heads, rtol=0, atol=0)


# --------------------------------------------------------------------- backends and cache


# Every causal mask kind with the default CoPE (bidirectional attention refuses it: it is
# causal only); the options with a padded and a cached case.
CAUSAL_MASKS = [m for m in MASKS if mask_case(m, torch.Generator().manual_seed(2))[1]["causal"]]
BACKEND_CASES = [(mask, {}) for mask in CAUSAL_MASKS] + [
    (mask, kwargs) for kwargs in VARIANTS[1:] for mask in ("padding", "cache")
]


@pytest.mark.parametrize("mask", sorted(set(MASKS) - set(CAUSAL_MASKS)))
def test_bidirectional_attention_refuses_cope(mask: str) -> None:
    q_len, mask_kwargs = mask_case(mask, torch.Generator().manual_seed(2))
    q, k, v = inputs(torch.float64, q_len, 2)
    with pytest.raises(ValueError, match="pos: CoPE is defined for causal attention only"):
        attend(q, k, v, pos=CoPE(HEADS, HEAD_DIM), **mask_kwargs)
    with pytest.raises(ValueError, match="pos: CoPE is defined for causal attention only"):
        Attention(HEADS * HEAD_DIM, HEADS, pos=CoPE(HEADS, HEAD_DIM), causal=False)


@pytest.mark.parametrize(
    ("mask", "kwargs"), BACKEND_CASES, ids=[f"{m}-{variant_id(kw)}" for m, kw in BACKEND_CASES]
)
@pytest.mark.parametrize("grad", [True, False], ids=["blocks", "plan"])
def test_chunked_equals_sdpa(
    mask: str, kwargs: dict[str, Any], grad: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checkpointed blocks with gradients; without, the scores plan (the term as the flash
    kernel's mask) wherever the mask is causal order and key padding."""
    chosen = record_plans(monkeypatch)
    cope = trained(CoPE(HEADS, HEAD_DIM, max_pos=8, dtype=torch.float64, **kwargs))
    q_len, mask_kwargs = mask_case(mask, torch.Generator().manual_seed(2))
    q, k, v = inputs(torch.float64, q_len, 2)  # grouped-query attention
    want, want_grads = run("sdpa", cope, q, k, v, mask_kwargs, grad=grad)
    got, got_grads = run(BACKENDS["chunked"], cope, q, k, v, mask_kwargs, grad=grad)
    assert_close(got, want)
    assert len(got_grads) == len(want_grads) == (3 + len(list(cope.parameters()))) * grad
    assert_close(got_grads, want_grads)
    if mask != "documents":  # pairwise masks take the blocks
        assert chosen == [None if grad else "scores term"]
    no_cope, _ = run("sdpa", None, q, k, v, mask_kwargs, grad=False)
    assert not torch.allclose(want, no_cope)  # the term changes the output


def test_flex_refuses_cope() -> None:
    q, k, v = inputs(torch.float32, 40, 4)
    with pytest.raises(ValueError, match="flex"):
        attend(
            q, k, v, pos=CoPE(HEADS, HEAD_DIM), causal=True, backend=Backend("flex", compile=False)
        )


def test_hooks() -> None:
    hooks = hooks_of(CoPE(2, 4))
    assert hooks.scores and hooks.needs_probabilities
    assert not (hooks.bias or hooks.contextual or hooks.rotary or hooks.additive)


@pytest.mark.parametrize("backend", ["sdpa", "chunked"])
@pytest.mark.parametrize("new_tokens", [1, 3])
def test_kv_cache_step_equals_last_rows_of_full_forward(backend: str, new_tokens: int) -> None:
    torch.manual_seed(0)
    cope = trained(CoPE(4, 8, max_pos=6, talking_heads=True))
    chosen = Backend("chunked", block_size=2) if backend == "chunked" else Backend("sdpa")
    attention = Attention(32, 4, num_kv_heads=2, head_dim=8, pos=cope, backend=chosen).eval()
    x = torch.randn(2, 14, 32, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        full = attention(x)
        cache = KVCache()
        attention(x[:, :-new_tokens], cache=cache)
        step = attention(x[:, -new_tokens:], cache=cache)
    assert_close(step, full[:, -new_tokens:])
    # The functional form: the last queries against every key, bottom-right causal.
    q, k, v = inputs(torch.float64, 40, 4)
    cope64 = cope.double()
    with torch.no_grad():
        rows = attend(q[:, :, -new_tokens:], k, v, pos=cope64, causal=True, backend=chosen)
        every = attend(q, k, v, pos=cope64, causal=True, backend=chosen)
    assert_close(rows, every[:, :, -new_tokens:])


# ------------------------------------------------------------------------- gradients


class _Attend(nn.Module):
    """``attend`` with a CoPE, as a module so that ``functional_call`` can swap its parameters."""

    def __init__(self, cope: CoPE, **kwargs: Any) -> None:
        super().__init__()
        self.cope, self.kwargs = cope, kwargs

    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return attend(q, k, v, pos=self.cope, **self.kwargs)


@pytest.mark.parametrize("kwargs", VARIANTS, ids=variant_id)
def test_gradcheck_parameters(kwargs: dict[str, Any]) -> None:
    cope = trained(CoPE(2, 4, max_pos=4, dtype=torch.float64, **kwargs))
    generator = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(2, 2, 6, 4, generator=generator, dtype=torch.float64) for _ in range(3))
    padding = torch.ones(2, 6, dtype=torch.bool)
    padding[1, 2] = False  # a hidden key between visible ones
    module = _Attend(cope, causal=True, key_padding_mask=padding)
    names = [f"cope.{name}" for name, _ in cope.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for p in cope.parameters())

    def fn(*values: Tensor) -> Tensor:
        state = dict(zip(names, values, strict=True))
        return torch.func.functional_call(module, state, (q, k, v))

    assert torch.autograd.gradcheck(fn, params, fast_mode=True)  # full mode: below


def test_gradcheck_functional_core() -> None:
    # Full-mode gradcheck of e, the talking-heads matrix, q and the scores (through the gates).
    cope = trained(CoPE(2, 4, max_pos=4, talking_heads=True, dtype=torch.float64))
    assert cope.talking_heads is not None
    q, scores, allowed = random_case(1, 2, 5, 5, 4, seed=10)
    leaves = tuple(
        x.detach().clone().requires_grad_(True)
        for x in (q, scores, cope.pos_emb, cope.talking_heads)
    )

    def fn(q: Tensor, scores: Tensor, pos_emb: Tensor, mixing: Tensor) -> Tensor:
        positions = cope_positions(scores, allowed, max_pos=4, mixing=mixing)
        return cope_bias(q, pos_emb, positions)

    assert torch.autograd.gradcheck(fn, leaves)


# ---------------------------------------------------------------------- dtypes and state


def test_dtypes() -> None:
    cope = trained(CoPE(HEADS, HEAD_DIM, max_pos=8))  # float32 parameters
    q, k, v = inputs(torch.float64, 40, 4)
    scores = q @ k.transpose(-1, -2)
    term = cope(q, scores, causal_mask(40, 40))
    assert term.dtype == torch.float64  # computed in the scores' dtype
    want = direct_cope(
        q[:1, :1],
        scores[:1, :1],
        causal_mask(40, 40)[None, None],
        cope.pos_emb.detach().double(),
        max_pos=8,
    )
    assert_close(term[:1, :1], want)
    half = tuple(x.to(torch.bfloat16) for x in (q, k, v))
    with torch.no_grad():
        got = attend(*half, pos=cope, causal=True)
        want_half = attend(*(x.float() for x in half), pos=cope, causal=True).to(torch.bfloat16)
    assert got.dtype == torch.bfloat16
    assert_close(got, want_half, rtol=0, atol=0)  # computed in float32, rounded once


def test_state_and_repr() -> None:
    cope = CoPE(4, 8, max_pos=12, talking_heads=True)
    assert set(cope.state_dict()) == {"pos_emb", "talking_heads"}
    assert tuple(cope.pos_emb.shape) == (12, 8)
    assert set(CoPE(4, 8).state_dict()) == {"pos_emb"}
    assert "max_pos=12" in repr(cope) and "talking_heads=True" in repr(cope)
    meta = CoPE(4, 8, talking_heads=True, device="meta")
    assert meta.pos_emb.device.type == "meta"


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"num_heads": 0, "head_dim": 4}, "num_heads"),
        ({"num_heads": 2.0, "head_dim": 4}, "num_heads"),
        ({"num_heads": 2, "head_dim": 0}, "head_dim"),
        ({"num_heads": 2, "head_dim": 4, "max_pos": 0}, "max_pos"),
        ({"num_heads": 2, "head_dim": 4, "max_pos": 2.5}, "max_pos"),
        ({"num_heads": 2, "head_dim": 4, "max_pos": True}, "max_pos"),
        ({"num_heads": 2, "head_dim": 4, "interpolation": "cubic"}, "interpolation"),
        ({"num_heads": 2, "head_dim": 4, "temperature": 0.0}, "temperature"),
        ({"num_heads": 2, "head_dim": 4, "temperature": float("nan")}, "temperature"),
        ({"num_heads": 2, "head_dim": 4, "talking_heads": 1}, "talking_heads"),
        ({"num_heads": 2, "head_dim": 4, "scale_term": "yes"}, "scale_term"),
        ({"num_heads": 2, "head_dim": 4, "dtype": torch.int64}, "dtype"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        CoPE(**kwargs)


@pytest.mark.parametrize(
    ("q", "scores", "allowed", "name"),
    [
        (torch.randn(2, 5, 4), torch.randn(1, 2, 5, 5), None, "q"),  # 3-D q
        (torch.randn(1, 2, 5, 3), torch.randn(1, 2, 5, 5), None, "q"),  # wrong head_dim
        (torch.randn(2, 2, 5, 4), torch.randn(1, 2, 5, 5), None, "q"),  # batch differs
        (torch.randn(1, 2, 4, 4), torch.randn(1, 2, 5, 5), None, "q"),  # q_len differs
        (torch.randn(1, 2, 5, 4), torch.randn(2, 5, 5), None, "scores"),  # 3-D scores
        (torch.randn(1, 3, 5, 4), torch.randn(1, 3, 5, 5), None, "scores"),  # 3 heads, not 2
        (torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 5), torch.ones(5, 5), "allowed"),
        (
            torch.randn(1, 2, 5, 4),
            torch.randn(1, 2, 5, 5),
            torch.ones(5, 4, dtype=torch.bool),
            "allowed",
        ),
        (
            torch.randn(1, 2, 5, 4),
            torch.randn(1, 2, 5, 5),
            torch.ones(3, 1, 1, 5, dtype=torch.bool),
            "allowed",
        ),
    ],
)
def test_bad_call_arguments(q: Tensor, scores: Tensor, allowed: Tensor | None, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        CoPE(2, 4)(q, scores, allowed)


def test_attention_with_the_wrong_number_of_heads() -> None:
    q, k, v = inputs(torch.float32, 40, 4)
    with pytest.raises(ValueError, match="num_heads"):
        attend(q, k, v, pos=CoPE(2, HEAD_DIM), causal=True)


def test_bad_functional_arguments() -> None:
    scores, q = torch.randn(1, 2, 5, 5), torch.randn(1, 2, 5, 4)
    with pytest.raises(ValueError, match="max_pos"):
        cope_positions(scores, max_pos=0)
    with pytest.raises(ValueError, match="mixing"):
        cope_positions(scores, max_pos=4, mixing=torch.eye(3))
    with pytest.raises(ValueError, match="logits"):
        cope_positions(torch.randn(2, 5, 5), max_pos=4)
    positions = cope_positions(scores, max_pos=4)
    with pytest.raises(ValueError, match="pos_emb"):
        cope_bias(q, torch.zeros(4, 3), positions)
    with pytest.raises(ValueError, match="positions"):
        cope_bias(q, torch.zeros(4, 4), positions[:, :1])
    with pytest.raises(ValueError, match="interpolation"):
        cope_bias(q, torch.zeros(4, 4), positions, interpolation="nearest")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="temperature"):
        cope_bias(q, torch.zeros(4, 4), positions, interpolation="soft_onehot", temperature=-1.0)


def test_keys_capped_in_every_row_read_the_last_embedding_with_the_same_gradients() -> None:
    """Past a few keys before each query the count reaches p_max − 1: those leading keys
    read z[p_max − 1] without interpolation, bit for bit what the interpolation gives, with
    the same gradients."""
    cope = CoPE(HEADS, HEAD_DIM, max_pos=4, dtype=torch.float64)
    nn.init.normal_(cope.pos_emb)
    # The last 10 queries of 30 keys (a block of rows, as the chunked backend asks).
    q, scores, _ = random_case(2, HEADS, 10, 30, HEAD_DIM, seed=3)
    scores = (scores.abs() + 2.0).requires_grad_()  # gates near 1: counts cap quickly
    q = q.requires_grad_()
    allowed = causal_mask(10, 30)
    positions = cope_positions(scores, allowed, max_pos=4)
    assert bool((positions[..., :10] == 3).all())  # a capped prefix in every row
    assert not bool((positions[..., -1] == 3).all())  # and keys past it
    got = cope(q, scores, allowed)
    want = cope_bias(q, cope.pos_emb, positions)  # the interpolation everywhere
    assert_close(got, want, rtol=0, atol=0)
    weights = torch.randn_like(got)
    leaves = [q, scores, cope.pos_emb]
    for g, w in zip(
        torch.autograd.grad((got * weights).sum(), leaves),
        torch.autograd.grad((want * weights).sum(), leaves),
        strict=True,
    ):
        assert_close(g, w, rtol=1e-13, atol=1e-13)
