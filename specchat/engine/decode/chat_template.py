"""Render a conversation with the model's own chat template (from its GGUF metadata).

Templates are untrusted input from model files, so they run in a sandbox bounded in time and
size (:mod:`.template_sandbox`), with the helpers Hugging Face templates expect
(``raise_exception``, ``strftime_now``), as llama-cpp-python does. Models without a template
fall back to ChatML. A template too long, one that does not compile, one that fails and one
that goes over its budget are each refused with a :class:`ModelFileError`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import jinja2

from specchat.engine.decode.messages import Message
from specchat.engine.decode.template_budget import Budget, Refused
from specchat.engine.decode.template_sandbox import BoundedEnvironment, Guards
from specchat.errors import Cancelled, ModelFileError

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Real templates are a few KB and render in milliseconds; these limits are far above that.
MAX_SOURCE_CHARS = 1_000_000
RENDER_SECONDS = 3.0
BASE_VALUE_CHARS = 1_000_000  # plus 8 × the conversation's length: the largest value built


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class ChatTemplate:
    def __init__(self, source: str | None, bos_token: str, eos_token: str) -> None:
        self.is_fallback = not source
        self.source = source or CHATML
        self.bos_token = bos_token
        self.eos_token = eos_token
        if len(self.source) > MAX_SOURCE_CHARS:
            raise ModelFileError(f"the model's chat template is {len(self.source):,} characters "
                                 f"long (the limit is {MAX_SOURCE_CHARS:,}): refused")
        self._env = BoundedEnvironment()
        try:
            tree = Guards().visit(self._env.parse(self.source))
            self._template = self._env.from_string(tree)
        except jinja2.TemplateError as e:
            raise ModelFileError(f"the model's chat template does not compile: {e}") from None
        except Exception as e:  # e.g. RecursionError on absurdly nested syntax
            raise ModelFileError(f"the model's chat template does not compile: "
                                 f"{type(e).__name__}") from None

    @property
    def takes_tools(self) -> bool:
        """Whether the template renders a tool list and writes calls in a format specchat
        reads back (:mod:`specchat.engine.decode.tool_calls`)."""
        return not self.is_fallback and "tools" in self.source and "<tool_call>" in self.source

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = True,
               cancel: threading.Event | None = None,
               tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        """The prompt text; raises :class:`ModelFileError` if the template fails or goes over
        its time or size budget, :class:`Cancelled` if ``cancel`` is set meanwhile. ``tools``:
        OpenAI's tool list, handed to the template as ``tools`` (as Hugging Face does)."""
        ctx: dict[str, Any] = {
            "messages": [m.as_dict() for m in messages],
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "raise_exception": _raise,
            "strftime_now": _strftime_now,
        }
        if tools:
            ctx["tools"] = [dict(t) for t in tools]
        size = sum(len(m.content) + len(m.role) for m in messages) \
            + sum(len(json.dumps(t)) for t in tools or ())
        budget = Budget(RENDER_SECONDS, BASE_VALUE_CHARS + 8 * size, cancel)
        self._env.bounded(budget)
        try:
            out: list[str] = []
            n = 0
            for chunk in self._template.generate(**ctx):
                n += len(chunk)
                if n > budget.max_chars:
                    raise Refused(f"its output passed {budget.max_chars:,} characters")
                budget.step()
                out.append(chunk)
            return "".join(out)
        except Refused as e:
            raise ModelFileError(f"the model's chat template was stopped: {e}") from None
        except Cancelled:
            raise
        except jinja2.TemplateError as e:
            raise ModelFileError(f"the model's chat template rejected the conversation: {e}") from None
        except MemoryError:
            raise ModelFileError("the model's chat template ran out of memory") from None
        except Exception as e:  # a template can fail in any way; the user still gets a sentence
            raise ModelFileError(f"the model's chat template failed: {e}") from None
        finally:
            self._env.bounded(None)
