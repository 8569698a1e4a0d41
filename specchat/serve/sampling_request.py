"""A request's sampler: its sampling fields, seed, stop strings and log-probabilities, checked
into the :class:`~specchat.engine.decode.sampling.SamplerSettings` the engine runs.

The sampling fields are checked by the config file's own rules for the setting, so a
temperature the app refuses is refused here too, and a wrong one is a 400 naming it; the
request changes the server's defaults (config.yaml's, or the command's flags) only where it
gives a field (``null`` is "not given").

Log-probabilities (chat's ``logprobs`` and ``top_logprobs``, a completion's ``logprobs: N``,
``/infill``'s ``n_probs``) become the sampler's ``logprobs``: how many alternatives to list
beside each chosen token.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specchat.config import check_setting
from specchat.engine.decode.sampling import MAX_TOP_LOGPROBS, SamplerSettings
from specchat.serve.api_errors import bad_request
from specchat.serve.fields import unicode_text, wrong_type

MAX_STOP = 16  # stop strings per request (OpenAI allows 4; llama-server more)
# Characters per stop string: the reply checks each one's prefixes at every token, so a long
# one costs its length squared per token (docs/performance.md).
MAX_STOP_CHARS = 1000

# The request fields that map onto the sampler, checked by the config's rules for the setting.
SAMPLING_FIELDS = {"temperature": "sampling.temperature", "top_p": "sampling.top_p",
                   "top_k": "sampling.top_k", "min_p": "sampling.min_p",
                   "max_tokens": "sampling.max_tokens"}


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
