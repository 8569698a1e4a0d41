"""OpenAI's Responses API (`POST /v1/responses`) through the official openai client: whole and
streamed replies, the SDK's stream helper and `.parse()` into a pydantic model, a function call
round trip (by `previous_response_id` and by items), and what is refused, on the tiny JSON pair
with a template that takes tools, γ fixed at 3 so that drafts really happen."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pydantic
import pytest

from specchat.devtools.tiny_models import TOOLS_TEMPLATE, TinySpec, json_vocabulary, write_tiny_model
from specchat.engine.decode.events import TokenEvent, TokenOrigin
from specchat.engine.decode.messages import Message
from specchat.serve.responses_request import ResponseStore
from specchat.serve.responses_writer import TextTokens
from specchat.serve.server import Serving
from tests.serve_helpers import cli_server, client, raw

WEATHER = {"type": "function", "name": "weather", "description": "The weather now in a city",
           "strict": True,
           "parameters": {"type": "object", "properties": {"city": {"enum": ["paris", "lyon"]}},
                          "required": ["city"], "additionalProperties": False}}
FORCED = {"type": "function", "name": "weather"}


class Record(pydantic.BaseModel):
    # JSON without free whitespace, or a random tiny model pads it out to the token limit.
    model_config = pydantic.ConfigDict(json_schema_extra={
        "x-guidance": {"whitespace_flexible": False}})
    name: str = pydantic.Field(max_length=6)
    age: int = pydantic.Field(ge=0, le=99)
    ok: bool


@pytest.fixture(scope="module")
def server(tiny_json_draft: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serving]:
    target = write_tiny_model(tmp_path_factory.mktemp("responses") / "tools.gguf",
                              TinySpec(seed=1), tokens=json_vocabulary(),
                              chat_template=TOOLS_TEMPLATE, name="tiny-tools")
    home = tmp_path_factory.mktemp("responses-home")
    with cli_server(home, "--model", str(target), "--draft", str(tiny_json_draft), "--gamma",
                    "3", "--ctx-size", "1024") as s:
        assert s.host.state == "ready", s.host.error
        yield s


@pytest.fixture(scope="module")
def api(server: Serving) -> openai.OpenAI:
    return client(server.url)


def test_a_response_is_the_chat_reply_with_usage_and_speculation(api: openai.OpenAI,
                                                                 server: Serving) -> None:
    model = server.host.model_id
    r = api.responses.create(model=model, input="hello there", instructions="Be brief.",
                             max_output_tokens=12, temperature=0)
    chat = api.chat.completions.create(
        model=model, max_tokens=12, temperature=0,
        messages=[{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": "hello there"}])
    assert r.object == "response" and r.id.startswith("resp_") and r.model == model
    assert r.output_text == chat.choices[0].message.content  # the same chat underneath
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 12 and r.usage.input_tokens == chat.usage.prompt_tokens
    assert r.usage.total_tokens == r.usage.input_tokens + 12
    assert r.instructions == "Be brief." and r.max_output_tokens == 12
    ext = r.model_extra["specchat"]
    assert ext["decoder"] == "speculative" and ext["drafted"] > 0
    # A list of items says the same as the string.
    items = api.responses.create(model=model, max_output_tokens=12, temperature=0,
                                 instructions="Be brief.",
                                 input=[{"role": "user", "content": [
                                     {"type": "input_text", "text": "hello there"}]}])
    assert items.output_text == r.output_text
    # store: false keeps nothing to go on from
    gone = api.responses.create(model=model, input="hi", max_output_tokens=1, store=False)
    with pytest.raises(openai.BadRequestError) as e:
        api.responses.create(model=model, input="hi", previous_response_id=gone.id)
    assert e.value.body["param"] == "previous_response_id"  # type: ignore[index]


def test_a_stream_sends_the_typed_events_in_order(api: openai.OpenAI, server: Serving) -> None:
    model = server.host.model_id
    whole = api.responses.create(model=model, input="hi", max_output_tokens=8, temperature=0)
    events = list(api.responses.create(model=model, input="hi", max_output_tokens=8,
                                       temperature=0, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:5] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added",
                         "response.output_text.delta"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.incomplete"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text == events[-4].text
    final = events[-1].response
    assert final.usage.output_tokens == 8 and final.output_text == text
    assert final.id == events[0].response.id


def test_parse_and_the_sdks_stream_helper_give_a_pydantic_model(api: openai.OpenAI,
                                                                server: Serving) -> None:
    model = server.host.model_id
    r = api.responses.parse(model=model, input="a record", text_format=Record,
                            max_output_tokens=80, temperature=0)
    assert r.status == "completed" and isinstance(r.output_parsed, Record)
    with api.responses.stream(model=model, input="a record", text_format=Record,
                              max_output_tokens=80, temperature=0) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert "response.output_text.delta" in kinds and kinds[-1] == "response.completed"
    assert final.output_parsed == r.output_parsed
    assert final.usage is not None and final.usage.output_tokens == r.usage.output_tokens


def test_a_function_call_round_trip(api: openai.OpenAI, server: Serving) -> None:
    model = server.host.model_id
    ask = [{"role": "user", "content": "what is the weather in paris?"}]
    first = api.responses.create(model=model, input=ask, tools=[WEATHER], tool_choice=FORCED,
                                 max_output_tokens=48, temperature=0)
    (call,) = [o for o in first.output if o.type == "function_call"]
    assert call.name == "weather" and call.call_id.startswith("call_")
    assert json.loads(call.arguments)["city"] in ("paris", "lyon")
    assert first.status == "completed" and first.model_extra["specchat"]["drafted"] > 0
    # Streamed through the SDK's helper: the call's arguments arrive in fragments, then done.
    with api.responses.stream(model=model, input=ask, tools=[WEATHER], tool_choice=FORCED,
                              max_output_tokens=48, temperature=0) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and done[0].arguments == call.arguments
    (streamed,) = [o for o in final.output if o.type == "function_call"]
    assert (streamed.name, streamed.arguments) == (call.name, call.arguments)
    # The result goes back: by previous_response_id, or as the whole list of items.
    result = {"type": "function_call_output", "call_id": call.call_id,
              "output": '{"temp_c": 14}'}
    by_id = api.responses.create(model=model, previous_response_id=first.id, input=[result],
                                 tools=[WEATHER], tool_choice="none", max_output_tokens=8,
                                 temperature=0)
    assert by_id.output_text and by_id.previous_response_id == first.id
    assert not [o for o in by_id.output if o.type == "function_call"]
    echoed = {"type": "function_call", "call_id": call.call_id, "name": call.name,
              "arguments": call.arguments}
    by_items = api.responses.create(model=model, input=[*ask, echoed, result],
                                    tools=[WEATHER], tool_choice="none",
                                    max_output_tokens=8, temperature=0)
    assert by_items.output_text == by_id.output_text
    alone = api.responses.create(model=model, input=ask, max_output_tokens=1)
    # the call and its result are in the prompt
    assert by_items.usage.input_tokens == by_id.usage.input_tokens > alone.usage.input_tokens + 10


LOGPROBS = ["message.output_text.logprobs"]


def _entries(logprobs: Any) -> list[tuple[Any, ...]]:
    """Log-probabilities as comparable tuples (figures to 1e-3: llama.cpp's rounding)."""
    return [(e.token, e.bytes, round(e.logprob, 3),
             [(t.token, t.bytes, round(t.logprob, 3)) for t in e.top_logprobs])
            for e in logprobs]


def test_logprobs_ride_on_the_output_text_as_chat_computes_them(api: openai.OpenAI,
                                                                 server: Serving) -> None:
    """``include: ["message.output_text.logprobs"]`` and ``top_logprobs``: each token of the
    output text with its alternatives, the very figures chat completions gives for the same
    reply; streamed, each delta carries its own tokens' and the done events all of them."""
    model = server.host.model_id
    kw: dict[str, Any] = dict(model=model, input="hello there", max_output_tokens=10,
                              temperature=0)
    r = api.responses.create(**kw, include=LOGPROBS, top_logprobs=3)  # type: ignore[arg-type]
    chat = api.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hello there"}], max_tokens=10,
        temperature=0, logprobs=True, top_logprobs=3)
    (part,) = r.output[0].content  # type: ignore[union-attr]
    assert part.type == "output_text" and part.logprobs is not None
    want = chat.choices[0].logprobs.content  # type: ignore[union-attr]
    assert want is not None and len(part.logprobs) == len(want) == 10
    assert _entries(part.logprobs) == _entries(want)
    assert all(len(e.top_logprobs) == 3 and e.logprob <= 0 for e in part.logprobs)
    assert b"".join(bytes(e.bytes) for e in part.logprobs).decode() == part.text
    assert r.top_logprobs == 3
    # top_logprobs alone asks for nothing (as OpenAI answers it): echoed, no logprobs.
    alone = api.responses.create(**kw, top_logprobs=3)
    assert alone.output[0].content[0].logprobs == [] and alone.top_logprobs == 3  # type: ignore[union-attr]
    # Streamed: the deltas' logprobs are their own tokens', the done event's and the final
    # response's all of them (through the SDK's stream helper; cut at max_output_tokens, the
    # reply ends with response.incomplete, whose response is the final one).
    with api.responses.stream(**kw, include=LOGPROBS, top_logprobs=3) as stream:  # type: ignore[arg-type]
        events = list(stream)
    assert events[-1].type == "response.incomplete"
    final = events[-1].response
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 1 and all(e.logprobs for e in deltas if e.delta)
    for e in deltas:
        assert "".join(lp.token for lp in e.logprobs) == e.delta
    flat = [lp for e in deltas for lp in e.logprobs]
    assert [(lp.token, round(lp.logprob, 3)) for lp in flat] == [
        (lp.token, round(lp.logprob, 3)) for lp in part.logprobs]
    (done,) = [e for e in events if e.type == "response.output_text.done"]
    assert [lp.token for lp in done.logprobs] == [lp.token for lp in part.logprobs]
    assert _entries(final.output[0].content[0].logprobs) == _entries(part.logprobs)  # type: ignore[union-attr]


