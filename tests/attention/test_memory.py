"""No backend builds a tensor of L² elements for a causal, padding or document mask."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from posenc.attention import Backend, attend, blocks
from posenc.registry import ModelDims, build_encoding

LENGTH, HEADS, HEAD_DIM = 1024, 2, 8


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


MASKS: dict[str, dict[str, Any]] = {
    "causal": {"causal": True},
    "causal-padding": {"causal": True, "key_padding_mask": torch.arange(LENGTH)[None, :] >= 100},
    "bidirectional-padding": {
        "causal": False,
        "key_padding_mask": torch.arange(LENGTH)[None, :] < 900,
    },
    "documents": {"causal": True, "document_ids": torch.arange(LENGTH) // 300},
}
NO_BIAS = ["nope", "rope"]
EVERY = [*NO_BIAS, "alibi", "t5", "shaw", "xl"]


def cases() -> list[Any]:
    """Forward: every backend with every encoding it serves (sdpa materializes a bias by
    design, so only encodings without one there). Backward (checkpointed blocks, flash
    parts): chunked with one encoding of each path and the document mask."""
    pairs = [("sdpa", n) for n in NO_BIAS] + [(b, n) for b in ("chunked", "blocked") for n in EVERY]
    params = [pytest.param(b, n, m, False, id=f"{b}-{n}-{m}") for b, n in pairs for m in MASKS]
    # Compiled FlexAttention on the CPU takes ~30 s per shape: make test-slow.
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
    encoding = (
        None
        if name == "nope"
        else build_encoding(name, ModelDims(dim=HEADS * HEAD_DIM, num_heads=HEADS))
    )
    q, k, v = (torch.randn(1, HEADS, LENGTH, HEAD_DIM, requires_grad=grad) for _ in range(3))
    choice = {
        "sdpa": Backend("sdpa"),
        "chunked": Backend("chunked"),
        "blocked": Backend("chunked", structured=False),
        "flex": Backend("flex"),
    }[backend]
    pos = encoding
    if name == "rope":  # rotary acts on q and k before attention
        assert encoding is not None
        positions = torch.arange(LENGTH)
        q, k = encoding(q, k, positions, positions)
        pos = None
    tracker = LargestStorage()
    with tracker, torch.set_grad_enabled(grad):
        out = attend(q, k, v, pos=pos, backend=choice, **MASKS[mask])
        if grad:
            out.sum().backward()
    assert tracker.largest < LENGTH * LENGTH // 4, (tracker.largest, tracker.op)
