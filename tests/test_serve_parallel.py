"""`specchat serve --parallel N`: requests served together, through the `openai` SDK.

A second stream's first token arrives while the first still streams; a client that hangs up
frees its slot at once; greedy replies given together are token for token the replies given
one at a time by a one-slot server (speculative and plain); ``--parallel 1`` serves one
request after another as before; bad values are a one-line error.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import llama_cpp
import openai
import pytest

from specchat.serve.server import Serving
from tests.serve_helpers import cli_server, client, raw, wait_until

LONG = 900  # tokens: a reply that lasts while the test does something else (ctx 1024)
HI = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def pair_server(tiny_target: Path, tiny_draft: Path,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serving]:
    home = tmp_path_factory.mktemp("serve-parallel")
    with cli_server(home, "--model", str(tiny_target), "--draft", str(tiny_draft),
                    "--gamma", "3", "--ctx-size", "1024", "--parallel", "2") as s:
        assert s.host.state == "ready", s.host.error
        yield s


def _model(api: openai.OpenAI) -> str:
    return api.models.list().data[0].id


def _stream(api: openai.OpenAI, content: str, max_tokens: int, **kw: Any) -> Any:
    return api.chat.completions.create(
        model=_model(api), messages=[{"role": "user", "content": content}],
        max_tokens=max_tokens, temperature=0, stream=True, **kw)


def _served_at_first_token(host: Any, api: openai.OpenAI, content: str) -> int:
    """How many requests the server had finished when this one's first token arrived."""
    for chunk in _stream(api, content, 4):
        if chunk.choices and chunk.choices[0].delta.content:
            return int(host.counts["served"])
    raise AssertionError("no token came")


def test_a_second_stream_starts_while_the_first_streams(pair_server: Serving) -> None:
    api = client(pair_server.url)
    host = pair_server.host
    _, before, _ = raw(pair_server.url, "GET", "/health")
    assert before["slots"] == 2
    served = host.counts["served"]
    first = iter(_stream(api, "tell me a long story", LONG))
    next(first)  # the first is streaming
    # The second's first token came while the first was still being generated.
    assert _served_at_first_token(host, api, "and a short one") == served
    assert sum(1 for c in first if c.choices and c.choices[0].delta.content) > 0
    _, after, _ = raw(pair_server.url, "GET", "/health")
    # Both slots' steps went into shared llama_decode passes.
    assert after["shared_passes"] > before["shared_passes"], (before, after)


def test_a_client_that_hangs_up_frees_its_slot(pair_server: Serving) -> None:
    api = client(pair_server.url)
    host = pair_server.host
    cancelled = host.counts["cancelled"]
    a = _stream(api, "story one", LONG)
    b = _stream(api, "story two", LONG)
    next(iter(a)), next(iter(b))  # both slots busy
    served = host.counts["served"]
    a.close()  # hang up
    r = api.chat.completions.create(model=_model(api), messages=HI, max_tokens=4,
                                    temperature=0)
    assert r.usage is not None and r.usage.completion_tokens == 4
    # The third ran in the slot the first left, while the second still went on (a slot not
    # freed: the third would have waited for one of the two to run to its end).
    assert host.counts["served"] == served + 1
    wait_until(lambda: host.counts["cancelled"] == cancelled + 1, "the cancel")
    assert sum(1 for c in b if c.choices and c.choices[0].delta.content) > 0


def _ask(api: openai.OpenAI, i: int) -> tuple[str, list[tuple[int, ...]]]:
    """A greedy reply and its token ids (by their log-probabilities' bytes)."""
    kinds = [
        {"messages": [{"role": "user", "content": "caller zero asks"}], "max_tokens": 60},
        {"messages": [{"role": "user", "content": "the second caller, a longer question"}],
         "max_tokens": 45},
        {"messages": [{"role": "user", "content": "a third, with a prediction"}],
         "max_tokens": 50, "prediction": {"type": "content", "content": "a third, with a"}},
    ]
    r = api.chat.completions.create(model=_model(api), temperature=0, logprobs=True,
                                    **kinds[i])
    content = r.choices[0].message.content or ""
    ids = [tuple(t.bytes or ()) for t in (r.choices[0].logprobs.content or [])]
    assert r.usage is not None and len(ids) == r.usage.completion_tokens
    return content, ids


