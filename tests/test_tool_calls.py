"""Tool calls: the reply's calls read out of its text (whole and streamed in any pieces), the
request's tools and tool messages checked and rendered by the model's own template, and a round
trip through `specchat serve` with the official openai client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from specchat.devtools.tiny_models import (
    CHATML_TEMPLATE,
    TOOLS_TEMPLATE,
    TinySpec,
    json_vocabulary,
    write_tiny_model,
)
from specchat.engine.decode.chat_template import ChatTemplate
from specchat.engine.decode.generic_tools import (
    GenericCallStream,
    generic_messages,
    generic_schema,
    read_generic,
)
from specchat.engine.decode.messages import Message, ToolCall
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.tool_calls import CallDelta, ToolCallStream, read_calls
from specchat.serve.api_errors import ApiError
from specchat.serve.parse import chat_request, completion_request
from specchat.serve.server import Serving
from tests.serve_helpers import cli_server, client

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather now in a city (°C; a < b)",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
NAMES = frozenset({"get_weather", "a", "b"})

REPLIES = [
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    'Let me look.\n<tool_call>\n{"name": "a", "arguments": {"x": {"y": [1, "}"]}}}\n'
    '</tool_call>\n<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>\n',
    '<tool_call>\n{"arguments": {"q": 1}, "name": "c"}\n</tool_call>',  # not name-first
    '<tool_call>\n{"name": "d", "arguments": "{\\"k\\": 2}"}\n</tool_call>',  # as a string
    'text with < and <tool and a } brace',
    '<tool_call>not json</tool_call> after',
    '<tool_call>\n{"name": "e", "arguments": {"s": "}</tool"}}',  # cut at its closing tag
    '```json\n{"name": "get_weather", "arguments": {"city": "Lyon"}}\n```',  # bare, fenced
    '{"name": "get_weather", "arguments": {"city": "Nice"}}',  # bare
    '{"name": "not_offered", "arguments": {}}',  # bare but no such tool: text
    '```python\nprint(1)\n```',  # a code block is held back, then given as text
]
EXPECTED = [
    ("", [("get_weather", '{"city": "Paris"}')]),
    ("Let me look.\n", [("a", '{"x": {"y": [1, "}"]}}'), ("b", "{}")]),
    ("", [("c", '{"q": 1}')]),
    ("", [("d", '{"k": 2}')]),
    ("text with < and <tool and a } brace", []),
    ("<tool_call>not json</tool_call> after", []),
    ("", [("e", '{"s": "}</tool"}')]),
    ("", [("get_weather", '{"city": "Lyon"}')]),
    ("", [("get_weather", '{"city": "Nice"}')]),
    ('{"name": "not_offered", "arguments": {}}', []),
    ("```python\nprint(1)\n```", []),
]


def _streamed(pieces: list[str]) -> tuple[str, list[tuple[str, str]], list[CallDelta]]:
    stream = ToolCallStream(names=NAMES)
    content, deltas = [], []
    for p in pieces:
        c, d = stream.feed(p)
        content.append(c)
        deltas += d
    c, d = stream.finish()
    return "".join(content) + c, [(x.name, x.arguments) for x in stream.calls], deltas + d


def _rebuilt(deltas: list[CallDelta]) -> list[tuple[str, str]]:
    calls: dict[int, list[str]] = {}
    for d in deltas:
        entry = calls.setdefault(d.index, ["", ""])
        if d.id is not None:
            assert d.id.startswith("call_") and d.name and not entry[0]
            entry[0] = d.name
        entry[1] += d.arguments
    return [(name, args) for _, (name, args) in sorted(calls.items())]


@pytest.mark.parametrize(("reply", "expected"), list(zip(REPLIES, EXPECTED, strict=True)))
def test_calls_are_read_the_same_whole_or_in_any_pieces(reply: str,
                                                        expected: tuple[str, Any]) -> None:
    content, calls = read_calls(reply, NAMES)
    assert (content, [(c.name, c.arguments) for c in calls]) == expected
    for cut in range(1, len(reply)):  # every split in two
        got = _streamed([reply[:cut], reply[cut:]])
        assert got[:2] == expected, cut
        assert _rebuilt(got[2]) == expected[1], cut
    got = _streamed(list(reply))  # a character at a time
    assert got[:2] == expected and _rebuilt(got[2]) == expected[1]


def test_arguments_stream_while_the_call_is_written() -> None:
    stream = ToolCallStream(names=NAMES)
    _, deltas = stream.feed('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa')
    assert [(d.name, d.arguments) for d in deltas] == [("get_weather", ""), (None, '{"city": "Pa')]
    _, deltas = stream.feed('ris"}}\n</tool_call>')
    assert "".join(d.arguments for d in deltas) == 'ris"}'
    assert stream.calls[0].arguments == '{"city": "Paris"}'


def test_a_bare_call_is_read_only_when_tools_are_offered() -> None:
    reply = '{"name": "get_weather", "arguments": {"city": "Nice"}}'
    assert read_calls(reply) == (reply, [])
    # While it could still be a call, nothing of it goes out as text.
    stream = ToolCallStream(names=NAMES)
    assert stream.feed('{"name": "get_weather", ')[0] == ""


def test_the_template_renders_tools_calls_and_results() -> None:
    t = ChatTemplate(TOOLS_TEMPLATE, "", "")
    assert t.takes_tools and not ChatTemplate(CHATML_TEMPLATE, "", "").takes_tools
    assert not ChatTemplate(None, "", "").takes_tools  # the fallback has no tool format
    call = ToolCall("call_1", "get_weather", '{"city": "Paris", "when": "<now>"}')
    text = t.render([Message("user", "weather?"), Message("assistant", "", (call,)),
                     Message("tool", '{"temp_c": 14}', tool_call_id="call_1")], tools=[WEATHER])
    # Hugging Face's tojson: keys in order, no HTML escapes (Jinja's own gives \u003c).
    assert json.dumps(WEATHER, ensure_ascii=False) in text
    assert '{"name": "get_weather", "arguments": {"city": "Paris", "when": "<now>"}}' in text
    assert "<tool_response>\n{\"temp_c\": 14}\n</tool_response>" in text
    assert "<tools>" not in t.render([Message("user", "weather?")])


def _bad(doc: dict[str, Any], parse: Any = chat_request) -> dict[str, Any]:
    with pytest.raises(ApiError) as e:
        parse({"messages": [{"role": "user", "content": "hi"}], **doc}, SamplerSettings())
    assert e.value.status == 400
    return e.value.body()["error"]


@pytest.mark.parametrize(("doc", "param", "code"), [
    ({"tools": [{"type": "function", "function": {}}]}, "tools[0].function.name",
     "missing_required_parameter"),
    ({"tools": [{"type": "function", "function": {"name": "no spaces"}}]},
     "tools[0].function.name", "invalid_value"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0].type", "invalid_value"),
    ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name", "invalid_value"),
    ({"tools": {"x": 1}}, "tools", "invalid_type"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
     "tools[0].function.parameters", "invalid_type"),
    ({"tool_choice": "auto"}, "tool_choice", "invalid_value"),
    ({"tools": [WEATHER], "tool_choice": "always"}, "tool_choice", "invalid_value"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "f"}}},
     "tool_choice.function.name", "invalid_value"),
    ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls", "invalid_type"),
    ({"functions": [{"name": "f"}]}, "functions", "invalid_value"),
    ({"messages": [{"role": "tool", "content": "14"}]}, "messages[0].tool_call_id",
     "missing_required_parameter"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": []}]},
     "messages[0].tool_calls", "invalid_value"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                                         "function": {"name": "f",
                                                                      "arguments": {}}}]}]},
     "messages[0].tool_calls[0].function.arguments", "invalid_type"),
])
def test_bad_tools_are_400_naming_the_field(doc: dict[str, Any], param: str, code: str) -> None:
    err = _bad(doc)
    assert (err["param"], err["code"]) == (param, code), err


def test_tools_are_a_chats_and_a_choice_is_checked_against_them() -> None:
    err = _bad({"prompt": "x", "tools": [WEATHER]}, completion_request)
    assert err["param"] == "tools"
    req = chat_request({"messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER],
                        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                        "parallel_tool_calls": False}, SamplerSettings())
    assert (req.tool_choice, req.parallel_tool_calls) == ("get_weather", False)
    assert req.tools[0]["function"]["name"] == "get_weather"
    plain = chat_request({"messages": [{"role": "user", "content": "hi"}]}, SamplerSettings())
    assert (plain.tools, plain.tool_choice) == ((), "none")


# ------------------------------------------------------------------- through the server

# Named without "_": the tiny vocabulary cannot spell it (a real one can).
CITY = {"type": "function", "function": {
    "name": "weather", "description": "The weather now in a city",
    "parameters": {"type": "object", "properties": {"city": {"enum": ["paris", "lyon"]}},
                   "required": ["city"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "clock", "parameters": {"type": "object", "properties": {"zone": {"enum": ["utc"]}},
                                       "required": ["zone"], "additionalProperties": False}}}


@pytest.fixture(scope="module")
def tools_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny JSON target (JSON's punctuation in its vocabulary) with a template that takes
    tools."""
    return write_tiny_model(tmp_path_factory.mktemp("tools") / "tools.gguf", TinySpec(seed=1),
                            tokens=json_vocabulary(), chat_template=TOOLS_TEMPLATE,
                            name="tiny-tools")


