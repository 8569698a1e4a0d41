"""One drafted token from a row of logits: what a chain drafter that runs a model (the draft
model, the target's own MTP layers) does per token, in one place."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from specchat.engine.decode.sampling import Distribution, SamplerSettings, distribution, greedy_token
from specchat.engine.decode.verify import one_hot


class TokenPicker:
    """Greedy: the argmax (q one-hot), its top-1 probability computed only if the policy asks.
    Sampled: a draw from the sampler's transform of the row (q that distribution)."""

    def __init__(self) -> None:
        self._buf: npt.NDArray[np.float32] | None = None

    def pick(self, row: npt.NDArray[np.float32], s: SamplerSettings,
             rng: np.random.Generator) -> tuple[int, Distribution, Callable[[], float]]:
        """The token drafted from logits ``row`` (n_vocab,), the q it was drawn from, and its
        top-1 probability (greedy: a softmax, only when called, while ``row`` is valid)."""
        if s.greedy:
            d = greedy_token(row)
            return d, one_hot(d), self._softmax_top(row)
        q = distribution(row, s)
        top = float(q.probs[0])
        return q.sample(rng), q, lambda: top

    def _softmax_top(self, row: npt.NDArray[np.float32]) -> Callable[[], float]:
        """The top-1 probability at ``row``, computed on call while the view is valid (float32
        into a scratch buffer: far cheaper than float64 on a large vocabulary)."""
        def top() -> float:
            buf = self._buf
            if buf is None or buf.shape != row.shape:
                buf = self._buf = np.empty(row.shape, dtype=np.float32)
            np.subtract(row, row.max(), out=buf)
            np.exp(buf, out=buf)
            return float(1.0 / buf.sum(dtype=np.float64))
        return top
