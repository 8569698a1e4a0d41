"""Render a conversation with the model's own chat template (from its GGUF metadata).

Templates are untrusted input from model files, so they run in Jinja's immutable sandbox, with
the helpers Hugging Face templates expect (``raise_exception``, ``strftime_now``), as
llama-cpp-python does. Models without a template fall back to ChatML.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from specchat.errors import ModelFileError

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class Message:
    role: str  # "system" | "user" | "assistant"
    content: str

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


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
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        try:
            self._template = env.from_string(self.source)
        except jinja2.TemplateError as e:
            raise ModelFileError(f"the model's chat template does not compile: {e}") from None

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> str:
        ctx: dict[str, Any] = {
            "messages": [m.as_dict() for m in messages],
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "raise_exception": _raise,
            "strftime_now": _strftime_now,
        }
        try:
            return self._template.render(**ctx)
        except jinja2.TemplateError as e:
            raise ModelFileError(f"the model's chat template rejected the conversation: {e}") from None
        except Exception as e:  # a template can fail in any way; the user still gets a sentence
            raise ModelFileError(f"the model's chat template failed: {e}") from None
