"""Token-state biases: a bias from per-token states of the layer's input (FoX)."""

from __future__ import annotations

from posenc.token_state.fox import ForgettingGate, fox_bias, fox_log_gates
from posenc.token_state.token_bias import TokenBias, check_token_bias_fits

__all__ = ["ForgettingGate", "TokenBias", "check_token_bias_fits", "fox_bias", "fox_log_gates"]
