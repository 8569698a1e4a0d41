"""Files attached to a message: read as UTF-8 text under a size limit, or refused with a
sentence — a folder, a device, a FIFO or socket, an unreadable or binary or non-UTF-8 file, one
over the limit. The model reads each as a fenced block headed by its path. The text is
untrusted: control characters go through :func:`safe_text`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.messages import Message
from specchat.engine.llama.model import LlamaModel
from specchat.errors import SpecchatError
from specchat.textsafe import safe_text

LANGUAGES = {".py": "python", ".js": "javascript", ".ts": "typescript", ".rs": "rust",
             ".go": "go", ".c": "c", ".h": "c", ".cpp": "cpp", ".java": "java", ".rb": "ruby",
             ".sh": "bash", ".md": "markdown", ".json": "json", ".yaml": "yaml", ".yml": "yaml",
             ".toml": "toml", ".html": "html", ".css": "css", ".sql": "sql", ".txt": ""}


class AttachError(SpecchatError):
    """A file that cannot be attached, and why."""


@dataclass(frozen=True)
class Attachment:
    """A file's path (as given) and the text that was sent to the model."""

    path: str
    text: str
    size: int  # bytes read

    @property
    def name(self) -> str:
        return Path(self.path).name

    def block(self) -> str:
        """The file as the model reads it: its path, then its text in a fence longer than any
        run of backticks inside it."""
        longest = run = 0
        for ch in self.text:
            run = run + 1 if ch == "`" else 0
            longest = max(longest, run)
        fence = "`" * max(3, longest + 1)
        lang = LANGUAGES.get(Path(self.path).suffix.lower(), "")
        body = self.text if self.text.endswith("\n") or not self.text else self.text + "\n"
        return f"{self.path}\n{fence}{lang}\n{body}{fence}"


