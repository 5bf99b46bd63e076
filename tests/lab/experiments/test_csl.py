"""The CSL and triangle experiments end to end on tiny configs: rows, resume, claims."""

from __future__ import annotations

import dataclasses
import json

import pytest

pytest.importorskip("networkx")
pytest.importorskip("sklearn")

from posenc.lab.config import expand_flat_options, from_record, replace_fields
from posenc.lab.experiments.csl import CslConfig, run_csl
from posenc.lab.experiments.triangles import TrianglesConfig, run_triangles
from posenc.lab.results import check_out_dir

CSL_TINY = replace_fields(
    CslConfig(),
    encodings=("none", "rwse"),
    seeds=(0,),
    folds=(0, 1),
    dim=16,
    depth=1,
    epochs=1,
    k=4,
    steps=4,
)
TRIANGLES_TINY = replace_fields(
    TrianglesConfig(),
    encodings=("none", "rwse"),
    seeds=(0,),
    train_graphs=24,
    val_graphs=8,
    test_graphs=8,
    dim=16,
    depth=1,
    epochs=1,
)


def test_csl_rows_resume_and_claims(tmp_path):
    rows = run_csl(CSL_TINY, tmp_path, echo=None)
    assert [(r["encoding"], r["fold"]) for r in rows] == [
        ("none", 0),
        ("none", 1),
        ("rwse", 0),
        ("rwse", 1),
    ]
    for row in rows:
        assert row["experiment"] == "csl" and row["attention"] == "graph" and row["seed"] == 0
        assert 0.0 <= row["test_accuracy"] <= 1.0 and 0.0 <= row["val_accuracy"] <= 1.0
    none = [r for r in rows if r["encoding"] == "none"]
    assert all(r["test_accuracy"] == pytest.approx(0.1) for r in none)  # one output: chance
    claims = {c["name"]: c for c in json.loads((tmp_path / "claims.json").read_text())}
    # at chance (0.1 <= 0.15), but one seed without spread cannot decide
    assert claims["csl_no_encoding_is_chance"]["status"] == "undecided"
    assert claims["csl_no_encoding_is_chance"]["margin"] == pytest.approx(0.05)
    assert "csl_laplacian_separates" not in claims  # no lap_flip rows: not applicable
    page = (tmp_path / "report.html").read_text()
    assert "CSL graphs" in page and "Without a position encoding, nothing tells" in page
    assert (tmp_path / "figures" / "csl.png").stat().st_size > 0
    finished = sorted(p.stat().st_mtime_ns for p in (tmp_path / "runs").rglob("eval.json"))
    assert run_csl(CSL_TINY, tmp_path, echo=None) == rows
    assert sorted(p.stat().st_mtime_ns for p in (tmp_path / "runs").rglob("eval.json")) == finished


def test_triangles_rows_and_claims(tmp_path):
    rows = run_triangles(TRIANGLES_TINY, tmp_path, echo=None)
    assert [r["encoding"] for r in rows] == ["none", "rwse"]
    for row in rows:
        assert row["relative_mae"] == pytest.approx(row["test_mae"] / row["constant_mae"])
    page = (tmp_path / "report.html").read_text()
    assert "Triangle count error per graph encoding" in page
    assert (tmp_path / "figures" / "triangles.png").stat().st_size > 0
    claims = {c["name"] for c in json.loads((tmp_path / "claims.json").read_text())}
    assert {"triangles_no_encoding_is_constant", "triangles_random_walks_read_counts"} <= claims


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"encodings": ("laplace",)}, "encodings"),
        ({"folds": (5,)}, "folds"),
        ({"attention": "sparse"}, "attention"),
        ({"seeds": (0, 0)}, "seeds"),
        ({"k": 0}, "k"),
        ({"lr": 0.0}, "lr"),
    ],
)
def test_csl_bad_config_names_the_field(kwargs, name):
    with pytest.raises(ValueError, match=name):
        replace_fields(CslConfig(), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"train_graphs": 0}, "train_graphs"),
        ({"encodings": ()}, "encodings"),
        ({"data_seed": -1}, "data_seed"),
    ],
)
def test_triangles_bad_config_names_the_field(kwargs, name):
    with pytest.raises(ValueError, match=name):
        replace_fields(TrianglesConfig(), **kwargs)


