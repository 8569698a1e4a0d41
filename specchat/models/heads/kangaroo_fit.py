"""Kangaroo's adapter, trained with numpy on this machine.

The shallow model (the target's first L blocks, a layer-skip cut) gives a post-norm hidden state
h per position; the adapter maps it toward the target's last one,

    x = h + B · SiLU(A · h + a),    logits = W · x

(A: r × d, a: r, B: d × r; W the target's frozen output matrix), and learns the target's
next-token distribution at the same position by cross-entropy to the target's top tokens there
(renormalised over the kept ones). B starts at zero, so the adapter starts as the shallow model
itself (the layer-skip draft) and learns only the correction. As for Medusa's heads
(:mod:`.medusa`), the softmax of training runs over the tokens the target put in its top lists
(at most ``max_vocab``, the most probable first): 2 cores cannot afford the whole vocabulary for
thousands of positions in minutes. At run time the drafter uses the whole vocabulary, as
``W · h + (W · B) · SiLU(A · h + a)``: ``W · h`` is the shallow model's own logits and ``W · B``
(V × r) is computed once when the adapter is saved.

Training stops at the time budget (or after ``epochs`` passes), keeping the weights that did
best on the held-out positions; held-out accuracy is reported for the shallow model alone and
with the adapter.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from specchat.engine.drafters.kangaroo import ETA
from specchat.errors import SpecchatError
from specchat.models.heads.adam import Adam
from specchat.models.heads.budget import Budget, fit_within
from specchat.models.progress import ProgressFn, no_progress

F32 = np.float32


@dataclass(frozen=True)
class KangarooSpec:
    rank: int = 128  # r: the adapter's width (its cost per draft token is V × r)
    minutes: float = 3.0
    epochs: int = 1000
    batch: int = 256
    lr: float = 2e-3
    max_vocab: int = 8192
    eval_every: int = 25
    seed: int = 0
    eta: float = ETA


@dataclass(frozen=True)
class AdapterAccuracy:
    """On the held-out positions: how often the best token is the target's best token."""

    shallow_top1: float  # the shallow model alone (the layer-skip draft)
    top1: float  # with the adapter
    top3: float  # the target's best among the adapter's three best
    positions: int


