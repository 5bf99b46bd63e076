"""Complex-order embeddings: the paper's formula and properties, init, gradients, the model's
token-embedding hook (cache, padding, backends, training), bad input."""

from __future__ import annotations

import cmath
import math
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.testing import assert_close

from posenc.additive.complex_order import (
    ComplexOrderEmbedding,
    complex_order_embedding,
    complex_order_real_view,
)
from posenc.additive.sinusoidal import sinusoidal_encoding, sinusoidal_inv_freq
from posenc.attention import hooks_of
from posenc.models import DecoderLM, EncoderClassifier, ModelConfig
from posenc.positions import positions_from_padding_mask
from posenc.registry import EncodingSpec, ModelDims, register_encoding, unregister_encoding

NAME = "complex_order_under_test"
VOCAB, DIM = 23, 32


def direct_formula(
    amplitude: Tensor, frequency: Tensor, phase: Tensor, tokens: list, positions: list
) -> Tensor:
    """``r_j exp(i(ω_j pos + θ_j))`` with :mod:`cmath`, one Python complex per channel."""
    r, w, t = amplitude.tolist(), frequency.tolist(), phase.tolist()

    def row(ids: list[int], pos: list[float]) -> list[list[complex]]:
        return [
            [
                rk * cmath.exp(1j * (wk * p + tk))
                for rk, wk, tk in zip(r[j], w[j], t[j], strict=True)
            ]
            for j, p in zip(ids, pos, strict=True)
        ]

    if isinstance(tokens[0], list):
        rows = [row(ids, pos) for ids, pos in zip(tokens, positions, strict=True)]
        return torch.tensor(rows, dtype=torch.complex128)
    return torch.tensor(row(tokens, positions), dtype=torch.complex128)


def randomized(embedding: ComplexOrderEmbedding, seed: int = 0) -> ComplexOrderEmbedding:
    """Trained-like tables: signed amplitudes, frequencies up to 3, phases in (-π, π)."""
    generator = torch.Generator().manual_seed(seed)
    shape = embedding.amplitude.shape
    with torch.no_grad():
        embedding.amplitude.copy_(torch.randn(shape, generator=generator))
        embedding.frequency.copy_(3.0 * torch.rand(shape, generator=generator))
        embedding.phase.copy_(math.pi * (2.0 * torch.rand(shape, generator=generator) - 1.0))
    return embedding


def tables(embedding: ComplexOrderEmbedding) -> tuple[Tensor, Tensor, Tensor]:
    return embedding.amplitude.detach(), embedding.frequency.detach(), embedding.phase.detach()


TOKENS = [[3, 0, 3, 7, 22], [1, 1, 6, 2, 3]]
POSITIONS = [[0, 1, 2, 3, 4], [5, 6.5, 100, 4096, 100_000]]  # per row, fractional, large


# ----------------------------------------------------------------------------- formula


def test_module_matches_direct_formula_float64() -> None:
    emb = randomized(ComplexOrderEmbedding(VOCAB, 8, dtype=torch.float64))
    want = direct_formula(*tables(emb), TOKENS, POSITIONS)
    got = emb.complex_embedding(torch.tensor(TOKENS), torch.tensor(POSITIONS))
    assert got.dtype == torch.complex128
    assert_close(got, want, rtol=1e-12, atol=1e-12)
    # Shared positions (seq,) for a batch of tokens, and a single sequence.
    shared = emb.complex_embedding(torch.tensor(TOKENS), torch.tensor(POSITIONS[1]))
    assert_close(
        shared, direct_formula(*tables(emb), TOKENS, [POSITIONS[1]] * 2), rtol=1e-12, atol=1e-12
    )
    single = emb.complex_embedding(torch.tensor(TOKENS[0]), torch.tensor(POSITIONS[1]))
    assert_close(
        single, direct_formula(*tables(emb), TOKENS[0], POSITIONS[1]), rtol=1e-12, atol=1e-12
    )


