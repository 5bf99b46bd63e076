"""patch_segments: segment methods inside tiny random HF decoders.

* method off (None): logits and greedy generate (incl. a left-padded batch) equal the
  unpatched model's for every family served (≤ 1e-5 in float32); unpatching restores the
  logits bit for bit;
* methods whose windows cover the input: equal to the unpatched model;
* methods with small windows: every layer's output, in a forward and at every step of
  generate, equals a float64 evaluation of the method's formula on that layer's q, k, v,
  written here pair by pair from the papers' definitions (not with posenc's segment code);
* dynamic NTK: decoding past max_position_embeddings equals a fresh forward of the prefix
  (keys rotated on read), unlike HF's cache of stale rotations;
* refusals: ValueError naming what is not served.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from posenc.bias import AlibiBias
from posenc.integrations.hf import patch_rotary, rope_from_config, unpatch_rotary
from posenc.integrations.hf.segments import (
    ATTENTION_NAME,
    patch_segments,
    segment_attention,
    unpatch_segments,
)
from posenc.rotary.rope import RotaryEmbedding
from posenc.segments import AttentionSinks, DualChunk, LMInfinite, ReRoPE, SelfExtend

transformers = pytest.importorskip("transformers")

BASE: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 128,
    "max_position_embeddings": 512,
    "pad_token_id": 0,
    "bos_token_id": None,
    "eos_token_id": None,
    "tie_word_embeddings": False,
}
FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {},
    "mistral": {"sliding_window": None},
    "qwen2": {},
    "qwen3": {},
    "gemma": {},
    "gemma2": {
        "attn_logit_softcapping": None,
        "layer_types": ["full_attention"] * 2,
        "query_pre_attn_scalar": 16,
    },
    "olmo": {},
    "olmo2": {},
    "granite": {},
    "starcoder2": {},
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
    "phi3": {},  # partial_rotary_factor 1 (its config carries the key)
    "stablelm": {},  # partial rotary 0.25
    "gpt_neox": {},  # partial rotary 0.25
    "cohere": {},  # interleaved layout
    "glm": {},  # interleaved layout, partial rotary 0.5
}
TOL = 1e-5


def tiny(family: str = "llama", *, dtype: torch.dtype = torch.float32, **extra: Any) -> nn.Module:
    config = transformers.AutoConfig.for_model(
        family, **{**BASE, **FAMILIES.get(family, {}), **extra}
    )
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).to(dtype).eval()


def prompts(length: int = 12, pad: int = 5, batch: int = 2) -> tuple[Tensor, Tensor]:
    """Random ids and an attention mask; the last row is left-padded by ``pad``."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 128, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[-1, :pad] = 0
    ids[-1, :pad] = 0
    return ids, mask


def generate(model: nn.Module, ids: Tensor, mask: Tensor, **kw: Any) -> tuple[Tensor, Tensor]:
    out = model.generate(
        ids,
        attention_mask=mask,
        max_new_tokens=kw.pop("max_new_tokens", 8),
        do_sample=False,
        output_scores=True,
        return_dict_in_generate=True,
        pad_token_id=0,
        **kw,
    )
    return out.sequences, torch.stack(out.scores)