def read_attachment(path: str, limit_bytes: int) -> Attachment:
    """The file at ``path`` as an attachment, or :class:`AttachError` saying why not."""
    shown = safe_text(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)  # a FIFO must not block the open
    try:
        fd = os.open(os.path.expanduser(path), flags)
    except FileNotFoundError:
        raise AttachError(f"{shown}: no such file") from None
    except IsADirectoryError:
        raise AttachError(f"{shown} is a folder: attach the files in it one by one") from None
    except OSError as e:
        raise AttachError(f"{shown}: cannot read it: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise AttachError(f"{shown} is a folder: attach the files in it one by one")
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO (a pipe)" if stat.S_ISFIFO(st.st_mode) else
                    "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
                    "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise AttachError(f"{shown} is {kind}, not a file: only text files can be "
                              "attached")
        if st.st_size > limit_bytes:
            raise AttachError(f"{shown} is {_size(st.st_size)}, over the {_size(limit_bytes)} "
                              "limit for an attached file (file_limit_kb in config.yaml)")
        try:
            data = os.read(fd, limit_bytes + 1)
            while len(data) <= limit_bytes:
                more = os.read(fd, limit_bytes + 1 - len(data))
                if not more:
                    break
                data += more
        except OSError as e:
            raise AttachError(f"{shown}: cannot read it: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if len(data) > limit_bytes:  # it grew since fstat
        raise AttachError(f"{shown} is over the {_size(limit_bytes)} limit for an attached "
                          "file (file_limit_kb in config.yaml)")
    if b"\0" in data:
        raise AttachError(f"{shown} looks binary (it holds NUL bytes): only text files can be "
                          "attached")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise AttachError(f"{shown} is not UTF-8 text (byte {e.start}): only UTF-8 text files "
                          "can be attached") from None
    return Attachment(path, safe_text(text.removeprefix("\ufeff")), len(data))


def size_text(n: int) -> str:
    """A file's size for people: ``812 bytes``, ``15 KB``, ``1.2 MB``."""
    return _size(n)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    if n < 1024 * 1024:
        return f"{n / 1024:.0f} KB"
    return f"{n / (1024 * 1024):.1f} MB"


def files_in(message: str) -> list[str]:
    """The texts of the files a user message carries (see :func:`split_files`): what a
    regenerated reply is offered as its predicted output. Text that only looks like such a
    block is taken too, which costs nothing but a guess (a prediction is exact whatever it
    says)."""
    return [text for _, text in split_files(message)[0]]


def looks_like_path(line: str) -> bool:
    """One word with a ``/`` or a ``.`` in it, not ending in punctuation: ``orders.py``,
    ``src/app``. (A file attached by a name without either, ``Makefile``, is then shown and
    offered as the words it is part of: nothing is lost but the shorter view.)"""
    return bool(line) and not any(c.isspace() for c in line) and ("/" in line or "." in line) \
        and not line.endswith((":", ".", ",", ";", "!", "?"))


def split_files(message: str) -> tuple[list[tuple[str, str]], str]:
    """A user message as :func:`with_files` wrote it: the (path, text) of each file block at
    its start (the path line, the fence, the text, the closing fence), and the words after
    them. A file without a final newline comes back with one. The path line must read as a
    path (:func:`looks_like_path`), so that "Fix this:" over a pasted code block is words."""
    out: list[tuple[str, str]] = []
    rest = message
    while True:
        path, nl, after = rest.partition("\n")
        opening, nl2, body = after.partition("\n")
        fence = opening[:len(opening) - len(opening.lstrip("`"))]
        lang = opening[len(fence):]
        if not (nl and nl2 and looks_like_path(path) and len(fence) >= 3
                and (lang == "" or lang.isalnum())):
            return out, rest
        if body.startswith(f"{fence}\n\n"):  # an empty file
            out.append((path, ""))
            rest = body[len(fence) + 2:]
            continue
        end = body.find(f"\n{fence}\n\n")
        if end < 0:
            return out, rest
        out.append((path, body[:end + 1]))
        rest = body[end + len(fence) + 3:]


def with_files(prompt: str, files: list[Attachment]) -> str:
    """The user message the model reads: each file's block, then the prompt."""
    if not files:
        return prompt
    return "\n\n".join([*(f.block() for f in files), prompt])


def file_tokens(model: LlamaModel, attachment: Attachment) -> int:
    """The file's text in the model's tokens (its fence and path line aside)."""
    return len(model.tokenize(attachment.text, add_special=False, parse_special=False))


@dataclass(frozen=True)
class Fit:
    """How a message with its files sits in the context, measured with the target's tokenizer
    and chat template.

    ``used``: the prompt as it would be sent (every message given). ``needed``: the system
    prompt and the last message alone, what dropping old turns (as the engine does) cannot
    shrink: the message fits when ``needed`` leaves ``reserve`` tokens for the reply."""

    used: int
    needed: int
    n_ctx: int
    reserve: int
    files: tuple[tuple[str, int], ...]  # (name, tokens) of each attached file

    @property
    def fits(self) -> bool:
        return self.needed + self.reserve <= self.n_ctx

    def refusal(self, hint: str) -> str:
        """Why the message does not fit, with the numbers; ``hint`` says how to make room."""
        sizes = ", ".join(f"{safe_text(name)} {n:,} tokens" for name, n in self.files)
        return (f"the message is {self.needed:,} tokens with its files ({sizes}); the context "
                f"holds {self.n_ctx:,} with {self.reserve:,} kept for the reply: {hint}")


def measure_fit(engine: ChatEngine, messages: Sequence[Message], files: Sequence[Attachment],
                max_tokens: int, tools: Sequence[Mapping[str, Any]] | None = None,
                counts: Sequence[int] | None = None) -> Fit:
    """``messages`` (the last one carrying ``files``, see :func:`with_files`) measured against
    the context; ``counts``: the files' tokens when already known (:func:`file_tokens`)."""
    used = len(engine.tokenize_chat(messages, tools=tools))
    system = [m for m in messages[:1] if m.role == "system"]
    alone = [*system, *messages[-1:]] if len(messages) > len(system) + 1 else list(messages)
    needed = used if len(alone) == len(messages) else \
        len(engine.tokenize_chat(alone, tools=tools))
    sizes = list(counts) if counts is not None else [file_tokens(engine.model, f) for f in files]
    return Fit(used, needed, engine.n_ctx, engine.reserve(max_tokens),
               tuple((f.name, n) for f, n in zip(files, sizes, strict=True)))
