from __future__ import annotations

import pytest
import torch

from posenc.additive import Sinusoidal2D
from posenc.attention import hooks_of
from posenc.encoding import base
from posenc.registry import ModelDims, build_encoding, encoding_spec, list_encodings
from posenc.rotary import AxialRotary2D

DIMS = ModelDims(dim=32, num_heads=4, max_seq_len=64, vocab_size=50)
IMAGE = ModelDims(dim=32, num_heads=4, max_seq_len=12, causal=False, grid=(3, 4), vocab_size=50)


@pytest.mark.parametrize("spec", list_encodings(), ids=lambda s: s.name)
def test_every_spec_builds_an_encoding_of_its_family(spec) -> None:
    encoding = build_encoding(spec.name, IMAGE if spec.needs_grid else DIMS)
    assert isinstance(encoding, base.PositionalEncoding)
    hooks = hooks_of(encoding)
    found = {
        "additive": hooks.additive or hooks.token_embedding,  # token embedding: additive
        "rotary": (hooks.rotary and not hooks.segments) or hooks.token_phases,  # CARoPE
        "bias": hooks.bias,
        "contextual": hooks.contextual,
        "scores": hooks.scores,
        "segments": hooks.segments,  # rotary hooks too, rotated per segment
        "token_state": hooks.token_state or hooks.token_transform,  # FoX, PaTH: hidden states
        "softmax": hooks.weights,  # stick-breaking: weights in place of the softmax
    }
    if spec.family == "softmax" and not hooks.weights:  # a wrapper: its own place, besides
        assert hooks.score_map or hooks.sinks  # its inner encoding's
        found = {"softmax": True}
    # The listed family is the one hook the encoding implements (none for NoPE).
    assert [family for family, present in found.items() if present] == (
        [] if spec.family == "none" else [spec.family]
    )
    assert "arxiv.org" in spec.paper or "github.com" in spec.paper  # ReRoPE: a repository


def test_an_encoding_of_token_ids_needs_the_vocabulary() -> None:
    with pytest.raises(ValueError, match="vocab_size is required for encoding 'complex_order'"):
        build_encoding("complex_order", ModelDims(dim=32, num_heads=4))
    embedding = build_encoding("complex_order", DIMS)
    assert (embedding.vocab_size, embedding.dim) == (50, 32)


def test_model_dims_fill_constructor_arguments() -> None:
    rope = build_encoding("rope", ModelDims(dim=64, num_heads=8))
    assert rope.head_dim == 8
    learned = build_encoding("learned", ModelDims(dim=16, num_heads=2, max_seq_len=33))
    assert learned.weight.shape == (33, 16)
    xl = build_encoding("xl", ModelDims(dim=48, num_heads=4, head_dim=16))
    assert (xl.num_heads, xl.head_dim, xl.dim) == (4, 16, 48)


def test_decoder_and_encoder_defaults_differ_for_biases() -> None:
    assert build_encoding("alibi", DIMS).mode == "causal"
    encoder = ModelDims(dim=32, num_heads=4, causal=False)
    assert build_encoding("alibi", encoder).mode == "symmetric"
    assert build_encoding("t5", DIMS).bidirectional is False
    assert build_encoding("t5", encoder).bidirectional is True
    # An explicit argument wins over the model-filled default.
    assert build_encoding("t5", encoder, bidirectional=False).bidirectional is False


def test_user_arguments_override_and_unknown_ones_raise() -> None:
    rope = build_encoding("rope", DIMS, {"base": 500000.0, "layout": "interleaved"})
    assert (rope.base, rope.layout) == (500000.0, "interleaved")
    with pytest.raises(ValueError, match="thetaa"):
        build_encoding("rope", DIMS, thetaa=1.0)
    with pytest.raises(ValueError, match="allowed: none"):
        build_encoding("nope", DIMS, base=1.0)
    with pytest.raises(ValueError, match="unknown encoding 'rotary'"):
        encoding_spec("rotary")


def test_parameters_list_user_settable_arguments() -> None:
    params = encoding_spec("rope").parameters()
    assert params["base"] == 10000.0 and params["layout"] == "half"
    assert "head_dim" not in params and "device" not in params
    assert encoding_spec("nope").parameters() == {}


def test_grid_encodings_take_height_and_width_from_the_grid() -> None:
    assert {s.name for s in list_encodings() if s.needs_grid} >= {"sinusoidal_2d", "rope_2d"}
    table = build_encoding("sinusoidal_2d", IMAGE)
    assert isinstance(table, Sinusoidal2D)
    assert (table.height, table.width, table.dim) == (3, 4, 32)
    rope = build_encoding("rope_2d", IMAGE)
    assert isinstance(rope, AxialRotary2D)
    assert (rope.height, rope.width, rope.head_dim, rope.base) == (3, 4, 8, 100.0)
    # Built by name, they are the classes constructed directly.
    positions = torch.arange(12)
    torch.testing.assert_close(table(positions), Sinusoidal2D(3, 4, 32)(positions))
    assert "height" not in encoding_spec("rope_2d").parameters()
    assert encoding_spec("rope_2d").parameters()["base"] == 100.0


@pytest.mark.parametrize("name", [s.name for s in list_encodings() if s.needs_grid])
def test_a_grid_encoding_without_a_grid_raises_naming_grid(name: str) -> None:
    with pytest.raises(ValueError, match="grid"):
        build_encoding(name, DIMS)


def test_sequence_encodings_ignore_the_grid() -> None:
    for spec in list_encodings():
        if not spec.needs_grid:
            build_encoding(spec.name, IMAGE)  # a grid is never required by a 1D encoding


@pytest.mark.parametrize("grid", [(), (0, 4), (4, 2.5), "44", 4, (1, 2, 3, 4)])
def test_bad_grid_raises_naming_grid(grid: object) -> None:
    with pytest.raises(ValueError, match="grid"):
        ModelDims(dim=32, num_heads=4, grid=grid)  # type: ignore[arg-type]


def test_grid_from_json_list_becomes_a_tuple() -> None:
    assert ModelDims(dim=32, num_heads=4, grid=[2, 3]).grid == (2, 3)  # type: ignore[arg-type]


def test_the_causal_only_encodings() -> None:
    # xPos's decay grows for keys after the query; CoPE counts gated keys up to the query
    # and every segment method positions pairs of causal attention
    segments = ["self_extend", "dual_chunk", "rerope", "lm_infinite", "sinks"]
    # FoX sums forget gates up to the query, PaTH multiplies transforms up to it, CARoPE
    # sums phases up to it;
    # stick-breaking breaks the stick from it backwards; additive GRAPE's bias is linear in
    # j − i (it would reward keys after the query)
    expected = ["xpos", "grape_additive", "grape_gated", "cope", "fox", "path", "carope"]
    expected += ["stick_breaking"]
    expected += segments
    assert [s.name for s in list_encodings() if s.causal_only] == expected


def test_model_dims_num_kv_heads_defaults_to_num_heads_and_must_divide_them() -> None:
    assert ModelDims(dim=32, num_heads=4).resolved_num_kv_heads == 4
    assert ModelDims(dim=32, num_heads=4, num_kv_heads=2).resolved_num_kv_heads == 2
    with pytest.raises(ValueError, match=r"num_kv_heads \(3\) must divide num_heads \(4\)"):
        ModelDims(dim=32, num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match="num_kv_heads"):
        ModelDims(dim=32, num_heads=4, num_kv_heads=0)
