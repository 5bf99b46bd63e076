"""The experiments' ``prepare``: what a run will build is judged at the start, before the out
folder is written (not after other runs have trained)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from posenc.lab.experiments import extend, longctx
from posenc.lab.runner import run_experiment


def _refused_beyond_t(monkeypatch: pytest.MonkeyPatch) -> None:
    """YaRN's dict made invalid at every ``s > 1``: accepted by the configs' own check at
    ``s = 1``, refused by the conversion only at the longer lengths the runs evaluate."""
    real = extend.scaling_for

    def scaling_for(method: str, factor: float, train_len: int) -> dict[str, Any] | None:
        scaling = real(method, factor, train_len)
        if method == "yarn" and factor > 1 and scaling is not None:
            scaling = {**scaling, "original_max_position_embeddings": 0}
        return scaling

    monkeypatch.setattr(extend, "scaling_for", scaling_for)


def _no_corpus(config: object) -> None:
    raise AssertionError("the corpus was read before the methods were judged")


@pytest.mark.parametrize(
    ("module", "config", "named"),
    [
        (
            extend,
            extend.ExtendConfig(methods=("rope", "yarn"), ft_methods=()),
            "methods: 'yarn' at s = 2",
        ),
        (
            extend,
            extend.ExtendConfig(methods=("rope",), ft_methods=("yarn",)),
            "ft_methods: 'yarn' at s = 2",
        ),
        (longctx, longctx.LongCtxConfig(methods=("rope", "yarn")), "methods: 'yarn' at length 256"),
    ],
    ids=["extend-methods", "extend-ft_methods", "longctx-methods"],
)
def test_a_scaling_refused_at_a_longer_length_fails_before_the_folder_is_written(
    module: ModuleType,
    config: Any,
    named: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _refused_beyond_t(monkeypatch)
    monkeypatch.setattr(module, "_load", _no_corpus)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="original_max_position_embeddings") as error:
        run_experiment(module.EXPERIMENT, config, out, echo=None)
    assert str(error.value).startswith(named)
    assert not out.exists()


@pytest.mark.parametrize("module", [extend, longctx])
def test_the_default_methods_pass_the_start(
    module: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every default method builds at every length (YaRN, which cannot be built on the meta
    device, is judged on the CPU); the corpus is read after."""
    loaded: list[object] = []
    monkeypatch.setattr(module, "_load", loaded.append)
    config = extend.ExtendConfig() if module is extend else longctx.LongCtxConfig()
    assert module.EXPERIMENT.prepare is not None
    module.EXPERIMENT.prepare(config)
    assert loaded == [config]
