"""Speculation wired in: Runtime (pair check, decoder choice), `specchat ask`, `specchat bench`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specchat.bench.prompts import load_prompts
from specchat.bench.report import paired_speedup, summarize
from specchat.cli.main import main
from specchat.devtools.tiny_models import (
    TinySpec,
    few_shared_vocabulary,
    vocabulary,
    write_tiny_model,
)
from specchat.engine.decode.events import SpecDetail
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.drafters.ngram import NgramDrafter
from specchat.engine.policy.gamma import GAMMA_DEFAULT
from specchat.engine.policy.planner import Planner
from specchat.errors import IncompatiblePairError, SpecchatError
from specchat.loading import RuntimeOptions, check_pair, select
from specchat.models.catalog import load_catalog
from specchat.models.resolver import ModelResolver
from specchat.paths import AppPaths
from specchat.runtime.opening import Runtime


@pytest.fixture(scope="module")
def swapped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    toks = vocabulary()
    toks[10], toks[11] = toks[11], toks[10]
    return write_tiny_model(tmp_path_factory.mktemp("swap") / "swapped.gguf", TinySpec(seed=4),
                            tokens=toks)


@pytest.fixture(scope="module")
def few(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("few") / "few.gguf", TinySpec(seed=4),
                            tokens=few_shared_vocabulary())


def test_incompatible_pair_is_refused_with_what_differs(tiny_target: Path, few: Path,
                                                        home: AppPaths) -> None:
    with pytest.raises(IncompatiblePairError, match=r"few.gguf cannot draft for target.gguf:"
                       r" different vocabularies sharing only 18 of the target's 52 tokens"):
        check_pair(tiny_target, few)
    sel = select(load_catalog(), model=str(tiny_target), draft=str(few))
    with pytest.raises(IncompatiblePairError):
        Runtime.open(sel, ModelResolver(load_catalog(), home))


def test_a_swapped_vocabulary_drafts_through_the_shared_tokens(tiny_target: Path,
                                                               swapped: Path) -> None:
    (warning,) = check_pair(tiny_target, swapped)
    assert "different vocabularies: drafting through their 52 shared tokens" in warning.message


def test_padding_difference_opens_with_a_warning(tiny_target: Path, tiny_other_vocab: Path,
                                                 home: AppPaths) -> None:
    sel = select(load_catalog(), model=str(tiny_target), draft=str(tiny_other_vocab))
    rt = Runtime.open(sel, ModelResolver(load_catalog(), home))
    try:
        assert [w.what for w in rt.pair_warnings] == ["vocab size"]
        dec = rt.decoder()
        assert isinstance(dec, SpeculativeDecoder) and dec.n_shared == 52
    finally:
        rt.close()


def test_decoder_choice(tiny_target: Path, tiny_draft: Path, home: AppPaths) -> None:
    cat = load_catalog()
    rt = Runtime.open(select(cat, model=str(tiny_target), draft=str(tiny_draft)),
                      ModelResolver(cat, home), RuntimeOptions())
    try:
        assert isinstance(rt.decoder(plain=True), PlainDecoder)
        spec = rt.decoder()
        assert isinstance(spec, SpeculativeDecoder) and isinstance(spec.policy, Planner)
        # The default: the planner, on prompt lookup and the draft model.
        assert spec.policy.drafters == ("model", "ngram")
        assert [d.name for d in spec.drafters] == ["ngram", "model"]
        beside = rt.decoder(drafters=("model", "ngram"))  # the lookup beside, the planner's pick
        assert isinstance(beside, SpeculativeDecoder)
        assert [d.name for d in beside.drafters] == ["model", "ngram"]
        alone = rt.decoder(ngram=False)  # --no-ngram
        assert isinstance(alone, SpeculativeDecoder)
        assert [d.name for d in alone.drafters] == ["model"]
        assert rt.decoder(gamma=2).policy.next_gamma() == 2  # type: ignore[attr-defined]
        pair = rt.decoder(gamma="pair").policy  # type: ignore[attr-defined]
        assert (pair.next_gamma(), pair.label) == (GAMMA_DEFAULT, "default")  # no pair entry
        both = rt.decoder(ngram=True)  # the old spelling of --drafter ngram,model
        assert isinstance(both, SpeculativeDecoder)
        assert [d.name for d in both.drafters] == ["ngram", "model"]
        ngram = both.drafters[0]
        assert isinstance(ngram, NgramDrafter)
        assert ngram.n_min == 2  # with a draft model, only specific matches go first
        assert both.policy.drafters == ("model", "ngram")  # type: ignore[attr-defined]
        tree = rt.decoder(drafters=("tree",))
        assert isinstance(tree, SpeculativeDecoder) and tree.drafters[0].name == "tree"
        with pytest.raises(SpecchatError, match="plan, auto, pair or a whole number"):
            rt.decoder(gamma="sometimes")
    finally:
        rt.close()
    rt = Runtime.open(select(cat, model=str(tiny_target)), ModelResolver(cat, home))
    try:
        assert isinstance(rt.decoder(), PlainDecoder)
        alone = rt.decoder(ngram=True)
        assert isinstance(alone, SpeculativeDecoder) and alone.draft is None
        assert alone.policy.drafters == ("ngram",)  # type: ignore[attr-defined]
        assert alone.name == "speculative"  # its kind; the stats say what drafted
        with pytest.raises(SpecchatError, match="the 'tree' drafter needs a draft model"):
            rt.decoder(drafters=("tree",))
    finally:
        rt.close()
    with pytest.raises(SpecchatError, match="--draft needs --model"):
        select(cat, draft=str(tiny_draft))


def test_ask_streams_speculative_events_as_json(tiny_target: Path, tiny_draft: Path,
                                               home: AppPaths,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["ask", "hello", "--model", str(tiny_target), "--draft", str(tiny_draft),
               "--gamma", "3", "--temperature", "0", "--max-tokens", "20", "--json",
               "--threads", "1"])
    assert rc == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    kinds = {x["type"] for x in lines}
    assert {"token", "step", "stats"} <= kinds
    stats = lines[-1]
    assert stats["type"] == "stats" and stats["steps"] > 0 and stats["alpha"] is not None
    # beside τ, vLLM's mean acceptance length: 1 + accepted / steps
    assert stats["acceptance_length"] == pytest.approx(1 + stats["accepted"] / stats["steps"])
    assert max(x["gamma"] for x in lines if x["type"] == "step") == 3
    origins = {x["origin"] for x in lines if x["type"] == "token"}
    # ("plain": a step with nothing to draft, e.g. the last token before --max-tokens)
    assert {"corrected"} <= origins <= {"accepted", "corrected", "bonus", "plain"}


def test_ask_summary_line_shows_alpha_and_tau(tiny_target: Path, home: AppPaths,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["ask", "the cat the cat the cat", "--model", str(tiny_target), "--ngram",
               "--temperature", "0", "--max-tokens", "30", "--threads", "1"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "α " in err and "τ " in err


def test_ask_refuses_an_incompatible_pair_in_one_line(tiny_target: Path, few: Path,
                                                      home: AppPaths,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["ask", "hi", "--model", str(tiny_target), "--draft", str(few)])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.count("\n") == 1 and err.startswith("specchat: error: few.gguf cannot draft")


def test_ask_rejects_a_bad_gamma(tiny_target: Path, home: AppPaths,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["ask", "hi", "--model", str(tiny_target), "--gamma", "x"])
    assert "--gamma: must be plan, auto, pair or a whole number 0-32" in capsys.readouterr().err


# ---------------------------------------------------------------------------------- bench


def write_prompts(path: Path) -> Path:
    lines = [{"question_id": i, "category": cat, "turns": [f"hello {i}", "next"]}
             for i, cat in enumerate(["alpha", "beta", "alpha", "beta"])]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return path


def test_load_prompts(tmp_path: Path) -> None:
    path = write_prompts(tmp_path / "q.jsonl")
    got = load_prompts(path, per_category=1)
    assert [(p.category, p.text) for p in got] == [("alpha", "hello 0"), ("beta", "hello 1")]
    assert len(load_prompts(path, ["beta"], per_category=5)) == 2
    with pytest.raises(SpecchatError, match="no prompts in category 'gamma'"):
        load_prompts(path, ["gamma"])
    (tmp_path / "bad.jsonl").write_text('{"category": "x"}\n', encoding="utf-8")
    with pytest.raises(SpecchatError, match=r"bad.jsonl:1: not a Spec-Bench line"):
        load_prompts(tmp_path / "bad.jsonl")
    default = load_prompts(per_category=1)  # the copy shipped in benchmarks/spec_bench
    assert len(default) == 13


def test_bench_writes_json_and_markdown(tiny_target: Path, tiny_draft: Path, home: AppPaths,
                                        tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    rc = main(["bench", "--model", str(tiny_target), "--draft", str(tiny_draft), "--prompts",
               str(write_prompts(tmp_path / "q.jsonl")), "--per-category", "1", "--gamma", "1,3",
               "--max-tokens", "16", "--threads", "1", "--out", str(out),
               "--report", str(out / "report")])
    assert rc == 0
    assert {p.name for p in (out / "report").iterdir()} == {
        "report.md", "tokens-per-s-T0.svg", "alpha-T0.svg", "tokens-per-s-T0_7.svg",
        "alpha-T0_7.svg"}
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert len(doc["records"]) == 2 * 2 * 3  # temperatures × prompts × (plain, γ 1, γ 3)
    greedy_spec = [r for r in doc["records"] if r["temperature"] == 0 and r["mode"] != "plain"]
    assert [r["identity"] for r in greedy_spec] == ["identical ✓"] * 4  # checked against plain
    assert all("identity" not in r for r in doc["records"] if r["temperature"] > 0)
    rows = {(r["temperature"], r["mode"], r["gamma"], r["category"]): r for r in doc["rows"]}
    plain, spec = rows[(0.0, "plain", None, "all")], rows[(0.0, "draft", 3, "all")]
    assert plain["speedup"] == pytest.approx(1.0) and plain["alpha"] is None
    assert spec["speedup"] == pytest.approx(spec["tok_s"] / plain["tok_s"])
    assert spec["alpha"] is not None and spec["tau"] >= 1
    assert len(spec["acceptance_by_position"]) == 3
    assert rows[(0.7, "draft", 1, "beta")]["prompts"] == 1
    md = (out / "results.md").read_text(encoding="utf-8")
    assert "| 0 | all | draft | 3 |" in md and "acc@3" in md
    assert md in capsys.readouterr().out


def _bench_rounds(target: Path, draft: Path, tmp_path: Path,
                  capsys: pytest.CaptureFixture[str], *extra: str
                  ) -> tuple[Path, list[tuple[str, str]]]:
    """A greedy γ 2 bench over two prompts: its output folder and, per run in the order they
    ran, the progress count and the run ("plain (run 1/3)")."""
    out = tmp_path / "out"
    rc = main(["bench", "--model", str(target), "--draft", str(draft), "--prompts",
               str(write_prompts(tmp_path / "q.jsonl")), "--gamma", "2", "--temperature", "0",
               "--max-tokens", "8", "--threads", "1", "--out", str(out), *extra])
    assert rc == 0
    said = capsys.readouterr()
    # Progress lines only ("[3/12] T=0 …"): a notice in brackets (the AMX one) is not a run.
    return out, [(line[1:].split("]")[0], line.split("#", 1)[1].split(":")[0].split(" ", 1)[1])
                 for line in (said.out + said.err).splitlines()
                 if re.match(r"\[\d+/\d+\] ", line)]


def test_bench_runs_keep_the_median_of_interleaved_rounds(tiny_target: Path, tiny_draft: Path,
                                                         home: AppPaths, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    out, runs = _bench_rounds(tiny_target, tiny_draft, tmp_path, capsys, "--runs", "3")
    # Every other round the other way round: a drifting machine weighs on both modes alike.
    assert [r for _, r in runs[:6]] == [
        "plain (run 1/3)", "draft γ=2 (run 1/3)", "draft γ=2 (run 2/3)", "plain (run 2/3)",
        "plain (run 3/3)", "draft γ=2 (run 3/3)"], runs
    # 2 prompts × 2 modes × 3 runs
    assert [c for c, _ in runs] == [f"{i}/12" for i in range(1, 13)]
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert doc["config"]["runs"] == 3
    assert len(doc["records"]) == 2 * 2  # one record (the median run) per prompt and mode
    for r in doc["records"]:
        lo, hi = r["tok_s_range"]
        assert r["runs"] == 3 and lo <= r["decode_tps"] <= hi
        # Each round's speed over plain's in that round, for the paired speed-up.
        assert len(r["paired"]) == 3 if r["mode"] != "plain" else "paired" not in r
    rows = {(r["mode"], r["category"]): r for r in doc["rows"]}
    assert rows[("plain", "all")]["paired_speedup"] is None
    assert rows[("draft", "all")]["paired_speedup"] > 0
    assert "each figure the median of 3 interleaved runs" in (out / "results.md").read_text(
        encoding="utf-8")
    assert main(["bench", "--model", str(tiny_target), "--runs", "0"]) == 1  # said, no trace


def test_bench_control_runs_plain_again_in_every_round(tiny_target: Path, tiny_draft: Path,
                                                       home: AppPaths, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    out, runs = _bench_rounds(tiny_target, tiny_draft, tmp_path, capsys, "--runs", "2",
                              "--control", "--report", str(tmp_path / "out" / "report"))
    assert [r for _, r in runs[:6]] == ["plain (run 1/2)", "plain again (run 1/2)", "draft γ=2 (run 1/2)",
                        "draft γ=2 (run 2/2)", "plain again (run 2/2)", "plain (run 2/2)"]
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    again = [r for r in doc["records"] if r["mode"] == "plain again"]
    assert len(again) == 2 and all(len(r["paired"]) == 2 and "identity" not in r for r in again)
    assert all(r["identity"] == "identical ✓" for r in doc["records"] if r["mode"] == "draft")
    rows = {(r["mode"], r["category"]): r for r in doc["rows"]}
    assert rows[("plain again", "all")]["paired_speedup"] > 0
    assert rows[("plain again", "all")]["alpha"] is None
    md = (out / "results.md").read_text(encoding="utf-8")
    assert "| 0 | all | plain again | – |" in md and '"plain again" is plain decoding' in md
    assert "plain again" not in (out / "report" / "alpha-T0.svg").read_text(encoding="utf-8")


def test_summarize_weights_by_time_not_by_prompt() -> None:
    def rec(mode: str, gamma: int | None, gen: int, secs: float) -> dict:
        return {"question_id": "1", "category": "c", "mode": mode, "gamma": gamma,
                "temperature": 0.0, "generated_tokens": gen, "total_s": secs + 1,
                "prompt_s": 1.0, "ttft_s": 1.0, "decode_s": secs, "accepted": 3,
                "rejections": 1, "target_forwards": gen // 2,
                "steps": gen // 2 if gamma else 0, "drafted": 4, "draft_s": 0.1,
                "detail": SpecDetail(position_drafted=(1, 1), position_accepted=(1, 0)).as_dict()}
    rows = summarize([rec("plain", None, 10, 1.0), rec("plain", None, 30, 1.0),
                      rec("draft", 2, 40, 1.0)])
    by = {(r["mode"], r["category"]): r for r in rows}
    # after the first token of each reply: 38 tokens in 2 s; the draft's 39 in 1 s
    assert by[("plain", "all")]["tok_s"] == pytest.approx(19.0)
    assert by[("draft", "c")]["speedup"] == pytest.approx(39 / 19)
    assert by[("draft", "c")]["acceptance_by_position"] == [1.0, 0.0]
    assert by[("draft", "c")]["alpha"] == pytest.approx(0.75)


def test_paired_speedup_takes_each_prompts_median_round_then_the_geometric_mean() -> None:
    # Prompt 1's middle round ran while the machine was busy for both sides: its paired ratio
    # stays put where the speeds themselves halved.
    group = [{"paired": [1.1, 0.9, 1.0]}, {"paired": [1.2]}, {"paired": [0.8, 1.25]},
             {"mode": "plain"}]
    assert paired_speedup(group) == pytest.approx((1.0 * 1.2 * 1.0) ** (1 / 3))
    assert paired_speedup([{"mode": "plain"}]) is None


def fake_llama_bin(folder: Path) -> Path:
    """Stand-ins for llama.cpp's tools that print what the real ones print (as of b-2025/26)."""
    folder.mkdir()
    spec = folder / "llama-speculative-simple"
    spec.write_text(
        "#!/bin/sh\n"
        "grep -q -- '--spec-type draft-simple' <<EOF || exit 3\n$*\nEOF\n"
        # the prompt goes in whole with -p (-f would drop its final newline)
        "grep -q -- '<|im_start|>assistant' <<EOF || exit 4\n$*\nEOF\n"
        "echo 'generated text'\n"
        "cat >&2 <<'EOF'\n"
        "0.00.221.013 I encoded   30 tokens in    0.016 seconds, speed: 1875.000 t/s\n"
        "0.00.221.049 I decoded   16 tokens in    0.100 seconds, speed:  160.000 t/s\n"
        "0.00.221.094 I n_draft   = 3\n0.00.221.115 I n_predict = 16\n"
        "0.00.221.134 I n_drafted = 12\n0.00.221.153 I n_accept  = 9\n"
        "0.00.221.177 I accept    = 75.000%\nEOF\n", encoding="utf-8")
    bench = folder / "llama-bench"
    bench.write_text("#!/bin/sh\necho '[{\"n_prompt\": 0, \"n_gen\": 16, \"avg_ts\": 123.5}]'\n",
                     encoding="utf-8")
    for f in (spec, bench):
        f.chmod(0o755)
    return folder


