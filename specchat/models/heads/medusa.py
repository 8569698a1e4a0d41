"""Medusa-1 heads, trained with numpy on this machine.

Head k (1 … K) maps the target's post-norm hidden state h at position t to
``W_out · (h + SiLU(A_k h + b_k))`` and learns the target's distribution at position t + k (its
token k + 1 ahead of h's) by cross-entropy to the target's top tokens there (a distillation
target: the probabilities the target gave, renormalised over the kept ones). W_out is the
target's frozen output matrix. A_k and b_k start at zero, so each head starts as the target's
own next-token head and learns only the shift.

The vocabulary is cut to the tokens the target put in its top list anywhere in the training
text (at most ``max_vocab``, the most probable first): a softmax over Qwen's 151,936 entries
costs 151,936 × 1,536 multiply-adds per position and head, forward and again backward, which
2 cores cannot afford for thousands of positions in minutes; the tokens the target never
proposed on the training text carry almost no mass there, so leaving them out changes the
loss little. The same subset is the heads' support at run time (their q), which keeps the
draft cheap and is still exact: q is what the tokens are drawn from, and the verifier decides.

Training stops at the time budget (or after ``epochs`` passes), keeping the weights that did
best on the held-out sequences.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from specchat.engine.drafters.medusa import MedusaHeads
from specchat.engine.llama.blas import blas_threads
from specchat.errors import SpecchatError
from specchat.models.heads.adam import Adam
from specchat.models.heads.budget import Budget, fit_within
from specchat.models.heads.data import TrainingData
from specchat.models.heads.store import (
    MEDUSA_FILE,
    HeadsError,
    check_target,
    load_npz,
    save_npz,
    target_dir,
)
from specchat.models.progress import ProgressFn, no_progress
from specchat.paths import AppPaths

F32 = np.float32


@dataclass(frozen=True)
class TrainSpec:
    heads: int = 3
    minutes: float = 3.0
    batch: int = 64
    lr: float = 1e-3
    max_vocab: int = 8192
    negatives: int = 512  # random vocabulary entries in each batch's softmax besides its labels
    epochs: int = 40  # at most, when the time budget allows
    eval_every: int = 50  # steps between held-out checks
    eval_positions: int = 256  # held-out positions those checks use (the summary uses all)
    blas_threads: int = 1  # see blas_threads
    seed: int = 0


@dataclass(frozen=True)
class HeadAccuracy:
    head: int  # 1 … K: predicts the token head + 1 positions after its hidden state
    top1: float  # the head's best token is the target's best token there
    top3: float  # the target's best token is among the head's three best
    positions: int


@dataclass(frozen=True)
class TrainResult:
    heads: MedusaHeads
    accuracy: tuple[HeadAccuracy, ...]
    steps: int
    seconds: float
    train_positions: int
    vocab: int
    coverage: float  # share of the target's top-token mass on the training text in the vocab


def choose_vocab(data: TrainingData, max_vocab: int) -> tuple[npt.NDArray[np.int64], float]:
    """The token ids the heads cover (most probable first, then sorted by id) and the share of
    the target's top-token mass they hold."""
    ids = data.top_ids.ravel().astype(np.int64)
    mass = np.bincount(ids, weights=data.top_probs.ravel().astype(np.float64))
    present = np.flatnonzero(mass > 0)
    order = present[np.argsort(-mass[present], kind="stable")][:max_vocab]
    return np.sort(order), float(mass[order].sum() / max(mass.sum(), 1e-30))