@dataclass(frozen=True)
class Adapter:
    a: npt.NDArray[np.float32]  # (r, d)
    bias: npt.NDArray[np.float32]  # (r,)
    b: npt.NDArray[np.float32]  # (d, r)

    def features(self, h: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """x = h + B · SiLU(A · h + a), row-wise."""
        u = h @ self.a.T + self.bias
        s = u / (1.0 + np.exp(-u))
        return (h + s @ self.b.T).astype(F32)


@dataclass(frozen=True)
class FitResult:
    adapter: Adapter
    accuracy: AdapterAccuracy
    steps: int
    seconds: float
    train_positions: int
    vocab_size: int
    coverage: float  # share of the target's top-token mass the training vocabulary holds


def choose_vocab(top_ids: npt.NDArray[np.int32], top_probs: npt.NDArray[np.floating],
                 max_vocab: int) -> tuple[npt.NDArray[np.int64], float]:
    """The token ids training covers (the most probable first, then sorted by id), and the
    share of the target's top-token mass they hold."""
    ids = top_ids.ravel().astype(np.int64)
    mass = np.bincount(ids, weights=top_probs.ravel().astype(np.float64))
    present = np.flatnonzero(mass > 0)
    order = present[np.argsort(-mass[present], kind="stable")][:max_vocab]
    return np.sort(order), float(mass[order].sum() / max(mass.sum(), 1e-30))


def _labels(top_ids: npt.NDArray[np.int32], top_probs: npt.NDArray[np.floating],
            vocab: npt.NDArray[np.int64], pos: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
    """Soft label rows over the vocabulary subset (zero rows where none of its tokens are)."""
    index = np.full(int(max(top_ids.max(), vocab.max())) + 1, -1, dtype=np.int64)
    index[vocab] = np.arange(vocab.size)
    ids = index[top_ids[pos]]
    probs = np.where(ids >= 0, top_probs[pos].astype(F32), 0.0).astype(F32)
    y = np.zeros((pos.size, vocab.size), dtype=F32)
    rows = np.repeat(np.arange(pos.size), ids.shape[1])
    ok = ids.ravel() >= 0
    np.add.at(y, (rows[ok], ids.ravel()[ok]), probs.ravel()[ok])
    total = y.sum(axis=1, keepdims=True)
    np.divide(y, total, out=y, where=total > 0)
    return y


def _step(h: npt.NDArray[np.float32], ad: Adapter, out: npt.NDArray[np.float32],
          y: npt.NDArray[np.float32]) -> tuple[float, list[npt.NDArray[np.float32]]]:
    """Cross-entropy on a batch, and its gradients for a, bias and b."""
    u = h @ ad.a.T + ad.bias
    sig = 1.0 / (1.0 + np.exp(-u))
    s = u * sig
    x = h + s @ ad.b.T
    z = x @ out.T
    z -= z.max(axis=1, keepdims=True)
    ez = np.exp(z)
    total = ez.sum(axis=1, keepdims=True)
    n = h.shape[0]
    loss = float(-(y * (z - np.log(total))).sum() / n)
    dz = ((ez / total - y) / n).astype(F32)
    dx = dz @ out
    db = dx.T @ s
    du = (dx @ ad.b) * (sig + u * sig * (1.0 - sig))
    return loss, [(du.T @ h).astype(F32), du.sum(axis=0).astype(F32), db.astype(F32)]




def evaluate(ad: Adapter, shallow: npt.NDArray[np.floating], top_ids: npt.NDArray[np.int32],
             out: npt.NDArray[np.float32], vocab: npt.NDArray[np.int64],
             pos: npt.NDArray[np.int64], chunk: int = 1024) -> AdapterAccuracy:
    """Held-out agreement with the target's best token, over the training vocabulary (a
    target token outside it counts as a miss)."""
    if pos.size == 0:
        return AdapterAccuracy(0.0, 0.0, 0.0, 0)
    hit0 = hit1 = hit3 = 0
    for i in range(0, pos.size, chunk):
        p = pos[i : i + chunk]
        h = shallow[p].astype(F32)
        want = top_ids[p, 0]
        hit0 += int((vocab[np.argmax(h @ out.T, axis=1)] == want).sum())
        z = ad.features(h) @ out.T
        top3 = vocab[np.argsort(-z, axis=1)[:, :3]]
        hit1 += int((top3[:, 0] == want).sum())
        hit3 += int((top3 == want[:, None]).any(axis=1).sum())
    n = int(pos.size)
    return AdapterAccuracy(hit0 / n, hit1 / n, hit3 / n, n)


def fit(shallow: npt.NDArray[np.floating], top_ids: npt.NDArray[np.int32],
        top_probs: npt.NDArray[np.floating], train_pos: npt.NDArray[np.int64],
        test_pos: npt.NDArray[np.int64],
        output_rows: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.float32]],
        spec: KangarooSpec = KangarooSpec(), report: ProgressFn = no_progress,
        cancel: threading.Event | None = None) -> FitResult:
    """Train the adapter: ``shallow[t]`` is the shallow model's hidden state at position t,
    ``top_ids[t]``/``top_probs[t]`` the target's top next tokens there; ``output_rows(ids)``
    gives rows of the target's output matrix. Raises Cancelled when ``cancel`` is set."""
    if train_pos.size < spec.batch or test_pos.size == 0:
        raise SpecchatError(f"too little text to train the adapter: {train_pos.size} training "
                            f"and {test_pos.size} held-out positions (a longer text, or more "
                            "prompts)")
    if spec.rank < 1:
        raise SpecchatError("the adapter's rank must be at least 1")
    vocab, coverage = choose_vocab(top_ids[train_pos], top_probs[train_pos], spec.max_vocab)
    out = np.ascontiguousarray(output_rows(vocab), dtype=F32)
    d = shallow.shape[1]
    if out.shape != (vocab.size, d):
        raise SpecchatError(f"the output matrix is {out.shape[1]} wide, the hidden states {d}")
    rng = np.random.default_rng(spec.seed)
    ad = Adapter((rng.standard_normal((spec.rank, d)) / np.sqrt(d)).astype(F32),
                 np.zeros(spec.rank, dtype=F32), np.zeros((d, spec.rank), dtype=F32))
    params = [ad.a, ad.bias, ad.b]
    opt = Adam([p.shape for p in params], spec.lr)

    def step(pos: npt.NDArray[np.int64]) -> float:
        y = _labels(top_ids, top_probs, vocab, pos)
        loss, grads = _step(shallow[pos].astype(F32), ad, out, y)
        opt.step(params, grads)
        return loss

    fitted = fit_within(
        Budget(spec.minutes, spec.epochs, spec.batch, spec.eval_every), train_pos, rng, step,
        snapshot=lambda: Adapter(ad.a.copy(), ad.bias.copy(), ad.b.copy()),
        score=lambda: evaluate(ad, shallow, top_ids, out, vocab, test_pos),
        key=lambda acc: acc.top1,
        describe=lambda acc: (f"held-out top-1 {acc.top1:.0%} "
                              f"(shallow alone {acc.shallow_top1:.0%})"),
        task=f"training the Kangaroo adapter (rank {spec.rank})", report=report, cancel=cancel,
        cancelled="training cancelled: no adapter was saved")
    return FitResult(fitted.best, fitted.score, fitted.steps, fitted.seconds,
                     int(train_pos.size), int(vocab.size), coverage)
