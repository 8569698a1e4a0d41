"""Training data for heads, without a GPU: the target prefilled over text.

The text is either Spec-Bench prompts (round-robin over its categories) each followed by the
target's own greedy reply — what the heads will see at run time — or a text file the user
names. Replies are generated once and appended to ``replies.jsonl`` in the target's heads folder
one at a time, so a cancelled run keeps what it finished and the next one resumes there.

Then every sequence is evaluated from an empty cache in chunks
(:func:`specchat.engine.llama.hidden_states.states_over`), keeping per position the post-norm hidden
state and the target's top tokens for the next position with their probabilities. Head k learns,
at position t, the target's distribution at position t + k (its token k + 1 ahead). The arrays
are cached as ``data-<key>.npz`` (the key names the text and its settings), written atomically:
a cancelled prefill leaves nothing.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.decoding import run_to_end
from specchat.engine.decode.messages import Message
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.hidden_states import states_over
from specchat.errors import Cancelled, SpecchatError
from specchat.models.heads.store import load_npz, save_npz
from specchat.models.progress import ProgressFn, Steps, no_progress

SPEC_BENCH = Path(__file__).resolve().parents[2] / "data" / "spec_bench" / "question.jsonl"
MIN_POSITIONS = 256  # fewer than this cannot train (nor test) anything


@dataclass(frozen=True)
class DataSpec:
    prompts: int = 48  # Spec-Bench prompts (with the target's replies)
    reply_tokens: int = 128  # the longest reply generated per prompt
    text_file: Path | None = None  # instead of Spec-Bench: this text, cut into sequences
    sequence_tokens: int = 512  # a text file's sequences
    top: int = 8  # the target's top tokens kept per position
    held_out: float = 0.1  # this share of the sequences (the last ones) is kept for testing

    def key(self) -> str:
        src: dict[str, Any] = {"top": self.top, "v": 1}
        if self.text_file is not None:
            digest = hashlib.sha256(Path(self.text_file).read_bytes()).hexdigest()
            src.update(text=digest, seq=self.sequence_tokens)
        else:
            src.update(prompts=self.prompts, reply=self.reply_tokens)
        return hashlib.sha256(json.dumps(src, sort_keys=True).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class TrainingData:
    hidden: npt.NDArray[np.float16]  # (N, d)
    top_ids: npt.NDArray[np.int32]  # (N, top): the target's next tokens at each position
    top_probs: npt.NDArray[np.float16]  # (N, top)
    starts: npt.NDArray[np.int64]  # (S + 1,): sequence s is positions starts[s]:starts[s + 1]
    n_train: int  # sequences 0 … n_train − 1 train, the rest test

    @property
    def n_positions(self) -> int:
        return int(self.hidden.shape[0])

    def positions(self, k: int, train: bool) -> npt.NDArray[np.int64]:
        """Positions t with a label k ahead in the same sequence, of the train or test part."""
        seqs = range(self.n_train) if train else range(self.n_train, len(self.starts) - 1)
        parts = [np.arange(self.starts[s], self.starts[s + 1] - k) for s in seqs
                 if self.starts[s + 1] - k > self.starts[s]]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def spec_bench_prompts(n: int, path: Path = SPEC_BENCH) -> list[tuple[str, str]]:
    """``n`` (question id, text) pairs, taken round-robin over the categories from the *end*
    of each: ``specchat bench`` and the race measure a category's first prompts, so heads
    trained here are judged on prompts they never saw."""
    by_cat: dict[str, list[tuple[str, str]]] = {}
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                obj = json.loads(line)
                by_cat.setdefault(str(obj["category"]), []).append(
                    (str(obj["question_id"]), str(obj["turns"][0])))
    out: list[tuple[str, str]] = []
    lists = [v[::-1] for v in by_cat.values()]
    i = 0
    while len(out) < n and any(i < len(v) for v in lists):
        out.extend(v[i] for v in lists if i < len(v))
        i += 1
    return out[:n]


def _read_replies(path: Path) -> dict[str, list[int]]:
    done: dict[str, list[int]] = {}
    if not path.exists():
        return done
    for line in path.read_text(encoding="utf-8").splitlines():
        try:  # an interrupted append leaves at most a torn last line: skipped
            obj = json.loads(line)
            done[str(obj["id"])] = [int(t) for t in obj["tokens"]]
        except (ValueError, KeyError, TypeError):
            continue
    return done


def _prompt_tokens(ctx: LlamaContext, text: str) -> list[int]:
    """The prompt as the app would send it: the model's chat template around one user turn."""
    return ChatEngine(PlainDecoder(ctx)).tokenize_chat([Message("user", text)])


