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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from specchat.engine.drafters.kangaroo import ETA, KangarooAdapter
from specchat.engine.hidden_states import states_over
from specchat.engine.model import LlamaContext, LlamaModel
from specchat.engine.model_settings import ContextSettings
from specchat.errors import Cancelled, SpecchatError
from specchat.models.heads.adam import Adam
from specchat.models.heads.data import DataSpec, collect, sequences
from specchat.models.heads.store import (
    HeadsError,
    check_target,
    heads_root,
    load_npz,
    save_npz,
    target_dir,
    target_sha256,
)
from specchat.models.layer_cut import CutError, open_source, write_cut
from specchat.models.progress import Progress, ProgressFn, no_progress
from specchat.paths import AppPaths

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

    def snapshot() -> Adapter:
        return Adapter(ad.a.copy(), ad.bias.copy(), ad.b.copy())

    def score(x: Adapter) -> AdapterAccuracy:
        return evaluate(x, shallow, top_ids, out, vocab, test_pos)

    best = snapshot()
    best_acc = score(best)
    budget = spec.minutes * 60.0
    task = f"training the Kangaroo adapter (rank {spec.rank})"
    t0 = time.monotonic()
    step = 0
    steps_per_epoch = max(1, train_pos.size // spec.batch)
    done = False
    for _epoch in range(spec.epochs):
        order = rng.permutation(train_pos)
        for i in range(steps_per_epoch):
            if cancel is not None and cancel.is_set():
                raise Cancelled("training cancelled: no adapter was saved")
            pos = order[i * spec.batch : (i + 1) * spec.batch]
            y = _labels(top_ids, top_probs, vocab, pos)
            loss, grads = _step(shallow[pos].astype(F32), ad, out, y)
            opt.step(params, grads)
            step += 1
            elapsed = time.monotonic() - t0
            if step % spec.eval_every == 0 or elapsed >= budget:
                acc = score(ad)
                if acc.top1 >= best_acc.top1:
                    best, best_acc = snapshot(), acc
            report(Progress(task, min(elapsed, budget), budget, unit="s",
                            detail=f"step {step} · loss {loss:.3f} · held-out top-1 "
                            f"{best_acc.top1:.0%} (shallow alone {best_acc.shallow_top1:.0%})"))
            if elapsed >= budget:
                done = True
                break
        if done:
            break
    acc = score(ad)
    if acc.top1 >= best_acc.top1:
        best, best_acc = snapshot(), acc
    seconds = time.monotonic() - t0
    report(Progress(task, min(seconds, budget), budget, unit="s", finished=True))
    return FitResult(best, best_acc, step, seconds, int(train_pos.size), int(vocab.size),
                     coverage)


class OutputRows:
    """Rows of the target's output matrix, read through one memory map of the file.

    ``gguf.GGUFReader`` parses every metadata field in Python each time it opens a file (a
    minute for SmolLM2's 49,152-token vocabulary on a busy 2-core machine); specchat's own
    header reader skips the token texts, and the rows are dequantized by ``gguf`` as they are
    asked for."""

    def __init__(self, path: Path) -> None:
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, dequantize

        from specchat.formats.gguf_file import read_header

        self._dequantize = dequantize
        header = read_header(Path(path), token_texts=False)
        tensors = {t.name: t for t in header.tensors}
        t = tensors.get("output.weight") or tensors.get("token_embd.weight")
        if t is None or len(t.shape) != 2:
            raise SpecchatError(f"{Path(path).name} has no output matrix (output.weight or "
                                "token_embd.weight)")
        try:
            self.qtype = GGMLQuantizationType(t.ggml_type)
            block, size = GGML_QUANT_SIZES[self.qtype]
        except (ValueError, KeyError):
            raise SpecchatError(f"{Path(path).name}'s output matrix has a type ({t.ggml_type}) "
                                "the gguf package does not know") from None
        cols, self.n_rows = int(t.shape[0]), int(t.shape[1])
        self.row_bytes = cols // block * size
        self._raw = np.memmap(path, dtype=np.uint8, mode="r", offset=header.data_start + t.offset,
                              shape=(self.n_rows, self.row_bytes))
        self(np.array([0], dtype=np.int64))  # a type gguf cannot dequantize is refused now

    def __call__(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        raw = np.asarray(self._raw[np.asarray(ids)])
        try:
            out = self._dequantize(raw, self.qtype)
        except (NotImplementedError, KeyError, ValueError) as e:
            raise SpecchatError(f"the output matrix is {self.qtype.name}, which the gguf package "
                                f"cannot dequantize ({e}): no adapter can be trained for it"
                                ) from None
        return np.ascontiguousarray(out, dtype=F32).reshape(len(raw), -1)


def output_times_b(output_rows: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.float32]],
                   n_vocab: int, b: npt.NDArray[np.float32], chunk: int = 32768
                   ) -> npt.NDArray[np.float32]:
    """W · B over the whole vocabulary, W read in chunks of rows (never all of it at once; each
    read opens the GGUF again, which costs seconds for a large vocabulary)."""
    wb = np.empty((n_vocab, b.shape[1]), dtype=F32)
    for i in range(0, n_vocab, chunk):
        ids = np.arange(i, min(n_vocab, i + chunk), dtype=np.int64)
        wb[ids] = output_rows(ids).astype(F32) @ b
    return wb


