"""FoX: x-transformers parity, the formula in float64, backends, the KV cache, the model."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn
from torch.testing import assert_close

from posenc.attention import Attention, Backend, KVCache, attend
from posenc.models import DecoderLM, EncoderClassifier, ModelConfig
from posenc.token_state.fox import ForgettingGate, fox_bias, fox_log_gates

DIM, HEADS = 16, 4


def trained(fox: ForgettingGate, seed: int = 0) -> ForgettingGate:
    """Gates away from the init's near-1 values: biases in [−1, 3], weights of std 0.3."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        fox.weight.copy_(torch.randn(fox.weight.shape, generator=generator) * 0.3)
        fox.bias.copy_(torch.rand(fox.bias.shape, generator=generator) * 4 - 1)
    return fox


def loop_bias(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """``Σ_{j<t≤i} log σ(w_h·x_t + b_h)`` for each pair ``j ≤ i``, in Python floats."""
    batch, seq, _ = x.shape
    heads = weight.shape[0]
    xs, w, b = x.tolist(), weight.tolist(), bias.tolist()
    out = torch.zeros(batch, heads, seq, seq, dtype=torch.float64)
    for n in range(batch):
        for h in range(heads):
            logs = []
            for t in range(seq):
                z = sum(wc * xc for wc, xc in zip(w[h], xs[n][t], strict=True)) + b[h]
                logs.append(-math.log1p(math.exp(-z)))  # log σ(z)
            for i in range(seq):
                for j in range(i + 1):
                    out[n, h, i, j] = sum(logs[j + 1 : i + 1])
    return out


def test_bias_equals_the_formula_in_float64() -> None:
    fox = trained(ForgettingGate(DIM, HEADS, dtype=torch.float64))
    x = torch.randn(2, 7, DIM, dtype=torch.float64)
    expected = loop_bias(x, fox.weight.detach(), fox.bias.detach())
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    assert_close(fox(x) * causal, expected, rtol=0, atol=1e-13)


def test_matches_x_transformers_data_dependent_alibi() -> None:
    xt = pytest.importorskip("x_transformers.x_transformers")
    torch.manual_seed(0)
    reference = xt.DataDependentAlibi(DIM, HEADS, causal=True)
    fox = trained(ForgettingGate(DIM, HEADS))
    with torch.no_grad():
        reference.to_forget_gates[0].weight.copy_(fox.weight)
        reference.to_forget_gates[0].bias.copy_(fox.bias)
    x = torch.randn(3, 33, DIM)
    assert_close(fox(x), reference(x), rtol=1e-5, atol=1e-5)


def test_equal_gates_make_alibi() -> None:
    """Every gate f: the bias is −(−log f)·(i − j), ALiBi of slope −log f."""
    fox = ForgettingGate(DIM, 1, dtype=torch.float64)
    with torch.no_grad():
        fox.weight.zero_()
        fox.bias.fill_(0.5)
    i = torch.arange(6, dtype=torch.float64)
    expected = torch.nn.functional.logsigmoid(torch.tensor(0.5, dtype=torch.float64)) * (
        i[:, None] - i[None, :]
    )
    assert_close(fox(torch.randn(1, 6, DIM, dtype=torch.float64))[0, 0], expected)


def direct_attention(attn: Attention, fox: ForgettingGate, x: Tensor) -> Tensor:
    """The layer by the paper's formula: softmax over j ≤ i of scale·q·k + log F_ij."""
    batch, seq, _ = x.shape
    q = attn.q_proj(x).view(batch, seq, HEADS, -1).transpose(1, 2)
    k = attn.k_proj(x).view(batch, seq, HEADS, -1).transpose(1, 2)
    v = attn.v_proj(x).view(batch, seq, HEADS, -1).transpose(1, 2)
    logits = q @ k.transpose(-1, -2) * attn.scale
    log_f = fox_log_gates(x, fox.weight, fox.bias)
    cumulative = torch.stack([log_f[..., : i + 1].sum(-1) for i in range(seq)], dim=-1)
    logits = logits + fox_bias(cumulative, cumulative)
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    probs = logits.masked_fill(~causal, -math.inf).softmax(-1)
    out = (probs @ v).transpose(1, 2).reshape(batch, seq, -1)
    return attn.out_proj(out)


BACKENDS = {
    "sdpa": Backend("sdpa"),
    "chunked": Backend("chunked", block_size=3),
    "flex": Backend("flex", compile=False),
}


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_attention_equals_the_formula_and_decoding_the_full_forward(backend: str) -> None:
    dtype = torch.float32 if backend == "flex" else torch.float64  # flex: CPU float32
    torch.manual_seed(0)
    fox = trained(ForgettingGate(DIM, HEADS, dtype=dtype))
    attn = Attention(DIM, HEADS, pos=fox, backend=BACKENDS[backend], dtype=dtype)
    x = torch.randn(2, 11, DIM, dtype=dtype)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}
    with torch.no_grad():
        full = attn(x)
        assert_close(full, direct_attention(attn, fox, x), **tol)
        cache = KVCache()
        steps = [attn(x[:, :5], cache=cache)]
        steps += [attn(x[:, i : i + 1], cache=cache) for i in range(5, 11)]
    assert_close(torch.cat(steps, dim=1), full, **tol)
    assert cache.token_states.shape == (2, HEADS, 11)


