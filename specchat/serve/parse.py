"""A request body, checked field by field into what the engine runs.

Every field this server acts on is checked for its type and range (the sampling ones by the
config file's own rules, so a temperature the app refuses is refused here too) and a wrong one
is a 400 naming it. ``null`` is "not given", as in OpenAI's API. Fields of OpenAI's API that
would change the reply in a way this server does not do (``n`` > 1, penalties) are refused
rather than ignored: a client must not believe it got what it asked for. Anything else unknown
is ignored, as OpenAI's servers do.

Constrained output (``response_format``, ``grammar``) is read by ``constraint_request.py``,
tools by ``tool_request.py``.

Log-probabilities (chat's ``logprobs`` and ``top_logprobs``, a completion's ``logprobs: N``,
``/infill``'s ``n_probs``) become the sampler's ``logprobs``. Fill-in-the-middle is a
completion's ``suffix`` or llama-server's ``/infill`` (``input_prefix``, ``input_suffix``,
``input_extra``, ``prompt``); whether the model can do it is known only once it is loaded, so
the worker says so. Tools (``tools``, ``tool_choice``, ``parallel_tool_calls``, assistant
messages' ``tool_calls`` and ``tool`` messages) are a chat's; whether the model's template takes
them is the worker's to say, likewise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from specchat.config import check_setting
from specchat.engine.decode.fim import ExtraFile
from specchat.engine.decode.messages import Message, ToolCall
from specchat.engine.decode.sampling import MAX_TOP_LOGPROBS, SamplerSettings
from specchat.serve.api_errors import bad_request
from specchat.serve.constraint_request import constraint
from specchat.serve.fields import flag, shown, unicode_text, wrong_type
from specchat.serve.tool_request import tool_calls, tool_grammar, tools

MAX_STOP = 16  # stop strings per request (OpenAI allows 4; llama-server more)
# Characters per stop string: the reply checks each one's prefixes at every token, so a long
# one costs its length squared per token (docs/performance.md).
MAX_STOP_CHARS = 1000
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
         "tool": "tool"}

# The request fields that map onto the sampler, checked by the config's rules for the setting.
SAMPLING_FIELDS = {"temperature": "sampling.temperature", "top_p": "sampling.top_p",
                   "top_k": "sampling.top_k", "min_p": "sampling.min_p",
                   "max_tokens": "sampling.max_tokens"}


@dataclass(frozen=True)
class GenerationRequest:
    kind: Literal["chat", "completion", "infill"]
    settings: SamplerSettings
    model: str | None = None
    messages: tuple[Message, ...] = ()  # chat: the conversation
    prompt: str | tuple[int, ...] = ""  # completion: text or token ids; infill: the prefix
    suffix: str | None = None  # fill-in-the-middle: the text after the gap (None: no FIM)
    extra: tuple[ExtraFile, ...] = ()  # infill: other files, as context
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage: a usage chunk before [DONE]
    fates: bool = False  # specchat.fates: each token's text and fate
    # OpenAI's Predicted Outputs: the text the reply is expected to be mostly (an edited file),
    # drafted from; None when not given.
    prediction: str | None = None
    # A chat's tools (OpenAI's objects, checked) and the choice: "auto", "none", "required" or
    # the name of the function the reply must call.
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str = "none"
    parallel_tool_calls: bool = True
    # The field the settings' grammar came from ("response_format", "grammar"): where a
    # grammar the loaded model's vocabulary cannot run is blamed.
    grammar_param: str | None = None


def _sampling_value(name: str, value: Any) -> Any:
    setting = SAMPLING_FIELDS[name]
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    try:
        return check_setting(setting, value)
    except ValueError as e:
        code = "invalid_value" if number else "invalid_type"
        raise bad_request(f"'{name}' {e}", name, code) from None


def _seed(value: Any) -> int | None:
    """A seed ≥ 0; -1 is llama.cpp's "a random one", as llama-server takes it."""
    if value is None or (type(value) is int and value == -1):
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise wrong_type("seed", "a whole number", value)
    if value < 0:
        raise bad_request("'seed' must be a whole number ≥ 0 (or -1: a random one)", "seed")
    return value


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise wrong_type("stop", "a string or an array of strings", value)
    if len(value) > MAX_STOP:
        raise bad_request(f"'stop' has {len(value)} strings: at most {MAX_STOP}", "stop")
    for s in value:
        unicode_text(s, "stop")
        if len(s) > MAX_STOP_CHARS:
            raise bad_request(f"a stop string of {len(s):,} characters: at most "
                              f"{MAX_STOP_CHARS:,}", "stop")
    return tuple(value)