def _flat(config) -> dict:
    """``config`` as a config.json written before its model and training were sections."""
    record = dataclasses.asdict(config)
    return json.loads(json.dumps({**record.pop("model"), **record.pop("train"), **record}))


def test_a_flat_record_and_flat_options_read_as_the_sections():
    assert from_record(CslConfig, _flat(CSL_TINY)) == CSL_TINY
    options = ["--dim", "16", "--epochs=2", "--k", "4"]
    expanded = ["--model.dim", "16", "--train.epochs=2", "--k", "4"]
    assert expand_flat_options(CslConfig, options) == expanded


def test_an_out_folder_of_an_old_triangles_config_is_refused_naming_its_file(tmp_path):
    (tmp_path / "runs" / "r").mkdir(parents=True)
    (tmp_path / "runs" / "r" / "eval.json").write_text("[]")
    old = {k: v for k, v in _flat(TRIANGLES_TINY).items() if not k.endswith("_graphs")}
    old |= {"experiment": "triangles", "train": 24, "val": 8, "test": 8}
    (tmp_path / "config.json").write_text(json.dumps(old))
    with pytest.raises(ValueError, match=r"config\.json .*'train' is the train section"):
        check_out_dir(tmp_path, "triangles", TRIANGLES_TINY)
    (tmp_path / "config.json").write_text(json.dumps({"experiment": "csl", **_flat(CSL_TINY)}))
    check_out_dir(tmp_path, "csl", CSL_TINY)


# --- hand-made rows for the graph claims (tests/lab/test_claims.py reads GRAPH_CASES) ---


def _csl_rows(values: dict[str, list[list[float | None]]]) -> list[dict]:
    """``values[encoding][seed][fold]`` → CSL rows."""
    return [
        {"experiment": "csl", "encoding": e, "seed": s, "fold": f, "test_accuracy": v}
        for e, per_seed in values.items()
        for s, folds in enumerate(per_seed)
        for f, v in enumerate(folds)
    ]


def _triangle_rows(encoding: str, relative: list[float | None]) -> list[dict]:
    return [
        {"experiment": "triangles", "encoding": encoding, "seed": s, "relative_mae": v}
        for s, v in enumerate(relative)
    ]


GRAPH_CASES: dict[str, dict] = {
    "csl_no_encoding_is_chance": {  # <= 0.15, folds averaged within a seed
        "holds": (_csl_rows({"none": [[0.1, 0.1], [0.1, 0.2]]}), 0.125),
        "fails": (_csl_rows({"none": [[0.2, 0.2], [0.1, 0.3]]}), 0.2),
        "undefined": _csl_rows({"none": [[0.1, None]]}),
    },
    "csl_laplacian_separates": {  # >= 0.9
        "holds": (_csl_rows({"lap_flip": [[1.0, 0.9], [0.9, 0.9]]}), 0.925),
        "fails": (_csl_rows({"lap_flip": [[0.9, 0.8], [0.9, 0.8]]}), 0.85),
        "undefined": _csl_rows({"lap": [[1.0]]}),
    },
    "csl_sign_flips_help": {  # lap_flip - lap >= 0.05, paired by seed
        "holds": (_csl_rows({"lap_flip": [[0.9], [1.0]], "lap": [[0.5], [0.6]]}), 0.4),
        "fails": (_csl_rows({"lap_flip": [[0.5], [0.6]], "lap": [[0.5], [0.58]]}), 0.01),
        "undefined": _csl_rows({"lap_flip": [[0.9]], "lap": [[None]]}),
    },
    "triangles_no_encoding_is_constant": {  # >= 0.9
        "holds": (_triangle_rows("none", [1.0, 0.98]), 0.99),
        "fails": (_triangle_rows("none", [0.5, 0.7]), 0.6),
        "undefined": _triangle_rows("none", [1.0, None]),
    },
    "triangles_random_walks_read_counts": {  # <= 0.25
        "holds": (_triangle_rows("rwse", [0.1, 0.2]), 0.15),
        "fails": (_triangle_rows("rwse", [0.3, 0.5]), 0.4),
        "undefined": _triangle_rows("none", [0.1]),
    },
}
