"""Exponential forgetting, shared by every decayed estimate of the policy."""

from __future__ import annotations


def decay_for(half_life: float) -> float:
    """The per-observation factor that halves an observation's weight after ``half_life``."""
    return 0.5 ** (1.0 / half_life)