class _Labels:
    """Soft labels over a batch's candidate tokens (see :meth:`batch`)."""

    def __init__(self, data: TrainingData, vocab: npt.NDArray[np.int64]) -> None:
        n = int(max(int(data.top_ids.max()), int(vocab.max()))) + 1
        self.index = np.full(n, -1, dtype=np.int64)
        self.index[vocab] = np.arange(vocab.size)
        self.ids = self.index[data.top_ids]  # (N, top) subset indices, −1 outside it
        self.probs = np.where(self.ids >= 0, data.top_probs.astype(F32), 0.0).astype(F32)
        self.v = vocab.size

    def batch(self, label_pos: list[npt.NDArray[np.int64]], negatives: int,
              rng: np.random.Generator) -> tuple[npt.NDArray[np.int64],
                                                 list[npt.NDArray[np.float32]]]:
        """The batch's candidates — every token some head's label names, plus ``negatives``
        drawn from the rest of the vocabulary — as subset indices, and per head the (B, C)
        label rows over them (each summing to 1, or 0 where the target's top tokens all fall
        outside the vocabulary)."""
        named = np.unique(np.concatenate([self.ids[p].ravel() for p in label_pos]))
        named = named[named >= 0]
        extra = rng.choice(self.v, size=min(negatives, self.v), replace=False)
        cand = np.union1d(named, extra)
        col = np.full(self.v, -1, dtype=np.int64)
        col[cand] = np.arange(cand.size)
        ys = []
        for pos in label_pos:
            ids, probs = self.ids[pos], self.probs[pos]
            y = np.zeros((pos.size, cand.size), dtype=F32)
            rows = np.repeat(np.arange(pos.size), ids.shape[1])
            flat = ids.ravel()
            ok = flat >= 0
            np.add.at(y, (rows[ok], col[flat[ok]]), probs.ravel()[ok])
            total = y.sum(axis=1, keepdims=True)
            np.divide(y, total, out=y, where=total > 0)
            ys.append(y)
        return cand, ys




def _head_step(h: npt.NDArray[np.float32], a: npt.NDArray[np.float32],
               b: npt.NDArray[np.float32], out: npt.NDArray[np.float32],
               y: npt.NDArray[np.float32]) -> tuple[float, npt.NDArray[np.float32],
                                                    npt.NDArray[np.float32]]:
    """Cross-entropy of one head on a batch, and its gradients for a and b."""
    u = h @ a + b
    s = 1.0 / (1.0 + np.exp(-u))
    x = h + u * s
    z = x @ out.T
    z -= z.max(axis=1, keepdims=True)
    ez = np.exp(z)
    lse = np.log(ez.sum(axis=1, keepdims=True))
    p = ez / np.exp(lse)
    n = h.shape[0]
    loss = float(-(y * (z - lse)).sum() / n)
    dz = ((p - y) / n).astype(F32)
    dx = dz @ out
    du = dx * (s + u * s * (1.0 - s))
    return loss, (h.T @ du).astype(F32), du.sum(axis=0).astype(F32)


def evaluate(heads: MedusaHeads, data: TrainingData, limit: int | None = None
             ) -> tuple[HeadAccuracy, ...]:
    """Per head, on the held-out sequences (their first ``limit`` positions): how often its
    best token is the target's best token k + 1 ahead (top-1), and how often that token is
    among its three best (top-3)."""
    out: list[HeadAccuracy] = []
    for k in range(1, heads.k + 1):
        pos = data.positions(k, train=False)[:limit]
        if pos.size == 0:
            out.append(HeadAccuracy(k, 0.0, 0.0, 0))
            continue
        h = data.hidden[pos].astype(F32)
        u = h @ heads.a[k - 1] + heads.b[k - 1]
        logits = (h + u / (1.0 + np.exp(-u))) @ heads.out.T
        top3 = np.argpartition(-logits, 2, axis=1)[:, :3]
        best = np.take_along_axis(top3, np.argmax(
            np.take_along_axis(logits, top3, axis=1), axis=1)[:, None], axis=1)[:, 0]
        want = data.top_ids[pos + k, 0]
        out.append(HeadAccuracy(k, float((heads.vocab[best] == want).mean()),
                                float((heads.vocab[top3] == want[:, None]).any(axis=1).mean()),
                                int(pos.size)))
    return tuple(out)


def _score(heads: MedusaHeads, data: TrainingData, spec: TrainSpec) -> float:
    return float(np.mean([x.top1 for x in evaluate(heads, data, spec.eval_positions)]))


def train(data: TrainingData, output_rows: Callable[[npt.NDArray[np.int64]],
                                                     npt.NDArray[np.float32]],
          spec: TrainSpec = TrainSpec(), sha256: str = "", report: ProgressFn = no_progress,
          cancel: threading.Event | None = None) -> TrainResult:
    """Train ``spec.heads`` heads on ``data``; ``output_rows(ids)`` gives the target's output
    matrix rows for token ids. Raises Cancelled when ``cancel`` is set (nothing is kept)."""
    with blas_threads(spec.blas_threads):
        return _train(data, output_rows, spec, sha256, report, cancel)


