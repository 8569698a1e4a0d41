"""Kangaroo: the shallow model + adapter drafter, and the adapter's numpy training.

- Exactness on scripted-logits contexts (a Markov "target" and a "shallow model" whose hidden
  state is a one-hot of its row): the real drafter (adapter logits, early stop on confidence)
  and the real decoder and verifier, ≥ 10⁵ committed tokens at T = 0.9, χ² of the transition
  counts against the target's rows at 1e-6. Control: the same drafts kept unchecked fail it.
- Training on arrays made here: a shallow state that is a known non-linear distortion of the
  "last" one; the adapter must raise held-out agreement with the target well above the shallow
  state's own.
- The real thing (slow, SPECCHAT_TEST_MODELS): on the demo target, greedy kangaroo output equals
  plain greedy.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from itertools import pairwise
from pathlib import Path
from typing import cast

import numpy as np
import numpy.typing as npt
import pytest

import specchat.engine.decode.target_pass as pass_mod
from specchat.bench.chi2 import chi_square, critical_value
from specchat.devtools.scripted import ScriptedContext
from specchat.engine.decode.decoding import run_to_end
from specchat.engine.decode.drafting import DraftRequest
from specchat.engine.decode.plan import chain
from specchat.engine.decode.registry import DrafterEnv, build
from specchat.engine.decode.sampling import SamplerSettings, distribution
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma
from specchat.engine.decode.verify import Verdict
from specchat.engine.drafters.kangaroo import KangarooAdapter, KangarooDrafter
from specchat.engine.llama.context import LlamaContext
from specchat.errors import SpecchatError

V = 5
T09 = SamplerSettings(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0)


def tables(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    target = (rng.normal(size=(V, V)) * 1.6).astype(np.float32)
    shallow = (target + rng.normal(size=target.shape) * 1.2).astype(np.float32)
    return target, shallow


def one_hot_hidden(ctx: LlamaContext, tokens: Sequence[int]
                   ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """The scripted shallow model's rows, and as its "hidden state" the row's index one-hot."""
    sc = cast(ScriptedContext, ctx)
    start = len(sc.tokens)
    rows = sc.decode(tokens, logits="all")
    idx = [(t + (start + i) * sc.stride) % len(sc.table) for i, t in enumerate(tokens)]
    return rows, np.eye(len(sc.table), dtype=np.float32)[idx]


def scripted_adapter(seed: int, eta: float) -> KangarooAdapter:
    rng = np.random.default_rng(seed)
    r = 3
    return KangarooAdapter(rng.normal(size=(r, V)).astype(np.float32),
                           rng.normal(size=r).astype(np.float32),
                           rng.normal(size=(V, r)).astype(np.float32), n_layers=1, eta=eta)


def scripted_decoder(seed: int, eta: float) -> SpeculativeDecoder:
    t, d = tables(seed)
    target = cast(LlamaContext, ScriptedContext(t))
    shallow = cast(LlamaContext, ScriptedContext(d))
    adapter = scripted_adapter(seed, eta)
    drafter = KangarooDrafter(target, lambda: (shallow, adapter), decode=one_hot_hidden)
    return SpeculativeDecoder(target, None, FixedGamma(4), [drafter])


def transitions(dec: SpeculativeDecoder, s: SamplerSettings, replies: int, length: int,
                stats: Counter[str]) -> Iterator[tuple[int, int]]:
    """(the target row the next token was drawn from, that token) along each reply."""
    for seed in range(replies):
        run = run_to_end(dec, [0], s.with_(seed=seed, max_tokens=length))
        for st in run.steps:
            stats["drafted"] += st.gamma
            stats["accepted"] += st.accepted
            stats["steps"] += 1
            stats["early"] += 0 < st.gamma < 4
        seq = [0, *run.tokens]
        yield from (((a + j) % V, b) for j, (a, b) in enumerate(pairwise(seq)))


def transition_chi2(pairs: Iterator[tuple[int, int]], s: SamplerSettings, seed: int
                    ) -> tuple[float, float, int]:
    t, _ = tables(seed)
    by_row: dict[int, Counter[int]] = {}
    n = 0
    for a, b in pairs:
        by_row.setdefault(a, Counter())[b] += 1
        n += 1
    stat, df = 0.0, 0
    for a, counts in by_row.items():
        p = distribution(t[a], s)
        r = chi_square(counts, dict(zip(p.ids.tolist(), p.probs.tolist(), strict=True)))
        stat += r.statistic
        df += r.df
    return stat, critical_value(df), n


def test_kangaroo_commits_the_targets_distribution_at_t09() -> None:
    stats: Counter[str] = Counter()
    stat, crit, n = transition_chi2(transitions(scripted_decoder(7, 0.5), T09, 200, 520, stats),
                                    T09, 7)
    assert n >= 100_000
    assert stat <= crit, (stat, crit)
    # the drafts were real, some kept, some stopped early on low confidence
    assert stats["accepted"] > 0.2 * stats["drafted"] > 0
    assert stats["early"] > 0


def test_kangaroo_drafts_kept_unchecked_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    original = pass_mod.verify_tree

    def unchecked(rows, tokens, parents, qs, rng):  # type: ignore[no-untyped-def]
        v = original(rows, tokens, parents, qs, rng)
        if not tokens:
            return v
        return Verdict(accepted=len(tokens), token=v.token, rejected=None,
                       path=tuple(range(len(tokens))))

    monkeypatch.setattr(pass_mod, "verify_tree", unchecked)
    stat, crit, _ = transition_chi2(transitions(scripted_decoder(7, 0.5), T09, 40, 520,
                                                Counter()), T09, 7)
    assert stat > crit, (stat, crit)


def test_greedy_kangaroo_is_the_targets_argmax_chain() -> None:
    dec = scripted_decoder(9, 0.3)
    t, _ = tables(9)
    run = run_to_end(dec, [0], SamplerSettings(temperature=0, max_tokens=300), threading.Event())
    seq = [0, *run.tokens]
    assert all(b == int(np.argmax(t[(a + j) % V])) for j, (a, b) in enumerate(pairwise(seq)))
    assert sum(s.accepted for s in run.steps) > 0


def test_the_early_stop_proposes_only_confident_tokens() -> None:
    t, d = tables(3)
    shallow = cast(LlamaContext, ScriptedContext(d))
    target = cast(LlamaContext, ScriptedContext(t))
    for eta in (0.0, 0.5, 0.999):
        adapter = scripted_adapter(3, eta)
        drafter = KangarooDrafter(target, lambda a=adapter: (shallow, a), decode=one_hot_hidden)
        got = drafter.propose(DraftRequest([0, 1], chain("kangaroo", 6),
                                           SamplerSettings(temperature=0),
                                           np.random.default_rng(0)))
        # replay: each proposed token's confidence is ≥ η, the one after it (if any) is not
        replay = cast(ScriptedContext, ScriptedContext(d))
        base, h = one_hot_hidden(cast(LlamaContext, replay), [0, 1])
        row = adapter.logits(base[-1], h[-1])
        for tok in got.tokens:
            assert int(np.argmax(row)) == tok
            z = np.exp(row - row.max())
            assert z.max() / z.sum() >= eta
            base, h = one_hot_hidden(cast(LlamaContext, replay), [tok])
            row = adapter.logits(base[-1], h[-1])
        if len(got.tokens) < 6:
            z = np.exp(row - row.max())
            assert z.max() / z.sum() < eta
        if eta == 0.0:
            assert len(got.tokens) == 6
        if eta == 0.999:
            assert len(got.tokens) < 6


def test_kangaroo_without_an_adapter_says_how_to_train_one() -> None:
    t, _ = tables(1)
    env = DrafterEnv(cast(LlamaContext, ScriptedContext(t)))
    with pytest.raises(SpecchatError, match=r"scripted-\d+\.gguf has no Kangaroo adapter.*--kind kangaroo"):
        build("kangaroo", env)


# ------------------------------------------------------------------------ the adapter's fit


def synthetic(seed: int, n: int = 6000, d: int = 32, v: int = 300
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A "last" hidden state H, a shallow one h = H − tanh(H·M) (a distortion the adapter has
    to undo), an output matrix W, and the target's top 8 next tokens from softmax(W·H)."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((v, d)) * 1.5).astype(np.float32)
    last = rng.standard_normal((n, d)).astype(np.float32)
    m = (rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32)
    shallow = (last - np.tanh(last @ m)).astype(np.float32)
    z = last @ w.T
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    ids = np.argsort(-p, axis=1)[:, :8].astype(np.int32)
    return shallow, ids, np.take_along_axis(p, ids, axis=1).astype(np.float16), w


def test_the_adapter_learns_to_undo_the_shallow_states_distortion() -> None:
    from specchat.models.heads.kangaroo_fit import KangarooSpec, fit

    h, ids, probs, w = synthetic(0)
    train, test = np.arange(5000), np.arange(5000, 6000)
    r = fit(h, ids, probs, train, test, lambda v: w[v],
            KangarooSpec(rank=32, minutes=5, epochs=10, lr=3e-3))
    acc = r.accuracy
    assert acc.positions == 1000
    assert 0.2 < acc.shallow_top1 < 0.5  # the shallow state alone agrees now and then
    assert acc.top1 > acc.shallow_top1 + 0.15, acc  # the adapter helps, on held-out positions
    assert acc.top3 >= acc.top1


def test_the_adapters_whole_vocabulary_logits_match_its_training_form() -> None:
    """Run time computes W·h + (W·B)·SiLU(A·h + a) over the whole vocabulary; training
    computes W·(h + B·SiLU(A·h + a)) over a subset: the same numbers on the subset."""
    from specchat.models.heads.kangaroo import output_times_b
    from specchat.models.heads.kangaroo_fit import Adapter

    rng = np.random.default_rng(1)
    d, r, v = 16, 4, 50
    w = rng.standard_normal((v, d)).astype(np.float32)
    ad = Adapter(rng.standard_normal((r, d)).astype(np.float32),
                 rng.standard_normal(r).astype(np.float32),
                 rng.standard_normal((d, r)).astype(np.float32))
    run = KangarooAdapter(ad.a, ad.bias, output_times_b(lambda i: w[i], v, ad.b, chunk=7), 1)
    h = rng.standard_normal(d).astype(np.float32)
    assert np.allclose(run.logits(w @ h, h), w @ ad.features(h[None, :])[0], atol=1e-4)


def test_too_little_text_is_refused_clearly() -> None:
    from specchat.models.heads.kangaroo_fit import fit

    h, ids, probs, w = synthetic(0, n=300)
    with pytest.raises(SpecchatError, match="too little text to train the adapter"):
        fit(h, ids, probs, np.arange(100), np.arange(100, 300), lambda v: w[v])


# ------------------------------------------------------------------ a real target (slow)


@pytest.mark.slow
def test_greedy_kangaroo_on_the_demo_target_equals_plain(
        demo_files: tuple[Path, Path], tmp_path: Path) -> None:
    """Train a small adapter for SmolLM2-135M F32 (its first 6 of 30 blocks) on a short text
    (eight Spec-Bench prompts, ~900 tokens), save it, load it back as the runtime does, and
    decode greedily: the output is the target's own greedy output (drafts proposed every step)."""
    from specchat.engine.decode.plain import PlainDecoder
    from specchat.engine.llama.model import LlamaModel
    from specchat.engine.llama.model_settings import ContextSettings
    from specchat.models.heads.data import DataSpec, spec_bench_prompts
    from specchat.models.heads.kangaroo import adapter_file, load, train
    from specchat.models.heads.kangaroo_fit import KangarooSpec
    from specchat.models.heads.store import target_sha256
    from specchat.paths import AppPaths

    target_path, _ = demo_files
    paths = AppPaths(tmp_path / "c", tmp_path / "d", tmp_path / "k")
    text = tmp_path / "text.txt"
    text.write_text("\n\n".join(t for _, t in spec_bench_prompts(8)), encoding="utf-8")
    cs = ContextSettings(n_ctx=1024, n_batch=256, n_threads=1)
    model = LlamaModel(target_path)
    ctx = LlamaContext(model, cs)
    trained = train(paths, target_path, ctx, KangarooSpec(rank=32, minutes=0.2, batch=64),
                    DataSpec(text_file=text, sequence_tokens=128), layers=6)
    assert trained.fit.accuracy.positions > 0
    sha = target_sha256(paths, target_path)
    adapter, shallow_path = load(adapter_file(paths, sha), sha, target_path)
    # η = 0: every step drafts (seconds of training on a busy machine may leave the adapter
    # unconfident everywhere, and η = 0.6 would then draft nothing to compare).
    adapter = dataclasses.replace(adapter, eta=0.0)
    shallow = LlamaContext(LlamaModel(shallow_path), cs)
    drafter = KangarooDrafter(ctx, lambda: (shallow, adapter))
    prompt = model.tokenize("<|im_start|>user\nWrite a short story about a robot who learns "
                            "to paint.<|im_end|>\n<|im_start|>assistant\n")
    s = SamplerSettings(temperature=0, max_tokens=32)
    plain = run_to_end(PlainDecoder(ctx), prompt, s).tokens
    spec = run_to_end(SpeculativeDecoder(ctx, None, FixedGamma(3), [drafter]), prompt, s)
    assert spec.tokens == plain
    assert sum(st.gamma for st in spec.steps if st.drafter == "kangaroo") > 0