# ------------------------------------------------------------------ the pipeline, on disk

KANGAROO_FILE = "kangaroo.npz"


def default_layers(n_layer: int) -> int:
    """How many of the target's first blocks the shallow model keeps by default: a sixth
    (Kangaroo exits after 2 of Vicuna-7B's 32; a small model needs a larger share to agree)."""
    return max(1, min(n_layer - 1, round(n_layer / 6)))


def shallow_file(folder: Path, layers: int) -> Path:
    return folder / f"shallow-{layers}.gguf"


def make_shallow(target: Path, folder: Path, layers: int | None,
                 cancel: threading.Event | None = None) -> tuple[Path, int, int]:
    """The GGUF of the target's first ``layers`` blocks in the target's heads folder (made
    once); returns (its path, the blocks kept, the target's block count)."""
    try:
        src = open_source(target)
    except CutError as e:  # the cutter's reason, said for Kangaroo
        raise CutError(str(e).replace("a layer-skip draft", "Kangaroo's shallow model")) from None
    n = layers if layers is not None else default_layers(src.n_layer)
    if not 1 <= n < src.n_layer:
        raise SpecchatError(f"the shallow model keeps 1 to {src.n_layer - 1} of the target's "
                            f"{src.n_layer} blocks, not {n}")
    dest = shallow_file(folder, n)
    if not dest.exists():
        folder.mkdir(parents=True, exist_ok=True)
        write_cut(src, dest, range(n), cancel.is_set if cancel is not None else None)
    return dest, n, src.n_layer


def shallow_states(ctx: LlamaContext, seqs: Sequence[Sequence[int]], report: ProgressFn,
                   cancel: threading.Event | None) -> npt.NDArray[np.float16]:
    """The shallow model's post-norm hidden state at every position of ``seqs``, in order."""
    total = sum(len(s) for s in seqs)
    task = "reading the shallow model's hidden states"
    done = 0
    out: list[npt.NDArray[np.float16]] = []
    for s in seqs:
        for chunk in states_over(ctx, s, chunk=64, top=1, cancel=cancel):
            out.append(chunk.hidden.astype(np.float16))
            done += chunk.hidden.shape[0]
            report(Progress(task, done, total, unit="tok"))
    report(Progress(task, done, total, unit="tok", finished=True))
    return np.concatenate(out)


@dataclass(frozen=True)
class KangarooTrained:
    path: Path  # the adapter file
    shallow: Path  # the shallow model's GGUF
    layers: int
    n_layer: int
    fit: FitResult