def _train(data: TrainingData, output_rows: Callable[[npt.NDArray[np.int64]],
                                                      npt.NDArray[np.float32]],
           spec: TrainSpec, sha256: str, report: ProgressFn,
           cancel: threading.Event | None) -> TrainResult:
    k_heads = spec.heads
    if k_heads < 1:
        raise SpecchatError("--heads must be at least 1")
    train_pos = data.positions(k_heads, train=True)
    if train_pos.size < spec.batch or data.positions(k_heads, train=False).size == 0:
        raise SpecchatError(f"too little text to train {k_heads} heads: {data.n_positions} "
                            "positions (a longer text, or more prompts)")
    vocab, coverage = choose_vocab(data, spec.max_vocab)
    out = output_rows(vocab)
    d = data.hidden.shape[1]
    if out.shape != (vocab.size, d):
        raise SpecchatError(f"the output matrix is {out.shape[1]} wide, the hidden states {d}")
    labels = _Labels(data, vocab)
    rng = np.random.default_rng(spec.seed)
    a = np.zeros((k_heads, d, d), dtype=F32)
    b = np.zeros((k_heads, d), dtype=F32)
    opt = Adam([a.shape, b.shape], spec.lr)

    def snapshot() -> MedusaHeads:
        return MedusaHeads(a.copy(), b.copy(), vocab, out, sha256)

    def step(pos: npt.NDArray[np.int64]) -> float:
        h = data.hidden[pos].astype(F32)
        cand, ys = labels.batch([pos + k + 1 for k in range(k_heads)], spec.negatives, rng)
        out_c = out[cand]
        ga, gb = np.zeros_like(a), np.zeros_like(b)
        losses = []
        for k in range(k_heads):
            lk, ga[k], gb[k] = _head_step(h, a[k], b[k], out_c, ys[k])
            losses.append(lk)
        opt.step([a, b], [ga, gb])
        return float(np.mean(losses))

    fitted = fit_within(
        Budget(spec.minutes, spec.epochs, spec.batch, spec.eval_every), train_pos, rng, step,
        snapshot=snapshot, score=lambda: _score(snapshot(), data, spec), key=float,
        describe=lambda s: f"held-out top-1 {s:.0%}", task=f"training {k_heads} Medusa heads",
        report=report, cancel=cancel,
        cancelled="training cancelled: no heads were saved (the training data is cached, so "
                  "the next run starts training at once)")
    return TrainResult(fitted.best, evaluate(fitted.best, data), fitted.steps, fitted.seconds,
                       int(train_pos.size), int(vocab.size), coverage)


def heads_file(paths: AppPaths, sha256: str) -> Path:
    return target_dir(paths, sha256) / MEDUSA_FILE


def save(paths: AppPaths, result: TrainResult, target: Path) -> Path:
    h = result.heads
    dest = heads_file(paths, h.target_sha256)
    meta = {
        "kind": "medusa", "version": 1, "target_sha256": h.target_sha256,
        "target_name": Path(target).name, "heads": h.k, "n_embd": h.n_embd,
        "vocab": int(h.vocab.size), "steps": result.steps, "seconds": round(result.seconds, 1),
        "accuracy": [{"head": x.head, "top1": x.top1, "top3": x.top3} for x in result.accuracy],
    }
    save_npz(dest, meta, {"a": h.a, "b": h.b, "vocab": h.vocab, "out": h.out.astype(np.float16)})
    return dest


def load(path: Path, sha256: str, target: Path) -> MedusaHeads:
    """The heads in ``path``, refused unless trained for the file whose sha256 is given."""
    meta, arr = load_npz(path)
    if meta.get("kind") != "medusa":
        raise HeadsError(f"{path} does not hold Medusa heads")
    check_target(meta, sha256, path, target)
    try:
        heads = MedusaHeads(arr["a"].astype(F32), arr["b"].astype(F32),
                            arr["vocab"].astype(np.int64), arr["out"].astype(F32), sha256)
    except KeyError as e:
        raise HeadsError(f"{path} is damaged (no {e}); train the heads again") from None
    if heads.a.ndim != 3 or heads.out.shape != (heads.vocab.size, heads.n_embd):
        raise HeadsError(f"{path} is damaged (shapes do not match); train the heads again")
    return heads
