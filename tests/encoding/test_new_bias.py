"""A new bias is one file plus one registry line (docs/architecture.md, the worked example).

The toy ``StepBias`` derives from ``BiasEncoding`` and writes ``bias_at`` only; registered by
one ``register_encoding`` call, it is served by every backend, decodes with a KV cache, builds
by name in the models and resets as built on the meta device, with nothing else written.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import Tensor
from torch.testing import assert_close

from posenc.attention import Attention, Backend, KVCache, attend
from posenc.encoding import BiasEncoding, hooks_of
from posenc.models import DecoderLM, EncoderClassifier, ModelConfig
from posenc.registry import EncodingSpec, list_encodings, register_encoding, unregister_encoding


class StepBias(BiasEncoding):
    """``-w_h`` for every key more than ``window`` positions behind the query."""

    depends_on_distance_only = True

    def __init__(self, num_heads: int, window: int = 4) -> None:
        super().__init__()
        self.num_heads, self.window = num_heads, window
        self.weight = torch.nn.Parameter(torch.empty(num_heads))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        torch.nn.init.uniform_(self.weight, 0.5, 2.0)

    def bias_at(self, head: Tensor, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        far = (q_pos - k_pos) > self.window
        return -(self.weight[head] * far).to(dtype)


def reference(q: Tensor, k: Tensor, v: Tensor, bias: StepBias) -> Tensor:
    """The formula written out: softmax(q kᵀ / √d - w_h [i - j > window] + causal) v."""
    n = q.shape[-2]
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    logits = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    logits = logits - bias.weight.view(-1, 1, 1).to(q.dtype) * (i - j > bias.window)
    logits = logits.masked_fill(j > i, float("-inf"))
    return torch.softmax(logits, dim=-1) @ v


@pytest.fixture
def registered() -> Iterator[None]:
    register_encoding(
        EncodingSpec(
            "step",
            "bias",
            "a test of the worked example",
            "a step bias",
            lambda: StepBias,
            lambda d: {"num_heads": d.num_heads},
        )
    )
    yield
    unregister_encoding("step")


@pytest.mark.parametrize(
    "backend",
    ["sdpa", "chunked", Backend("flex", compile=False), Backend("chunked", block_size=3)],
    ids=["sdpa", "chunked", "flex", "chunked-3"],
)
@pytest.mark.parametrize("grad", [False, True])
def test_every_backend_serves_the_new_bias(backend: str | Backend, grad: bool) -> None:
    flex = isinstance(backend, Backend) and backend.name == "flex"
    if flex and grad:
        pytest.skip("FlexAttention has no backward on the CPU")
    # FlexAttention computes float32 on the CPU (no float64): compare at its rounding
    dtype, tol = (torch.float32, 1e-5) if flex else (torch.float64, 1e-12)
    torch.manual_seed(0)
    bias = StepBias(4).to(dtype)
    q, k, v = (torch.randn(2, 4, 13, 8, dtype=dtype) for _ in range(3))
    hooks = hooks_of(bias)
    assert hooks.bias is bias and not hooks.contextual and not hooks.rotary
    with torch.set_grad_enabled(grad):
        out = attend(q, k, v, pos=bias, causal=True, backend=backend)
    assert_close(out, reference(q, k, v, bias), rtol=tol, atol=tol)


def test_decoding_with_a_cache_equals_the_full_forward() -> None:
    torch.manual_seed(1)
    attn = Attention(32, 4, pos=StepBias(4), backend="chunked").double()
    x = torch.randn(2, 11, 32, dtype=torch.float64)
    full = attn(x)
    cache = KVCache()
    steps = [attn(x[:, :6], cache=cache)] + [
        attn(x[:, t : t + 1], cache=cache) for t in range(6, 11)
    ]
    assert_close(torch.cat(steps, dim=1), full, rtol=1e-12, atol=1e-12)


def test_one_registry_line_builds_it_by_name_in_every_model(registered: None) -> None:
    assert "step" in [spec.name for spec in list_encodings()]
    config = ModelConfig(vocab_size=32, dim=32, num_heads=4, depth=2, pos="step")
    torch.manual_seed(2)
    lm = DecoderLM(config)
    assert all(isinstance(block.attn.pos, StepBias) for block in lm.trunk.blocks)  # type: ignore[union-attr]
    tokens = torch.randint(0, 32, (2, 9))
    assert lm(tokens).shape == (2, 9, 32)
    assert EncoderClassifier(config, num_classes=3)(tokens).shape == (2, 3)
    with torch.device("meta"):
        meta = DecoderLM(config)
    meta.to_empty(device="cpu")
    torch.manual_seed(2)
    meta.reset_parameters()
    assert_close(meta(tokens), lm(tokens), rtol=0, atol=0)  # the same draws, same kernels
