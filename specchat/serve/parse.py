"""A request body, checked field by field into what the engine runs, per endpoint: a chat
completion, a completion and llama-server's ``/infill``.

Every field this server acts on is checked for its type and range, and a wrong one is a 400
naming it. ``null`` is "not given", as in OpenAI's API. Fields of OpenAI's API that would
change the reply in a way this server does not do (``n`` > 1, penalties) are refused rather
than ignored: a client must not believe it got what it asked for. Anything else unknown is
ignored, as OpenAI's servers do.

The fields the endpoints share have modules of their own: the sampler's (and the
log-probabilities') ``sampling_request.py``, a chat's messages ``message_request.py``,
constrained output (``response_format``, ``grammar``) ``constraint_request.py``, tools
``tool_request.py``.

Fill-in-the-middle is a completion's ``suffix`` or llama-server's ``/infill``
(``input_prefix``, ``input_suffix``, ``input_extra``, ``prompt``); whether the model can do it
is known only once it is loaded, so ``prompt.py`` says so, on the generation thread. Tools
(``tools``, ``tool_choice``, ``parallel_tool_calls``, assistant messages' ``tool_calls`` and
``tool`` messages) are a chat's; whether the model's template takes them is ``prompt.py``'s to
say, likewise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from specchat.config import check_setting
from specchat.engine.decode.fim import ExtraFile
from specchat.engine.decode.messages import Message
from specchat.engine.decode.sampling import SamplerSettings
from specchat.serve.api_errors import bad_request
from specchat.serve.constraint_request import constraint
from specchat.serve.fields import flag, shown, unicode_text, wrong_type
from specchat.serve.message_request import content_text, messages
from specchat.serve.sampling_request import logprobs, sampler
from specchat.serve.tool_request import tool_grammar, tools


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