@pytest.fixture(scope="module")
def server(tools_target: Path, tiny_json_draft: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serving]:
    home = tmp_path_factory.mktemp("tools-home")
    with cli_server(home, "--model", str(tools_target), "--draft", str(tiny_json_draft),
                    "--gamma", "3", "--ctx-size", "1024") as s:
        assert s.host.state == "ready", s.host.error
        yield s


def test_a_forced_call_round_trip_with_the_openai_client(server: Serving) -> None:
    api = client(server.url)
    model = server.host.model_id
    msgs: list[Any] = [{"role": "user", "content": "what is the weather in Paris?"}]
    kw: dict[str, Any] = dict(model=model, tools=[CITY, TIME], temperature=0, max_tokens=48,
                              tool_choice={"type": "function",
                                           "function": {"name": "weather"}})
    whole = api.chat.completions.create(messages=msgs, **kw)
    calls = whole.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "weather" and calls[0].id.startswith("call_")
    # A random model, and still a valid call: the grammar allowed nothing else.
    assert json.loads(calls[0].function.arguments)["city"] in ("paris", "lyon")
    assert whole.choices[0].finish_reason == "tool_calls"
    assert whole.choices[0].message.content is None
    assert whole.specchat["drafted"] > 0  # type: ignore[attr-defined]  # speculation ran
    # Streamed: OpenAI's deltas (id, type and name first, then argument fragments) rebuild the
    # same call, since greedy replies are the same.
    name, args, ids = "", "", set()
    for chunk in api.chat.completions.create(messages=msgs, stream=True, **kw):
        for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            assert tc.index == 0
            ids.add(tc.id) if tc.id else None
            name += (tc.function.name or "") if tc.function else ""
            args += (tc.function.arguments or "") if tc.function else ""
    assert (name, args, len(ids)) == ("weather", calls[0].function.arguments, 1)
    # The result goes back through the template; the answer is text.
    msgs += [whole.choices[0].message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": calls[0].id, "content": '{"temp_c": 14}'}]
    answer = api.chat.completions.create(messages=msgs, model=model, tools=[CITY],
                                         tool_choice="none", temperature=0, max_tokens=8)
    assert answer.choices[0].message.tool_calls is None
    first = api.chat.completions.create(messages=msgs[:1], model=model, max_tokens=1)
    assert answer.usage is not None and first.usage is not None
    assert answer.usage.prompt_tokens > first.usage.prompt_tokens + 10  # the call and result


def test_a_streamed_call_has_openais_shape_and_the_sdks_helper_fires(server: Serving) -> None:
    api = client(server.url)
    strict = [{"type": "function", "function": {**t["function"], "strict": True}}
              for t in (CITY, TIME)]
    kw: dict[str, Any] = dict(model=server.host.model_id, tools=strict, temperature=0,
                              max_tokens=48, messages=[{"role": "user", "content": "weather?"}],
                              tool_choice={"type": "function", "function": {"name": "weather"}})
    whole = api.chat.completions.create(**kw).choices[0].message.tool_calls
    assert whole is not None
    chunks = list(api.chat.completions.create(stream=True, **kw))
    deltas = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    head, *rest = deltas
    # The first delta: index, id, type and name, no arguments yet; then fragments only.
    assert (head.index, head.type, head.function.name, head.function.arguments) == (
        0, "function", "weather", "")
    assert head.id and rest and all(d.id is None and d.function.name is None for d in rest)
    # The finish alone, with an empty delta; no usage unless asked for.
    last = chunks[-1].choices[0]
    assert last.finish_reason == "tool_calls" and last.delta.tool_calls is None
    assert last.delta.content is None and all(c.usage is None for c in chunks)
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])
    # The SDK's stream helper: its events fire, its final completion is whole.
    with api.chat.completions.stream(**kw) as stream:
        events = list(stream)
        final = stream.get_final_completion()
    done = [e for e in events if e.type == "tool_calls.function.arguments.done"]
    assert len(done) == 1 and done[0].name == "weather"
    assert done[0].arguments == whole[0].function.arguments
    assert done[0].parsed_arguments == json.loads(whole[0].function.arguments)
    assert any(e.type == "tool_calls.function.arguments.delta" for e in events)
    calls = final.choices[0].message.tool_calls
    assert calls and calls[0].function.arguments == whole[0].function.arguments
    assert final.choices[0].finish_reason == "tool_calls"