def test_functional_forms_match_the_module() -> None:
    emb = randomized(ComplexOrderEmbedding(VOCAB, 8, dtype=torch.float64), seed=1)
    tokens, positions = torch.tensor(TOKENS), torch.tensor(POSITIONS)
    z = complex_order_embedding(*tables(emb), tokens, positions)
    assert_close(z, emb.complex_embedding(tokens, positions), rtol=0, atol=0)
    real = complex_order_real_view(*tables(emb), tokens, positions)
    assert_close(real, emb(tokens, positions), rtol=0, atol=0)


def test_real_view_is_real_then_imaginary_halves() -> None:
    emb = randomized(ComplexOrderEmbedding(VOCAB, 10, dtype=torch.float64), seed=2)
    tokens, positions = torch.tensor(TOKENS), torch.tensor(POSITIONS)
    z = emb.complex_embedding(tokens, positions)  # (2, 5, 5)
    x = emb(tokens, positions)  # (2, 5, 10)
    assert x.shape == (2, 5, 10) and z.shape == (2, 5, 5)
    assert_close(x[..., :5], z.real, rtol=0, atol=0)
    assert_close(x[..., 5:], z.imag, rtol=0, atol=0)
    assert_close(emb.embed_tokens(tokens, positions), x, rtol=0, atol=0)  # the model's hook


def test_float32_keeps_the_phase_of_large_positions() -> None:
    """The angle is formed in float64: at position 1e5 a float32 angle would be off by
    ~0.004 rad; here only the final rounding to float32 remains."""
    emb = randomized(ComplexOrderEmbedding(VOCAB, 8), seed=3)
    assert emb.amplitude.dtype == torch.float32
    got = emb.complex_embedding(torch.tensor(TOKENS), torch.tensor(POSITIONS))
    assert got.dtype == torch.complex64
    want = direct_formula(*(t.double() for t in tables(emb)), TOKENS, POSITIONS)
    assert_close(got, want.to(torch.complex64))


def test_half_precision_tables_compute_in_float32_and_round_once() -> None:
    emb = randomized(ComplexOrderEmbedding(VOCAB, 8), seed=4)
    tokens, positions = torch.tensor(TOKENS), torch.tensor(POSITIONS)
    with torch.no_grad():
        reference = ComplexOrderEmbedding(VOCAB, 8)
        for mine, theirs in zip(emb.parameters(), reference.parameters(), strict=True):
            theirs.copy_(mine.to(torch.bfloat16))  # the same (rounded) values in float32
        want = reference(tokens, positions).to(torch.bfloat16)
        got = emb.to(torch.bfloat16)(tokens, positions)
    assert got.dtype == torch.bfloat16
    assert_close(got, want, rtol=0, atol=0)


# -------------------------------------------------------------------------- properties


@pytest.mark.parametrize("offset", [1, 3, 17, 250])
def test_offset_is_a_position_free_rotation(offset: int) -> None:
    """Property 1: ``f(j, pos + n) = exp(i ω_j n) ⊙ f(j, pos)``, the same for every pos."""
    emb = randomized(ComplexOrderEmbedding(VOCAB, 12, dtype=torch.float64), seed=5)
    tokens = torch.tensor([4, 4, 9, 0, 22, 13])
    for start in (0, 7, 1000, 123_456):
        positions = torch.arange(start, start + 6, dtype=torch.float64)
        here = emb.complex_embedding(tokens, positions)
        there = emb.complex_embedding(tokens, positions + offset)
        rotation = torch.exp(1j * emb.frequency.detach()[tokens] * offset)  # depends on j, n
        assert_close(there, rotation * here, rtol=1e-9, atol=1e-9)


def test_bounded_modulus_is_the_amplitude() -> None:
    """Property 2: ``|f(j, pos)| = |r_j|`` at every position."""
    emb = randomized(ComplexOrderEmbedding(VOCAB, 12, dtype=torch.float64), seed=6)
    tokens = torch.arange(VOCAB)
    for positions in (torch.zeros(VOCAB), torch.arange(VOCAB) * 7919.0, torch.full((VOCAB,), 1e6)):
        modulus = emb.complex_embedding(tokens, positions).abs()
        assert_close(modulus, emb.amplitude.detach().abs(), rtol=1e-12, atol=1e-12)