def train(paths: AppPaths, target: Path, ctx: LlamaContext, spec: KangarooSpec = KangarooSpec(),
          data: DataSpec | None = None, layers: int | None = None,
          shallow_ctx: ContextSettings | None = None, report: ProgressFn = no_progress,
          cancel: threading.Event | None = None) -> KangarooTrained:
    """Train and save a Kangaroo adapter for the target file ``target`` (loaded as ``ctx``):
    the training data (shared with Medusa's heads, cached), the shallow model, its hidden
    states (cached per data key and depth), the fit, and ``W · B``. Nothing is saved unless
    all of it completes."""
    target = Path(target)
    data = data or DataSpec()
    sha = target_sha256(paths, target, report)
    folder = target_dir(paths, sha)
    shallow, n, n_layer = make_shallow(target, folder, layers, cancel)
    td = collect(ctx, folder, data, report, cancel)
    cache = folder / f"shallow-{n}-{data.key()}.npz"
    if cache.exists():
        states = load_npz(cache)[1]["hidden"]
    else:
        seqs = sequences(ctx, folder, data, report, cancel)
        model = LlamaModel(shallow, ctx.model.settings)
        try:
            sctx = LlamaContext(model, shallow_ctx or ctx.settings)
            try:
                states = shallow_states(sctx, seqs, report, cancel)
            finally:
                sctx.close()
        finally:
            model.close()
        if states.shape[0] != td.n_positions:
            raise SpecchatError("the shallow model's positions do not match the training data's "
                                "(the cached text changed): delete "
                                f"{folder} and train again")
        save_npz(cache, {"layers": n, "positions": int(states.shape[0])}, {"hidden": states})
    rows = OutputRows(target)
    result = fit(states, td.top_ids, td.top_probs, td.positions(0, True), td.positions(0, False),
                 rows, spec, report, cancel)
    wb = output_times_b(rows, ctx.n_vocab, result.adapter.b)
    dest = folder / KANGAROO_FILE
    acc = result.accuracy
    save_npz(dest, {"target_sha256": sha, "target": target.name, "layers": n, "n_layer": n_layer,
                    "rank": spec.rank, "eta": spec.eta, "shallow": shallow.name,
                    "shallow_top1": acc.shallow_top1, "top1": acc.top1, "top3": acc.top3,
                    "held_out": acc.positions, "seconds": round(result.seconds, 1),
                    "steps": result.steps},
             {"a": result.adapter.a, "bias": result.adapter.bias, "wb": wb.astype(np.float16)})
    return KangarooTrained(dest, shallow, n, n_layer, result)


def adapter_file(paths: AppPaths, sha256: str) -> Path:
    return target_dir(paths, sha256) / KANGAROO_FILE


def load(path: Path, sha256: str, target: Path) -> tuple[KangarooAdapter, Path]:
    """The adapter at ``path`` and its shallow model's file; HeadsError when it was trained
    for another file, is damaged, or its shallow model is gone."""
    meta, arrays = load_npz(path)
    check_target(meta, sha256, path, target)
    try:
        a, bias, wb = arrays["a"], arrays["bias"], arrays["wb"]
        layers = int(meta["layers"])
        shallow = path.parent / str(meta["shallow"])
    except (KeyError, ValueError, TypeError) as e:
        raise HeadsError(f"{path} is damaged ({e}); train it again with "
                         f"`specchat models train-heads {target} --kind kangaroo`") from None
    if a.ndim != 2 or bias.shape != (a.shape[0],) or wb.ndim != 2 or wb.shape[1] != a.shape[0]:
        raise HeadsError(f"{path} is damaged (its arrays do not fit together); train it again")
    if not shallow.exists():
        raise HeadsError(f"the adapter's shallow model {shallow.name} is gone; train it again "
                         f"with `specchat models train-heads {target} --kind kangaroo`")
    return (KangarooAdapter(a.astype(F32), bias.astype(F32), wb.astype(F32), layers, sha256,
                            float(meta.get("eta", ETA))), shallow)


def known_adapter(paths: AppPaths, target: Path) -> Path | None:
    """The target's adapter file if one was trained, without hashing the target: training
    remembers the file's sha256 per (path, size, mtime) (:func:`.store.target_sha256`), so a
    target with an adapter is always remembered (None otherwise, or after the file changed)."""
    import json

    target = Path(target).resolve()
    try:
        st = target.stat()
        memo = json.loads((heads_root(paths) / "sha256.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    hit = memo.get(str(target)) if isinstance(memo, dict) else None
    if not (isinstance(hit, dict) and hit.get("stamp") == [st.st_size, st.st_mtime_ns]
            and isinstance(hit.get("sha256"), str)):
        return None
    found = adapter_file(paths, str(hit["sha256"]))
    return found if found.exists() else None
