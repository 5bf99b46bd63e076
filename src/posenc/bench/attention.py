"""``posenc bench attention``: the attention backends side by side with SDPA.

Suites (each a function returning rows; :func:`run` runs the chosen ones):

* ``forward``: one causal forward, batch 1 × 8 heads × 4096 × head dim 64, of every
  encoding on every backend that serves it, as a ratio to
  ``F.scaled_dot_product_attention(is_causal=True)`` on the same q, k, v.
* ``module``: the :class:`~posenc.attention.Attention` module (dim 512, 8 heads) with NoPE
  (additive encodings act outside attention, so they are NoPE here) and RoPE against the
  same projections around SDPA ``is_causal``.
* ``memory``: peak RSS growth of one forward (no grad) at 16k and 64k tokens, 8 heads, head
  dim 64, each in a fresh process (two threads: memory does not depend on them).
* ``train-memory``: peak growth of one forward + backward with ALiBi and T5 at 16k on
  ``chunked``, against the materialized ``sdpa`` path measured at 2k and 4k and projected
  by ``a + b·L²`` to 16k (it does not fit in memory there).
* ``lm``: training tokens/s of the small LM (vocab 256, dim 128, depth 3, 4 heads, batch
  16 × 256, AdamW) per encoding against NoPE, and NoPE against the same model calling bare
  SDPA ``is_causal``.
* ``decode``: one decoding step of the module with a 4096-token KV cache against the same
  projections around bare SDPA over a preallocated cache, per layer.
* ``relative``: the :class:`~posenc.attention.Attention` module (dim 512, 8 heads, 2048
  tokens, causal, backend ``auto``) with each relative method (KERPLE, Sandwich,
  FIRE, the dynamic bias, DeBERTa, CoPE, DAPE around ALiBi) and ALiBi/T5 for reference,
  registry defaults: one forward (no grad) and one training step (forward + backward), each
  against the same projections around bare SDPA ``is_causal``.
* ``longctx``, ``longctx-memory``, ``longctx-decode``: the segment methods and the unrotated
  KV cache (:mod:`posenc.bench.longctx`).
* ``linear``: the linear-attention backend with RoPE against the softmax module at 1k, 4k
  and 16k tokens (:mod:`posenc.bench.linear`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.attention import Attention, KVCache, attend
from posenc.bench import (
    compare,
    format_suites,
    linear,
    longctx,
    peak_memory,
    rss_peak_bytes,
    run_suites,
)
from posenc.bench.decoding import prefilled_stack, stack_step
from posenc.bench.targets import TARGETS
from posenc.models import DecoderLM, ModelConfig
from posenc.registry import ModelDims, build_encoding

__all__ = ["SUITES", "run"]

GIB = 1024**3


def _encoding(
    name: str, heads: int, head_dim: int, dtype: torch.dtype = torch.float32
) -> nn.Module | None:
    if name == "nope":
        return None
    encoding = build_encoding(name, ModelDims(dim=heads * head_dim, num_heads=heads))
    return encoding.to(dtype)


def _qkv(batch: int, heads: int, seq: int, head_dim: int, grad: bool = False) -> tuple[Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    return tuple(
        torch.randn(batch, heads, seq, head_dim, generator=generator).requires_grad_(grad)
        for _ in range(3)
    )


def _served(name: str, backend: str) -> bool:
    return not (backend == "flex" and name in ("shaw", "xl"))


def forward(
    seq: int = 4096, heads: int = 8, head_dim: int = 64, rounds: int = 5, flex: bool = True
) -> list[dict[str, Any]]:
    """Causal forward of each encoding × backend, × SDPA ``is_causal`` (no grad)."""
    q, k, v = _qkv(1, heads, seq, head_dim)
    positions = torch.arange(seq)
    candidates: dict[str, Callable[[], object]] = {
        "sdpa is_causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    }
    backends = ["sdpa", "chunked"] + (["flex"] if flex else [])
    for name in ["nope", "rope", "alibi", "t5", "shaw", "xl"]:
        encoding = _encoding(name, heads, head_dim)
        for backend in backends:
            if not _served(name, backend):
                continue
            if name == "rope":
                assert encoding is not None

                def call(encoding: Any = encoding, backend: str = backend) -> object:
                    q_rot, k_rot = encoding(q, k, positions, positions)
                    return attend(q_rot, k_rot, v, causal=True, backend=backend)

            else:

                def call(encoding: Any = encoding, backend: str = backend) -> object:
                    return attend(q, k, v, pos=encoding, causal=True, backend=backend)

            candidates[f"{name} / {backend}"] = call
    with torch.no_grad():
        timings = compare(candidates, "sdpa is_causal", rounds=rounds)
    return [t.as_dict() for t in timings]


class _BareAttention(nn.Module):
    """The same projections as :class:`Attention` around bare SDPA ``is_causal``."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
            nn.Linear(dim, dim, bias=False) for _ in range(4)
        )

    def forward(self, x: Tensor) -> Tensor:
        batch, seq, dim = x.shape
        q, k, v = (
            p(x).view(batch, seq, self.heads, -1).transpose(1, 2)
            for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out_proj(out.transpose(1, 2).reshape(batch, seq, dim))


def module(
    seq: int = 4096, heads: int = 8, head_dim: int = 64, rounds: int = 5
) -> list[dict[str, Any]]:
    """The Attention module with NoPE and RoPE × the same projections around SDPA."""
    dim = heads * head_dim
    torch.manual_seed(0)
    x = torch.randn(1, seq, dim)
    bare = _BareAttention(dim, heads)
    nope = Attention(dim, heads)
    rope = Attention(dim, heads, pos=_encoding("rope", heads, head_dim))
    for attn in (nope, rope):
        attn.load_state_dict(bare.state_dict(), strict=False)
    with torch.no_grad():
        timings = compare(
            {"bare SDPA module": lambda: bare(x), "nope": lambda: nope(x), "rope": lambda: rope(x)},
            "bare SDPA module",
            rounds=rounds,
        )
    return [t.as_dict() for t in timings]


def _forward_peak(name: str, seq: int, heads: int, head_dim: int, backend: str) -> dict[str, Any]:
    torch.set_num_threads(2)
    q, k, v = _qkv(1, heads, seq, head_dim)
    encoding = None if name == "sdpa is_causal" else _encoding(name, heads, head_dim)
    positions = torch.arange(seq)
    before = rss_peak_bytes()
    with torch.no_grad():
        if name == "sdpa is_causal":
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif name == "rope":
            assert encoding is not None
            q, k = encoding(q, k, positions, positions)
            attend(q, k, v, causal=True, backend=backend)
        else:
            attend(q, k, v, pos=encoding, causal=True, backend=backend)
    return {
        "encoding": name,
        "seq": seq,
        "backend": backend,
        "peak_gib": (rss_peak_bytes() - before) / GIB,
    }


def memory(
    lengths: tuple[int, ...] = (16384, 65536), heads: int = 8, head_dim: int = 64
) -> list[dict[str, Any]]:
    """Peak RSS growth of one forward per encoding (``auto`` backend), fresh process each."""
    rows = []
    for seq in lengths:
        for name in ["sdpa is_causal", "nope", "rope", "alibi", "t5", "shaw", "xl"]:
            rows.append(peak_memory(_forward_peak, name, seq, heads, head_dim, "auto"))
    return rows


def _train_peak(name: str, seq: int, heads: int, head_dim: int, backend: str) -> dict[str, Any]:
    torch.set_num_threads(2)
    q, k, v = _qkv(1, heads, seq, head_dim, grad=True)
    encoding = _encoding(name, heads, head_dim)
    before = rss_peak_bytes()
    out = attend(q, k, v, pos=encoding, causal=True, backend=backend)
    out.square().sum().backward()
    return {
        "encoding": name,
        "seq": seq,
        "backend": backend,
        "peak_gib": (rss_peak_bytes() - before) / GIB,
    }


def train_memory(seq: int = 16384, heads: int = 8, head_dim: int = 64) -> list[dict[str, Any]]:
    """A training step's peak: ``chunked`` at ``seq`` against the materialized path projected."""
    rows = []
    for name in ["alibi", "t5"]:
        chunked = peak_memory(_train_peak, name, seq, heads, head_dim, "chunked")
        small = [
            peak_memory(_train_peak, name, n, heads, head_dim, "sdpa") for n in (seq // 8, seq // 4)
        ]
        (n1, m1), (n2, m2) = ((r["seq"], r["peak_gib"]) for r in small)
        b = (m2 - m1) / (n2**2 - n1**2)
        projected = m1 + b * (seq**2 - n1**2)
        rows.append(
            {
                "encoding": name,
                "seq": seq,
                "chunked_gib": chunked["peak_gib"],
                "sdpa_measured": {r["seq"]: r["peak_gib"] for r in small},
                "sdpa_projected_gib": projected,
                "ratio": chunked["peak_gib"] / projected,
            }
        )
    return rows


class _BareBlock(nn.Module):
    """:class:`posenc.models.Block` with :class:`_BareAttention`."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attn_norm, self.mlp_norm = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = _BareAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class _BareLM(nn.Module):
    """:class:`DecoderLM`'s architecture without an encoding, calling bare SDPA."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        dim = config.dim
        self.embed = nn.Embedding(config.vocab_size, dim)
        self.scale = math.sqrt(dim)
        blocks = (_BareBlock(dim, config.num_heads) for _ in range(config.depth))
        self.blocks = nn.Sequential(*blocks)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, config.vocab_size, bias=False)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.head(self.norm(self.blocks(self.embed(tokens) * self.scale)))


RELATIVE = (
    "alibi",
    "t5",
    "kerple",
    "sandwich",
    "fire",
    "dynamic",
    "shaw",
    "xl",
    "deberta",
    "cope",
    "dape",
)
"""The encodings of the ``relative`` suite (DAPE with ALiBi inside, its paper's main row), also
timed by the ``lm`` suite after the absolute and rotary ones."""


def lm(
    names: tuple[str, ...] = ("nope", "sinusoidal", "learned", "rope", "xpos", *RELATIVE),
    batch: int = 16,
    seq: int = 256,
    steps: int = 3,
    rounds: int = 5,
) -> list[dict[str, Any]]:
    """Training tokens/s of the small LM per encoding, × NoPE; NoPE × bare SDPA."""
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 256, (batch, seq + 1), generator=generator)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    def trainer(model: nn.Module) -> Callable[[], object]:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def run_steps() -> None:
            for _ in range(steps):
                logits = model(inputs)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

        return run_steps

    candidates: dict[str, Callable[[], object]] = {}
    for name in names:
        torch.manual_seed(0)
        config = ModelConfig(
            vocab_size=256, dim=128, depth=3, num_heads=4, max_seq_len=seq, pos=name
        )
        candidates[name] = trainer(DecoderLM(config))
    torch.manual_seed(0)
    candidates["bare SDPA"] = trainer(
        _BareLM(ModelConfig(vocab_size=256, dim=128, depth=3, num_heads=4))
    )
    timings = compare(candidates, "nope", rounds=rounds)
    per_step = {t.name: t.seconds / steps for t in timings}
    rows = [
        {"name": t.name, "tokens_per_s": batch * seq / per_step[t.name], "vs_nope": 1.0 / t.ratio}
        for t in timings
    ]
    return rows