def test_bench_runs_llama_cpp_tools_on_the_same_prompts(tiny_target: Path, tiny_draft: Path,
                                                        home: AppPaths, tmp_path: Path) -> None:
    out = tmp_path / "out"
    rc = main(["bench", "--model", str(tiny_target), "--draft", str(tiny_draft), "--prompts",
               str(write_prompts(tmp_path / "q.jsonl")), "--gamma", "3", "--temperature", "0",
               "--max-tokens", "16", "--threads", "1", "--out", str(out),
               "--llama-bin", str(fake_llama_bin(tmp_path / "bin"))])
    assert rc == 0
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    ref = doc["llama_cpp"]
    (spec,) = ref["speculative_simple"]
    assert spec["gamma"] == 3 and len(spec["runs"]) == 2  # one per prompt
    assert spec["tok_s"] == pytest.approx(160.0) and spec["accept"] == pytest.approx(0.75)
    assert spec["ratio"] == pytest.approx(spec["ours_tok_s"] / 160.0)
    assert ref["llama_bench_target_tok_s"] == ref["llama_bench_draft_tok_s"] == 123.5
    md = (out / "results.md").read_text(encoding="utf-8")
    assert "| llama-speculative-simple | 3 | 160.0 | 0.75 |" in md


def test_bench_without_llama_tools_says_so(tiny_target: Path, tiny_draft: Path, home: AppPaths,
                                           tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["bench", "--model", str(tiny_target), "--draft", str(tiny_draft), "--prompts",
               str(write_prompts(tmp_path / "q.jsonl")), "--llama-bin", str(tmp_path / "none")])
    assert rc == 1
    assert "llama-speculative-simple not found in" in capsys.readouterr().err