def sampler(doc: Mapping[str, Any], defaults: SamplerSettings) -> SamplerSettings:
    """The request's sampler: the server's defaults (config.yaml's, or the command's flags),
    changed by the fields the request gives."""
    changes: dict[str, object] = {}
    for name in SAMPLING_FIELDS:
        if doc.get(name) is not None:
            changes[name] = _sampling_value(name, doc[name])
    # Chat's newer name for max_tokens wins, as in OpenAI's API.
    if doc.get("max_completion_tokens") is not None:
        v = doc["max_completion_tokens"]
        try:
            changes["max_tokens"] = check_setting("sampling.max_tokens", v)
        except ValueError as e:
            raise bad_request(f"'max_completion_tokens' {e}", "max_completion_tokens") from None
    if "seed" in doc:
        changes["seed"] = _seed(doc["seed"])
    changes["stop"] = _stop(doc.get("stop"))
    try:
        return defaults.with_(**changes).validate()
    except ValueError as e:  # a combination the sampler refuses (min_p 1)
        raise bad_request(str(e)) from None


def _unsupported(doc: Mapping[str, Any], kind: str) -> None:
    """Refuse OpenAI fields that ask for what this server does not do (default values pass)."""
    n = doc.get("n")
    if n is not None:
        if not isinstance(n, int) or isinstance(n, bool):
            raise wrong_type("n", "a whole number", n)
        if n != 1:
            raise bad_request("'n' must be 1: this server writes one choice per request", "n")
    for name in ("frequency_penalty", "presence_penalty"):
        v = doc.get(name)
        if v is None:
            continue
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise wrong_type(name, "a number", v)
        if v != 0:
            raise bad_request(f"'{name}' is not supported: the reply is sampled exactly from the "
                              "target's distribution, which a penalty would change", name)
    if doc.get("logit_bias"):
        raise bad_request("'logit_bias' is not supported: it would change the target's "
                          "distribution", "logit_bias")
    for name in ("functions", "function_call"):
        if doc.get(name):
            raise bad_request(f"'{name}' is the old form of tools: send 'tools' and "
                              "'tool_choice'", name)
    if kind != "chat":
        for name in ("tools", "tool_choice"):
            if doc.get(name) is not None:
                raise bad_request(f"'{name}' is for chat completions (/v1/chat/completions)",
                                  name)
    if kind == "completion":
        if doc.get("echo"):
            raise bad_request("'echo' is not supported", "echo")
        best_of = doc.get("best_of")
        if best_of not in (None, 1) or isinstance(best_of, bool):
            raise bad_request("'best_of' must be 1", "best_of")


def _alternatives(value: Any, param: str) -> int:
    """How many likeliest tokens to list beside each chosen one."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise wrong_type(param, f"a whole number from 0 to {MAX_TOP_LOGPROBS}", value)
    if not 0 <= value <= MAX_TOP_LOGPROBS:
        raise bad_request(f"'{param}' must be from 0 to {MAX_TOP_LOGPROBS} (the likeliest "
                          f"tokens listed beside each chosen one), not {value}", param)
    return value


def check_top_logprobs(value: Any) -> int:
    """``top_logprobs``: how many alternatives per token, 0 to 20."""
    return _alternatives(value, "top_logprobs")


def logprobs(doc: Mapping[str, Any], kind: str) -> int | None:
    """The sampler's ``logprobs``: None for none, else how many alternatives per token.
    Chat: ``logprobs: true`` and ``top_logprobs: N``; a completion: ``logprobs: N``;
    ``/infill``: llama-server's ``n_probs: N`` (0: none, as there)."""
    if kind == "infill":
        n = doc.get("n_probs")
        return None if n is None or _alternatives(n, "n_probs") == 0 else n
    on, top = doc.get("logprobs"), doc.get("top_logprobs")
    if kind == "completion":
        if top is not None:
            raise bad_request("'top_logprobs' is chat's: a completion asks with 'logprobs': N "
                              "(the likeliest tokens listed beside each chosen one)",
                              "top_logprobs")
        return None if on is None or on is False else _alternatives(on, "logprobs")
    if on is not None and not isinstance(on, bool):
        raise wrong_type("logprobs", "true or false", on)
    if top is not None:
        _alternatives(top, "top_logprobs")
        if not on:
            raise bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs")
    return (top or 0) if on else None


