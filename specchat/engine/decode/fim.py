"""Fill-in-the-middle prompts: the text before and after a gap, in the model's own FIM tokens.

The layout is llama-server's (``format_infill``), prefix-suffix-middle order:

    [BOS] [REP]myproject\\n [SEP]file0\\n text0 [SEP]file1\\n text1 … [SEP]filename\\n
    [PRE]prefix [SUF]suffix [MID]

The repository part (``repo_level``: ``/infill``, with its ``input_extra`` files) is written
only when there are extra files, and only where the vocabulary has the tokens — Qwen2.5-Coder's
``<|repo_name|>`` and ``<|file_sep|>``; without a file separator each extra file follows a
plain-text ``--- snippet ---`` line, as llama-server writes it. The extra files are context to
fill the room left: only as many of their last tokens as fit under ``limit`` are kept (the
nearest ones, as llama-server keeps). Prefix and suffix are kept whole, and the text is
tokenized without parsing special markers, so a file that contains ``<|endoftext|>`` is read
as text.

Without extra files the prompt is the file-level one, token for token what a completion with
a ``suffix`` sends, so both routes end the middle at the same place: llama-server's header
that names no file (its placeholder repository, then ``filename``) made Qwen2.5-Coder 1.5B
write on past the middle to the token limit, where the file-level prompt ends it.

Generation then continues after ``[MID]``; the model ends the middle with an end-of-generation
token (llama.cpp counts the FIM pad, repository and file-separator tokens as such). The reply
is an ordinary decoder run over these tokens: speculation and the n-gram lookup see the prefix
and the suffix like any prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.vocab import FimTokens, fim_tokens
from specchat.errors import SpecchatError

REPO_NAME = "myproject"  # llama-server's placeholder repository and current-file names
CURRENT_FILE = "filename"
SNIPPET = "\n\n--- snippet ---\n\n"  # between extra files when there is no file separator


class FimUnsupportedError(SpecchatError):
    """The model's vocabulary has no fill-in-the-middle tokens."""


@dataclass(frozen=True)
class ExtraFile:
    """Another file's text, given as context before the one being edited."""

    filename: str
    text: str


def require_fim(model: LlamaModel) -> FimTokens:
    fim = fim_tokens(model)
    if fim is None:
        raise FimUnsupportedError(
            f"fill-in-the-middle needs a model whose vocabulary has FIM tokens (prefix, suffix "
            f"and middle, such as Qwen2.5-Coder's <|fim_prefix|>, <|fim_suffix|>, "
            f"<|fim_middle|>); {model.name} has none")
    return fim


def fim_prompt(model: LlamaModel, prefix: str | Sequence[int], suffix: str, *,
               extra: Sequence[ExtraFile] = (), repo_level: bool = False,
               limit: int = 0) -> list[int]:
    """The prompt's tokens (see the module docstring). ``prefix`` may be token ids already.
    The repository part is cut from its front so that the whole takes at most ``limit``
    tokens (prefix and suffix are never cut: the caller refuses what does not fit).
    Raises :class:`FimUnsupportedError` for a model without FIM tokens."""
    fim = require_fim(model)

    def tok(text: str) -> list[int]:
        return model.tokenize(text, add_special=False, parse_special=False)

    head = [model.bos] if model.add_bos and model.bos >= 0 else []
    before = tok(prefix) if isinstance(prefix, str) else list(prefix)
    core = [fim.pre, *before, fim.suf, *tok(suffix), fim.mid]
    if not repo_level or not extra:
        return head + core
    files: list[int] = []
    if fim.rep is not None:
        files += [fim.rep, *tok(REPO_NAME + "\n")]
    for f in extra:
        files += [fim.sep, *tok(f.filename + "\n")] if fim.sep is not None else tok(SNIPPET)
        files += tok(f.text)
    if fim.sep is not None:
        files += [fim.sep, *tok(CURRENT_FILE + "\n")]
    keep = max(0, min(limit - len(head) - len(core), len(files)))
    return head + files[len(files) - keep:] + core
