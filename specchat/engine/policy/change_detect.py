"""Page-Hinkley test: has the mean of a stream (here, draft tokens kept: 1/0) changed?

Two-sided. With x̄ the running mean since the last reset (or a reference the caller passes: the
rate a controller currently believes in), it accumulates
m⁺ = Σ (x − x̄ − δ) and m⁻ = Σ (x − x̄ + δ) and signals an increase when m⁺ rises ``threshold``
above its minimum, a decrease when m⁻ falls ``threshold`` below its maximum. δ is the size of
drift to ignore. A shift of Δ > δ in the mean is detected after about threshold / (Δ − δ)
observations; on a stationary 0/1 stream of variance σ², a false alarm needs an excursion whose
probability is about exp(−2·δ·threshold / σ²) (≈ 0.6% with the defaults at α = 0.5).
"""

from __future__ import annotations


class PageHinkley:
    def __init__(self, delta: float = 0.08, threshold: float = 8.0) -> None:
        self.delta = delta
        self.threshold = threshold
        self.reset()

    def reset(self, mean: float | None = None, weight: float = 0.0) -> None:
        """Start afresh; ``mean`` (as ``weight`` observations) anchors the first estimates."""
        self._n = weight if mean is not None else 0.0
        self._mean = mean if mean is not None else 0.0
        self._up = self._up_min = 0.0
        self._down = self._down_max = 0.0
        self.count = 0  # observations since the reset
        self.direction = 0  # +1 / −1: the last change detected

    def update(self, x: float, reference: float | None = None) -> bool:
        """Add one observation; True if it completes a detected change (then reset).

        ``reference``: the mean to test against instead of the running mean."""
        self._n += 1.0
        self._mean += (x - self._mean) / self._n
        self.count += 1
        mean = self._mean if reference is None else reference
        self._up += x - mean - self.delta
        self._up_min = min(self._up_min, self._up)
        self._down += x - mean + self.delta
        self._down_max = max(self._down_max, self._down)
        if self._up - self._up_min > self.threshold:
            self.reset()
            self.direction = 1
            return True
        if self._down_max - self._down > self.threshold:
            self.reset()
            self.direction = -1
            return True
        return False