def test_a_required_call_is_a_valid_call_of_an_offered_tool(server: Serving) -> None:
    api = client(server.url)
    names = []
    for seed in range(6):
        r = api.chat.completions.create(model=server.host.model_id, tools=[CITY, TIME],
                                        tool_choice="required", parallel_tool_calls=False,
                                        messages=[{"role": "user", "content": "weather?"}],
                                        temperature=1.0, seed=seed, max_tokens=48)
        calls = r.choices[0].message.tool_calls
        assert calls is not None and len(calls) == 1, r.choices[0].message
        args = json.loads(calls[0].function.arguments)
        assert (calls[0].function.name, sorted(args)) in (("weather", ["city"]),
                                                         ("clock", ["zone"]))
        names.append(calls[0].function.name)
    assert r.choices[0].finish_reason == "tool_calls"


def test_a_forced_call_and_a_response_format_are_refused_together() -> None:
    err = _bad({"tools": [CITY], "tool_choice": "required",
                "response_format": {"type": "json_object"}})
    assert err["param"] == "response_format"


def test_generic_replies_and_turns_are_read_and_written() -> None:
    names = frozenset({"weather"})
    call = '{"tool_calls": [{"name": "weather", "arguments": {"city": "paris"}}]}'
    content, calls = read_generic(call, names)
    assert content == "" and [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("weather", {"city": "paris"})]
    assert read_generic('{"content": "hi there"}', names) == ("hi there", [])
    assert read_generic('{"content": "cut sh', names) == ("cut sh", [])  # at the token limit
    cut = read_generic('{"tool_calls":[{"name":"weather","arguments":{}},{"name":"wea', names)
    assert cut[0] == "" and [c.name for c in cut[1]] == ["weather"]  # the whole ones
    assert read_generic('{"tool_calls":[{"name":"wea', names) == ("", [])
    assert read_generic('{"tool_calls": [{"name": "other", "arguments": {}}]}', names)[1] == []
    stream = GenericCallStream(names)
    assert stream.feed(call[:20]) == ("", []) and stream.feed(call[20:]) == ("", [])
    _, deltas = stream.finish()
    assert [(d.index, d.name) for d in deltas] == [(0, "weather")] and stream.calls
    msgs = generic_messages([Message("system", "Be brief."), Message("user", "weather?"),
                             Message("assistant", "", (ToolCall("call_1", "weather",
                                                                '{"city": "paris"}'),)),
                             Message("tool", '{"temp_c": 14}', (), "call_1")], [CITY], "auto")
    assert msgs[0].role == "system" and msgs[0].content.startswith("Be brief.\n\n")
    assert '"name": "weather"' in msgs[0].content and '{"content"' in msgs[0].content
    assert json.loads(msgs[2].content)["tool_calls"][0]["arguments"] == {"city": "paris"}
    assert msgs[3].role == "user" and json.loads(msgs[3].content)["tool_response"][
        "tool_call_id"] == "call_1"
    schema = generic_schema([CITY, TIME], "weather")
    assert schema["properties"]["tool_calls"]["maxItems"] == 1 and "anyOf" not in schema


