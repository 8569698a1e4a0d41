"""A chat's reply format as the grammar its replies are masked by. No Textual here.

:func:`compile_format` compiles a :class:`~specchat.store.reply_format.ReplyFormat` with the
engine's ``compile_grammar`` (llguidance): a large schema can take a moment, so the app calls it
from worker threads only — the format dialog's check before saving, and the reply's worker
(:func:`reply_sampling`, in ``session/worker.py``) before it generates. Compiled grammars are
kept (by kind and text), so the reply after the dialog's check does not compile again.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from specchat.engine.decode.grammar import GrammarError, GrammarKind, compile_grammar
from specchat.engine.decode.sampling import SamplerSettings
from specchat.errors import SpecchatError
from specchat.store.reply_format import ReplyFormat
from specchat.textsafe import safe_text

MAX_FILE_BYTES = 1 << 20  # a schema or a grammar is text a person wrote: 1 MiB is plenty


def compile_format(fmt: ReplyFormat) -> str | None:
    """The llguidance grammar of ``fmt``; None for free text. Raises :class:`GrammarError` with
    a one-line reason. Slow on a large schema: call it from a worker thread."""
    kind = fmt.kind
    if kind == "text":
        return None
    return _compiled(kind, fmt.source if fmt.uses_source else None)


@lru_cache(maxsize=32)
def _compiled(kind: GrammarKind, source: str | None) -> str:
    return compile_grammar(kind, source)


def reply_sampling(sampling: SamplerSettings, fmt: ReplyFormat) -> SamplerSettings:
    """A reply's sampler settings under the chat's format: ``grammar`` set to its compiled
    grammar; ``sampling`` as it is for free text. A format that no longer compiles (a saved
    schema an upgraded llguidance reads differently) raises :class:`GrammarError` saying so."""
    if not fmt.constrained:
        return sampling
    try:
        grammar = compile_format(fmt)
    except GrammarError as e:
        raise GrammarError(f"this chat's reply format ({fmt.label}) does not compile: {e}. "
                           "F10 changes it.") from None
    return sampling.with_(grammar=grammar)


def read_format_file(path: str) -> str:
    """The text of a schema or grammar file the user named, or a :class:`SpecchatError` with a
    one-line reason (missing, a folder, too large, not UTF-8, unreadable)."""
    text = path.strip()
    if not text:
        raise SpecchatError("type the path of a schema or grammar file first")
    p = Path(os.path.expanduser(text))
    shown = safe_text(text)
    try:
        if p.is_dir():
            raise SpecchatError(f"{shown} is a folder, not a file")
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise SpecchatError(f"{shown} is {size / (1 << 20):.1f} MiB: too large for a schema "
                                f"or a grammar (at most {MAX_FILE_BYTES >> 20} MiB)")
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecchatError(f"no such file: {shown}") from None
    except UnicodeDecodeError:
        raise SpecchatError(f"{shown} is not UTF-8 text") from None
    except OSError as e:
        raise SpecchatError(f"cannot read {shown}: {safe_text(e.strerror or str(e))}") from None