def sequences(ctx: LlamaContext, folder: Path, spec: DataSpec, report: ProgressFn = no_progress,
              cancel: threading.Event | None = None) -> list[list[int]]:
    """The token sequences to learn from (replies generated and cached as needed)."""
    limit = min(ctx.n_ctx, ctx.n_batch * 64)
    if spec.text_file is not None:
        try:
            text = Path(spec.text_file).read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            raise SpecchatError(f"cannot read {spec.text_file}: {e.strerror or e}") from None
        tokens = ctx.model.tokenize(text, add_special=ctx.model.add_bos)
        n = max(8, min(spec.sequence_tokens, limit))
        return [tokens[i : i + n] for i in range(0, len(tokens), n) if len(tokens[i : i + n]) > 8]
    prompts = spec_bench_prompts(spec.prompts)
    cache = folder / "replies.jsonl"
    done = _read_replies(cache)
    todo = [p for p in prompts if p[0] not in done]
    eta = Steps("generating the target's replies", len(todo) * spec.reply_tokens, report, "tok")
    settings = SamplerSettings(temperature=0.0, max_tokens=spec.reply_tokens)
    cancel = cancel or threading.Event()
    for qid, text in todo:
        prompt = _prompt_tokens(ctx, text)[: limit - spec.reply_tokens - 1]
        run = run_to_end(PlainDecoder(ctx), prompt, settings, cancel)
        if run.stats.stop_reason == "cancelled" or cancel.is_set():
            raise Cancelled(f"cancelled: {len(done)} of {len(prompts)} replies are kept in "
                            f"{folder}; the next run goes on from there")
        done[qid] = run.tokens
        folder.mkdir(parents=True, exist_ok=True)
        with cache.open("a", encoding="utf-8") as f:  # one whole line per reply
            f.write(json.dumps({"id": qid, "tokens": run.tokens}) + "\n")
        eta.add(spec.reply_tokens, f"{len(done)}/{len(prompts)} prompts")
    if todo:
        eta.finish()
    ctx.clear()
    return [(_prompt_tokens(ctx, text)[: limit - spec.reply_tokens - 1] + done[qid])
            for qid, text in prompts]


def collect(ctx: LlamaContext, folder: Path, spec: DataSpec, report: ProgressFn = no_progress,
            cancel: threading.Event | None = None) -> TrainingData:
    """The training data for the target behind ``ctx``, from the cache when it is there."""
    dest = folder / f"data-{spec.key()}.npz"
    if dest.exists():
        _, a = load_npz(dest)
        return TrainingData(a["hidden"], a["top_ids"], a["top_probs"], a["starts"],
                            int(a["n_train"]))
    seqs = sequences(ctx, folder, spec, report, cancel)
    total = sum(len(s) for s in seqs)
    if total < MIN_POSITIONS:
        raise SpecchatError(f"only {total} tokens of text: heads need at least {MIN_POSITIONS} "
                            "(a longer text file, or more prompts)")
    eta = Steps("reading the target's hidden states", total, report, "tok")
    hidden, ids, probs, starts = [], [], [], [0]
    for s in seqs:
        last = 0

        def progress(done: int, _total: int) -> None:
            nonlocal last
            eta.add(done - last)
            last = done

        for chunk in states_over(ctx, s, chunk=64, top=spec.top, cancel=cancel,
                                 progress=progress):
            hidden.append(chunk.hidden.astype(np.float16))
            ids.append(chunk.top_ids)
            probs.append(chunk.top_probs.astype(np.float16))
        starts.append(starts[-1] + len(s))
    eta.finish()
    n_seq = len(seqs)
    n_test = max(1, round(n_seq * spec.held_out)) if n_seq > 1 else 0
    data = TrainingData(np.concatenate(hidden), np.concatenate(ids), np.concatenate(probs),
                        np.array(starts, dtype=np.int64), n_seq - n_test)
    save_npz(dest, {"sequences": n_seq, "positions": total},
             {"hidden": data.hidden, "top_ids": data.top_ids, "top_probs": data.top_probs,
              "starts": data.starts, "n_train": np.array(data.n_train)})
    return data