def _common(doc: Mapping[str, Any], defaults: SamplerSettings, kind: str) -> dict[str, Any]:
    _unsupported(doc, kind)
    model = doc.get("model")
    if model is not None and not isinstance(model, str):
        raise wrong_type("model", "a string", model)
    stream = flag(doc, "stream")
    include_usage = False
    opts = doc.get("stream_options")
    if opts is not None:
        if not isinstance(opts, dict):
            raise wrong_type("stream_options", "an object", opts)
        include_usage = flag(opts, "include_usage", where="stream_options.")
    ext = doc.get("specchat")
    fates = False
    if ext is not None:
        if not isinstance(ext, dict):
            raise wrong_type("specchat", "an object", ext)
        v = ext.get("fates")
        if v is not None and not isinstance(v, bool):
            raise wrong_type("specchat.fates", "true or false", v)
        fates = bool(v)
    grammar, grammar_param = constraint(doc)
    settings = sampler(doc, defaults).with_(logprobs=logprobs(doc, kind), grammar=grammar)
    return dict(settings=settings, model=model, stream=stream, include_usage=include_usage,
                fates=fates, prediction=_prediction(doc.get("prediction")),
                grammar_param=grammar_param)


def _prediction(value: Any) -> str | None:
    """``{"type": "content", "content": text or text parts}``, as OpenAI takes it."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise wrong_type("prediction", "an object", value)
    kind = value.get("type")
    if kind != "content":
        raise bad_request(f"'prediction.type' must be 'content', not {shown(kind)!r}",
                          "prediction.type")
    if value.get("content") is None:
        raise bad_request("'prediction.content' is required", "prediction.content",
                          "missing_required_parameter")
    return content_text(value.get("content"), "prediction.content")


def content_text(value: Any, param: str, kinds: tuple[str, ...] = ("text",),
                 expected: str = "'text'") -> str:
    """A message's text: a string, or an array of text parts (joined), or null. ``kinds``: the
    part types read as text (``expected`` names them in the error for any other)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return unicode_text(value, param)
    if not isinstance(value, list):
        raise wrong_type(param, "a string or an array of content parts", value)
    texts = []
    for j, part in enumerate(value):
        where = f"{param}[{j}]"
        if not isinstance(part, dict):
            raise wrong_type(where, "an object", part)
        kind = part.get("type")
        if kind not in kinds:
            raise bad_request(f"'{where}.type' must be {expected}: this server reads text only, "
                              f"not {shown(kind)!r}", f"{where}.type")
        text = part.get("text")
        if not isinstance(text, str):
            raise wrong_type(f"{where}.text", "a string", text)
        texts.append(unicode_text(text, f"{where}.text"))
    return "".join(texts)


def messages(value: Any) -> tuple[Message, ...]:
    if value is None:
        raise bad_request("'messages' is required", "messages", "missing_required_parameter")
    if not isinstance(value, list):
        raise wrong_type("messages", "an array of messages", value)
    if not value:
        raise bad_request("'messages' is empty: give at least one message", "messages")
    out = []
    for i, m in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise wrong_type(where, "an object", m)
        role = m.get("role")
        if not isinstance(role, str):
            raise wrong_type(f"{where}.role", "a string", role)
        if role not in ROLES:
            raise bad_request(f"'{where}.role' must be system, developer, user, assistant or "
                              f"tool, not {role[:40]!r}", f"{where}.role")
        calls: tuple[ToolCall, ...] = ()
        if m.get("tool_calls") is not None:
            if role != "assistant":
                raise bad_request(f"'{where}.tool_calls' is an assistant message's",
                                  f"{where}.tool_calls")
            calls = tool_calls(m["tool_calls"], f"{where}.tool_calls")
        call_id = m.get("tool_call_id")
        if role == "tool":
            if not isinstance(call_id, str):
                raise bad_request(f"'{where}.tool_call_id' is required: the id of the call "
                                  "this message answers", f"{where}.tool_call_id",
                                  "missing_required_parameter")
        else:
            call_id = None
        out.append(Message(ROLES[role], content_text(m.get("content"), f"{where}.content"),
                           calls, call_id))
    return tuple(out)


