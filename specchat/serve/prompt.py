"""A request on the loaded model, before its reply: the prompt as the target's tokens, and
what the offered tools and a grammar make of it.

A chat goes through the model's own template (the app's), a completion's text as it is, a
fill-in-the-middle through the model's FIM tokens; a prompt that does not fit the context is a
400. Tools are shown to the template in its own format, or, when it has none, as the generic
JSON form (engine/decode/generic_tools.py) whose grammar shapes the reply; a grammar the
model's vocabulary cannot follow is a 400 before the reply starts. These run on a
generation thread (the tokenizer and the template are the loaded model's), and the route's
handler asks the same questions of the request to read the reply's calls back.
"""
from __future__ import annotations

import json
import threading
from typing import Any

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.fim import FimUnsupportedError, fim_prompt
from specchat.engine.decode.generic_tools import generic_messages, generic_schema
from specchat.engine.decode.grammar import GrammarError, compile_grammar, start
from specchat.engine.decode.tool_calls import call_start
from specchat.errors import ModelFileError
from specchat.serve.api_errors import ApiError, bad_request
from specchat.serve.parse import GenerationRequest


def check_grammar(engine: ChatEngine, grammar: str | None, param: str | None) -> None:
    """A 400 before the reply starts when the request's grammar compiled but cannot run on this
    model's vocabulary (llguidance checks it against the tokens, and no token may start it;
    the tokenizer is built here, once per model)."""
    if grammar is None:
        return
    try:
        g = start(engine.model, grammar)
        if g is not None:
            g.allowed()  # its first token: one the vocabulary can write
    except GrammarError as e:
        raise bad_request(str(e), param, "invalid_grammar") from None


def prompt_tokens(engine: ChatEngine, request: GenerationRequest,
                  cancel: threading.Event) -> list[int]:
    """The request's prompt as the target's tokens: a chat through the model's own template
    (the app's), a completion's text as it is, a fill-in-the-middle in the model's FIM tokens;
    a 400 when it does not fit in the context."""
    model = engine.model
    param = "messages" if request.kind == "chat" else "prompt"
    if not isinstance(request.prompt, str):
        bad = next((t for t in request.prompt if not 0 <= t < model.n_vocab), None)
        if bad is not None:
            raise bad_request(f"token id {bad} is not in the model's vocabulary (0 to "
                              f"{model.n_vocab - 1})", "prompt")
    fim = _fim_tokens(engine, request) if request.suffix is not None else None
    if fim is not None:
        tokens = fim
        param = "input_prefix" if request.kind == "infill" else param
    elif request.kind == "chat":
        offered = tools_offered(request)
        try:
            if generic_tools(engine, request):  # the tools in the system message
                tokens = engine.tokenize_chat(generic_messages(
                    request.messages, offered, request.tool_choice), cancel)
            else:
                tokens = engine.tokenize_chat(request.messages, cancel, tools=offered or None,
                                              reply_start=reply_start(request))
        except ModelFileError as e:  # the template refused this conversation
            raise bad_request(str(e), "messages") from None
    elif isinstance(request.prompt, str):
        tokens = model.tokenize(request.prompt, add_special=model.add_bos, parse_special=True)
    else:
        tokens = list(request.prompt)
    if not tokens:
        raise bad_request("the prompt is empty", param)
    if len(tokens) >= engine.n_ctx:  # not even one token of room for the reply
        raise bad_request(f"the prompt is {len(tokens)} tokens and the context holds "
                          f"{engine.n_ctx}: shorten it, or start the server with a larger "
                          "--ctx-size", param, "context_length_exceeded")
    return tokens


def tools_offered(request: GenerationRequest) -> tuple[dict[str, Any], ...]:
    """The tools the template is shown: none when the choice is "none"."""
    return request.tools if request.tool_choice != "none" else ()


def generic_tools(engine: ChatEngine, request: GenerationRequest) -> bool:
    """Whether the request's tools are offered in the generic JSON form: its template has no
    tool format of its own (see engine/decode/generic_tools.py)."""
    return bool(tools_offered(request)) and not engine.template.takes_tools


def generic_grammar(request: GenerationRequest) -> str:
    """The grammar of a generic tool reply: calls of the offered tools, or an answer."""
    if request.grammar_param is not None:
        raise bad_request(f"this model's chat template has no tool format, so its tool calls "
                          f"are JSON replies, which '{request.grammar_param}' cannot also "
                          "shape: send one or the other", request.grammar_param)
    schema = generic_schema(tools_offered(request), request.tool_choice,
                            request.parallel_tool_calls)
    try:
        return compile_grammar("json_schema", json.dumps(schema))
    except GrammarError as e:
        raise bad_request(f"a tool's parameters are not a schema a call can follow: {e}",
                          "tools", "invalid_json_schema") from None


def tool_names(request: GenerationRequest) -> frozenset[str] | None:
    """The names of the tools offered (None: none, and the reply is read as text only)."""
    offered = tools_offered(request)
    return frozenset(t["function"]["name"] for t in offered) if offered else None


def reply_start(request: GenerationRequest, generic: bool = False) -> str:
    """What a reply that must call a tool begins with, put after the prompt (see
    :func:`~specchat.engine.decode.tool_calls.call_start`). Nothing for a generic JSON reply:
    its grammar alone makes it a call."""
    return "" if generic else call_start(request.tool_choice)


def _fim_tokens(engine: ChatEngine, request: GenerationRequest) -> list[int] | None:
    """A fill-in-the-middle prompt; the extra files fill what the prompt and the reply's
    ``max_tokens`` leave of the context. None: an empty suffix on a model without FIM."""
    assert request.suffix is not None
    try:
        return fim_prompt(engine.model, request.prompt, request.suffix, extra=request.extra,
                          repo_level=request.kind == "infill",
                          limit=engine.n_ctx - request.settings.max_tokens)
    except FimUnsupportedError as e:
        if request.kind == "completion":
            if not request.suffix:  # nothing after the gap: what a plain completion does
                return None
            raise bad_request(str(e), "suffix", "fim_not_supported") from None
        # llama-server's answer to /infill on such a model
        raise ApiError(501, str(e), type="not_supported_error", param="input_suffix",
                       code="fim_not_supported") from None
