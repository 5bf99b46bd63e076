"""The graph methods' catalogue: what ``posenc list`` shows of them follows their signatures,
and none of them reaches the sequence registry."""

from __future__ import annotations

import inspect

import pytest

from posenc.graph import laplacian_pe
from posenc.graph.catalogue import FAMILY, graph_method, list_graph_methods
from posenc.registry import ModelDims, build_encoding, list_encodings

METHODS = list_graph_methods()


def test_names_are_unique_and_apart_from_the_sequence_encodings() -> None:
    names = [method.name for method in METHODS]
    assert len(set(names)) == len(names)
    assert not set(names) & {spec.name for spec in list_encodings()}
    for name in names:  # not buildable as a sequence encoding (the model's pos=)
        with pytest.raises(ValueError, match="unknown encoding"):
            build_encoding(name, ModelDims(dim=32, num_heads=4))


def test_every_family_of_graph_method_is_listed_with_its_paper() -> None:
    names = {method.name for method in METHODS}
    assert {"laplacian_combinatorial", "laplacian_sym", "laplacian_rw", "rwse", "rrwp"} <= names
    assert {"signnet", "eigenvector_mlp", "shortest_paths", "graphormer_spatial"} <= names
    assert {"graphormer_edges", "graphormer_centrality", "lstep"} <= names
    for method in METHODS:
        assert method.family == FAMILY == "graph"
        assert "https://arxiv.org/abs/" in method.paper, method.name
        assert method.summary


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_parameters_follow_the_signature(method) -> None:
    signature = inspect.signature(method.target).parameters
    shown = [*method.required(), *method.parameters()]
    assert set(shown) <= set(signature)
    assert not set(shown) & {"graph", "device", "dtype", "generator", *method.preset}
    for name in method.required():
        assert signature[name].default is inspect.Parameter.empty
    for name, default in method.parameters().items():
        assert signature[name].default == default
    for name in method.preset:  # a preset is a real argument of the target
        assert name in signature


def test_laplacian_variants_are_presets_of_one_function() -> None:
    for normalization in ("combinatorial", "sym", "rw"):
        method = graph_method(f"laplacian_{normalization}")
        assert method.target is laplacian_pe
        assert method.preset == {"normalization": normalization}
        assert method.required() == ("k",) and method.parameters() == {"pad": True}
    signnet = graph_method("signnet")
    assert signnet.required() == ("k", "dim")
    assert signnet.parameters()["phi_layers"] == 2


def test_unknown_names_are_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown graph method 'rope'.*laplacian_sym"):
        graph_method("rope")
