"""The qwen-coder pair end to end (1.6 GB; opt in with ``-m qwen``, see conftest.qwen_paths):
the files are the catalog's, `ask` answers sensibly, and a race on a copy-heavy prompt with
prompt lookup is identical to plain decoding or parts only at a near-tie within the measured
batch rounding."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.messages import Message
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.llama import batch_rounding
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.models.catalog import load_catalog
from specchat.models.resolver import ModelResolver
from specchat.paths import AppPaths
from tests.serve_helpers import cli_server, client, raw

pytestmark = pytest.mark.qwen


def _env(paths: AppPaths) -> dict[str, str]:
    return {**os.environ, "SPECCHAT_HOME": str(paths.config_dir.parent)}


def test_the_files_are_the_catalogs(qwen_paths: AppPaths) -> None:
    cat = load_catalog()
    res = ModelResolver(cat, qwen_paths)
    pair = cat.pair("qwen-coder")
    for mid in (pair.target, pair.draft):
        entry = cat.model(mid)
        st = res.state(entry)
        assert st.present and st.size == entry.size
    t = LlamaModel(res.ensure(pair.target, fetch=False))
    d = LlamaModel(res.ensure(pair.draft, fetch=False))
    assert t.n_vocab == d.n_vocab == 151_936 and t.eos == d.eos == 151_645
    assert t.chat_template and "im_start" in t.chat_template


def test_ask_answers_a_coding_question(qwen_paths: AppPaths) -> None:
    cmd = [sys.executable, "-m", "specchat", "ask",
           "Write a Python function is_prime(n). Reply with the code only.",
           "--pair", "qwen-coder", "--temperature", "0", "--max-tokens", "40", "--threads", "2"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(qwen_paths), timeout=600,
                       check=False)
    assert r.returncode == 0, r.stderr
    assert "def is_prime" in r.stdout, r.stdout


def test_race_with_prompt_lookup_on_a_copy_prompt(qwen_paths: AppPaths) -> None:
    cmd = [sys.executable, "-m", "specchat", "race", "--prompt-from", "copy", "--pair",
           "qwen-coder", "--ngram", "--max-tokens", "32", "--runs", "1", "--no-replay",
           "--threads", "2"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(qwen_paths), timeout=900,
                       check=False)
    assert r.returncode == 0, r.stdout + r.stderr  # exit 1 would be a divergence outside rounding
    assert "outputs identical ✓" in r.stdout or "parted at a near-tie" in r.stdout
    assert "canal" in r.stdout and "why: on this CPU" in r.stdout


def test_batch_rounding_of_this_build_is_measurable(qwen_paths: AppPaths) -> None:
    cat = load_catalog()
    path = ModelResolver(cat, qwen_paths).ensure(cat.pair("qwen-coder").target, fetch=False)
    ctx = LlamaContext(LlamaModel(path), ContextSettings(n_ctx=512, n_threads=2))
    prompt = ChatEngine(PlainDecoder(ctx)).tokenize_chat([Message("user", "Say hello.")])
    reply = [int(t) for t in ctx.model.tokenize("Hello! How can I help you today?")]
    bound = batch_rounding.measure(ctx, prompt, reply)
    assert 0 <= bound.gap < 1.0  # rounding, not a different model


def test_tool_calls_round_trip_with_auto(qwen_paths: AppPaths, tmp_path: Path) -> None:
    """The model's own template shows the tool; its call comes back as OpenAI's tool_calls, the
    result goes back as a tool message, and the answer uses it."""
    cat = load_catalog()
    res = ModelResolver(cat, qwen_paths)
    pair = cat.pair("qwen-coder")
    target, draft = (res.ensure(m, fetch=False) for m in (pair.target, pair.draft))
    weather = {"type": "function", "function": {
        "name": "get_weather", "description": "The weather now in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}
    with cli_server(tmp_path, "--model", str(target), "--draft", str(draft), "--ctx-size",
                    "2048", "--threads", "2") as s:
        api = client(s.url)
        msgs: list[Any] = [{"role": "user", "content": "What is the weather in Paris right now?"}]
        r = api.chat.completions.create(model=s.host.model_id, messages=msgs, tools=[weather],
                                        temperature=0, max_tokens=64)
        calls = r.choices[0].message.tool_calls
        assert r.choices[0].finish_reason == "tool_calls" and calls, r.choices[0].message
        assert calls[0].function.name == "get_weather"
        assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
        msgs += [r.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": calls[0].id,
                  "content": '{"temp_c": 14, "sky": "light rain"}'}]
        answer = api.chat.completions.create(model=s.host.model_id, messages=msgs,
                                             tools=[weather], tool_choice="none",
                                             temperature=0, max_tokens=48)
        assert "14" in (answer.choices[0].message.content or "")


def test_infill_ends_the_middle_where_a_completion_with_a_suffix_does(
        qwen_paths: AppPaths, tmp_path: Path) -> None:
    """The same prefix and suffix through both routes: one prompt, one middle, one stop (with
    llama-server's repository header and no files, the model wrote on to the token limit)."""
    cat = load_catalog()
    target = ModelResolver(cat, qwen_paths).ensure(cat.pair("qwen-coder").target, fetch=False)
    prefix, suffix = "def add(a, b):\n    ", "\n\ndef sub(a, b):\n    return a - b\n"
    with cli_server(tmp_path, "--model", str(target), "--plain", "--ctx-size", "1024",
                    "--threads", "2") as s:
        api = client(s.url)
        r = api.completions.create(model=s.host.model_id, prompt=prefix, suffix=suffix,
                                   max_tokens=48, temperature=0)
        assert r.choices[0].finish_reason == "stop" and "a + b" in r.choices[0].text
        status, doc, _ = raw(s.url, "POST", "/infill", json.dumps(
            {"input_prefix": prefix, "input_suffix": suffix, "n_predict": 48,
             "temperature": 0}).encode(), {"Content-Type": "application/json"})
        assert status == 200 and doc["stop_type"] == "eos", doc
        assert doc["content"] == r.choices[0].text
        assert doc["tokens_evaluated"] == r.usage.prompt_tokens
