"""Adam (Kingma & Ba 2015) over float32 numpy arrays, for the heads trained on this machine."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F32 = np.float32

class Adam:
    def __init__(self, shapes: list[tuple[int, ...]], lr: float) -> None:
        self.m = [np.zeros(s, dtype=F32) for s in shapes]
        self.v = [np.zeros(s, dtype=F32) for s in shapes]
        self.lr, self.t = lr, 0

    def step(self, params: list[npt.NDArray[np.float32]],
             grads: list[npt.NDArray[np.float32]]) -> None:
        self.t += 1
        b1, b2, eps = 0.9, 0.999, 1e-8
        c1, c2 = 1 - b1 ** self.t, 1 - b2 ** self.t
        for p, g, m, v in zip(params, grads, self.m, self.v, strict=True):
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            p -= (self.lr * (m / c1) / (np.sqrt(v / c2) + eps)).astype(F32)