def test_bench_planner_table_on_tiny_models(tiny_target: Path, tiny_draft: Path, home: AppPaths,
                                            tmp_path: Path) -> None:
    out = tmp_path / "out"
    rc = main(["bench", "--model", str(tiny_target), "--draft", str(tiny_draft), "--prompts",
               str(write_prompts(tmp_path / "q.jsonl")), "--gamma", "1,2,plan",
               "--temperature", "0", "--max-tokens", "16", "--threads", "1", "--out", str(out)])
    assert rc == 0
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert len(doc["cost_curve"]["verify_s"]) == 32
    table = {r["category"]: r for r in doc["planner"]}
    assert set(table) == {"alpha", "beta", "all"}
    row = table["all"]
    assert row["chain_gamma"] in (1, 2)
    assert row["ideal_tok_s"] >= row["plain_tok_s"]  # plain is one of the ideal's choices
    assert row["plan_vs_ideal"] == pytest.approx(row["plan_tok_s"] / row["ideal_tok_s"])
    md = (out / "results.md").read_text(encoding="utf-8")
    assert "Target verify cost T(n), ms (n = 1..32" in md and "planner/ideal" in md


def test_a_reply_that_drafted_nothing_says_plain(tiny_target: Path, tiny_draft: Path,
                                                 home: AppPaths,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    args = ["ask", "hello", "--model", str(tiny_target), "--draft", str(tiny_draft),
            "--max-tokens", "8", "--threads", "1"]
    assert main([*args, "--gamma", "0"]) == 0
    assert "plain: nothing was worth drafting" in capsys.readouterr().err
    assert main([*args, "--gamma", "2"]) == 0
    err = capsys.readouterr().err
    assert "plain:" not in err and "α " in err


@pytest.mark.parametrize("mode", ["auto", "plan"])
def test_a_second_ask_process_starts_warm(tiny_target: Path, tiny_draft: Path, home: AppPaths,
                                          capsys: pytest.CaptureFixture[str], mode: str) -> None:
    """As a CLI user gets it: separate `specchat ask` calls, a fresh controller each time."""
    args = ["ask", "hello", "--model", str(tiny_target), "--draft", str(tiny_draft),
            "--gamma", mode, "--temperature", "0", "--max-tokens", "80", "--json",
            "--threads", "1"]  # long enough for the planner's warm-up (from token 64)

    def modes() -> list[str]:
        assert main(args) == 0
        lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        return [x["mode"] for x in lines if x["type"] == "step"]

    assert any(m.endswith("warm-up") for m in modes())
    assert list((home.data_dir / "controllers").glob("*.json"))
    assert not any(m.endswith("warm-up") for m in modes())  # learnt before: no warm-up again


def test_bench_drafter_ngram_on_a_pair_is_the_lookup_alone(tiny_target: Path, tiny_draft: Path,
                                                           home: AppPaths, tmp_path: Path) -> None:
    """`--drafter ngram` names one drafter: the pair's draft model must not stand in where the
    lookup has nothing (`--ngram` is the choice of both)."""
    seen: dict[str, set[str]] = {}
    for flag in (["--drafter", "ngram"], ["--ngram"]):
        out = tmp_path / flag[-1].strip("-")
        rc = main(["bench", "--model", str(tiny_target), "--draft", str(tiny_draft), "--prompts",
                   str(write_prompts(tmp_path / "q.jsonl")), *flag, "--gamma", "2",
                   "--temperature", "0", "--max-tokens", "16", "--threads", "1", "--out",
                   str(out)])
        assert rc == 0
        doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
        seen[flag[-1]] = {d for r in doc["records"] if r["mode"] != "plain"
                          for d in r["detail"]["steps_by_drafter"]}
    assert seen["ngram"] <= {"ngram", "none"}
    assert "model" in seen["--ngram"]
