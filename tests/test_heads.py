"""Training Medusa heads on a tiny generated model: data, cache, cancel, refusals, the CLI."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from specchat.devtools.tiny_models import TinySpec, write_tiny_model
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.errors import Cancelled, SpecchatError
from specchat.models.heads import data as heads_data
from specchat.models.heads import medusa
from specchat.models.heads.budget import Budget, fit_within
from specchat.models.heads.output_matrix import output_rows
from specchat.models.heads.store import HeadsError, target_dir, target_sha256
from specchat.models.progress import Progress
from specchat.paths import AppPaths

SPEC = heads_data.DataSpec(prompts=10, reply_tokens=40)


def _ctx(path: Path) -> LlamaContext:
    return LlamaContext(LlamaModel(path), ContextSettings(n_ctx=1024, n_batch=64, n_threads=1))


def test_collect_train_save_load(tiny_target: Path, home: AppPaths) -> None:
    paths = home.ensure()
    sha = target_sha256(paths, tiny_target)
    assert sha == target_sha256(paths, tiny_target)  # remembered
    folder = target_dir(paths, sha)
    seen: list[Progress] = []
    data = heads_data.collect(_ctx(tiny_target), folder, SPEC, seen.append)
    assert data.hidden.shape[1] == 64 and data.n_positions > 300
    assert {p.task for p in seen} == {"generating the target's replies",
                                      "reading the target's hidden states"}
    assert len((folder / "replies.jsonl").read_text().splitlines()) == 10
    again = heads_data.collect(_ctx(tiny_target), folder, SPEC)  # from the cache
    np.testing.assert_array_equal(again.hidden, data.hidden)

    result = medusa.train(data, lambda ids: output_rows(tiny_target, ids),
                          medusa.TrainSpec(minutes=0.05, eval_every=5), sha)
    assert result.steps > 0 and len(result.accuracy) == 3
    zero = medusa.MedusaHeads(result.heads.a * 0, result.heads.b * 0, result.heads.vocab,
                              result.heads.out)
    # Trained heads beat the untrained ones (each the target's next-token head) on held-out text.
    assert (np.mean([a.top1 for a in result.accuracy])
            > np.mean([a.top1 for a in medusa.evaluate(zero, data)]))
    dest = medusa.save(paths, result, tiny_target)
    assert not list(dest.parent.glob(".*.tmp"))
    heads = medusa.load(dest, sha, tiny_target)
    np.testing.assert_array_equal(heads.a, result.heads.a)
    with pytest.raises(HeadsError, match="trained for another file"):
        medusa.load(dest, "0" * 64, tiny_target)


def test_cancelled_replies_resume(tiny_target: Path, home: AppPaths) -> None:
    folder = target_dir(home.ensure(), "ab" * 32)
    cancel = threading.Event()

    def stop_after_three(p: Progress) -> None:
        if p.detail.startswith("3/"):
            cancel.set()

    with pytest.raises(Cancelled, match="3 of 10 replies are kept"):
        heads_data.collect(_ctx(tiny_target), folder, SPEC, stop_after_three, cancel)
    assert len((folder / "replies.jsonl").read_text().splitlines()) == 3
    assert not list(folder.glob("data-*")) and not list(folder.glob(".*tmp"))
    with (folder / "replies.jsonl").open("a") as f:
        f.write('{"id": "torn')  # an interrupted append
    resumed: list[Progress] = []
    heads_data.collect(_ctx(tiny_target), folder, SPEC, resumed.append)
    assert resumed[0].total == 7 * SPEC.reply_tokens  # only the missing replies were generated


def test_too_little_text_is_refused(tiny_target: Path, home: AppPaths, tmp_path: Path) -> None:
    short = tmp_path / "short.txt"
    short.write_text("the cat sat on the mat.")
    with pytest.raises(SpecchatError, match="only .* tokens of text"):
        heads_data.collect(_ctx(tiny_target), tmp_path / "h",
                           heads_data.DataSpec(text_file=short))


def test_an_output_matrix_gguf_cannot_dequantize_is_refused(tmp_path: Path) -> None:
    def as_int(w: dict[str, np.ndarray]) -> None:
        w["output.weight"] = (w["output.weight"] * 100).astype(np.int32)

    bad = write_tiny_model(tmp_path / "int.gguf", TinySpec(seed=4), weights_hook=as_int)
    with pytest.raises(SpecchatError, match="I32, which the gguf package cannot dequantize"):
        output_rows(bad, np.array([0, 1]))


def test_train_heads_cli(tiny_target: Path, home: AppPaths, tmp_path: Path,
                         capsys: pytest.CaptureFixture[str]) -> None:
    from specchat.cli.main import main

    target = tmp_path / "t.gguf"
    shutil.copy(tiny_target, target)
    args = ["models", "train-heads", str(target), "--minutes", "0.05", "--prompts", "10",
            "--reply-tokens", "40", "--threads", "1"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert "3 heads" in out and "head 3 (token +4): top-1" in out and "saved:" in out
    # Not on a terminal: each phase a line per few percent, with an ETA.
    assert "generating the target's replies  [##########----------]  50%" in err
    assert "training 3 Medusa heads  [" in err and "ETA" in err
    assert main(["models", "train-heads", str(target), "--minutes", "0"]) == 1
    assert "--minutes must be more than 0" in capsys.readouterr().err


def test_the_shared_training_loop_keeps_the_best_scored_weights_and_stops_on_cancel() -> None:
    """One loop for Medusa's heads and Kangaroo's adapter: every epoch's minibatches, a score
    every ``eval_every`` steps and at the end; the best weights kept (a tie: the later ones)."""
    w = [0.0]
    seen: list[int] = []

    def step(pos: np.ndarray) -> float:
        seen.extend(pos.tolist())
        w[0] += 1.0
        return 1.0 / w[0]

    scores = iter([0.5, 0.9, 0.2, 0.9, 0.1, 0.3])  # start, every 2 steps (4 of them), the end
    lines: list[Progress] = []
    got = fit_within(Budget(minutes=60, epochs=2, batch=3, eval_every=2), np.arange(12),
                     np.random.default_rng(0), step, snapshot=lambda: w[0],
                     score=lambda: next(scores), key=float, describe=lambda s: f"top-1 {s:.0%}",
                     task="training", report=lines.append, cancel=None, cancelled="stopped")
    assert (got.best, got.score, got.steps) == (6.0, 0.9, 8)  # the tie at step 6 wins
    assert sorted(seen) == sorted(list(range(12)) * 2)  # each epoch sees every position once
    assert lines[-1].finished and "top-1 90%" in lines[-2].detail
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled, match="stopped"):
        fit_within(Budget(60, 1, 3, 2), np.arange(12), np.random.default_rng(0), step,
                   snapshot=lambda: w[0], score=lambda: 0.0, key=float, describe=str,
                   task="training", report=lines.append, cancel=cancel, cancelled="stopped")
