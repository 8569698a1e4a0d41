"""The tool-calling turn (specchat.tools.turn) on scripted replies: what the model "writes" is
fixed by the test (a decoder that replays text, in the tests only), the template is the tiny
tools model's, and the tools run on the SDK-written test server over stdio. So the loop's rules
are checked one by one: an invented tool, bad arguments, a refusal, a repeated call, the
prediction handed to the drafter, the round cap."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.events import Event, GenerationStats, NoticeEvent, TokenEvent, TokenOrigin
from specchat.engine.decode.messages import Message
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.mcp_config import McpServer
from specchat.tools.hub import McpHub
from specchat.tools.offer import OfferedTool, ToolSet
from specchat.tools.turn import ToolCallEvent, ToolResultEvent, ToolTurn, TurnResult
from tests.test_ask_tools import TEST_SERVER, tools_target  # noqa: F401  (a fixture)


class Scripted:
    """A decoder that writes the next of its replies whatever the prompt (test-side only),
    and records the settings and prompt each reply was asked with."""

    name = "scripted"

    def __init__(self, target: LlamaContext, replies: Sequence[str]) -> None:
        self.target = target
        self.replies = list(replies)
        self.asked: list[tuple[list[int], SamplerSettings]] = []

    def run(self, prompt: Sequence[int], settings: SamplerSettings,
            cancel: threading.Event) -> Iterator[Event]:
        self.asked.append((list(prompt), settings))
        text = self.replies.pop(0)
        for i, ch in enumerate(text):
            yield TokenEvent(0, ch, TokenOrigin.PLAIN, i, 0.0)
        yield GenerationStats(prompt_tokens=len(prompt), generated_tokens=len(text))


@pytest.fixture(scope="module")
def hub() -> Iterator[McpHub]:
    server = McpServer("t", command=sys.executable, args=(str(TEST_SERVER),), timeout_s=20)
    with McpHub({"t": server}) as h:
        yield h


@pytest.fixture(scope="module")
def model(tools_target: Path) -> LlamaModel:  # noqa: F811
    return LlamaModel(tools_target)


def turn(model: LlamaModel, hub: McpHub, replies: Sequence[str], allow: set[str],
         max_rounds: int = 8) -> tuple[ToolTurn, Scripted, list[Any], TurnResult]:
    decoder = Scripted(LlamaContext(model, ContextSettings(n_ctx=4096)), replies)
    tools, failed = ToolSet.gather(hub)
    assert not failed

    def approve(tool: OfferedTool, args: dict[str, object]) -> bool:
        return tool.name in allow

    t = ToolTurn(ChatEngine(decoder), hub, tools, approve, max_rounds)
    result = TurnResult()
    events = list(t.run([Message("user", "go")], SamplerSettings(max_tokens=64),
                        result=result))
    return t, decoder, events, result


def call(name: str, args: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def results(events: list[Any]) -> list[ToolResultEvent]:
    return [e for e in events if isinstance(e, ToolResultEvent)]


def test_checks_refusal_and_a_run_each_go_back_to_the_model(model: LlamaModel, hub: McpHub
                                                            ) -> None:
    replies = [call("paint", "{}") + call("color", '{"name": "green"}')
               + call("color", '{"name": "red"}') + call("echo", '{"text": "x"}'),
               "done"]
    _, decoder, events, result = turn(model, hub, replies, allow={"color"})
    got = [(r.name, r.status, r.text) for r in results(events)]
    assert got[0] == ("paint", "error", "error: there is no tool named 'paint'; the tools are: "
                      "boom, color, echo, hang, huge, junk, quit, read")
    assert got[1][:2] == ("color", "error") and "'green' is not one of ['red', 'blue']" in got[1][2]
    assert got[2] == ("color", "ok", "painted red")
    assert got[3] == ("echo", "refused", "error: the user did not allow the tool echo to run")
    # The second reply was asked with the calls and their results in the prompt.
    prompt = model.detokenize(decoder.asked[1][0])
    assert "painted red" in prompt and "the user did not allow the tool echo" in prompt
    assert [m.role for m in result.messages] == ["assistant", "tool", "tool", "tool", "tool",
                                                 "assistant"]
    assert result.messages[-1].content == "done" and result.rounds == 2


def test_a_file_like_result_is_the_next_replys_prediction(model: LlamaModel, hub: McpHub,
                                                          tmp_path: Path) -> None:
    src = tmp_path / "orders.py"
    src.write_text("".join(f"def f{i}(total):\n    return total + {i}\n" for i in range(6)))
    replies = [call("read", f'{{"path": "{src}"}}'), "the file"]
    _, decoder, events, _ = turn(model, hub, replies, allow={"read"})
    assert results(events)[0].status == "ok"
    first, second = decoder.asked[0][1], decoder.asked[1][1]
    assert first.prediction == ()
    assert second.prediction == tuple(model.tokenize(src.read_text(), add_special=False,
                                                     parse_special=False))


def test_a_repeated_call_is_not_run_again_and_the_model_answers_without_tools(
        model: LlamaModel, hub: McpHub) -> None:
    again = call("color", '{"name": "blue"}')
    _, decoder, events, result = turn(model, hub, [again, again, "blue it is"],
                                      allow={"color"})
    assert [r.text for r in results(events)] == ["painted blue"]  # run once
    notices = [e.message for e in events if isinstance(e, NoticeEvent)]
    assert notices == ["the model called color again with the same arguments: not run again; "
                       "it answers from the result it has"]
    # The last reply was asked with no tools in its prompt, and without the repeated call.
    # (The tiny vocabulary spells no capitals nor angle brackets: the JSON is what reads.)
    assert '{"type": "function"' in model.detokenize(decoder.asked[0][0])
    last = model.detokenize(decoder.asked[2][0])
    assert '{"type": "function"' not in last and last.count('{"name": "color"') == 1
    assert result.messages[-1].content == "blue it is"


def test_the_rounds_are_capped_and_said(model: LlamaModel, hub: McpHub) -> None:
    replies = [call("color", '{"name": "red"}'), call("color", '{"name": "blue"}'), "never"]
    _, _, events, result = turn(model, hub, replies, allow={"color"}, max_rounds=2)
    assert len([e for e in events if isinstance(e, ToolCallEvent)]) == 2
    assert result.stopped == "max_rounds" and result.rounds == 2
    assert isinstance(events[-1], GenerationStats)
    assert events[-1].generated_tokens == sum(len(r) for r in replies[:2])