def test_an_adapter_for_another_file_is_refused(tmp_path: Path) -> None:
    from specchat.models.heads.kangaroo import load
    from specchat.models.heads.store import HeadsError, save_npz

    f = tmp_path / "kangaroo.npz"
    save_npz(f, {"target_sha256": "a" * 64, "layers": 2, "shallow": "s.gguf"},
             {"a": np.zeros((2, 3), np.float32), "bias": np.zeros(2, np.float32),
              "wb": np.zeros((5, 2), np.float16)})
    with pytest.raises(HeadsError, match="was trained for another file"):
        load(f, "b" * 64, tmp_path / "target.gguf")
    with pytest.raises(HeadsError, match="shallow model s.gguf is gone"):
        load(f, "a" * 64, tmp_path / "target.gguf")
    f.write_bytes(b"not a zip")
    with pytest.raises(HeadsError, match="damaged"):
        load(f, "a" * 64, tmp_path / "target.gguf")


def test_a_target_that_cannot_be_cut_says_why(tmp_path: Path) -> None:
    import gguf

    from specchat.models.heads.kangaroo import make_shallow

    p = tmp_path / "g.gguf"
    w = gguf.GGUFWriter(str(p), "gemma3")
    w.add_block_count(2)
    w.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(SpecchatError, match="cannot make Kangaroo's shallow model of a gemma3 "
                       "model: its blocks alternate"):
        make_shallow(p, tmp_path / "heads", None)
    assert not (tmp_path / "heads").exists()  # nothing left behind


