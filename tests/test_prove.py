"""``specchat prove`` and the two-sample χ² test behind it."""

from __future__ import annotations

import re
import threading
from collections import Counter
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from specchat.bench.chi2 import detectable_tv, homogeneity
from specchat.cli.main import main
from specchat.cli.prove_cmd import Tally, sample, verdict
from specchat.engine.decode import target_pass, verify
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.paths import AppPaths


def draws(p: list[float], n: int, seed: int) -> Counter[object]:
    rng = np.random.default_rng(seed)
    return Counter(rng.choice(len(p), size=n, p=p).tolist())


def test_homogeneity_passes_one_distribution_and_fails_two() -> None:
    p = [0.5, 0.2, 0.15, 0.1, 0.04, 0.01]
    same = homogeneity(draws(p, 4000, 1), draws(p, 4000, 2))
    assert same.ok and same.p_value > 1e-3 and same.df >= 3
    q = [0.4, 0.3, 0.15, 0.1, 0.04, 0.01]
    assert not homogeneity(draws(p, 4000, 1), draws(q, 4000, 2)).ok
    assert homogeneity(Counter({1: 50}), Counter({1: 50})).statistic == 0.0


def test_prove_on_a_tiny_pair_with_a_tree(tiny_target: Path, tiny_draft: Path, home: AppPaths,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["prove", "--model", str(tiny_target), "--draft", str(tiny_draft), "--drafter",
               "tree", "--gamma", "8", "--samples", "400", "--seed", "3", "--threads", "1"])
    out = capsys.readouterr()
    assert rc == 0, out
    assert "χ² = " in out.out and "df = " in out.out and "p-value = " in out.out
    assert "PASS" in out.out and "tree" in out.err


def sqrt_rule(pd: float, qd: float) -> float:
    """A wrong rule: min(1, p/q)^0.5 keeps too many of the drafter's tokens."""
    return min(1.0, pd / qd) ** 0.5


# What the tiny target tends to write after "assistant\n" (its greedy reply), twice: the n-gram
# lookup then has a match on most steps, as it has on a real model asked to repeat a sentence.
ECHO = "assistant\nb1o'b1v0000 and assistant\nb1o'b1v0000"


def prove(target: Path, draft: Path | None, drafter: str, seed: int,
          capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``specchat prove`` at its defaults (N, tokens, γ) on the tiny models."""
    args = ["prove", "--model", str(target), "--drafter", drafter, "--seed", str(seed),
            "--threads", "1", *(["--prompt", ECHO] if drafter == "ngram" else [])]
    rc = main([*args, "--draft", str(draft)] if draft is not None else args)
    return rc, capsys.readouterr().out


@pytest.mark.parametrize("drafter", ["model", "tree", "ngram"])
def test_prove_passes_the_rule_and_fails_a_biased_one(
        drafter: str, tiny_target: Path, tiny_draft: Path, home: AppPaths,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """At the default N, the exact rule passes with drafts made and rejected, and the same run
    with a biased acceptance fails (the check can fail: it tests the rule, not plain steps)."""
    draft = None if drafter == "ngram" else tiny_draft
    rc, out = prove(tiny_target, draft, drafter, 11, capsys)
    assert rc == 0 and "PASS" in out, out
    drafted, rejected, share = re.search(
        r"(\d+) tokens drafted.*?(\d+) rejected.*?\((\d+)%\) went through a rejection", out).groups()
    assert int(drafted) > 1000 and int(rejected) > 200 and int(share) >= 20, out
    assert re.search(r"total variation ≥ 0\.\d+", out)
    monkeypatch.setattr(target_pass, "verify_tree", partial(verify.verify_tree, keep=sqrt_rule))
    rc, out = prove(tiny_target, draft, drafter, 11, capsys)
    assert rc == 1 and "FAIL" in out, out


def test_prove_with_a_prediction_passes_and_a_biased_rule_fails(
        tiny_target: Path, home: AppPaths, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Drafting from a predicted output (the tiny target's greedy reply, which sampling at
    T = 0.9 often leaves): the rule passes with drafts kept and rejected; a biased rule fails."""
    pred = tmp_path / "pred.txt"
    pred.write_text("b1o'b1v0000", encoding="utf-8")
    args = ["prove", "--model", str(tiny_target), "--drafter", "prediction", "--seed", "5",
            "--threads", "1", "--prediction", str(pred)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "PASS" in out, out
    drafted, rejected = re.search(r"(\d+) tokens drafted.*?(\d+) rejected", out).groups()
    assert int(drafted) > 500 and int(rejected) > 100, out
    monkeypatch.setattr(target_pass, "verify_tree", partial(verify.verify_tree, keep=sqrt_rule))
    assert main(args) == 1
    assert "FAIL" in capsys.readouterr().out


def test_prove_will_not_pass_a_run_that_hardly_rejected() -> None:
    same = homogeneity(Counter({(1,): 500, (2,): 500}), Counter({(1,): 502, (2,): 498}))
    few = Tally(continuations=1000, drafted=900, through_rejection=150)
    assert verdict(same, few).startswith("INCONCLUSIVE: only 15%")
    assert verdict(same, Tally(continuations=1000)).startswith("INCONCLUSIVE: no token")
    assert verdict(same, Tally(continuations=1000, drafted=900, through_rejection=200)
                   ).startswith("PASS")


def test_detectable_tv_is_what_the_test_catches() -> None:
    """The printed power is right: a difference of that total variation, spread in proportion
    to the probabilities (where the bound is tight), is caught ~90 % of the time at the same N;
    half of it far less often. Four times the samples halve the distance."""
    k, n = 16, 1000
    tv = detectable_tv(n, n, k - 1, 1e-3)
    assert 0.1 < tv < 0.2
    assert detectable_tv(4 * n, 4 * n, k - 1, 1e-3) == pytest.approx(tv / 2, rel=1e-3)
    rng = np.random.default_rng(5)
    a = np.full(k, 1 / k)
    signs = np.where(np.arange(k) % 2 == 0, 1.0, -1.0)

    def caught(delta: float) -> int:
        b = a * (1 + 2 * delta * signs)  # total variation exactly delta
        return sum(homogeneity(Counter(dict(enumerate(rng.multinomial(n, a).tolist()))),
                               Counter(dict(enumerate(rng.multinomial(n, b).tolist())))
                               ).p_value < 1e-3 for _ in range(300))

    assert caught(tv) >= 250  # 90 % of 300 is 270, sd 5
    assert caught(tv / 2) < 150


def test_the_verdict_fails_two_different_models(tiny_target: Path, tiny_draft: Path) -> None:
    """Control: the draft model's own samples are not the target's."""
    s = SamplerSettings(temperature=0.9, max_tokens=2)
    ctx = ContextSettings(n_ctx=256, n_threads=1)
    target = PlainDecoder(LlamaContext(LlamaModel(tiny_target), ctx))
    draft = PlainDecoder(LlamaContext(LlamaModel(tiny_draft), ctx))
    prompt = target.target.model.tokenize("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    cancel = threading.Event()
    a = sample(target, prompt, lambda seed: s.with_(seed=seed), range(400), cancel)
    b = sample(draft, prompt, lambda seed: s.with_(seed=seed), range(400, 800), cancel)
    assert verdict(homogeneity(a.counts, b.counts)).startswith("FAIL")
