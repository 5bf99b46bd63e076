"""posenc's RoPE in place of HF's sequence rotaries (posenc.integrations.hf.sequence).

Parity per HF class: the adapter's whole output (stacked cos/sin, or CLVP's phases) equals
HF's at every length 1…40, in float32 and float64 inputs. Parity per model: tiny random
conformers and CLVP's text encoder (tools/hf_sweep/tiny.py) give HF's output after
``patch_rotary`` (≤ 5e-6), every sequence rotary replaced and run. Properties: checkpoint keys
kept, HF's cache untouched, unpatch; refusals name what they refuse."""

from __future__ import annotations

import importlib

import pytest
import torch
from torch import nn

from posenc.integrations.hf import patch_rotary, unpatch_rotary
from posenc.integrations.hf.sequence import (
    SEQUENCE_CONVENTIONS,
    SequenceRotaryAdapter,
    sequence_adapter,
)

transformers = pytest.importorskip("transformers")
from tools.hf_sweep.sweep import TOLERANCE, output_and_rotary_calls  # noqa: E402
from tools.hf_sweep.tiny import build_tiny  # noqa: E402

#: HF class → (model folder, config class) in transformers 5.23.0. The conformers' configs get
#: rotary_embedding_base 5000, away from CLVP's constant 10000, so a base read from the wrong
#: place shows.
HF_CLASSES: dict[str, tuple[str, str]] = {
    "Wav2Vec2ConformerRotaryPositionalEmbedding": ("wav2vec2_conformer", "Wav2Vec2ConformerConfig"),
    "Wav2Vec2BertRotaryPositionalEmbedding": ("wav2vec2_bert", "Wav2Vec2BertConfig"),
    "SeamlessM4TConformerRotaryPositionalEmbedding": ("seamless_m4t", "SeamlessM4TConfig"),
    "ClvpRotaryPositionalEmbedding": ("clvp", "ClvpEncoderConfig"),
}


def _hf_module(name: str) -> tuple[nn.Module, object]:
    folder, config_name = HF_CLASSES[name]
    module = importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")
    config = getattr(transformers, config_name)()
    if hasattr(config, "rotary_embedding_base"):
        config.rotary_embedding_base = 5000
    hf: nn.Module = getattr(module, name)(config)
    return hf, config


def test_every_convention_is_a_tested_hf_class() -> None:
    assert set(SEQUENCE_CONVENTIONS) == set(HF_CLASSES)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(HF_CLASSES))
def test_tables_equal_hf(name: str, dtype: torch.dtype) -> None:
    hf, config = _hf_module(name)
    adapter = sequence_adapter(hf, config)
    width = 2 * hf.get_buffer("inv_freq").numel()
    for length in range(1, 41):
        hidden = torch.zeros(2, length, width, dtype=dtype)
        expected, got = hf(hidden), adapter(hidden)
        assert got.dtype == expected.dtype
        # HF's phases are float32 products even for float64 inputs: compare at float32
        torch.testing.assert_close(got.float(), expected.float())


@pytest.mark.parametrize("family", ["wav2vec2_conformer", "wav2vec2_bert", "seamless_m4t", "clvp"])
def test_model_output_equals_hf(family: str) -> None:
    built = build_tiny(family)
    assert not isinstance(built, str), built
    model, inputs, _ = built
    hf = [n for n, m in model.named_modules() if type(m).__name__ in SEQUENCE_CONVENTIONS]
    assert hf
    expected, hf_called = output_and_rotary_calls(model, inputs)
    patch_rotary(model)  # sequence rotaries need no opt-in: 1-D positions 0…seq−1
    adapters = [n for n, m in model.named_modules() if isinstance(m, SequenceRotaryAdapter)]
    assert sorted(adapters) == sorted(hf)
    got, called = output_and_rotary_calls(model, inputs)
    assert called == hf_called and set(adapters) <= called
    assert (got - expected).abs().max().item() <= TOLERANCE


def test_checkpoint_keys_kept_and_unpatch_restores() -> None:
    """Wav2Vec2-Conformer saves its rotary's inv_freq: the patched model saves the same keys
    (and values), and unpatch_rotary puts HF's module back."""
    built = build_tiny("wav2vec2_conformer")
    assert not isinstance(built, str)
    model = built[0]
    before = model.state_dict()
    hf = dict(model.named_modules())
    patch_rotary(model)
    after = model.state_dict()
    assert after.keys() == before.keys()
    for key, value in before.items():
        torch.testing.assert_close(after[key], value, rtol=0, atol=0)
    unpatch_rotary(model)
    assert all(dict(model.named_modules())[n] is m for n, m in hf.items())


def test_the_patch_time_check_leaves_hf_cache_alone() -> None:
    """HF caches its tables by length alone; the check's probe call must not leave one."""
    hf, config = _hf_module("Wav2Vec2ConformerRotaryPositionalEmbedding")
    hf(torch.zeros(1, 5, 8, dtype=torch.float64))
    cached = hf.cached_rotary_positional_embedding
    sequence_adapter(hf, config)
    assert hf.cached_sequence_length == 5
    assert hf.cached_rotary_positional_embedding is cached


def test_a_config_without_the_base_is_refused() -> None:
    hf, _ = _hf_module("Wav2Vec2BertRotaryPositionalEmbedding")
    with pytest.raises(ValueError, match="reads the config's rotary_embedding_base, got None"):
        sequence_adapter(hf, object())


def test_a_module_that_breaks_its_convention_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    name = "ClvpRotaryPositionalEmbedding"
    hf, config = _hf_module(name)
    wrong = SEQUENCE_CONVENTIONS[name].__class__("phases", base=500.0)
    monkeypatch.setitem(SEQUENCE_CONVENTIONS, name, wrong)
    with pytest.raises(ValueError, match=f"{name}'s tables differ from its convention"):
        sequence_adapter(hf, config)
