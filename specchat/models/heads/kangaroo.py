"""Kangaroo for a target, end to end: the shallow model (the target's first L blocks, a
layer-skip cut written as a GGUF file), its hidden states and the target's top tokens over a
text, the adapter fitted to them (:mod:`.kangaroo_fit`), and the adapter's file beside the
target's other heads, checked against the target when it is loaded.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from specchat.engine.drafters.kangaroo import ETA, KangarooAdapter
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.hidden_states import states_over
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.errors import SpecchatError
from specchat.models.heads.data import DataSpec, collect, sequences
from specchat.models.heads.kangaroo_fit import FitResult, KangarooSpec, fit
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