def test_a_generic_text_answer_streams_as_its_string_is_written() -> None:
    """{"content": "…"} gives its text as it comes, each escape once whole, the same text
    whatever the pieces, also when the reply is cut short (mid-escape, between the halves of
    a surrogate pair)."""
    answer = 'héllo "q" \\ \n 😀 end'
    whole = '{"content":' + json.dumps(answer, ensure_ascii=True) + "}"
    for cut in range(len('{"content":"'), len(whole) + 1):
        text = whole[:cut]
        for size in (1, 2, 5):
            stream = GenericCallStream(frozenset())
            out = "".join(stream.feed(text[i:i + size])[0] for i in range(0, len(text), size))
            rest, deltas = stream.finish()
            assert deltas == [] and answer.startswith(out + rest), (cut, size, out, rest)
            assert out + rest == read_generic(text, frozenset())[0]
            (out + rest).encode("utf-8")  # never half a pair
    stream = GenericCallStream(frozenset())
    assert stream.feed('{"content":"ab')[0] == "ab" and stream.feed('c\\u00')[0] == "c"
    assert stream.feed('e9"}')[0] == "é" and stream.finish() == ("", [])


GENERIC_CALLS = ('{"tool_calls":[{"name":"weather","arguments":{"city":"pa]}\\"r,is",'
                 '"n":[1,{"x":null}],"t":true}},{"name":"clock","arguments":{}},'
                 '{"name":"weather","arguments":"as \\"text\\""},'
                 '{"name":"clock","arguments":12}]}')


