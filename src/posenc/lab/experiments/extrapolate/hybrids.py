"""The published findings about per-layer options the ``extrapolate`` rows test.

Runs with ``--model.schedule``, ``--model.window`` or ``--model.output_gate`` carry their
options in the ``schedule`` column (:meth:`posenc.lab.config.ModelArgs.label`); these claims
read them beside the plain transformer's rows (``schedule`` empty) of the same encoding, so
they are ``layered`` (:class:`~posenc.lab.claims.Claim`). The recipes are the documented ones
(docs/hybrids.md, docs/results.md §10)::

    posenc lab extrapolate --out runs/frontier/rope --encodings rope --seeds 0 1 2
    posenc lab extrapolate --out runs/frontier/rnope_swa --encodings rope --seeds 0 1 2 \\
        --model.schedule rnope_swa --model.window 64
    posenc lab extrapolate --out runs/frontier/gate --encodings rope --seeds 0 1 2 \\
        --model.output_gate true

- **RNoPE-SWA is flat past T** (Cohere's hybrid: RoPE layers with a sliding window, one global
  NoPE layer in four): ``ppl(8T) / ppl(T) ≤ 1.10``, decided against the plain RoPE model,
  which must fail the same test.
- **Gated attention reduces the first-token attention mass** (Qwen's sigmoid output gate):
  the gated model's first-token mass at ``T`` at most half the ungated one's, paired by seed.
  It needs a sink to reduce: the ungated model's mass must reach 10 % (the paper measured
  46.7 % at 1.7B parameters), else the claim is undecided, the reason saying so.
"""

from __future__ import annotations

from posenc.lab.claims import Claim, Control, MeanOverSeeds, Reaches, ratio_at
from posenc.lab.experiments.extrapolate.claims import growth, learned

__all__ = ["HYBRID_CLAIMS", "RNOPE_SWA", "SINK_MASS"]

#: The RNoPE-SWA recipe's ``schedule`` label: window 64 = T / 2 at extrapolate's T = 128.
RNOPE_SWA = "rnope_swa+w64"
#: The first-token attention mass at T the ungated model must reach for the gate to have a
#: sink to reduce.
SINK_MASS = 0.10

_RNOPE = (
    "Yang et al. 2025, Rope to Nope and Back Again: A New Hybrid Attention Strategy (the "
    "RNoPE-SWA of Cohere's Command A), https://arxiv.org/abs/2501.18795"
)
_GATED = (
    "Qiu et al. 2025, Gated Attention for Large Language Models: Non-linearity, Sparsity, and "
    "Attention-Sink-Free (NeurIPS), https://arxiv.org/abs/2505.06708"
)


def _rnope_swa_flat() -> Claim:
    return Claim(
        name="rnope_swa_flat_8x",
        text=f"RNoPE-SWA ({RNOPE_SWA}: three RoPE layers with a sliding window of T/2, one global "
        "NoPE layer in four) extrapolates to 8×T: ppl(8T) / ppl(T) ≤ 1.10; decided against the "
        "plain RoPE model (it holds only if RoPE's own ratio is above 1.10).",
        paper=_RNOPE,
        published="The paper's hybrid keeps long-context retrieval where full RoPE fails (its "
        "figures' perplexities were not retrieved); Command A, built on it: near-perfect NIAH "
        "at 256k tokens",
        experiment="extrapolate",
        statistic=MeanOverSeeds(growth("rope", 8.0, schedule=RNOPE_SWA)),
        threshold=1.10,
        direction="<=",
        control=Control("rope", MeanOverSeeds(growth("rope", 8.0, schedule=None))),
        requires=(
            *learned("rope", schedule=RNOPE_SWA),
            *learned("rope", schedule=None),
        ),
        layered=True,
    )


def _gate_reduces_sink() -> Claim:
    return Claim(
        name="gate_reduces_first_token_mass",
        text="The sigmoid output gate at least halves the first-token attention mass at T: "
        "first_token_mass(rope with gate) / first_token_mass(rope), paired by seed, ≤ 0.5 "
        f"(the paper's tenfold cut, with room); needs a sink: the ungated model's mass ≥ "
        f"{SINK_MASS:.0%}.",
        paper=_GATED,
        published="Table/Figure on attention sinks: first-token attention 46.7 % (baseline) → "
        "4.8 % (gated), 1.7B-parameter dense models",
        experiment="extrapolate",
        statistic=ratio_at(
            "extrapolate",
            {"encoding": "rope", "multiplier": 1.0},
            "first_token_mass",
            {"schedule": "gate"},
            {"schedule": None},
        ),
        threshold=0.5,
        direction="<=",
        control=Control("rope without the gate"),
        requires=(
            Reaches(
                "extrapolate",
                ({"encoding": "rope", "multiplier": 1.0, "schedule": None},),
                "first_token_mass",
                SINK_MASS,
                f"the ungated RoPE model forms an attention sink (first-token mass at T ≥ "
                f"{SINK_MASS:.0%})",
            ),
            *learned("rope", schedule="gate"),
            *learned("rope", schedule=None),
        ),
        layered=True,
    )


#: The per-layer options' claims, in report order.
HYBRID_CLAIMS: tuple[Claim, ...] = (_rnope_swa_flat(), _gate_reduces_sink())