@pytest.mark.parametrize("plain", [False, True], ids=["speculative", "plain"])
def test_greedy_replies_together_are_the_lone_replies(tiny_target: Path, tiny_draft: Path,
                                                     tmp_path: Path, plain: bool) -> None:
    models = ["--model", str(tiny_target), "--ctx-size", "512"]
    models += ["--plain"] if plain else ["--draft", str(tiny_draft), "--gamma", "3"]
    with cli_server(tmp_path / "one", *models, "--parallel", "1") as one:
        api = client(one.url)
        alone = [_ask(api, i) for i in range(3)]
    with cli_server(tmp_path / "two", *models, "--parallel", "2") as two:
        api = client(two.url)
        with ThreadPoolExecutor(3) as pool:  # three at once on two slots
            together = list(pool.map(lambda i: _ask(api, i), range(3)))
        again = [_ask(api, i) for i in range(3)]  # one at a time, on whichever slot is free
        _, health, _ = raw(two.url, "GET", "/health")
    assert together == alone and again == alone
    assert all(len(ids) > 20 for _, ids in alone)
    assert health["shared_passes"] > 0 and health["failed"] == 0


def test_parallel_1_serves_one_after_another(tiny_target: Path, tmp_path: Path) -> None:
    with cli_server(tmp_path, "--model", str(tiny_target), "--ctx-size", "1024",
                    "--parallel", "1") as s:
        served = s.host.served
        assert served is not None and served.member is None and not served.engines
        _, health, _ = raw(s.url, "GET", "/health")
        assert health["slots"] == 1 and "shared_passes" not in health
        api = client(s.url)
        first = iter(_stream(api, "tell me a long story", 300))
        next(first)
        # The second waited for the whole first reply.
        assert _served_at_first_token(s.host, api, "and a short one") == 1
        assert sum(1 for c in first if c.choices and c.choices[0].delta.content) > 0


@pytest.mark.parametrize("value", ["0", "17", "two", "-1"])
def test_bad_parallel_values_are_one_line(tmp_path: Path, tiny_target: Path,
                                          value: str) -> None:
    from tests.test_cli import specchat

    r = specchat(tmp_path, "serve", "--model", str(tiny_target), "--parallel", value)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"argument --parallel: '{value}' is not a number of slots (1 to 16" in r.stderr


def test_a_drafter_that_cannot_share_says_so(tiny_target: Path, tmp_path: Path) -> None:
    with cli_server(tmp_path, "--model", str(tiny_target), "--drafter", "lookahead",
                    "--parallel", "2") as s:
        assert s.host.state == "failed"
        assert s.host.error is not None and "--parallel 1" in s.host.error
        assert "lookahead" in s.host.error


def test_a_chats_next_turn_goes_to_the_slot_that_holds_it(pair_server: Serving) -> None:
    api = client(pair_server.url)
    model = _model(api)

    def ask(messages: list[dict[str, str]]) -> Any:
        return api.chat.completions.create(model=model, messages=messages, max_tokens=6,
                                           temperature=0)

    turn = [{"role": "user", "content": "the first question of a conversation about apples"}]
    first = ask(turn)
    ask([{"role": "user", "content": "an unrelated question"}])  # both slots free: not there
    # The conversation's slot, idle while the other worked, was parked out of the shared
    # caches (the target's and the draft model's): no pass of the other slot attended over it.
    served = pair_server.host.served
    assert served is not None
    views = [(k, served.slot_engine(k).decoder.target) for k in (0, 1)]
    parked = [k for k, v in views if v.parked is not None]
    assert len(parked) == 1, parked
    target = views[parked[0]][1]
    assert target.tokens and llama_cpp.llama_memory_seq_pos_max(target.mem, target.seq_base) == -1
    draft = served.slot_engine(parked[0]).decoder.draft
    assert draft is not None and draft.parked is not None
    turn += [{"role": "assistant", "content": first.choices[0].message.content or ""},
             {"role": "user", "content": "and pears?"}]
    second = ask(turn)
    cached = (second.model_extra or {})["timings"]["cache_n"]
    # Read only the new turn: the conversation so far was in its slot's cache, put back.
    assert cached >= first.usage.prompt_tokens - 1, (cached, first.usage)
    assert target.parked is None and views[1 - parked[0]][1].parked is not None


def test_two_slots_by_default_and_one_for_a_drafter_that_cannot_share(
        tiny_target: Path, tiny_draft: Path, tmp_path: Path) -> None:
    with cli_server(tmp_path / "pair", "--model", str(tiny_target), "--draft",
                    str(tiny_draft), "--ctx-size", "512") as s:
        assert s.host.state == "ready", s.host.error
        _, health, _ = raw(s.url, "GET", "/health")
        assert health["slots"] == 2
    # Without --parallel a drafter that keeps unshareable state gets one slot, and says why,
    # where asked for two it is refused (test_a_drafter_that_cannot_share_says_so).
    with cli_server(tmp_path / "lookahead", "--model", str(tiny_target), "--drafter",
                    "lookahead", "--ctx-size", "512") as s:
        assert s.host.state == "ready", s.host.error
        _, health, _ = raw(s.url, "GET", "/health")
        assert health["slots"] == 1
        served = s.host.served
        assert served is not None
        assert any("'lookahead' drafter cannot share" in n for n in served.notices)
