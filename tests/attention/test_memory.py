"""No backend builds a tensor of L² elements for a causal, padding or document mask.

Eager backends are watched at the dispatcher (:class:`LargestStorage`: every op's output).
Compiled FlexAttention cannot be: a ``TorchDispatchMode`` makes ``torch.compile`` fall back
to eager, and FlexAttention's eager reference materializes the scores by design; inside a
compiled graph the kernels allocate their buffers below the dispatcher. So ``flex`` is watched
at the CPU allocator instead (:class:`LargestAllocation`), on a call whose compiled graph is
already built, block mask included.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from posenc.attention import Backend, attend, blocks, flex
from posenc.registry import ModelDims, build_encoding

LENGTH, HEADS, HEAD_DIM = 1024, 2, 8
# Compiled flex's kernel keeps a 128 × 128 block of scores per thread (O(threads · block²),
# ~70 KB a thread): at 4096 tokens that stays far below L²/4 bytes up to ~48 threads.
FLEX_LENGTH = 4096


class LargestStorage(TorchDispatchMode):
    """Records the largest storage (in elements) any op returns."""

    def __init__(self) -> None:
        super().__init__()
        self.largest, self.op = 0, ""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(out):
            if isinstance(tensor, Tensor):
                elements = tensor.untyped_storage().nbytes() // max(1, tensor.element_size())
                if elements > self.largest:
                    self.largest, self.op = elements, str(func)
        return out


class LargestAllocation:
    """Records the largest block (in bytes) the CPU allocator hands to this thread, the op
    that asked for it (the innermost op running), and whether a compiled graph ran.

    Reads the profiler's memory events: they see every allocation through c10's CPU
    allocator, also those of compiled kernels (their buffers and scratch are allocated on
    the calling thread before their parallel loops), which no dispatch mode sees.
    """

    def __init__(self) -> None:
        self.largest, self.op, self.compiled = 0, "", False

    def __enter__(self) -> LargestAllocation:
        self.profile = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        self.profile.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.profile.__exit__(*exc)
        events = list(self.profile.profiler.kineto_results.events())  # type: ignore[union-attr]
        ops = [e for e in events if e.name() != "[memory]"]
        # Inductor's graph ran (a "Torch-Compiled Region" alone also wraps an eager fallback).
        self.compiled = any("CompiledFxGraph" in e.name() for e in ops)
        for event in events:
            if event.name() == "[memory]" and event.nbytes() > self.largest:
                at = event.start_ns()
                running = [o for o in ops if o.start_ns() <= at <= o.end_ns()]
                innermost = min(running, key=lambda o: o.duration_ns(), default=None)
                self.largest = event.nbytes()
                self.op = innermost.name() if innermost is not None else "?"


def masks(length: int) -> dict[str, dict[str, Any]]:
    return {
        "causal": {"causal": True},
        "causal-padding": {"causal": True, "key_padding_mask": torch.arange(length)[None] >= 100},
        "bidirectional-padding": {
            "causal": False,
            "key_padding_mask": torch.arange(length)[None] < length - 124,
        },
        "documents": {"causal": True, "document_ids": torch.arange(length) // 300},
    }


MASKS = masks(LENGTH)
NO_BIAS = ["nope", "rope"]
EVERY = [*NO_BIAS, "alibi", "t5", "shaw", "xl"]


def cases() -> list[Any]:
    """Forward: every backend with every encoding it serves (sdpa materializes a bias by
    design, so only encodings without one there). Backward (checkpointed blocks, flash
    parts): chunked with one encoding of each path and the document mask."""
    pairs = [("sdpa", n) for n in NO_BIAS] + [(b, n) for b in ("chunked", "blocked") for n in EVERY]
    params = [pytest.param(b, n, m, False, id=f"{b}-{n}-{m}") for b, n in pairs for m in MASKS]
    # Compiled FlexAttention on the CPU takes ~10-30 s per shape: make test-slow.
    flex = [
        pytest.param("flex", n, m, False, id=f"flex-{n}-{m}", marks=pytest.mark.slow)
        for n in ("nope", "alibi", "t5")
        for m in MASKS
    ]
    params += flex
    for backend, name, mask in [
        ("chunked", "alibi", "causal-padding"),
        ("chunked", "t5", "causal"),
        ("chunked", "shaw", "documents"),
        ("blocked", "rope", "documents"),
    ]:
        params.append(
            pytest.param(backend, name, mask, True, id=f"{backend}-{name}-{mask}-backward")
        )
    return params


@pytest.mark.parametrize(("backend", "name", "mask", "grad"), cases())
def test_no_tensor_grows_as_length_squared(
    monkeypatch: pytest.MonkeyPatch, backend: str, name: str, mask: str, grad: bool
) -> None:
    if backend == "flex":
        pytest.importorskip("torch.nn.attention.flex_attention")
    # A small block budget, so that one block of the default size is far below L².
    monkeypatch.setattr(blocks, "BLOCK_ELEMENTS", 1 << 17)
    torch.manual_seed(0)
    length = FLEX_LENGTH if backend == "flex" else LENGTH
    encoding = (
        None
        if name == "nope"
        else build_encoding(name, ModelDims(dim=HEADS * HEAD_DIM, num_heads=HEADS))
    )
    q, k, v = (torch.randn(1, HEADS, length, HEAD_DIM, requires_grad=grad) for _ in range(3))
    choice = {
        "sdpa": Backend("sdpa"),
        "chunked": Backend("chunked"),
        "blocked": Backend("chunked", structured=False),
        "flex": Backend("flex"),
    }[backend]
    pos = encoding
    if name == "rope":  # rotary acts on q and k before attention
        assert encoding is not None
        positions = torch.arange(length)
        q, k = encoding(q, k, positions, positions)
        pos = None
    if backend == "flex":
        kwargs = masks(length)[mask]
        # This process may have compiled flex for other shapes already: past torch's
        # recompile limit it runs the eager reference (test_flex_recompile_limit below).
        torch._dynamo.reset()
        with torch.no_grad():
            attend(q, k, v, pos=pos, backend=choice, **kwargs)  # compiles
        flex._causal_block_mask.cache_clear()  # the watched call builds its block mask too
        with LargestAllocation() as allocator, torch.no_grad():
            attend(q, k, v, pos=pos, backend=choice, **kwargs)
        assert allocator.compiled, "the flex call ran eagerly (a recompile limit?)"
        # In bytes: a quarter of an L×L bool mask, a sixteenth of float32 scores.
        assert allocator.largest < length * length // 4, (allocator.largest, allocator.op)
        return
    tracker = LargestStorage()
    with tracker, torch.set_grad_enabled(grad):
        out = attend(q, k, v, pos=pos, backend=choice, **MASKS[mask])
        if grad:
            out.sum().backward()
    assert tracker.largest < LENGTH * LENGTH // 4, (tracker.largest, tracker.op)


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="the limit of flex today: one torch.compile(flex_attention, dynamic=False) serves "
    "every shape, and past dynamo's recompile_limit (8) torch runs FlexAttention's eager "
    "reference, which materializes the scores (a warning, no error); dynamic=True does not "
    "compile on the CPU in torch 2.13 (C++ compile error)",
)
def test_flex_builds_no_length_squared_tensor_at_a_ninth_length() -> None:
    pytest.importorskip("torch.nn.attention.flex_attention")
    torch._dynamo.reset()
    encoding = build_encoding("alibi", ModelDims(dim=HEADS * HEAD_DIM, num_heads=HEADS))
    for length in range(512, 512 + 9 * 128, 128):  # nine lengths, each compiled once
        q, k, v = (torch.randn(1, HEADS, length, HEAD_DIM) for _ in range(3))
        with torch.no_grad():
            attend(q, k, v, pos=encoding, backend=Backend("flex"), causal=True)
    with LargestAllocation() as allocator, torch.no_grad():
        attend(q, k, v, pos=encoding, backend=Backend("flex"), causal=True)
    found = (allocator.compiled, allocator.largest, allocator.op)
    assert allocator.compiled and allocator.largest < length * length // 4, found