def chat_request(doc: Mapping[str, Any], defaults: SamplerSettings) -> GenerationRequest:
    msgs = messages(doc.get("messages"))
    listed, choice, parallel = tools(doc)
    common = _common(doc, defaults, "chat")
    forced = tool_grammar(listed, choice)
    if forced is not None:
        if common["grammar_param"] is not None:
            raise bad_request(f"'tool_choice' {choice!r} makes the reply a call: send no "
                              f"'{common['grammar_param']}' with it", common["grammar_param"])
        common["settings"] = common["settings"].with_(grammar=forced)
    return GenerationRequest("chat", messages=msgs, tools=listed, tool_choice=choice,
                             parallel_tool_calls=parallel, **common)


def _prompt(value: Any, batch: bool = True) -> str | tuple[int, ...]:
    """Text, or token ids; OpenAI's batch forms (several prompts) are refused, a batch of one
    is its prompt (one level: OpenAI's forms nest no deeper)."""
    if value is None:
        raise bad_request("'prompt' is required", "prompt", "missing_required_parameter")
    if isinstance(value, str):
        return unicode_text(value, "prompt")
    if isinstance(value, list):
        if batch and len(value) == 1 and isinstance(value[0], (str, list)):
            return _prompt(value[0], batch=False)  # a batch of one
        if all(isinstance(t, int) and not isinstance(t, bool) for t in value):
            return tuple(value)
        if batch and all(isinstance(t, (str, list)) for t in value):
            raise bad_request("one prompt per request: this server writes one choice",
                              "prompt")
    raise wrong_type("prompt", "a string or an array of token ids", value)


def _suffix(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise wrong_type("suffix", "a string", value)
    return value


def completion_request(doc: Mapping[str, Any], defaults: SamplerSettings) -> GenerationRequest:
    prompt = _prompt(doc.get("prompt"))
    return GenerationRequest("completion", prompt=prompt, suffix=_suffix(doc.get("suffix")),
                             **_common(doc, defaults, "completion"))


def _text(doc: Mapping[str, Any], name: str) -> str:
    v = doc.get(name)
    if v is None:
        return ""
    if not isinstance(v, str):
        raise wrong_type(name, "a string", v)
    return v


def _extra(value: Any) -> tuple[ExtraFile, ...]:
    """llama-server's ``input_extra``: ``[{"filename": ..., "text": ...}, ...]``."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise wrong_type("input_extra", 'an array of {"filename", "text"} objects', value)
    out = []
    for i, chunk in enumerate(value):
        where = f"input_extra[{i}]"
        if not isinstance(chunk, dict):
            raise wrong_type(where, 'an object {"filename", "text"}', chunk)
        text, name = chunk.get("text", ""), chunk.get("filename", "tmp")  # llama-server's
        if not isinstance(text, str):
            raise wrong_type(f"{where}.text", "a string", text)
        if not isinstance(name, str):
            raise wrong_type(f"{where}.filename", "a string", name)
        out.append(ExtraFile(name, text))
    return tuple(out)


def infill_request(doc: Mapping[str, Any], defaults: SamplerSettings) -> GenerationRequest:
    """llama-server's ``/infill``: its ``n_predict`` is ``max_tokens`` (−1: the default), its
    ``prompt`` is text that continues the prefix (the current line, for llama.vim)."""
    doc = dict(doc)
    n_predict = doc.pop("n_predict", None)
    if n_predict is not None and doc.get("max_tokens") is None and n_predict != -1:
        if not isinstance(n_predict, int) or isinstance(n_predict, bool):
            raise wrong_type("n_predict", "a whole number", n_predict)
        try:
            doc["max_tokens"] = check_setting("sampling.max_tokens", n_predict)
        except ValueError as e:
            raise bad_request(f"'n_predict' {e} (or -1: the server's default)",
                              "n_predict") from None
    repeat = doc.get("repeat_penalty")
    if repeat is not None and (not isinstance(repeat, (int, float)) or isinstance(repeat, bool)):
        raise wrong_type("repeat_penalty", "a number", repeat)
    if repeat is not None and repeat != 1:
        raise bad_request("'repeat_penalty' is not supported: the reply is sampled exactly from "
                          "the target's distribution, which a penalty would change",
                          "repeat_penalty")
    prefix = _text(doc, "input_prefix") + _text(doc, "prompt")
    return GenerationRequest("infill", prompt=prefix, suffix=_text(doc, "input_suffix"),
                             extra=_extra(doc.get("input_extra")),
                             **_common(doc, defaults, "infill"))