def test_same_token_differs_by_position_and_tokens_by_id() -> None:
    emb = randomized(ComplexOrderEmbedding(VOCAB, 8, dtype=torch.float64), seed=7)
    x = emb(torch.tensor([5, 5, 6]), torch.tensor([2, 3, 2]))
    assert (x[0] - x[1]).abs().max() > 1e-3
    assert (x[0] - x[2]).abs().max() > 1e-3


def test_sinusoidal_encoding_is_the_special_case() -> None:
    """Unit amplitudes, no phase, shared frequencies ``base^{-2k/d}``: the real view is the
    Transformer's sinusoidal encoding (concat layout) with its sin and cos halves swapped."""
    emb = ComplexOrderEmbedding(VOCAB, DIM, dtype=torch.float64)
    with torch.no_grad():
        emb.amplitude.fill_(1.0)
    positions = torch.arange(0, 3000, 37)
    x = emb(torch.randint(0, VOCAB, positions.shape), positions)
    pe = sinusoidal_encoding(positions, DIM, layout="concat", dtype=torch.float64)  # [sin ‖ cos]
    assert_close(x, pe.roll(DIM // 2, dims=-1), rtol=1e-12, atol=1e-12)


def test_initialization() -> None:
    emb = ComplexOrderEmbedding(
        VOCAB, DIM, init_std=0.3, generator=torch.Generator().manual_seed(9)
    )
    draw = torch.randn(VOCAB, DIM // 2, generator=torch.Generator().manual_seed(9))
    assert_close(emb.amplitude.detach(), draw * 0.3, rtol=0, atol=0)
    inv_freq = sinusoidal_inv_freq(DIM).float()  # base^{-2k/dim}, k < dim/2, every token
    assert_close(emb.frequency.detach(), inv_freq.expand(VOCAB, -1), rtol=0, atol=0)
    assert_close(emb.phase.detach(), torch.zeros(VOCAB, DIM // 2), rtol=0, atol=0)
    other = ComplexOrderEmbedding(VOCAB, DIM, base=100.0)
    assert_close(
        other.frequency.detach()[0], sinusoidal_inv_freq(DIM, 100.0).float(), rtol=0, atol=0
    )


def test_module_state_hooks_and_devices() -> None:
    emb = ComplexOrderEmbedding(VOCAB, DIM)
    assert set(emb.state_dict()) == {"amplitude", "frequency", "phase"}
    assert emb.complex_dim == DIM // 2
    assert repr(emb) == f"ComplexOrderEmbedding(vocab_size={VOCAB}, dim={DIM}, base=10000)"
    hooks = hooks_of(emb)
    assert hooks.token_embedding
    assert not (hooks.additive or hooks.rotary or hooks.logit_terms)
    meta = ComplexOrderEmbedding(VOCAB, DIM, device="meta")  # meta-device init works
    assert meta.amplitude.device.type == "meta"
    assert ComplexOrderEmbedding(2, 4, dtype=torch.float64).amplitude.dtype == torch.float64


# --------------------------------------------------------------------------- gradients


def test_gradcheck_amplitude_frequency_phase() -> None:
    emb = randomized(ComplexOrderEmbedding(6, 4, dtype=torch.float64), seed=10)
    tokens = torch.tensor([[0, 3, 3, 5], [2, 2, 1, 0]])  # repeated ids accumulate gradients
    positions = torch.tensor([[0.0, 1.0, 2.5, 9.0], [4.0, 5.0, 6.0, 7.0]])
    params = {name: p.detach().clone().requires_grad_() for name, p in emb.named_parameters()}

    def real_view(amplitude: Tensor, frequency: Tensor, phase: Tensor) -> Tensor:
        state = {"amplitude": amplitude, "frequency": frequency, "phase": phase}
        return torch.func.functional_call(emb, state, (tokens, positions))

    inputs = (params["amplitude"], params["frequency"], params["phase"])
    assert torch.autograd.gradcheck(real_view, inputs)

    def complex_form(amplitude: Tensor, frequency: Tensor, phase: Tensor) -> Tensor:
        return complex_order_embedding(amplitude, frequency, phase, tokens, positions)

    assert torch.autograd.gradcheck(complex_form, inputs)


# ----------------------------------------------------------------------- bad arguments


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"vocab_size": 0}, "vocab_size"),
        ({"vocab_size": 2.5}, "vocab_size"),
        ({"vocab_size": True}, "vocab_size"),
        ({"dim": 7}, "dim must be even"),
        ({"dim": 0}, "dim"),
        ({"base": 0.0}, "base"),
        ({"base": float("nan")}, "base"),
        ({"init_std": 0.0}, "init_std"),
        ({"dtype": torch.long}, "dtype"),
    ],
)
def test_constructor_errors_name_the_argument(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ComplexOrderEmbedding(**{"vocab_size": VOCAB, "dim": DIM, **kwargs})


@pytest.mark.parametrize(
    ("tokens", "positions", "match"),
    [
        (torch.tensor([1, VOCAB]), torch.arange(2), r"tokens must be ids in \[0, vocab_size\)"),
        (torch.tensor([-1, 0]), torch.arange(2), r"tokens must be ids in \[0, vocab_size\)"),
        (torch.tensor([1.0, 2.0]), torch.arange(2), "tokens must be an integer tensor"),
        (torch.tensor([True, False]), torch.arange(2), "tokens must be an integer tensor"),
        (torch.zeros(1, 1, 2, dtype=torch.long), torch.arange(2), "tokens must be an integer"),
        ([1, 2], torch.arange(2), "tokens must be an integer tensor"),
        (torch.tensor([1, 2]), torch.arange(3), "positions has 3 entries"),
        (torch.tensor([1, 2]), torch.tensor([0.0, float("nan")]), "positions must be finite"),
        (torch.tensor([1, 2]), torch.tensor([True, False]), "positions must be an integer"),
        (torch.tensor([1, 2]), torch.zeros(1, 1, 2), "positions must have shape"),
        (torch.ones(2, 2, dtype=torch.long), torch.zeros(3, 2), "positions has batch 3"),
    ],
)
def test_call_errors_name_the_argument(tokens: Any, positions: Tensor, match: str) -> None:
    emb = ComplexOrderEmbedding(VOCAB, DIM)
    with pytest.raises(ValueError, match=match):
        emb(tokens, positions)
    with pytest.raises(ValueError, match=match):
        emb.complex_embedding(tokens, positions)
    with pytest.raises(ValueError, match=match):
        complex_order_real_view(*tables(emb), tokens, positions)


def test_functional_table_errors_name_the_table() -> None:
    r = torch.ones(5, 3)
    tokens, positions = torch.tensor([0, 4]), torch.arange(2)
    with pytest.raises(ValueError, match="phase has shape"):
        complex_order_embedding(r, r, torch.ones(5, 4), tokens, positions)
    with pytest.raises(ValueError, match="frequency must be a floating tensor"):
        complex_order_embedding(r, torch.ones(5, 3, dtype=torch.long), r, tokens, positions)
    with pytest.raises(ValueError, match="amplitude must be a floating tensor"):
        complex_order_real_view(torch.ones(5), r, r, tokens, positions)
    with pytest.raises(ValueError, match=r"\[0, 5\)"):
        complex_order_embedding(r, r, r, torch.tensor([5]), torch.arange(1))


# ------------------------------------------------------------------------------- model


def from_dims(d: ModelDims) -> dict[str, Any]:
    """What the model's dims fill in: its vocabulary and width."""
    return {"vocab_size": d.vocab_size, "dim": d.dim}


@pytest.fixture
def registered() -> Iterator[str]:
    """Register the encoding under a test name (the user-registration API)."""
    spec = EncodingSpec(
        NAME,
        "additive",
        "Wang et al. 2020, https://arxiv.org/abs/1912.12333",
        "complex-order token embeddings (test registration)",
        lambda: ComplexOrderEmbedding,
        from_dims,
    )
    register_encoding(spec)
    try:
        yield NAME
    finally:
        unregister_encoding(NAME)


def config(name: str, **more: Any) -> ModelConfig:
    base: dict[str, Any] = {"vocab_size": VOCAB, "dim": DIM, "depth": 2, "num_heads": 4}
    return ModelConfig(pos=name, **{**base, **more})


def visible(model: nn.Module) -> nn.Module:
    """Trained-like tables, so that positions visibly matter."""
    emb = model.encoding
    assert isinstance(emb, ComplexOrderEmbedding)
    randomized(emb, seed=11)
    return model


def test_model_uses_the_embedding_in_place_of_its_own(registered: str) -> None:
    model = visible(DecoderLM(config(registered))).double().eval()
    trunk = model.trunk
    assert trunk.embed is None and trunk.additive is None
    assert all(block.attn.pos is None for block in trunk.blocks)
    assert not any(name.startswith("trunk.embed.") for name, _ in model.named_parameters())
    assert config(registered).dims(causal=True).vocab_size == VOCAB
    seen: list[Tensor] = []
    trunk.blocks[0].register_forward_pre_hook(
        lambda _, args, kwargs: seen.append(args[0]), with_kwargs=True
    )
    tokens = torch.randint(0, VOCAB, (2, 9))
    positions = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8], [40, 41, 42, 43, 44, 45, 46, 47, 48]])
    with torch.no_grad():
        logits = model(tokens, positions)
        cache = model.new_cache()
        model(tokens[:, :4], cache=cache)
        model(tokens[:, 4:], cache=cache)  # positions continue the cache: 4..8
    assert logits.shape == (2, 9, VOCAB)
    emb = model.encoding
    assert_close(seen[0], emb(tokens, positions), rtol=0, atol=0)
    assert_close(seen[2], emb(tokens[:, 4:], torch.arange(4, 9)), rtol=0, atol=0)