def decode(
    cache_len: int = 4096, heads: int = 8, head_dim: int = 64, layers: int = 4, rounds: int = 20
) -> list[dict[str, Any]]:
    """One decoding step with a ``cache_len`` KV cache, per layer, × the bare equivalent.

    ``stack``: ``layers`` attention layers sharing one per-forward context (what
    :class:`~posenc.models.DecoderLM` does: positions, mask and shared tables built once per
    step) against ``layers`` × (the same projections around bare SDPA over a preallocated
    cache). ``alone``: one standalone module that builds its own context every call.
    """
    dim = heads * head_dim
    torch.manual_seed(0)
    bare = _BareAttention(dim, heads)
    prompt = torch.randn(1, cache_len, dim)
    step = torch.randn(1, 1, dim)
    k_buffer = torch.randn(1, heads, cache_len + 1, head_dim)
    v_buffer = torch.randn(1, heads, cache_len + 1, head_dim)

    def bare_step() -> Tensor:
        q = bare.q_proj(step).view(1, 1, heads, head_dim).transpose(1, 2)
        k_buffer[:, :, cache_len] = bare.k_proj(step).view(1, heads, head_dim)
        v_buffer[:, :, cache_len] = bare.v_proj(step).view(1, heads, head_dim)
        out = F.scaled_dot_product_attention(q, k_buffer, v_buffer)
        return bare.out_proj(out.transpose(1, 2).reshape(1, 1, dim))

    def bare_stack() -> None:
        for _ in range(layers):
            bare_step()

    candidates: dict[str, Callable[[], object]] = {"bare": bare_stack}
    for name in ["nope", "rope", "alibi", "t5"]:
        encoding = _encoding(name, heads, head_dim)  # one instance, shared as in the model
        stack, caches = prefilled_stack(encoding, bare, prompt, heads=heads, layers=layers)

        def alone_step(attn: Attention = stack[0], cache: KVCache = caches[0]) -> None:
            for _ in range(layers):
                attn(step, cache=cache)
                cache.truncate(cache_len)

        candidates[f"{name} stack"] = stack_step(stack, caches, step)
        candidates[f"{name} alone"] = alone_step
    with torch.no_grad():
        timings = compare(candidates, "bare", rounds=rounds, warmup=3)
    return [
        {**t.as_dict(), "seconds": t.seconds / layers}  # per layer
        for t in timings
    ]