def test_generic_calls_stream_as_they_are_written() -> None:
    """A compact generic reply's calls stream as OpenAI's do: a call's id and name once its
    name is written, then its arguments' text as it comes, held back nowhere (its end is
    found by brackets, strings and escapes); the calls are the same whatever the pieces, the
    same as the whole reply's, and a reply cut anywhere gives the calls as far as written."""
    names = frozenset({"weather", "clock"})
    args = ['{"city":"pa]}\\"r,is","n":[1,{"x":null}],"t":true}', "{}", '"as \\"text\\""', "12"]
    _, whole = read_generic(GENERIC_CALLS, names)
    assert [(c.name, c.arguments) for c in whole] == list(
        zip(["weather", "clock", "weather", "clock"], args, strict=True))
    json.loads(whole[0].arguments)
    for cut in range(len('{"tool_calls":['), len(GENERIC_CALLS) + 1):
        text = GENERIC_CALLS[:cut]
        for size in (1, 3, 7):
            stream = GenericCallStream(names)
            deltas: list[CallDelta] = []
            for i in range(0, len(text), size):
                content, more = stream.feed(text[i:i + size])
                assert content == ""
                deltas += more
            rest, last = stream.finish()
            got = [(c.name, c.arguments) for c in stream.calls]
            assert rest == "" and got == [(c.name, c.arguments)
                                          for c in read_generic(text, names)[1]], (cut, size)
            if deltas:  # given as it came: nothing was left for the end
                assert last == []
                heads = [d for d in deltas if d.id is not None]
                assert [(d.index, d.name, d.arguments) for d in heads] == [
                    (i, c[0], "") for i, c in enumerate(got)]
                for i, (_, a) in enumerate(got):
                    assert "".join(d.arguments for d in deltas if d.index == i) == a
            # Every fragment is out as soon as it is written: the arguments so far, whole.
            if cut == len(GENERIC_CALLS) and size == 1:
                assert len([d for d in deltas if d.id is None]) == sum(map(len, args))
    # Another form (spaces, keys in another order): read whole at the end.
    spaced = '{"tool_calls": [{"arguments": {"city": "x"}, "name": "weather"}]}'
    stream = GenericCallStream(names)
    assert stream.feed(spaced) == ("", [])
    _, last = stream.finish()
    assert [(d.name, json.loads(d.arguments)) for d in last] == [("weather", {"city": "x"})]
    # A tool not offered is no call: the reply is text, as before.
    assert read_generic('{"tool_calls":[{"name":"other","arguments":{}}]}', names)[1] == []


