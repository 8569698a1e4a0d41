"""Files attached to a chat message, from the moment they are picked to the message sent. No
Textual here; every function that touches the model runs in a worker thread.

- :func:`attach` reads a file (or says why not: :mod:`specchat.tools.files` decides) and counts
  its tokens with the target's tokenizer: what a chip shows.
- :func:`measure` says how the chat, with the message and its files, sits in the context: the
  stats bar's ctx figure before sending, and the refusal of a file that would overflow it.
- :func:`prepare` runs at send time: each file is read again (it may have changed or gone since
  it was attached), the message is checked against the context once more, and the result is
  what the model reads and the chat stores (each file as its path and a fenced block, then the
  typed text: :func:`~specchat.tools.files.with_files`, as ``ask --file`` sends it). The
  session finds the files in that text again for the reply's predicted output
  (:func:`~specchat.tools.files.files_in`), so a regenerated or edited reply gets them too.
- :func:`complete_path` completes a path typed after ``@`` in the message box (Tab).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.messages import Message
from specchat.errors import SpecchatError
from specchat.tools.files import (
    AttachError,
    Attachment,
    Fit,
    file_tokens,
    measure_fit,
    read_attachment,
    with_files,
)

ROOM_HINT = "remove a file, or start the app with a larger --ctx-size (n_ctx in config.yaml)"


@dataclass(frozen=True)
class AttachedFile:
    """A file waiting in the message box: what was read when it was attached, and its tokens."""

    attachment: Attachment
    tokens: int

    @property
    def path(self) -> str:
        return self.attachment.path

    @property
    def name(self) -> str:
        return self.attachment.name


@dataclass(frozen=True)
class Outgoing:
    """A message ready to send: the text the model reads (and the chat keeps; the session
    offers the files in it to the prediction drafter, ``files_in``)."""

    text: str
    fit: Fit


def attach(engine: ChatEngine, path: str, limit_bytes: int) -> AttachedFile:
    """The file at ``path`` read and counted; :class:`AttachError` says why it cannot be."""
    a = read_attachment(path, limit_bytes)
    return AttachedFile(a, file_tokens(engine.model, a))


def message_with(history: Sequence[Message], text: str,
                 files: Sequence[Attachment]) -> list[Message]:
    """The chat as the model would read it with this message (``history``: the system prompt
    and the shown branch, :meth:`Conversation.engine_messages`)."""
    return [*history, Message("user", with_files(text, list(files)))]


def measure(engine: ChatEngine, history: Sequence[Message], text: str,
            files: Sequence[AttachedFile], max_tokens: int) -> Fit:
    """How the chat sits in the context with this message and its files."""
    return measure_fit(engine, message_with(history, text, [f.attachment for f in files]),
                       [f.attachment for f in files], max_tokens,
                       counts=[f.tokens for f in files])


def prepare(engine: ChatEngine, history: Sequence[Message], text: str,
            paths: Sequence[str], limit_bytes: int, max_tokens: int) -> Outgoing:
    """The message to send, its files read again now; :class:`SpecchatError` (nothing sent)
    when one cannot be read any more or the message would not fit the context."""
    files = []
    for path in paths:
        try:
            files.append(read_attachment(path, limit_bytes))
        except AttachError as e:
            raise AttachError(f"{e} (it was attached, and is read again when the message is "
                              "sent): remove it, or put the file back") from None
    fit = measure_fit(engine, message_with(history, text, files), files, max_tokens)
    if not fit.fits:
        raise SpecchatError(fit.refusal(ROOM_HINT))
    return Outgoing(with_files(text, files), fit)


@dataclass(frozen=True)
class Completion:
    """What Tab makes of ``@partial`` in the message box: ``text`` replaces ``partial`` (the
    longest common start of the names that match, a folder with its ``/``); ``file`` when it
    names one file, to attach; ``choices``: the names that match, when several do."""

    text: str
    file: bool
    choices: tuple[str, ...]


def complete_path(partial: str, cwd: str) -> Completion:
    """Complete a path typed after ``@`` (relative to ``cwd``, or absolute, or ``~/…``), as a
    shell does: hidden entries only when the name typed starts with a dot."""
    folder, _, start = partial.rpartition("/")
    shown = folder + "/" if folder or partial.startswith("/") else ""
    where = os.path.join(cwd, os.path.expanduser(shown or "."))
    try:
        names = sorted(n for n in os.listdir(where) if n.startswith(start)
                       and (start.startswith(".") or not n.startswith(".")))
    except OSError:
        names = []
    if not names:
        return Completion(partial, False, ())
    common = os.path.commonprefix(names)  # noqa: RUF071 (names, not paths: a shared start)
    if len(names) == 1:
        full = os.path.join(where, names[0])
        if os.path.isdir(full):
            return Completion(f"{shown}{names[0]}/", False, ())
        return Completion(f"{shown}{names[0]}", True, ())
    return Completion(f"{shown}{common}", False, tuple(names))