def test_decode_with_kv_cache_equals_full_forward(registered: str) -> None:
    model = visible(DecoderLM(config(registered))).eval()
    tokens = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(0))
    positions = torch.stack([torch.arange(9), torch.arange(7, 16)])
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        prefix = model(tokens[:, :5], cache=cache)
        steps = [model(tokens[:, i : i + 1], cache=cache) for i in range(5, 9)]
        per_row = model(tokens, positions)
        cache = model.new_cache()
        first = model(tokens[:, :5], positions[:, :5], cache=cache)
        rest = model(tokens[:, 5:], positions[:, 5:], cache=cache)
    assert_close(torch.cat([prefix, *steps], dim=1), full, atol=1e-5, rtol=1e-5)
    assert_close(torch.cat([first, rest], dim=1), per_row, atol=1e-5, rtol=1e-5)


def test_left_padding_equals_the_unpadded_sequence(registered: str) -> None:
    """Key padding + causal mask: left-padded rows (positions counted from the first real
    token) give the unpadded sequence's logits at the real tokens."""
    model = visible(DecoderLM(config(registered))).double().eval()
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (2, 10), generator=generator)
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[0, :3] = False
    positions = positions_from_padding_mask(mask)
    with torch.no_grad():
        padded = model(tokens, positions, key_padding_mask=mask)
        alone = model(tokens[:1, 3:])
        full_row = model(tokens[1:])
    assert_close(padded[0, 3:], alone[0], rtol=1e-10, atol=1e-10)
    assert_close(padded[1], full_row[0], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("causal", [True, False])
def test_chunked_backend_equals_sdpa_with_padding(registered: str, causal: bool) -> None:
    """Outputs and every parameter's gradient agree between the sdpa reference and chunked."""
    generator = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, VOCAB, (3, 14), generator=generator)
    mask = torch.ones(3, 14, dtype=torch.bool)
    mask[0, :4] = False  # left padding
    mask[2, 9:] = False  # right padding
    results = []
    for backend in ("sdpa", "chunked"):
        torch.manual_seed(0)
        if causal:
            model: nn.Module = DecoderLM(config(registered, backend=backend))
            run = lambda m: m(tokens, positions_from_padding_mask(mask), key_padding_mask=mask)  # noqa: E731
        else:
            model = EncoderClassifier(config(registered, backend=backend), num_classes=3)
            run = lambda m: m.encode(tokens, key_padding_mask=mask)  # noqa: E731
        model = visible(model).double()
        out = run(model)
        weights = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view_as(out)
        (out * weights * mask[..., None]).sum().backward()
        grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
        results.append((out.detach() * mask[..., None], grads))
    (sdpa_out, sdpa_grads), (chunked_out, chunked_grads) = results
    assert_close(chunked_out, sdpa_out, rtol=1e-10, atol=1e-10)
    assert set(chunked_grads) == set(sdpa_grads)
    assert {"amplitude", "frequency", "phase"} <= {n.rsplit(".", 1)[-1] for n in sdpa_grads}
    for name, grad in sdpa_grads.items():
        assert_close(chunked_grads[name], grad, rtol=1e-10, atol=1e-10, msg=name)


