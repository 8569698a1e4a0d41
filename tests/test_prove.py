"""``specchat prove`` and the two-sample χ² test behind it."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from specchat.bench.chi2 import homogeneity
from specchat.cli.main import main
from specchat.cli.prove_cmd import sample, verdict
from specchat.engine.model import LlamaContext, LlamaModel
from specchat.engine.model_settings import ContextSettings
from specchat.engine.plain import PlainDecoder
from specchat.engine.sampling import SamplerSettings
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


def test_prove_says_what_is_wrong(tiny_target: Path, home: AppPaths,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prove", "--model", str(tiny_target), "--samples", "5"]) == 1
    assert "--samples must be ≥ 20" in capsys.readouterr().err
    assert main(["prove", "--model", str(tiny_target), "--samples", "50"]) == 1
    assert "nothing to prove" in capsys.readouterr().err


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
    assert verdict(homogeneity(a, b)).startswith("FAIL")
