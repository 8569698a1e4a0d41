"""`specchat serve`, through the official openai client against a real server on a free
loopback port (the command line's own build, run on a thread), on the tiny pair with γ fixed at
3 so that drafts really happen."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from specchat.cli.main import build_parser, main
from specchat.engine.decode.chat import ChatEngine
from specchat.engine.llama.model_settings import ContextSettings
from specchat.engine.policy.in_force import in_force
from specchat.loading import RuntimeOptions, select
from specchat.models.catalog import load_catalog
from specchat.models.resolver import ModelResolver
from specchat.runtime.opening import Runtime
from specchat.serve.server import Serving, bind
from specchat.serve.worker import ModelHost, Served
from tests.serve_helpers import ServerProcess, cli_server, client, home_paths, raw, running, wait_until

CTX = 512
MAX_BODY_MB = "0.0625"  # 64 KiB: the 413 test needs only a small body
HI = [{"role": "user", "content": "hello there"}]
FATES = {"accepted", "corrected", "bonus", "plain"}


@pytest.fixture(scope="module")
def server(tiny_target: Path, tiny_draft: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serving]:
    home = tmp_path_factory.mktemp("serve-home")
    with cli_server(home, "--model", str(tiny_target), "--draft", str(tiny_draft), "--gamma",
                    "3", "--ctx-size", str(CTX), "--max-body-mb", MAX_BODY_MB) as s:
        assert s.host.state == "ready", s.host.error
        yield s


@pytest.fixture(scope="module")
def api(server: Serving) -> openai.OpenAI:
    return client(server.url)


@pytest.fixture(scope="module")
def model_id(server: Serving) -> str:
    return server.host.model_id


def chat(api: openai.OpenAI, model_id: str, **kw: Any) -> Any:
    kw.setdefault("messages", HI)
    kw.setdefault("max_tokens", 12)
    return api.chat.completions.create(model=model_id, **kw)


def test_models_lists_the_one_served_model(api: openai.OpenAI, model_id: str) -> None:
    (m,) = api.models.list().data
    assert m.id == model_id and m.owned_by == "specchat"


def test_the_model_id_is_the_files_name_and_the_old_ids_still_work(
        api: openai.OpenAI, model_id: str, tiny_target: Path, tiny_draft: Path) -> None:
    assert model_id == tiny_target.stem == "target"  # not both paths joined
    assert api.models.retrieve(model_id).id == model_id
    old = f"{tiny_target.resolve()} + {tiny_draft.resolve()}"  # the id of earlier versions
    for name in (tiny_target.name, str(tiny_target.resolve()), old):
        assert api.models.retrieve(name).id == name
        assert chat(api, name, max_tokens=1).model == model_id
    with pytest.raises(openai.NotFoundError) as e:
        api.models.retrieve("draft")  # the draft is not a model the server answers as
    assert e.value.body["code"] == "model_not_found"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        chat(api, "target.gguf.nope", max_tokens=1)


def test_alias_names_the_model(tiny_target: Path, tmp_path: Path) -> None:
    with cli_server(tmp_path, "--model", str(tiny_target), "--alias", "my-model",
                    "--ctx-size", "256") as s:
        api = client(s.url)
        assert [m.id for m in api.models.list().data] == ["my-model"]
        assert api.models.retrieve("my-model").id == "my-model"
        r = api.chat.completions.create(model="target", messages=HI, max_tokens=1)
        assert r.model == "my-model"  # the file's name still works; replies say the alias
    for bad in (["--alias", " "], ["--alias", "x\ty"], ["--cors-origin", "example.com/page"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["serve", "--model", str(tiny_target), *bad])


def test_a_chat_completion_carries_usage_timings_and_speculation(api: openai.OpenAI,
                                                                 model_id: str) -> None:
    r = chat(api, model_id, temperature=0)
    choice = r.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason == "length"  # the tiny models rarely end a reply
    assert r.usage.completion_tokens == 12
    assert r.usage.total_tokens == r.usage.prompt_tokens + 12
    t = r.timings
    assert t["predicted_n"] == 12 and t["prompt_n"] + t["cache_n"] == r.usage.prompt_tokens
    assert t["draft_n"] > 0 and 0 <= t["draft_n_accepted"] <= t["draft_n"]
    ext = r.specchat
    assert ext["decoder"] == "speculative" and ext["gamma_mode"] == "fixed 3"
    # A request may carry a predicted output (its drafter first), then the default drafters.
    assert ext["drafters"] == ["prediction", "ngram", "model"]
    assert ext["drafted"] == t["draft_n"]
    assert ext["tau"] is not None and ext["tau"] >= 1
    assert ext["acceptance_length"] == pytest.approx(1 + ext["accepted"] / ext["steps"], abs=1e-4)
    assert "tokens" not in ext  # fates only when asked for


def test_a_streamed_chat_ends_with_timings_and_matches_the_whole_reply(api: openai.OpenAI,
                                                                       model_id: str) -> None:
    chunks = list(chat(api, model_id, temperature=0, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    last = chunks[-1]
    assert last.choices[0].finish_reason == "length"
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])
    assert last.timings["draft_n"] > 0 and all(c.usage is None for c in chunks)
    assert last.specchat["gamma_mode"] == "fixed 3"
    assert text == chat(api, model_id, temperature=0).choices[0].message.content
    with_usage = list(chat(api, model_id, max_tokens=3, stream=True,
                           stream_options={"include_usage": True}))
    assert with_usage[-1].choices == [] and with_usage[-1].usage.completion_tokens == 3
    assert with_usage[-2].choices[0].finish_reason == "length"


def test_streams_have_openais_shapes_and_the_sdks_helper_reads_them(api: openai.OpenAI,
                                                                     model_id: str) -> None:
    # Chat: the finish in a chunk of its own with an empty delta, then the usage alone.
    chunks = list(chat(api, model_id, temperature=0, stream=True,
                       stream_options={"include_usage": True}))
    *body, finish, tail = chunks
    assert tail.choices == [] and tail.usage.completion_tokens == 12
    assert [c for c in chunks if c.usage is not None] == [tail]
    assert finish.choices[0].finish_reason == "length"
    assert finish.choices[0].delta.content is None and finish.choices[0].delta.role is None
    assert all(c.choices[0].finish_reason is None for c in body)
    # The helper refuses a reply cut at the token limit: one that ends at a stop string.
    text = chat(api, model_id, temperature=0).choices[0].message.content
    stop = text[len(text) // 2:][:3]
    whole = chat(api, model_id, temperature=0, stop=[stop])
    with api.chat.completions.stream(model=model_id, messages=HI, max_tokens=12, stop=[stop],
                                     temperature=0) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_completion()
    assert "content.delta" in kinds and kinds.count("content.done") == 1
    assert final.choices[0].message.content == whole.choices[0].message.content
    assert final.choices[0].finish_reason == "stop" and final.choices[0].message.content
    # Completions: the same, text "" on the finish.
    chunks = list(api.completions.create(model=model_id, prompt="the cat", max_tokens=5,
                                         temperature=0, stream=True,
                                         stream_options={"include_usage": True}))
    *body, finish, tail = chunks
    assert tail.choices == [] and tail.usage.completion_tokens == 5
    assert (finish.choices[0].text, finish.choices[0].finish_reason) == ("", "length")
    assert all(c.usage is None and c.choices[0].finish_reason is None for c in body)
    plain = list(api.completions.create(model=model_id, prompt="the cat", max_tokens=5,
                                        temperature=0, stream=True))
    assert all(c.usage is None for c in plain) and plain[-1].choices[0].finish_reason


def test_fates_on_request_in_every_chunk_and_the_whole_reply(api: openai.OpenAI,
                                                             model_id: str) -> None:
    body = {"specchat": {"fates": True}}
    # With a seed, each request is drafted from its own tokens alone (not from the n-gram
    # drafter's memory of the first), so the two requests' fates can be compared.
    chunks = list(chat(api, model_id, temperature=0, stream=True, max_tokens=20, seed=7,
                       extra_body=body))
    tokens = [t for c in chunks[1:-1] for t in c.specchat["tokens"]]
    assert len(tokens) == 20
    assert {t["fate"] for t in tokens} <= FATES and {t["fate"] for t in tokens} & {
        "accepted", "corrected", "bonus"}
    assert "".join(t["text"] for t in tokens) == "".join(
        c.choices[0].delta.content or "" for c in chunks)
    whole = chat(api, model_id, temperature=0, max_tokens=20, seed=7, extra_body=body)
    assert [t["fate"] for t in whole.specchat["tokens"]] == [t["fate"] for t in tokens]


def test_the_completions_endpoint_whole_and_streamed(api: openai.OpenAI, model_id: str) -> None:
    r = api.completions.create(model=model_id, prompt="the cat sat on", max_tokens=8,
                               temperature=0)
    assert r.object == "text_completion" and r.choices[0].text
    assert r.usage.completion_tokens == 8 and r.timings["draft_n"] > 0
    streamed = list(api.completions.create(model=model_id, prompt="the cat sat on",
                                           max_tokens=8, temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == r.choices[0].text
    assert streamed[-1].choices[0].finish_reason == "length"
    assert streamed[-1].timings["predicted_n"] == 8
    ids = api.completions.create(model=model_id, prompt=[5, 6, 7], max_tokens=4, temperature=0)
    assert ids.usage.prompt_tokens == 3


def test_greedy_through_the_server_is_specchat_ask_greedy(api: openai.OpenAI, model_id: str,
                                                          tiny_target: Path, tiny_draft: Path,
                                                          home: Any, capsys: Any) -> None:
    prompt = "name three colours"
    rc = main(["ask", prompt, "--model", str(tiny_target), "--draft", str(tiny_draft),
               "--gamma", "3", "--temperature", "0", "--max-tokens", "24", "--system", "",
               "--ctx-size", str(CTX)])
    assert rc == 0
    asked = capsys.readouterr().out.removesuffix("\n")
    r = chat(api, model_id, messages=[{"role": "user", "content": prompt}], temperature=0,
             max_tokens=24)
    assert r.choices[0].message.content == asked


def test_a_seed_reproduces_a_sampled_reply(api: openai.OpenAI, model_id: str) -> None:
    def sampled(seed: int) -> str:
        return chat(api, model_id, temperature=0.9, seed=seed, max_tokens=24,
                    extra_body={"top_k": 0, "min_p": 0}).choices[0].message.content

    first = sampled(1234)
    assert sampled(1234) == first
    others = {sampled(s) for s in (1, 2, 3)}
    assert others != {first}  # the seed matters (three other seeds all equal to it: no)


def test_stop_strings_end_the_reply_before_them(api: openai.OpenAI, model_id: str) -> None:
    full = chat(api, model_id, temperature=0, max_tokens=24).choices[0].message.content
    stop = full[6:8]
    assert len(stop) == 2
    r = chat(api, model_id, temperature=0, max_tokens=24, stop=[stop, "never-seen"])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == full[:full.index(stop)]
    streamed = list(chat(api, model_id, temperature=0, max_tokens=24, stop=stop, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == full[:full.index(stop)]
    assert streamed[-1].choices[0].finish_reason == "stop"


def test_max_tokens_ends_with_length(api: openai.OpenAI, model_id: str) -> None:
    r = chat(api, model_id, max_tokens=3)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3
    r = chat(api, model_id, max_completion_tokens=2, max_tokens=None)
    assert r.usage.completion_tokens == 2


def _error(excinfo: Any) -> dict[str, Any]:
    return excinfo.value.body  # the "error" object, as the openai client parses it


def test_wrong_types_and_values_are_400_naming_the_field(api: openai.OpenAI,
                                                         model_id: str) -> None:
    cases = [({"temperature": "hot"}, "temperature", "invalid_type"),
             ({"temperature": -1}, "temperature", "invalid_value"),
             ({"top_p": 0}, "top_p", "invalid_value"),
             ({"max_tokens": 0}, "max_tokens", "invalid_value"),
             ({"seed": 1.5}, "seed", "invalid_type"),
             ({"stop": [1]}, "stop", "invalid_type"),
             ({"n": 2}, "n", "invalid_value"),
             ({"extra_body": {"specchat": {"fates": "yes"}}}, "specchat.fates", "invalid_type"),
             ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id",
              "missing_required_parameter"),
             ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role",
              "invalid_value"),
             ({"messages": []}, "messages", "invalid_value")]
    for kw, param, code in cases:
        with pytest.raises(openai.BadRequestError) as e:
            chat(api, model_id, **kw)
        err = _error(e)
        assert (err["param"], err["code"], err["type"]) == (param, code,
                                                            "invalid_request_error"), kw
        assert param.split("[")[0].split(".")[0] in err["message"]
    # Unknown fields are ignored, as OpenAI's servers do.
    ok = chat(api, model_id, max_tokens=2, extra_body={"no_such_field": {"x": 1}})
    assert ok.usage.completion_tokens == 2


def test_bad_json_a_long_prompt_a_large_body_and_unknown_things(server: Serving,
                                                                api: openai.OpenAI,
                                                                model_id: str) -> None:
    url, path = server.url, "/v1/chat/completions"
    status, body, _ = raw(url, "POST", path, b'{"messages": [')
    assert status == 400 and body["error"]["code"] == "invalid_json"
    assert set(body["error"]) == {"message", "type", "param", "code"}
    status, body, _ = raw(url, "POST", path, b'["not", "an", "object"]')
    assert status == 400
    status, body, _ = raw(url, "POST", path, b'{"messages": NaN}')
    assert status == 400 and "NaN" in body["error"]["message"]
    with pytest.raises(openai.BadRequestError) as e:  # a prompt over the 512-token context
        chat(api, model_id, messages=[{"role": "user", "content": "the cat " * 400}])
    assert _error(e)["code"] == "context_length_exceeded" and "512" in _error(e)["message"]
    big = json.dumps({"messages": HI, "padding": "x" * 70_000}).encode()
    status, body, _ = raw(url, "POST", path, big, {"Content-Type": "application/json"})
    assert status == 413 and body["error"]["code"] == "request_too_large"
    with pytest.raises(openai.NotFoundError) as e:  # OpenAI's answer to a model it lacks
        chat(api, "gpt-4o")
    assert _error(e)["code"] == "model_not_found" and model_id in _error(e)["message"]
    status, body, _ = raw(url, "GET", "/v1/nothing")
    assert status == 404 and body["error"]["type"] == "not_found_error"
    status, body, _ = raw(url, "GET", path)
    assert status == 405 and "error" in body


def test_a_request_while_loading_is_503_then_served(tiny_target: Path, tmp_path: Path) -> None:
    release = threading.Event()
    cat = load_catalog()

    def load() -> Served:
        release.wait(60)
        rt = Runtime.open(select(cat, model=str(tiny_target)), ModelResolver(cat, home_paths(tmp_path)),
                          RuntimeOptions(context=ContextSettings(n_ctx=CTX)))
        decoder = rt.decoder()
        return Served(ChatEngine(decoder), in_force(decoder), rt.close)

    host = ModelHost(load, "tiny", log=lambda _line: None)
    with running(Serving(host, bind("127.0.0.1", 0), log_level="warning")) as s:
        api = client(s.url)
        with pytest.raises(openai.APIStatusError) as e:
            api.chat.completions.create(model="tiny", messages=HI, max_tokens=2)
        assert e.value.status_code == 503 and _error(e)["code"] == "model_loading"
        assert e.value.response.headers["retry-after"]
        status, body, _ = raw(s.url, "GET", "/health")
        assert status == 503 and body["error"]["code"] == "model_loading"
        release.set()
        wait_until(lambda: host.state == "ready", "the load")
        r = api.chat.completions.create(model="tiny", messages=HI, max_tokens=2)
        assert r.usage.completion_tokens == 2 and r.specchat["decoder"] == "plain"


class SlowDecoder:
    """The real decoder, its events slowed down: a generation that lasts while a test hangs up."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.target = inner.target

    def run(self, prompt: Any, settings: Any, cancel: threading.Event) -> Iterator[Any]:
        for ev in self.inner.run(prompt, settings, cancel):
            time.sleep(0.005)
            yield ev