def relative(
    seq: int = 2048,
    heads: int = 8,
    head_dim: int = 64,
    rounds: int = 5,
    encodings: tuple[str, ...] = RELATIVE,
) -> list[dict[str, Any]]:
    """The Attention module with each relative method × the bare SDPA module, no grad and
    with a backward."""
    dim = heads * head_dim
    torch.manual_seed(0)
    x = torch.randn(1, seq, dim)
    bare = _BareAttention(dim, heads)
    modules: dict[str, nn.Module] = {"bare SDPA module": bare}
    dims = ModelDims(dim=dim, num_heads=heads)
    for name in encodings:
        extra = {"inner": "alibi"} if name == "dape" else {}
        attn = Attention(dim, heads, pos=build_encoding(name, dims, extra))
        attn.load_state_dict(bare.state_dict(), strict=False)
        modules[name] = attn

    def infer(module: nn.Module) -> Callable[[], object]:
        def call() -> object:
            with torch.no_grad():
                return module(x)

        return call

    def train(module: nn.Module) -> Callable[[], object]:
        def call() -> None:
            module.zero_grad(set_to_none=True)
            module(x).square().mean().backward()

        return call

    rows = []
    for mode, make in (("forward", infer), ("train step", train)):
        candidates = {name: make(module) for name, module in modules.items()}
        for timing in compare(candidates, "bare SDPA module", rounds=rounds):
            rows.append({**timing.as_dict(), "mode": mode})
    return rows


