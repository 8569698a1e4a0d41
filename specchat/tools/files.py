"""Files attached to a message: read as UTF-8 text under a size limit, or refused with a
sentence — a folder, a device, a FIFO or socket, an unreadable or binary or non-UTF-8 file, one
over the limit. The model reads each as a fenced block headed by its path. The text is
untrusted: control characters go through :func:`safe_text`.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

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


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    if n < 1024 * 1024:
        return f"{n / 1024:.0f} KB"
    return f"{n / (1024 * 1024):.1f} MB"


def with_files(prompt: str, files: list[Attachment]) -> str:
    """The user message the model reads: each file's block, then the prompt."""
    if not files:
        return prompt
    return "\n\n".join([*(f.block() for f in files), prompt])