def test_a_training_step_reduces_the_loss(registered: str) -> None:
    torch.manual_seed(0)
    model = DecoderLM(config(registered))
    tokens = torch.randint(0, VOCAB, (4, 16), generator=torch.Generator().manual_seed(3))

    def loss() -> Tensor:
        logits = model(tokens[:, :-1])
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))

    before = loss()
    before.backward()
    emb = model.encoding
    for table in (emb.amplitude, emb.frequency, emb.phase):
        assert table.grad is not None and table.grad.abs().max() > 0
    with torch.no_grad():  # one plain gradient step (torch.optim would import torch._dynamo)
        for p in model.parameters():
            assert p.grad is not None
            p -= 0.05 * p.grad
        after = loss()
    assert after < before - 1e-3


def test_encoder_breaks_permutation_equivariance(registered: str) -> None:
    model = visible(EncoderClassifier(config(registered), num_classes=3)).double().eval()
    tokens = torch.randint(0, VOCAB, (2, 10), generator=torch.Generator().manual_seed(4))
    perm = torch.tensor([3, 7, 0, 9, 1, 5, 2, 8, 6, 4])
    with torch.no_grad():
        gap = (model.encode(tokens[:, perm]) - model.encode(tokens)[:, perm]).abs().max()
    assert gap > 1e-3


@pytest.mark.slow  # importing torch._dynamo alone takes seconds
def test_model_compiles_fullgraph(registered: str) -> None:
    torch._dynamo.reset()
    model = DecoderLM(config(registered)).eval()
    tokens = torch.randint(0, VOCAB, (2, 8))
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        assert_close(compiled(tokens, torch.arange(8)), model(tokens, torch.arange(8)))


def test_model_rejects_a_smaller_vocabulary_or_another_width(registered: str) -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        DecoderLM(config(registered, pos_kwargs={"vocab_size": VOCAB - 1}))
    with pytest.raises(ValueError, match="dim 16 but the model's dim is 32"):
        DecoderLM(config(registered, pos_kwargs={"dim": 16}))
    bigger = DecoderLM(config(registered, pos_kwargs={"vocab_size": VOCAB + 5}))  # allowed
    assert bigger(torch.tensor([[VOCAB - 1]])).shape == (1, 1, VOCAB)
    with pytest.raises(ValueError, match="vocab_size"):
        ModelDims(dim=DIM, num_heads=4, vocab_size=0)
    with pytest.raises(ValueError, match="vocab_size"):  # dims without a vocabulary
        ComplexOrderEmbedding(**from_dims(ModelDims(dim=DIM, num_heads=4)))