def maxdiff(a: Tensor, b: Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """Tiny tensors: a second intra-op thread only adds synchronization, which on a busy
    machine costs milliseconds per op (this file: ~5 s on one thread, ~30 s on two)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _no_grad() -> Iterator[None]:
    with torch.no_grad():
        yield


# ------------------------------------------------------------------------- (a) method off


@pytest.mark.parametrize("family", list(FAMILIES))
def test_method_off_equals_unpatched(family: str) -> None:
    model = tiny(family)
    ids, mask = prompts()
    real = mask.bool()
    ref = model(ids[:1]).logits
    ref_pad = model(ids, attention_mask=mask).logits
    ref_seq, ref_scores = generate(model, ids, mask)
    previous = model.config._attn_implementation

    assert patch_segments(model) is model
    assert model.config._attn_implementation == ATTENTION_NAME
    fwd = maxdiff(model(ids[:1]).logits, ref)
    fwd_pad = maxdiff(model(ids, attention_mask=mask).logits[real], ref_pad[real])
    seq, scores = generate(model, ids, mask)
    gen = maxdiff(scores, ref_scores)
    print(f"max |logit diff| {family}: forward {fwd:.1e}, padded {fwd_pad:.1e}, generate {gen:.1e}")
    assert max(fwd, fwd_pad, gen) <= TOL
    assert torch.equal(seq, ref_seq)

    unpatch_segments(model)
    assert model.config._attn_implementation == previous
    assert torch.equal(model(ids[:1]).logits, ref)  # bit-identical
    assert torch.equal(model(ids, attention_mask=mask).logits, ref_pad)


def test_cache_holds_unrotated_keys_and_chunked_prefill_matches() -> None:
    model = tiny("llama")
    ids, mask = prompts()
    ref_seq, ref_scores = generate(model, ids, mask)
    projected: dict[str, Tensor] = {}
    attention = model.model.layers[0].self_attn
    handle = attention.k_proj.register_forward_hook(lambda m, i, o: projected.__setitem__("k", o))
    patch_segments(model)
    out = model(ids[:1], use_cache=True)
    handle.remove()
    k = projected["k"].view(1, 12, 2, 16).transpose(1, 2)
    assert torch.equal(out.past_key_values.layers[0].keys, k)
    seq, scores = generate(model, ids, mask, prefill_chunk_size=4)
    assert torch.equal(seq, ref_seq) and maxdiff(scores, ref_scores) <= TOL


def test_patch_rotary_then_segments_uses_its_rope() -> None:
    model = tiny("llama")
    ids, _ = prompts()
    rope = RotaryEmbedding(16, base=500.0)
    patch_rotary(model, rope)
    ref = model(ids).logits
    patch_segments(model)
    assert maxdiff(model(ids).logits, ref) <= TOL
    unpatch_segments(model)
    unpatch_rotary(model)


# ------------------------------------------------------------------------- (b) wide windows

WIDE: dict[str, Callable[[nn.Module], nn.Module]] = {
    "self_extend": lambda r: SelfExtend(r, window=64, group=4),
    "dual_chunk": lambda r: DualChunk(r, chunk_size=64, local_window=8),
    "rerope": lambda r: ReRoPE(r, window=64),
    "leaky_rerope": lambda r: ReRoPE(r, window=64, leak=4.0),
    "lm_infinite": lambda r: LMInfinite(r, local_window=64, global_tokens=3),
    "attention_sinks": lambda r: AttentionSinks(r, sinks=2, window=64),
}


@pytest.mark.parametrize("method", list(WIDE))
def test_windows_covering_the_input_equal_unpatched(method: str) -> None:
    model = tiny("qwen2")
    ids, mask = prompts()
    real = mask.bool()
    ref_pad = model(ids, attention_mask=mask).logits
    ref_seq, ref_scores = generate(model, ids, mask)
    patch_segments(model, WIDE[method](rope_from_config(model.config)))
    got = model(ids, attention_mask=mask).logits
    seq, scores = generate(model, ids, mask)
    assert maxdiff(got[real], ref_pad[real]) <= TOL
    assert torch.equal(seq, ref_seq) and maxdiff(scores, ref_scores) <= TOL


# ------------------------------------------------------------------------- (c) small windows
# Each reference maps a pair (query position i, key position j) to the positions its query
# and key are rotated at, or None for a hidden pair; written from the papers' definitions.

PairRule = Callable[[int, int], "tuple[float, float] | None"]


def self_extend_rule(w: int, g: int) -> PairRule:
    def rule(i: int, j: int) -> tuple[float, float] | None:
        if i - j < w:
            return i, j
        return i // g + w - w / g, j // g

    return rule


def dual_chunk_rule(chunk_size: int, local_window: int) -> PairRule:
    c = chunk_size - local_window

    def rule(i: int, j: int) -> tuple[float, float] | None:
        if i // c == j // c:
            return i % c, j % c
        if i // c - j // c == 1:
            return min(i % c + c, chunk_size), j % c
        return min(2 * c - 1, chunk_size), j % c

    return rule


def rerope_rule(w: int, leak: float | None = None) -> PairRule:
    def rule(i: int, j: int) -> tuple[float, float] | None:
        if i - j < w:
            return i, j
        if leak is None:
            return w, 0
        return (i + w * (leak - 1)) / leak, j / leak

    return rule


def lm_infinite_rule(n_local: int, n_global: int, limit: int) -> PairRule:
    def rule(i: int, j: int) -> tuple[float, float] | None:
        if i - j < n_local:
            return i, j
        if j < n_global:
            return min(i, limit), 0
        return None

    return rule


def sinks_rule(sinks: int, window: int) -> PairRule:
    def rule(i: int, j: int) -> tuple[float, float] | None:
        if i - j <= window:
            return i, j
        if j < sinks:
            return min(i, sinks + window), j
        return None

    return rule


def plain_rule(i: int, j: int) -> tuple[float, float] | None:
    return i, j


# name -> (method from the model's rope, pair rule, log-n base or None)
SMALL: dict[str, tuple[Callable[[nn.Module], nn.Module] | None, PairRule, int | None]] = {
    "off": (None, plain_rule, None),
    "self_extend": (lambda r: SelfExtend(r, window=8, group=3), self_extend_rule(8, 3), None),
    "dual_chunk": (
        lambda r: DualChunk(r, chunk_size=12, local_window=4),
        dual_chunk_rule(12, 4),
        None,
    ),
    "rerope": (lambda r: ReRoPE(r, window=6), rerope_rule(6), None),
    "leaky_rerope": (lambda r: ReRoPE(r, window=6, leak=4.0), rerope_rule(6, 4.0), None),
    "rerope_log_n": (
        lambda r: ReRoPE(r, window=6, log_scale_base=16),
        rerope_rule(6),
        16,
    ),
    "lm_infinite": (
        lambda r: LMInfinite(r, local_window=8, global_tokens=3),
        lm_infinite_rule(8, 3, 8),
        None,
    ),
    "attention_sinks": (lambda r: AttentionSinks(r, sinks=2, window=6), sinks_rule(2, 6), None),
}


def rotate(x: Tensor, positions: Tensor, config: Any, layout: str) -> Tensor:
    """RoPE of ``x`` (..., n, head_dim) at ``positions`` (n,), float64, from the config:
    ``inv_freq = 1 / base^(arange(0, d, 2) / d)`` on the first ``d`` channels."""
    head_dim = x.shape[-1]
    params = config.rope_parameters
    d = int(head_dim * params.get("partial_rotary_factor", 1.0))
    inv_freq = 1.0 / params["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * inv_freq  # (n, d/2)
    if layout == "half":
        cos, sin = torch.cat((angles.cos(),) * 2, -1), torch.cat((angles.sin(),) * 2, -1)
        x1, x2 = x[..., : d // 2], x[..., d // 2 : d]
        turned = torch.cat((-x2, x1), -1)
    else:
        cos, sin = angles.cos().repeat_interleave(2, -1), angles.sin().repeat_interleave(2, -1)
        turned = torch.stack((-x[..., 1:d:2], x[..., 0:d:2]), -1).flatten(-2)
    return torch.cat((x[..., :d] * cos + turned * sin, x[..., d:]), -1)


def reference(
    record: dict[str, Any],
    rule: PairRule,
    positions: Tensor,
    valid: Tensor,
    config: Any,
    layout: str,
    log_base: int | None,
) -> tuple[Tensor, Tensor]:
    """The method's attention output for one layer call, pair by pair, in float64, and which
    query rows are real tokens. ``positions`` and ``valid`` cover all ``k_len`` tokens."""
    q, k, v = (record[n].double() for n in ("q", "k", "v"))
    batch, heads, q_len, _ = q.shape
    k_len, rep = k.shape[2], heads // k.shape[1]
    out = torch.zeros_like(q)
    real_rows = valid[:, k_len - q_len : k_len].bool()
    for b in range(batch):
        for row in range(q_len):
            index = k_len - q_len + row
            if not real_rows[b, row]:
                continue
            i = int(positions[b, index])
            keys, q_at, k_at = [], [], []
            for key in range(index + 1):  # causal
                j = int(positions[b, key])
                pair = rule(i, j) if valid[b, key] else None
                if pair is not None:
                    keys.append(key)
                    q_at.append(pair[0])
                    k_at.append(pair[1])
            q_rot = rotate(
                q[b, :, row : row + 1].expand(heads, len(keys), -1),
                torch.tensor(q_at, dtype=torch.float64),
                config,
                layout,
            )
            k_rot = rotate(k[b, :, keys], torch.tensor(k_at, dtype=torch.float64), config, layout)
            k_rot = k_rot.repeat_interleave(rep, 0)  # GQA: query head h reads kv head h // rep
            scores = (q_rot * k_rot).sum(-1) * record["scaling"]  # (heads, keys)
            if log_base is not None:
                scores = scores * max(1.0, math.log(i + 1) / math.log(log_base))
            probs = scores.softmax(-1)
            out[b, :, row] = (probs[..., None] * v[b, :, keys].repeat_interleave(rep, 0)).sum(1)
    return out, real_rows


class Recorder:
    """What every patched layer's attention saw and returned: :meth:`install` after patching
    wraps the registered function (the fixture puts it back)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def __call__(
        self,
        module: nn.Module,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attention_mask: Any,
        **kwargs: Any,
    ) -> tuple[Tensor, None]:
        out, weights = segment_attention(module, query, key, value, attention_mask, **kwargs)
        self.records.append(
            {
                "layer": module.layer_idx,
                "q": query.clone(),
                "k": key.clone(),
                "v": value.clone(),
                "scaling": kwargs["scaling"],
                "out": out.transpose(1, 2).clone(),
            }
        )
        return out, weights

    def install(self) -> list[dict[str, Any]]:
        transformers.AttentionInterface.register(ATTENTION_NAME, self)
        return self.records


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    yield Recorder()
    transformers.AttentionInterface.register(ATTENTION_NAME, segment_attention)


def _check_records(
    records: list[dict[str, Any]],
    rule: PairRule,
    positions: Tensor,
    valid: Tensor,
    model: nn.Module,
    layout: str,
    log_base: int | None,
) -> float:
    assert records
    worst = 0.0
    for record in records:
        k_len = record["k"].shape[2]
        ref, real = reference(
            record, rule, positions[:, :k_len], valid[:, :k_len], model.config, layout, log_base
        )
        got = record["out"]
        worst = max(worst, maxdiff(got.permute(0, 2, 1, 3)[real], ref.permute(0, 2, 1, 3)[real]))
    return worst


@pytest.mark.parametrize("method", list(SMALL))
def test_small_windows_equal_the_formula_in_every_layer(method: str, recorder: Recorder) -> None:
    model = tiny("llama", dtype=torch.float64)
    make, rule, log_base = SMALL[method]
    patch_segments(model, None if make is None else make(rope_from_config(model.config)))
    records = recorder.install()

    # a forward of 40 tokens: positions 0 … 39
    ids, _ = prompts(length=40, batch=1)
    model(ids)
    assert [r["layer"] for r in records] == [0, 1]
    positions, valid = torch.arange(40)[None], torch.ones(1, 40)
    fwd = _check_records(records, rule, positions, valid, model, "half", log_base)
    if method != "off":  # control: the windows are small enough for the method to matter
        assert _check_records(records, plain_rule, positions, valid, model, "half", None) > 1e-4

    # generate from a left-padded batch: prefill, then one query per step, at every layer
    records.clear()
    ids, mask = prompts(length=30, pad=6)
    seq, _ = generate(model, ids, mask, max_new_tokens=10)
    full = torch.cat((mask, torch.ones(2, seq.shape[1] - 30, dtype=torch.long)), 1)
    positions = (full.cumsum(-1) - 1).clamp(min=0)
    assert len(records) == 2 * 10 and records[-1]["q"].shape[2] == 1
    gen = _check_records(records, rule, positions, full, model, "half", log_base)
    print(f"max |out - float64 formula| {method}: forward {fwd:.1e}, generate {gen:.1e}")
    assert max(fwd, gen) <= 1e-10


@pytest.mark.parametrize("method", ["self_extend", "dual_chunk"])
def test_small_windows_interleaved_partial_family(method: str, recorder: Recorder) -> None:
    """GLM: interleaved pairs on half the channels; the method's rope says so."""
    model = tiny("glm", dtype=torch.float64)
    make, rule, log_base = SMALL[method]
    rope = rope_from_config(model.config)
    rope = RotaryEmbedding(
        rope.head_dim, rotary_dim=rope.rotary_dim, base=rope.base, layout="interleaved"
    )
    assert make is not None
    patch_segments(model, make(rope))
    records = recorder.install()
    ids, _ = prompts(length=40, batch=1)
    model(ids)
    worst = _check_records(
        records, rule, torch.arange(40)[None], torch.ones(1, 40), model, "interleaved", log_base
    )
    assert worst <= 1e-10


def test_chunked_prefill_with_a_method_equals_one_prefill() -> None:
    model = tiny("llama", dtype=torch.float64)
    patch_segments(model, DualChunk(rope_from_config(model.config), chunk_size=12, local_window=4))
    ids, mask = prompts(length=30, pad=6)
    seq, scores = generate(model, ids, mask)
    seq_c, scores_c = generate(model, ids, mask, prefill_chunk_size=7)
    assert torch.equal(seq, seq_c) and maxdiff(scores, scores_c) <= 1e-10


def test_long_input_takes_the_chunked_path() -> None:
    """600 tokens: q_len · k_len > 512², so ``auto`` runs the O(block · L) path."""
    model = tiny("llama", num_hidden_layers=1)
    ids = torch.randint(1, 128, (1, 600), generator=torch.Generator().manual_seed(3))
    ref = model(ids).logits
    patch_segments(model)
    assert maxdiff(model(ids).logits, ref) <= TOL
    unpatch_segments(model)
    patch_segments(
        model, SelfExtend(rope_from_config(model.config), window=64, group=4), backend="sdpa"
    )
    sdpa = model(ids).logits
    unpatch_segments(model)
    patch_segments(model, SelfExtend(rope_from_config(model.config), window=64, group=4))
    assert maxdiff(model(ids).logits, sdpa) <= TOL


# ------------------------------------------------------------------------- (d) refusals


def test_patch_twice_and_unpatch_unpatched_raise() -> None:
    model = tiny("llama")
    with pytest.raises(ValueError, match="not patched"):
        unpatch_segments(model)
    patch_segments(model)
    with pytest.raises(ValueError, match="already patched"):
        patch_segments(model)
    unpatch_segments(model)
    with pytest.raises(ValueError, match="not patched"):
        unpatch_segments(model)


def _bad_cases() -> dict[str, tuple[str, dict[str, Any], Callable[[nn.Module], Any], str]]:
    # name -> (family, config extras, method from the model, message pattern)
    def rope(m: nn.Module) -> RotaryEmbedding:
        return rope_from_config(m.config)

    return {
        "head_dim": ("llama", {}, lambda m: SelfExtend(RotaryEmbedding(32)), "method: head_dim"),
        "rotary_dim": (
            "llama",
            {},
            lambda m: SelfExtend(RotaryEmbedding(16, rotary_dim=8)),
            "rotary_dim",
        ),
        "interleaved_on_half": (
            "llama",
            {},
            lambda m: SelfExtend(RotaryEmbedding(16, layout="interleaved")),
            "method: layout 'interleaved'",
        ),
        "half_on_interleaved": ("cohere", {}, lambda m: SelfExtend(rope(m)), "layout 'half'"),
        "not_rotary": ("llama", {}, lambda m: AlibiBias(4), "method must be"),
        "not_a_module": ("llama", {}, lambda m: "self_extend", "method must be"),
        "mistral_sliding": ("mistral", {"sliding_window": 4096}, lambda m: None, "sliding_window"),
        "qwen2_sliding_layer": (
            "qwen2",
            {"use_sliding_window": True, "sliding_window": 6, "max_window_layers": 1},
            lambda m: None,
            "layer types",
        ),
        "gemma2_softcap": (
            "gemma2",
            {"attn_logit_softcapping": 50.0},
            lambda m: None,
            "soft-capping",
        ),
        "gemma2_sliding": (
            "gemma2",
            {"layer_types": ["sliding_attention", "full_attention"]},
            lambda m: None,
            "layer types",
        ),
        "nope_layers": ("smollm3", {"no_rope_layer_interval": 2}, lambda m: None, "NoPE"),
    }


@pytest.mark.parametrize("case", list(_bad_cases()))
def test_refused_patch_raises_and_leaves_the_model_alone(case: str) -> None:
    family, extra, method, pattern = _bad_cases()[case]
    model = tiny(family, **extra)
    ids, _ = prompts()
    previous = model.config._attn_implementation
    ref = model(ids).logits
    with pytest.raises(ValueError, match=pattern):
        patch_segments(model, method(model))
    assert model.config._attn_implementation == previous
    assert torch.equal(model(ids).logits, ref)


def test_bad_backend_and_model() -> None:
    with pytest.raises(ValueError, match="backend must be one of"):
        patch_segments(tiny("llama"), backend="fast")
    with pytest.raises(ValueError, match="model must be an HF"):
        patch_segments(nn.Linear(2, 2))


def test_forward_time_refusals() -> None:
    model = tiny("llama")
    patch_segments(model)
    ids, mask = prompts()
    with pytest.raises(ValueError, match="past_key_values: StaticCache"):
        generate(model, ids, mask, cache_implementation="static")
    packed = torch.cat((torch.arange(6), torch.arange(6)))[None]
    with pytest.raises(ValueError, match="packed sequences"):
        model(ids[:1], position_ids=packed, use_cache=False)
    with pytest.raises(ValueError, match="multi-axis"):
        model(ids[:1], position_ids=torch.arange(12).expand(3, 1, 12))
    # the model still works afterwards
    model(ids, attention_mask=mask)


def test_two_patched_models_keep_their_own_methods() -> None:
    """One registered name, per-model state: interleaved calls do not mix the methods."""
    ids, mask = prompts(length=30, pad=6)
    plain, extended = tiny("llama"), tiny("llama")
    ref_plain = plain(ids, attention_mask=mask).logits
    patch_segments(extended, SelfExtend(rope_from_config(extended.config), window=8, group=3))
    ref_extended = extended(ids, attention_mask=mask).logits
    patch_segments(plain)
    for _ in range(2):
        assert (
            maxdiff(plain(ids, attention_mask=mask).logits[mask.bool()], ref_plain[mask.bool()])
            <= TOL
        )
        assert torch.equal(extended(ids, attention_mask=mask).logits, ref_extended)
    assert maxdiff(ref_plain, ref_extended) > 1e-3  # the method matters at this length


def test_unpatched_module_with_the_name_raises() -> None:
    patched, other = tiny("llama"), tiny("llama")
    patch_segments(patched)
    other.set_attn_implementation(ATTENTION_NAME)  # the registered name, but no state
    with pytest.raises(ValueError, match="was not patched"):
        other(prompts()[0])


# ------------------------------------------------------------------------- (e) dynamic NTK


def test_dynamic_ntk_decoding_equals_fresh_forwards() -> None:
    """HF's cache keeps keys rotated with the frequencies of their time; patched keys are
    rotated on read with the current ones, so each step equals a fresh forward."""
    dynamic = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
    model = tiny(
        "llama",
        num_hidden_layers=1,
        max_position_embeddings=16,
        rope_parameters=dynamic,
        initializer_range=0.05,
    )
    pristine = copy.deepcopy(model)

    def fresh_forwards(seq: Tensor) -> Tensor:
        # every prefix in increasing length on a new copy (HF's dynamic module only grows)
        fresh = copy.deepcopy(pristine)
        return torch.stack([fresh(seq[:, :n]).logits[:, -1] for n in range(12, seq.shape[1])])

    ids = torch.randint(1, 128, (1, 12), generator=torch.Generator().manual_seed(5))
    ones = torch.ones_like(ids)
    hf_seq, hf_scores = generate(copy.deepcopy(model), ids, ones, max_new_tokens=12)
    patch_segments(model)
    seq, scores = generate(model, ids, ones, max_new_tokens=12)
    patched_gap = maxdiff(scores, fresh_forwards(seq))
    hf_gap = maxdiff(hf_scores, fresh_forwards(hf_seq))
    print(f"dynamic NTK: patched vs fresh {patched_gap:.1e}, HF cache vs fresh {hf_gap:.1e}")
    assert seq.shape[1] == 24
    assert patched_gap <= TOL
    assert hf_gap > 1e-3


# ------------------------------------------------------------------------- (f) mixed patching


def test_switching_attention_after_patch_segments_raises_instead_of_dropping_rope() -> None:
    """After patch_segments the rotary tables are identity; an attention implementation
    switched behind its back would run the model without RoPE: the next forward raises, and
    switching back (or unpatching) restores the model."""
    model = tiny("llama")
    ids, _ = prompts()
    ref = model(ids).logits
    patch_segments(model)
    patched = model(ids).logits
    model.set_attn_implementation("sdpa")
    with pytest.raises(
        ValueError,
        match=r"attention implementation is 'sdpa', but the model is patched by patch_segments"
        r".*without RoPE.*unpatch_segments\(model\)",
    ):
        model(ids)
    model.set_attn_implementation(ATTENTION_NAME)
    torch.testing.assert_close(model(ids).logits, patched, rtol=0, atol=0)
    model.set_attn_implementation("eager")
    unpatch_segments(model)  # puts back the implementation chosen before patching
    assert model.config._attn_implementation == "sdpa"
    torch.testing.assert_close(model(ids).logits, ref, rtol=0, atol=0)


def _patch_rotary(model: nn.Module) -> None:
    patch_rotary(model)


# name -> (calls before, the refused call, what its message must say)
MIXED: dict[str, tuple[list[Callable[[nn.Module], Any]], Callable[[nn.Module], Any], str]] = {
    "unpatch_rotary of a plain model": (
        [],
        unpatch_rotary,
        r"not patched by patch_rotary \(its rotary modules are HF's own\): nothing to undo",
    ),
    "unpatch_segments of a plain model": (
        [],
        unpatch_segments,
        r"not patched by patch_segments \(nothing to undo\)",
    ),
    "unpatch_rotary after patch_segments": (
        [patch_segments],
        unpatch_rotary,
        r"not patched by patch_rotary; it is patched by patch_segments "
        r"\(unpatch_segments\(model\) undoes that\)",
    ),
    "unpatch_segments after patch_rotary": (
        [_patch_rotary],
        unpatch_segments,
        r"not patched by patch_segments; its rotary module is patch_rotary's "
        r"\(unpatch_rotary\(model\) undoes that\)",
    ),
    "patch_rotary after patch_segments": (
        [patch_segments],
        _patch_rotary,
        r"patched by patch_segments \(its rotary module is posenc's identity stand-in\): "
        r"unpatch_segments\(model\) first, then patch_rotary",
    ),
    "patch_rotary after patch_rotary and patch_segments": (
        [_patch_rotary, patch_segments],
        _patch_rotary,
        r"patched by patch_segments over patch_rotary's rope .*unpatch_segments\(model\) first",
    ),
    "unpatch_rotary after patch_rotary and patch_segments": (
        [_patch_rotary, patch_segments],
        unpatch_rotary,
        r"patched by patch_segments over patch_rotary's rope: unpatch_segments\(model\) first, "
        r"then unpatch_rotary\(model\)",
    ),
    "patch_segments twice": (
        [patch_segments],
        patch_segments,
        r"already patched by patch_segments; unpatch_segments\(model\) first",
    ),
}


@pytest.mark.parametrize("case", list(MIXED))
def test_mixed_patching_messages_say_what_is_patched_and_what_undoes_it(case: str) -> None:
    """Each refused call leaves the model as it was, and following the message (the calls it
    names, in its order) brings back the unpatched logits."""
    before, refused, pattern = MIXED[case]
    model = tiny("llama")
    ids, _ = prompts()
    ref = model(ids).logits
    for call in before:
        call(model)
    state = model(ids).logits
    with pytest.raises(ValueError, match=pattern):
        refused(model)
    torch.testing.assert_close(model(ids).logits, state, rtol=0, atol=0)
    for call in reversed(before):  # the undo calls the messages name, outermost first
        {patch_segments: unpatch_segments, _patch_rotary: unpatch_rotary}[call](model)
    torch.testing.assert_close(model(ids).logits, ref, rtol=0, atol=0)