def test_gradients_agree_between_sdpa_and_chunked() -> None:
    torch.manual_seed(0)
    fox = trained(ForgettingGate(DIM, HEADS, dtype=torch.float64))
    x = torch.randn(2, 13, DIM, dtype=torch.float64)
    grads = []
    for backend in (Backend("sdpa"), Backend("chunked", block_size=4)):
        torch.manual_seed(1)
        attn = Attention(DIM, HEADS, pos=fox, backend=backend, dtype=torch.float64)
        fox.zero_grad()
        leaf = x.clone().requires_grad_(True)
        attn(leaf).pow(2).sum().backward()
        grads.append([leaf.grad, fox.weight.grad.clone(), fox.bias.grad.clone()])
    for a, b in zip(*grads, strict=True):
        assert_close(a, b)


def test_gradcheck_of_the_gates() -> None:
    fox = trained(ForgettingGate(DIM, 2, dtype=torch.float64))
    x = torch.randn(1, 5, DIM, dtype=torch.float64)

    def bias(weight: Tensor, b: Tensor) -> Tensor:
        c = fox_log_gates(x, weight, b).cumsum(-1)
        return fox_bias(c, c)

    weight = fox.weight.detach().clone().requires_grad_(True)
    b = fox.bias.detach().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(bias, (weight, b))
    torch.manual_seed(0)
    attn = Attention(DIM, 2, pos=fox, backend=Backend("chunked", block_size=2))
    attn = attn.to(torch.float64)

    def layer(weight: Tensor, b: Tensor) -> Tensor:
        with torch.no_grad():
            fox.weight.copy_(weight.detach())
            fox.bias.copy_(b.detach())
        return torch.func.functional_call(attn, {"pos.weight": weight, "pos.bias": b}, (x,))

    assert torch.autograd.gradcheck(layer, (weight, b))


def test_padding_tokens_forget_nothing() -> None:
    """A left-padded row gives its real tokens the outputs of the unpadded sequence."""
    torch.manual_seed(0)
    fox = trained(ForgettingGate(DIM, HEADS, dtype=torch.float64))
    attn = Attention(DIM, HEADS, pos=fox, dtype=torch.float64)
    x = torch.randn(1, 6, DIM, dtype=torch.float64)
    padded = torch.cat([torch.randn(1, 3, DIM, dtype=torch.float64), x], dim=1)
    real = torch.tensor([[False] * 3 + [True] * 6])
    with torch.no_grad():
        assert_close(attn(padded, key_padding_mask=real)[:, 3:], attn(x))


def test_model_decodes_as_the_full_forward_and_encoders_refuse_it() -> None:
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=32, dim=DIM, depth=2, num_heads=HEADS, pos="fox")
    model = DecoderLM(config).eval()
    gates = [block.attn.pos for block in model.trunk.blocks]
    assert gates[0] is not gates[1]  # one set of gates per layer
    tokens = torch.randint(0, 32, (2, 10))
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        steps = [model(tokens[:, :4], cache=cache)]
        steps += [model(tokens[:, i : i + 1], cache=cache) for i in range(4, 10)]
    assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"^pos: ForgettingGate is defined for causal"):
        EncoderClassifier(config, num_classes=2)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"dim": 0, "num_heads": 2}, "dim"),
        ({"dim": 8, "num_heads": 0}, "num_heads"),
        ({"dim": 8, "num_heads": 2, "bias_init": float("nan")}, "bias_init"),
        ({"dim": 8, "num_heads": 2, "dtype": torch.long}, "dtype"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, argument: str) -> None:
    with pytest.raises(ValueError, match=rf"^{argument}\b"):
        ForgettingGate(**kwargs)


def test_attention_refuses_mismatched_gates_and_attend_refuses_the_hook() -> None:
    with pytest.raises(ValueError, match=r"^pos: ForgettingGate reads inputs of dim=8"):
        Attention(DIM, HEADS, pos=ForgettingGate(8, HEADS))
    with pytest.raises(ValueError, match=r"^pos: ForgettingGate has num_heads=2"):
        Attention(DIM, HEADS, pos=ForgettingGate(DIM, 2))
    q = torch.randn(1, HEADS, 4, 4)
    with pytest.raises(ValueError, match=r"^pos: ForgettingGate reads the layer's hidden"):
        attend(q, q, q, pos=ForgettingGate(DIM, HEADS), causal=True)
    with pytest.raises(ValueError, match=r"^x must be a floating tensor"):
        ForgettingGate(DIM, HEADS)(torch.ones(1, 4, DIM, dtype=torch.long))


def test_meta_device_and_reset_parameters() -> None:
    with torch.device("meta"):
        fox = ForgettingGate(DIM, HEADS)
    fox.to_empty(device="cpu")
    fox.reset_parameters()
    assert bool((fox.bias == 5.0).all()) and isinstance(fox, nn.Module)


def test_soft_capped_fox_is_the_same_on_every_backend() -> None:
    """A SoftCap around FoX: the cap applies to the FoX-biased scores, flex included."""
    from posenc.softmax.softcap import SoftCap

    torch.manual_seed(0)
    capped = SoftCap(trained(ForgettingGate(DIM, HEADS)), cap=1.5)
    x = torch.randn(2, 9, DIM)
    outs = {}
    for name, backend in BACKENDS.items():
        torch.manual_seed(1)
        attn = Attention(DIM, HEADS, pos=capped, backend=backend)
        with torch.no_grad():
            outs[name] = attn(x)
    assert_close(outs["chunked"], outs["sdpa"], rtol=1e-5, atol=1e-5)
    assert_close(outs["flex"], outs["sdpa"], rtol=1e-5, atol=1e-5)
    torch.manual_seed(1)
    uncapped = Attention(DIM, HEADS, pos=capped.encoding)
    with torch.no_grad():
        assert not torch.allclose(uncapped(x), outs["sdpa"], atol=1e-3)  # the cap acted