def test_the_output_rows_reader_matches_gguf(tiny_target: Path) -> None:
    import gguf

    from specchat.models.heads.kangaroo import OutputRows

    ids = np.array([0, 7, 3, 51], dtype=np.int64)
    reader = gguf.GGUFReader(str(tiny_target))
    t = next(x for x in reader.tensors if x.name == "output.weight")
    want = gguf.dequantize(t.data[ids], t.tensor_type).reshape(len(ids), -1)
    assert np.array_equal(OutputRows(tiny_target)(ids), want)


def test_train_heads_kangaroo_then_ask_with_it(home: object, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The command end to end on a tiny 6-block target: a summary with held-out accuracy, then
    ``ask --drafter kangaroo`` gives the plain greedy reply; another file is refused."""
    from specchat.cli.main import main
    from specchat.devtools.tiny_models import TinySpec, write_tiny_model

    target = write_tiny_model(tmp_path / "deep.gguf", TinySpec(seed=1, n_layer=6,
                                                                residual_scale=0.4), name="deep")
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat. a robot paints in the rain, then it writes. " * 40,
                    encoding="utf-8")
    assert main(["models", "train-heads", str(target), "--kind", "kangaroo", "--text", str(text),
                 "--minutes", "0.05", "--layers", "2", "--rank", "16", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "the first 2 of 6 blocks + a rank-16 adapter" in out
    assert "held-out top-1 agreement with the target" in out

    def ask(*extra: str) -> str:
        rc = main(["ask", "the cat sat", "--model", str(target), "--threads", "1",
                   "--max-tokens", "24", "--temperature", "0", *extra])
        got = capsys.readouterr()
        assert rc == 0, got.err
        return got.out

    assert ask("--drafter", "kangaroo") == ask()
    other = write_tiny_model(tmp_path / "other.gguf", TinySpec(seed=5, n_layer=6), name="o")
    rc = main(["ask", "hi", "--model", str(other), "--drafter", "kangaroo", "--threads", "1"])
    err = capsys.readouterr().err
    assert rc != 0 and "Traceback" not in err
    assert "has no Kangaroo adapter yet: train one with `specchat models train-heads" in err


def test_heads_train_on_prompts_the_bench_does_not_measure() -> None:
    from specchat.bench.prompts import load_prompts
    from specchat.models.heads.data import spec_bench_prompts

    trained = {qid for qid, _ in spec_bench_prompts(48)}
    measured = {p.question_id for p in load_prompts(None, (), per_category=5)}
    assert len(trained) == 48 and not trained & measured
