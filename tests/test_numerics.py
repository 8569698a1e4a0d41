"""NaN and infinite logits (a model with NaN in its output matrix): a clear error for the target
at any temperature, never an IndexError or a silent token; a broken *draft* is dropped for the
rest of the reply with a notice, and the reply is the one the target alone gives."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from specchat.devtools.tiny_models import TinySpec, write_tiny_model
from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.decoding import Decoder
from specchat.engine.decode.events import Event, GenerationStats, NoticeEvent, TokenEvent
from specchat.engine.decode.messages import Message
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.sampling import SamplerSettings, distribution, greedy_token, greedy_tokens
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.errors import BadLogitsError, SpecchatError

GREEDY = SamplerSettings(temperature=0, max_tokens=24)
WARM = SamplerSettings(temperature=0.8, seed=3, max_tokens=24)
MSGS = [Message("user", "hello there")]


@pytest.mark.parametrize(("bad", "word"), [(math.nan, "NaN"), (math.inf, "infinite")])
def test_a_bad_row_is_an_error_at_every_temperature(bad: float, word: str) -> None:
    row = np.linspace(-3, 3, 52).astype(np.float32)
    row[7] = bad
    with pytest.raises(BadLogitsError, match=f"the model produced {word} logits"):
        distribution(row, WARM)
    with pytest.raises(BadLogitsError, match=word):
        greedy_token(row)
    with pytest.raises(BadLogitsError, match=word):
        greedy_tokens(np.stack([np.zeros(52, np.float32), row]))


def test_banned_tokens_at_minus_infinity_are_fine() -> None:
    row = np.full(52, -np.inf, dtype=np.float32)
    row[[4, 9]] = [1.0, 2.0]
    assert greedy_token(row) == 9
    d = distribution(row, SamplerSettings(temperature=1, top_k=0, top_p=1, min_p=0))
    assert sorted(d.ids.tolist()) == [4, 9] and math.isclose(d.probs.sum(), 1)
    with pytest.raises(BadLogitsError, match="only −∞"):
        greedy_token(np.full(52, -np.inf, dtype=np.float32))


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, tiny_target: Path
           ) -> dict[str, LlamaModel]:
    d = tmp_path_factory.mktemp("nan")
    nan_target = write_tiny_model(d / "nan-target.gguf", TinySpec(seed=1),
                                  output_rows={10: math.nan})
    # The target's own weights with NaN in one output row: every draft row has a NaN max.
    nan_draft = write_tiny_model(d / "nan-draft.gguf", TinySpec(seed=1),
                                 output_rows={10: math.nan})
    return {"target": LlamaModel(tiny_target), "nan-target": LlamaModel(nan_target),
            "nan-draft": LlamaModel(nan_draft)}


def ctx(model: LlamaModel) -> LlamaContext:
    return LlamaContext(model, ContextSettings(n_ctx=256, n_threads=1))


def reply(decoder: Decoder, s: SamplerSettings) -> list[Event]:
    return list(ChatEngine(decoder).reply(MSGS, s, threading.Event()))


@pytest.mark.parametrize("settings", [GREEDY, WARM], ids=["T=0", "T=0.8"])
def test_a_nan_target_is_a_clear_error(models: dict[str, LlamaModel],
                                       settings: SamplerSettings) -> None:
    for decoder in (PlainDecoder(ctx(models["nan-target"])),
                    SpeculativeDecoder(ctx(models["nan-target"]), ctx(models["target"]))):
        with pytest.raises(BadLogitsError, match="the model produced NaN logits"):
            reply(decoder, settings)


@pytest.mark.parametrize("settings", [GREEDY, WARM], ids=["T=0", "T=0.8"])
def test_a_nan_draft_is_dropped_with_a_notice(models: dict[str, LlamaModel],
                                              settings: SamplerSettings) -> None:
    plain = reply(PlainDecoder(ctx(models["target"])), settings)
    spec = reply(SpeculativeDecoder(ctx(models["target"]), ctx(models["nan-draft"])), settings)
    notices = [e.message for e in spec if isinstance(e, NoticeEvent)]
    assert len(notices) == 1 and notices[0].startswith("the draft stopped: the model produced "
                                                       "NaN logits")
    assert notices[0].endswith("the reply goes on without it")
    assert isinstance(spec[-1], GenerationStats) and spec[-1].generated_tokens > 1
    if settings.greedy:  # the target alone decides every token: the same reply as plain
        assert [e.token_id for e in spec if isinstance(e, TokenEvent)] == \
            [e.token_id for e in plain if isinstance(e, TokenEvent)]


def test_ask_with_a_nan_model_is_one_line(tmp_path: Path, models: dict[str, LlamaModel]
                                         ) -> None:
    env = {**os.environ, "SPECCHAT_HOME": str(tmp_path / "home")}
    for t in ("0", "0.8"):
        r = subprocess.run([sys.executable, "-m", "specchat", "ask", "hello there", "--model",
                            str(models["nan-target"].path), "--temperature", t,
                            "--max-tokens", "8"], capture_output=True, text=True, env=env,
                           timeout=120, check=False)
        assert r.returncode == 1, r.stderr
        assert "the model produced NaN logits" in r.stderr
        assert "Traceback" not in r.stderr and "IndexError" not in r.stderr


def test_a_draft_whose_decode_fails_is_dropped_too(models: dict[str, LlamaModel],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Any error of the draft's own (here llama.cpp refusing a decode) ends only the draft."""
    draft = ctx(models["target"])
    calls = {"n": 0}
    real = draft.decode

    def failing(tokens: object, **kw: object) -> object:
        calls["n"] += 1
        if calls["n"] > 3:
            raise SpecchatError("llama.cpp decode failed (-3): out of memory")
        return real(tokens, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(draft, "decode", failing)
    plain = reply(PlainDecoder(ctx(models["target"])), GREEDY)
    spec = reply(SpeculativeDecoder(ctx(models["target"]), draft), GREEDY)
    assert [e.message for e in spec if isinstance(e, NoticeEvent)] == [
        "the draft stopped: llama.cpp decode failed (-3): out of memory; the reply goes on "
        "without it"]
    assert [e.token_id for e in spec if isinstance(e, TokenEvent)] == \
        [e.token_id for e in plain if isinstance(e, TokenEvent)]