def test_a_template_without_tools_gets_the_generic_json_calls(tmp_path: Path) -> None:
    """A template with no tool format: the tools go in the system message and the reply is
    constrained to {"tool_calls": [...]} or {"content": ...} (llama.cpp's generic handler);
    the client sees OpenAI's calls all the same. The tiny pair's JSON vocabulary, with the
    '_' that "tool_calls" needs, and the plain ChatML template."""
    tokens = [*json_vocabulary(), "_"]
    target = write_tiny_model(tmp_path / "generic.gguf", TinySpec(seed=1), tokens=tokens,
                              name="tiny-generic")
    draft = write_tiny_model(tmp_path / "generic-draft.gguf", TinySpec(seed=2),
                             noise_from=TinySpec(seed=1), noise=0.25, tokens=tokens,
                             name="tiny-generic-draft")
    with cli_server(tmp_path, "--model", str(target), "--draft", str(draft), "--gamma", "3",
                    "--ctx-size", "1024") as s:
        api = client(s.url)
        model = s.host.model_id
        msgs: list[Any] = [{"role": "user", "content": "weather in paris?"}]
        kw: dict[str, Any] = dict(model=model, messages=msgs, tools=[CITY, TIME],
                                  temperature=0, max_tokens=120)
        forced = api.chat.completions.create(
            **kw, tool_choice={"type": "function", "function": {"name": "weather"}})
        calls = forced.choices[0].message.tool_calls
        assert calls and calls[0].function.name == "weather", forced.choices[0].message
        assert json.loads(calls[0].function.arguments)["city"] in ("paris", "lyon")
        assert forced.choices[0].finish_reason == "tool_calls"
        assert forced.choices[0].message.content is None
        assert forced.specchat["drafted"] > 0  # type: ignore[attr-defined]
        # Streamed: the same call in OpenAI's deltas, its arguments in fragments as written.
        chunks = list(api.chat.completions.create(
            **kw, stream=True, tool_choice={"type": "function", "function": {"name": "weather"}}))
        deltas = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
        assert deltas[0].function.name == "weather" and deltas[0].id
        assert deltas[0].function.arguments == "" and len(deltas) > 2
        assert all(d.id is None and d.function.name is None for d in deltas[1:])
        assert "".join(d.function.arguments or "" for d in deltas) == calls[0].function.arguments
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        # The SDK's stream helper: argument deltas fire as they come, the final call is whole.
        with api.chat.completions.stream(
                **kw, tool_choice={"type": "function", "function": {"name": "weather"}}) as st:
            events = list(st)
            final = st.get_final_completion()
        kinds = [e.type for e in events]
        assert kinds.count("tool_calls.function.arguments.delta") > 1, kinds
        (done,) = [e for e in events if e.type == "tool_calls.function.arguments.done"]
        assert done.name == "weather" and done.arguments == calls[0].function.arguments
        got = final.choices[0].message.tool_calls
        assert got and got[0].function.arguments == calls[0].function.arguments
        assert final.choices[0].finish_reason == "tool_calls"
        # The Responses API on the same model: the same call, as a function_call item.
        flat = [{"type": "function", **t["function"]} for t in (CITY, TIME)]
        r = api.responses.create(model=model, input=msgs[0]["content"], tools=flat,
                                 tool_choice={"type": "function", "name": "weather"},
                                 temperature=0, max_output_tokens=120)
        (item,) = r.output
        assert item.type == "function_call" and item.name == "weather"
        assert item.arguments == calls[0].function.arguments
        with api.responses.stream(model=model, input=msgs[0]["content"], tools=flat,
                                  tool_choice={"type": "function", "name": "weather"},
                                  temperature=0, max_output_tokens=120) as rs:
            r_events = list(rs)
            r_final = rs.get_final_response()
        r_kinds = [e.type for e in r_events]
        assert r_kinds.count("response.function_call_arguments.delta") > 1, r_kinds
        (r_item,) = r_final.output
        assert r_item.type == "function_call" and r_item.arguments == item.arguments
        # Sampled with auto: each reply is a valid call or a text answer, never broken JSON.
        answered: tuple[int, str] | None = None
        for seed in range(6):
            r = api.chat.completions.create(**{**kw, "temperature": 1.0}, tool_choice="auto",
                                            seed=seed)
            m = r.choices[0].message
            if m.tool_calls:
                assert m.tool_calls[0].function.name in ("weather", "clock")
                json.loads(m.tool_calls[0].function.arguments)
            else:
                assert isinstance(m.content, str) and not m.content.startswith("{")
                answered = (seed, m.content)
        # A text answer streams as it is written (the same reply: the same seed).
        assert answered is not None
        seed, content = answered
        chunks = list(api.chat.completions.create(
            **{**kw, "temperature": 1.0}, tool_choice="auto", seed=seed, stream=True))
        texts = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
        assert "".join(texts) == content and len(texts) > 1
        # The call and its result go back as JSON text the template can show.
        msgs += [forced.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": calls[0].id, "content": '{"temp_c": 14}'}]
        answer = api.chat.completions.create(model=model, messages=msgs, tools=[CITY],
                                             tool_choice="none", max_tokens=4)
        first = api.chat.completions.create(model=model, messages=msgs[:1], max_tokens=1)
        assert answer.usage and first.usage
        assert answer.usage.prompt_tokens > first.usage.prompt_tokens + 10
        # Tools on such a model and a response_format: one or the other.
        with pytest.raises(openai.BadRequestError) as e:
            api.chat.completions.create(**kw, response_format={"type": "json_object"})
        assert e.value.body["param"] == "response_format"  # type: ignore[index]