def test_a_client_that_hangs_up_cancels_its_generation(tiny_target: Path,
                                                       tmp_path: Path) -> None:
    cat = load_catalog()
    lines: list[str] = []

    def load() -> Served:
        rt = Runtime.open(select(cat, model=str(tiny_target)), ModelResolver(cat, home_paths(tmp_path)),
                          RuntimeOptions(context=ContextSettings(n_ctx=CTX)))
        decoder = rt.decoder()
        return Served(ChatEngine(SlowDecoder(decoder)), in_force(decoder), rt.close)  # type: ignore[arg-type]

    host = ModelHost(load, "tiny", log=lines.append)
    with running(Serving(host, bind("127.0.0.1", 0), log_level="warning")) as s:
        wait_until(lambda: host.state == "ready", "the load")
        api = client(s.url)
        stream = api.chat.completions.create(model="tiny", messages=HI, max_tokens=400,
                                             stream=True)
        got = [next(iter(stream)) for _ in range(3)]
        assert got[0].choices[0].delta.role == "assistant"
        stream.close()  # hang up mid-reply
        wait_until(lambda: host.counts["cancelled"] == 1, "the cancel")
        assert any("cancelled (its client went away)" in line for line in lines)
        n = int(next(x for x in lines if "cancelled" in x).split(" after ")[1].split()[0])
        assert n < 400
        r = api.chat.completions.create(model="tiny", messages=HI, max_tokens=3)
        assert r.usage.completion_tokens == 3 and host.counts["served"] == 1


