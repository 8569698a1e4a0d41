"""What a drafter needs from specchat's stores reaches it through the models layer's sources
(``specchat.models.drafter_sources``, issue 39): the runtime names no drafter. Medusa, which no
other test runs through the runtime: without heads it says how to train them before anything
runs, and is not offered as usable; with heads it drafts, its own tree in place of auto-γ."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specchat.engine.decode.decoding import run_to_end
from specchat.engine.decode.registry import DrafterEnv, Need
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma
from specchat.engine.drafters.medusa import OWN_NODES, MedusaHeads
from specchat.engine.policy.auto_gamma import AutoGamma
from specchat.engine.policy.planner import Planner
from specchat.errors import SpecchatError
from specchat.loading import select
from specchat.models.catalog import load_catalog
from specchat.models.drafter_sources import sources
from specchat.models.heads import medusa
from specchat.models.heads.output_matrix import output_rows
from specchat.models.heads.store import target_sha256
from specchat.models.resolver import ModelResolver
from specchat.paths import AppPaths
from specchat.runtime.opening import Runtime

GREEDY = SamplerSettings(temperature=0, max_tokens=24)


def test_every_store_backed_drafter_has_a_source() -> None:
    assert sorted(s.need.name for s in sources()) == ["kangaroo", "layerskip", "medusa",
                                                      "mtp file"]


def test_an_offered_need_is_looked_for_once_and_only_when_asked() -> None:
    calls: list[int] = []
    need: Need[int] = Need("n")
    env = DrafterEnv(target=None)  # type: ignore[arg-type]
    env.offer(need, lambda: calls.append(1) or 7)
    assert calls == []
    assert env.get(need) == 7 and env.get(need) == 7 and calls == [1]
    env.offer(need, lambda: None)  # provided already: the first value stands
    assert env.get(need) == 7


def _open(home: AppPaths, target: Path) -> Runtime:
    cat = load_catalog()
    return Runtime.open(select(cat, model=str(target)), ModelResolver(cat, home))


def test_medusa_through_the_runtime(home: AppPaths, tiny_target: Path) -> None:
    rt = _open(home, tiny_target)
    try:
        assert rt.usable_drafters(("medusa", "ngram")) == ("ngram",)
        with pytest.raises(SpecchatError, match=r"has no Medusa heads yet: train them with "
                                                r"`specchat models train-heads \S+ --kind medusa`"):
            rt.decoder(drafters=("medusa",))
        v = rt.target.n_vocab
    finally:
        rt.close()

    # Untrained heads (each one the target's own next-token head) are enough to draft with.
    paths = home.ensure()
    sha = target_sha256(paths, tiny_target)
    d, k, vocab = 64, 3, np.arange(v, dtype=np.int64)
    heads = MedusaHeads(np.zeros((k, d, d), np.float32), np.zeros((k, d), np.float32), vocab,
                        output_rows(tiny_target, vocab), sha)
    medusa.save(paths, medusa.TrainResult(heads, (), 0, 0.0, 0, v, 1.0), tiny_target)

    rt = _open(home, tiny_target)
    try:
        assert rt.usable_drafters(("medusa",)) == ("medusa",)
        auto = rt.decoder(gamma="auto", drafters=("medusa",))
        assert isinstance(auto, SpeculativeDecoder) and isinstance(auto.policy, FixedGamma)
        assert (auto.policy.gamma, auto.policy.label) == (OWN_NODES, "medusa tree")
        planned = rt.decoder(drafters=("medusa",))
        assert isinstance(planned, SpeculativeDecoder) and isinstance(planned.policy, Planner)
        both = rt.decoder(gamma="auto", drafters=("medusa", "ngram"))  # not alone: auto-γ
        assert isinstance(both, SpeculativeDecoder) and type(both.policy) is AutoGamma
        prompt = [1, 2, 3, 4, 5, 6, 7, 8]
        plain = run_to_end(rt.decoder(plain=True), prompt, GREEDY)
        rt.clear_caches()
        run = run_to_end(auto, prompt, GREEDY)
        assert run.tokens == plain.tokens
        assert any(s.drafter == "medusa" for s in run.steps)
    finally:
        rt.close()
