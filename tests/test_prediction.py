"""Predicted outputs (OpenAI's ``prediction``): the drafter follows the reply through the
prediction and re-joins it after a change; the reply is the target's (greedy identity, a χ²
test of sampled continuations); `specchat ask --prediction` and `specchat serve` report the
prediction's accepted and rejected tokens as OpenAI does, and refuse bad values clearly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from specchat.bench.chi2 import chi_square
from specchat.cli.main import main
from specchat.engine.decode.drafting import DraftRequest, Proposal
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.plan import chain
from specchat.engine.decode.sampling import SamplerSettings, make_rng
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma
from specchat.engine.decode.verify import Verdict
from specchat.engine.drafters.prediction import PredictionDrafter
from specchat.engine.llama.model import LlamaModel
from specchat.engine.policy.planner import Planner
from specchat.serve.server import Serving
from tests.serve_helpers import cli_server, client
from tests.test_speculative import GREEDY, T1, ctx, exact_joint, prompt_of, run, sampled_joint, token_ids

PROMPT = [1, 2, 3]


def drafter(prediction: list[int]) -> PredictionDrafter:
    d = PredictionDrafter()
    d.reset(PROMPT)
    d.configure(SamplerSettings(prediction=tuple(prediction)))
    return d


def propose(d: PredictionDrafter, seq: list[int], k: int) -> list[int]:
    req = DraftRequest(seq, chain("prediction", k), GREEDY, make_rng(0))
    return list(d.propose(req).tokens)


def test_the_drafter_follows_the_reply_and_rejoins_after_a_change() -> None:
    pred = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    d = drafter(pred)
    seq = list(PROMPT)
    assert propose(d, seq, 4) == [10, 11, 12, 13]  # from the first token
    seq += [10, 11, 12]
    assert propose(d, seq, 3) == [13, 14, 15]
    seq += [99, 98]  # the reply departs (a renamed word)
    assert not d.can_propose(seq) and propose(d, seq, 3) == []
    seq += [15, 16]  # ... and re-joins the prediction after it
    assert propose(d, seq, 3) == [17, 18, 19]
    d.commit([*seq, 17], Proposal("prediction"), Verdict(0, 17, None))
    assert d.lookup(5) == [18, 19]  # to the prediction's end, no further


def test_an_edit_is_learnt_and_made_in_later_proposals() -> None:
    # The prediction uses 40 41 twice; the reply renames it to 90 at the first use.
    pred = [1, 40, 41, 2, 3, 4, 5, 40, 41, 6, 7]
    d = drafter(pred)
    seq = [*PROMPT, 1, 90, 2, 3]  # departs at 40 41, re-joins at "2 3"
    assert propose(d, seq, 6) == [4, 5, 90, 6, 7]  # the second use proposed renamed
    seq += [4, 5, 90, 6]
    assert propose(d, seq, 2) == [7]  # followed through the edit without losing its place
    assert d.edits == {(40, 41): (90,)}


def test_rejoining_prefers_the_occurrence_after_where_the_reply_left() -> None:
    # "7 8" occurs twice: the reply left the prediction after the first, so it goes on from
    # the second, not back at the start.
    pred = [7, 8, 1, 2, 3, 4, 7, 8, 5, 6]
    d = drafter(pred)
    seq = [*PROMPT, 7, 8, 1, 2, 3, 4, 50, 7, 8]
    assert propose(d, seq, 2) == [5, 6]


def test_no_prediction_proposes_nothing() -> None:
    d = drafter([])
    assert not d.can_propose([*PROMPT, 5]) and propose(d, [*PROMPT, 5], 4) == []


def test_greedy_with_a_prediction_is_token_identical_to_plain(target: LlamaModel) -> None:
    prompt = prompt_of(target, "the cat sat")
    plain, _ = run(PlainDecoder(ctx(target)), prompt, GREEDY)
    want = token_ids(plain)
    assert len(want) > 12
    # The prediction: plain's reply with two tokens changed, so drafts are kept and rejected.
    pred = list(want)
    pred[5] = (pred[5] + 1) % target.n_vocab
    pred[11] = (pred[11] + 3) % target.n_vocab
    for policy in (FixedGamma(6), Planner()):
        dec = SpeculativeDecoder(ctx(target), None, policy, ["prediction"])
        spec, stats = run(dec, prompt, GREEDY.with_(prediction=tuple(pred)))
        assert token_ids(spec) == want, policy
        kept = stats.detail.accepted_by_drafter.get("prediction", 0)
        drafted = stats.detail.drafted_by_drafter.get("prediction", 0)
        assert kept > 0 and drafted > kept, policy  # drafts were made, and some rejected


def test_sampled_continuations_are_the_targets_with_a_prediction(target: LlamaModel) -> None:
    """χ² of the first three tokens' joint at T = 1 against the exact one: the prediction
    (plain greedy's reply) is often wrong at T = 1, so drafts are both kept and rejected."""
    prompt = prompt_of(target)
    plain, _ = run(PlainDecoder(ctx(target)), prompt, GREEDY)
    pred = tuple(token_ids(plain))
    exact = exact_joint(target, prompt, T1, depth=3)
    dec = SpeculativeDecoder(ctx(target), None, FixedGamma(3), ["prediction"])
    counts = sampled_joint(dec, prompt, T1.with_(prediction=pred), depth=3, n=3000, known=exact)
    result = chi_square(counts, exact)
    assert result.ok, str(result)


@pytest.fixture(scope="module")
def target(tiny_target: Path) -> LlamaModel:
    return LlamaModel(tiny_target)


# ------------------------------------------------------------------------ ask and serve


def ask_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["ask", *args, "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    return next(x for x in lines if x["type"] == "stats")


def test_ask_with_a_prediction_file(tiny_target: Path, tiny_draft: Path, home: object,
                                    tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["the cat sat", "--model", str(tiny_target), "--draft", str(tiny_draft),
            "--temperature", "0", "--max-tokens", "24", "--threads", "1"]
    plain = ask_json(capsys, *base, "--plain")
    assert "accepted_prediction_tokens" not in plain
    # The reply's own text as the prediction: nearly all of it is kept.
    assert main(["ask", *base, "--plain"]) == 0
    text = capsys.readouterr().out.rstrip("\n")
    pred = tmp_path / "pred.txt"
    pred.write_text(text, encoding="utf-8")
    got = ask_json(capsys, *base, "--prediction", str(pred))
    assert "prediction" in got["drafters"]
    assert got["accepted_prediction_tokens"] > 0
    assert got["accepted_prediction_tokens"] + got["rejected_prediction_tokens"] > 0
    assert main(["ask", *base, "--prediction", str(tmp_path / "missing.txt")]) != 0
    assert "--prediction: no such file" in capsys.readouterr().err
    binary = tmp_path / "bin.dat"
    binary.write_bytes(b"\xff\xfe\x00junk")
    assert main(["ask", *base, "--prediction", str(binary)]) != 0
    assert "is not UTF-8 text" in capsys.readouterr().err


@pytest.fixture(scope="module")
def server(tiny_target: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serving]:
    # One model, no draft: predictions still draft (the prediction drafter needs no draft).
    home = tmp_path_factory.mktemp("serve-prediction")
    with cli_server(home, "--model", str(tiny_target), "--ctx-size", "512") as s:
        assert s.host.state == "ready", s.host.error
        yield s


def test_serve_drafts_from_a_prediction_and_reports_its_tokens(server: Serving) -> None:
    api = client(server.url)
    model = server.host.model_id
    msgs = [{"role": "user", "content": "the cat sat"}]
    plain = api.chat.completions.create(model=model, messages=msgs, max_tokens=24,
                                        temperature=0)
    assert plain.usage.completion_tokens_details is None  # no prediction, none reported
    text = plain.choices[0].message.content
    got = api.chat.completions.create(model=model, messages=msgs, max_tokens=24, temperature=0,
                                      prediction={"type": "content", "content": text})
    assert got.choices[0].message.content == text  # the target's reply all the same
    details = got.usage.completion_tokens_details
    assert details.accepted_prediction_tokens > 0
    assert details.rejected_prediction_tokens >= 0
    ext = got.model_extra["specchat"]
    assert ext["steps_by_drafter"].get("prediction", 0) > 0
    # Text parts are taken as OpenAI takes them (the planner, having learnt how good the
    # prediction is, may check more of it at once now).
    parts = api.chat.completions.create(
        model=model, messages=msgs, max_tokens=24, temperature=0,
        prediction={"type": "content", "content": [{"type": "text", "text": text}]})
    assert parts.choices[0].message.content == text
    assert parts.usage.completion_tokens_details.accepted_prediction_tokens > 0


def test_prediction_counts_follow_the_output(server: Serving, tiny_target: Path) -> None:
    """OpenAI's counts: the prediction's tokens that appear in the reply, aligned, whatever
    the drafting did; so the same reply twice reports the same counts."""
    api = client(server.url)
    model = LlamaModel(tiny_target)
    msgs = [{"role": "user", "content": "a prediction"}]
    kw: dict[str, Any] = dict(model=server.host.model_id, messages=msgs, max_tokens=20,
                              temperature=0, extra_body={"specchat": {"fates": True}})
    plain = api.chat.completions.create(**kw)
    text = plain.choices[0].message.content
    reply = [t["id"] for t in plain.model_extra["specchat"]["tokens"]]
    extra = " the cat sat on the mat"
    predicted = text[: len(text) // 2] + extra + text[len(text) // 2:]
    counts = []
    for _ in range(3):  # the planner learns between requests: the drafts differ, not counts
        r = api.chat.completions.create(
            **kw, prediction={"type": "content", "content": predicted})
        assert r.choices[0].message.content == text
        d = r.usage.completion_tokens_details
        counts.append((d.accepted_prediction_tokens, d.rejected_prediction_tokens))
    assert len(set(counts)) == 1, counts
    accepted, rejected = counts[0]
    pred_ids = model.tokenize(predicted, add_special=False, parse_special=False)
    assert accepted + rejected == len(pred_ids)
    # Every reply token is in the prediction, which only adds words: all of it is accepted
    # when the reply's tokens are the text's own; the inserted words are rejected.
    if model.tokenize(text, add_special=False, parse_special=False) == reply:
        assert accepted >= len(reply) - 2  # the cut may split a token at either side
        assert rejected >= len(model.tokenize(extra, add_special=False, parse_special=False)) - 2
    assert 0 < accepted <= len(reply)


@pytest.mark.parametrize(("value", "param"), [
    ("some text", "prediction"),
    ({"type": "file", "content": "x"}, "prediction.type"),
    ({"type": "content"}, "prediction.content"),
    ({"type": "content", "content": 5}, "prediction.content"),
    ({"type": "content", "content": [{"type": "image_url"}]}, "prediction.content[0].type"),
])
def test_bad_predictions_are_400_naming_the_field(server: Serving, value: object,
                                                  param: str) -> None:
    api = client(server.url)
    with pytest.raises(openai.BadRequestError) as e:
        api.chat.completions.create(model=server.host.model_id, max_tokens=4,
                                    messages=[{"role": "user", "content": "hi"}],
                                    extra_body={"prediction": value})
    body = e.value.body
    assert isinstance(body, dict) and body.get("param") == param, body