SUITES: dict[str, Callable[..., list[dict[str, Any]]]] = {
    "forward": forward,
    "module": module,
    "memory": memory,
    "train-memory": train_memory,
    "lm": lm,
    "decode": decode,
    "relative": relative,
    "longctx": longctx.forward,
    "longctx-memory": longctx.memory,
    "longctx-decode": longctx.decode,
    "linear": linear.forward,
}


def run(suites: list[str] | None = None, *, threads: int = 1) -> dict[str, Any]:
    """Run the chosen suites (all by default) and return ``{"machine", suite: rows}``."""
    return run_suites(SUITES, suites, threads=threads)


_COLUMNS: dict[str, list[tuple[str, str, str]]] = {
    "forward": [
        ("name", "encoding / backend", ""),
        ("seconds", "s", ".3f"),
        ("ratio", "× SDPA causal", ".2f"),
    ],
    "module": [("name", "module", ""), ("seconds", "s", ".3f"), ("ratio", "× bare module", ".3f")],
    "memory": [
        ("seq", "tokens", ""),
        ("encoding", "encoding", ""),
        ("backend", "backend", ""),
        ("peak_gib", "peak GiB", ".3f"),
    ],
    "train-memory": [
        ("encoding", "encoding", ""),
        ("seq", "tokens", ""),
        ("chunked_gib", "chunked GiB", ".3f"),
        ("sdpa_projected_gib", "materialized GiB (projected)", ".2f"),
        ("ratio", "ratio", ".4f"),
    ],
    "lm": [
        ("name", "encoding", ""),
        ("tokens_per_s", "tokens/s", ".0f"),
        ("vs_nope", "× NoPE", ".3f"),
    ],
    "relative": [
        ("mode", "mode", ""),
        ("name", "module", ""),
        ("seconds", "s", ".3f"),
        ("ratio", "× bare module", ".2f"),
    ],
    "longctx": [
        ("name", "module", ""),
        ("seq", "tokens", ""),
        ("seconds", "s", ".3f"),
        ("ratio", "× RoPE module", ".3f"),
    ],
    "longctx-memory": [
        ("name", "method", ""),
        ("seq", "tokens", ""),
        ("peak_gib", "peak GiB", ".3f"),
    ],
    "longctx-decode": [
        ("name", "step", ""),
        ("seconds", "s per layer", ".5f"),
        ("ratio", "× rotated cache", ".3f"),
    ],
    "linear": [
        ("name", "module", ""),
        ("seq", "tokens", ""),
        ("seconds", "s", ".3f"),
        ("ratio", "× softmax module", ".3f"),
    ],
    "decode": [
        ("name", "step", ""),
        ("seconds", "s", ".5f"),
        ("ratio", "× projections + SDPA", ".3f"),
    ],
}


def format_result(result: dict[str, Any]) -> str:
    """The machine line and one table per suite, each figure with a target beside its goal
    (:data:`posenc.bench.targets.TARGETS`)."""
    return format_suites(result, _COLUMNS, bench="attention", targets=TARGETS)