def test_cli_errors_are_one_line(tmp_path: Path, tiny_target: Path, server: Serving) -> None:
    from tests.test_cli import specchat

    port = server.url.rsplit(":", 1)[1]
    r = specchat(tmp_path, "serve", "--model", str(tiny_target), "--port", port)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        f"specchat: error: port {port} on 127.0.0.1 is already in use (another server is "
        "listening there): stop it, or choose another port with --port")
    r = specchat(tmp_path, "serve", "--model", str(tiny_target), "--host", "0.0.0.0",
                 "--port", port)
    assert "warning: listening on 0.0.0.0: anyone who can reach this machine" in r.stderr
    r = specchat(tmp_path, "serve", "--model", str(tiny_target), "--port", "70000")
    assert r.returncode == 2 and "not a port number" in r.stderr


def test_a_model_that_fails_to_load_stops_the_server_in_one_line(tmp_path: Path,
                                                                 tiny_target: Path) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_target.read_bytes()[: tiny_target.stat().st_size // 2])
    proc = ServerProcess(tmp_path / "home", "--model", str(cut))
    assert proc.proc.wait(60) == 1
    proc._reader.join(10)
    assert "truncated GGUF file" in proc.stderr.strip().splitlines()[-1]
    assert "Traceback" not in proc.stderr
