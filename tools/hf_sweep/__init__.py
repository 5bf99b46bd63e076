"""The HF conformance sweep: posenc's ``patch_rotary`` on every RoPE family of the installed
``transformers``, each built tiny with random weights (no downloads).

Tooling, not part of the installed package; run it from the repository root (``posenc``
importable: installed, or ``PYTHONPATH=src``)::

    python -m tools.hf_sweep [family ...] [--jobs N] [--timeout SECONDS] [--markdown FILE]
        [--json FILE] [--dtype float64]
    python -m tools.hf_sweep --conventions

* :mod:`tools.hf_sweep.sweep`: one family's check and the whole sweep (statuses, table, CLI);
* :mod:`tools.hf_sweep.parallel`: the families in worker processes, each within a timeout;
* :mod:`tools.hf_sweep.table`: the expected statuses (``NOT_EQUAL``) the slow test asserts;
* :mod:`tools.hf_sweep.families`: the RoPE families and model types of the installed release;
* :mod:`tools.hf_sweep.tiny` and :mod:`tools.hf_sweep.overrides`: the tiny model builder;
* :mod:`tools.hf_sweep.conventions`: HF's conventions read from its code (the source of
  :mod:`posenc.integrations.hf.conventions`).

Needs ``transformers`` (importing this package does not).
"""