def test_an_output_text_carries_its_own_tokens_logprobs_not_a_calls() -> None:
    """With tools, the tokens matched to the output text are those that wrote it, in order,
    up to the first that wrote something else (a call's tag): a streamed reply whose text
    comes in other pieces than its tokens gets the same tokens as the whole reply."""
    def tok(text: str) -> TokenEvent:
        return TokenEvent(1, text, TokenOrigin.PLAIN, 0, 0.0)

    tokens = [tok("Let"), tok(" me"), tok(""), tok(" look"), tok(".\n<tool"), tok("_call>")]
    whole = TextTokens()
    whole.add(tokens)
    # The fifth token also began the call: the text's last characters have none.
    assert [t.text for t in whole.show("Let me look.\n")] == ["Let", " me", "", " look"]
    stream = TextTokens()
    got = []
    for i, piece in enumerate(["Le", "t m", "e look", ".\n"]):
        stream.add(tokens[2 * i:2 * i + 2] if i < 3 else [])
        got += [t.text for t in stream.show(piece)]
    assert got == ["Let", " me", "", " look"]
    stream.end()  # the call's deltas came
    stream.add(tokens[4:])
    assert stream.show("after") == [] and stream.held == []
    # A token whose text is not the text's next part ends the matching at once.
    other = TextTokens()
    other.add([tok("{"), tok("x")])
    assert other.show("x") == [] and other.ended


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "x", "include": ["message.output_text.logprob"]}, "include[0]"),
    ({"input": "x", "include": "message.output_text.logprobs"}, "include"),
    ({"input": "x", "top_logprobs": 21}, "top_logprobs"),
    ({"input": "x", "include": LOGPROBS, "top_logprobs": -1}, "top_logprobs"),
    ({"input": "x", "include": LOGPROBS, "top_logprobs": True}, "top_logprobs"),
    ({}, "input"),
    ({"input": 5}, "input"),
    ({"input": []}, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].content[0].type"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": "x", "tools": [{"type": "function", "name": "bad name"}]}, "tools[0].name"),
    ({"input": "x", "tool_choice": {"type": "file_search"}}, "tool_choice.type"),
    ({"input": "x", "background": True}, "background"),
    ({"input": "x", "conversation": "conv_1"}, "conversation"),
    ({"input": "x", "store": "yes"}, "store"),
    ({"input": "x", "previous_response_id": "resp_nothing"}, "previous_response_id"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "x", "temperature": "hot"}, "temperature"),
    ({"input": "x", "instructions": 3}, "instructions"),
    ({"input": "x", "text": {"format": {"type": "json_schema"}}}, "text.format.schema"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "schema": {"type": "nope"}}}},
     "text.format.schema"),
    ({"input": "x", "text": {"format": {"type": "xml"}}}, "text.format.type"),
])
def test_what_is_not_served_is_a_400_naming_the_field(server: Serving, body: dict[str, Any],
                                                      param: str) -> None:
    status, doc, _ = raw(server.url, "POST", "/v1/responses", json.dumps(body).encode(),
                         {"Content-Type": "application/json"})
    assert status == 400, doc
    assert doc["error"]["param"] == param, doc
    if param in ("background", "conversation", "tools[0].type", "previous_response_id"):
        assert f"'{param}'" in doc["error"]["message"], doc  # what is not served says so


def test_kept_responses_are_bounded_least_recently_used_first() -> None:
    store = ResponseStore(limit=2)
    for name in ("a", "b"):
        store.put(name, (Message("user", name),))
    assert store.get("a") is not None  # used: b is now the oldest
    store.put("c", (Message("user", "c"),))
    assert store.get("b") is None and store.get("a") and store.get("c") and len(store) == 2
