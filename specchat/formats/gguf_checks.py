"""What a model file must be before llama.cpp gets it: complete (every part of a split file, as
long as its tensor table says), and with a vocabulary llama.cpp can load without aborting.
The header itself is read by :mod:`specchat.formats.gguf_file`."""

from __future__ import annotations

import re
from pathlib import Path

from specchat.errors import ModelFileError
from specchat.formats.gguf_file import (
    _ARRAY,
    _INT32,
    _STRING,
    _TYPE_NAMES,
    TOKENS,
    DamagedFile,
    GgufHeader,
    read_header,
)
from specchat.formats.unchanged import WhileUnchanged

_SPLIT_RE = re.compile(r"^(?P<stem>.*)-(?P<idx>\d{5})-of-(?P<count>\d{5})\.gguf$")


def vocabulary_problem(header: GgufHeader) -> str | None:
    """Why llama.cpp would refuse (or abort on) this file's vocabulary, or None.

    llama.cpp reads ``tokenizer.ggml.tokens`` as an array of strings, replaces an empty token
    text with ``[EMPTY_<id>]`` and requires every text to be distinct (older builds, as the one
    llama-cpp-python 0.3.x ships, abort the whole process on a duplicate: GGML_ASSERT); it reads
    the scores and token types as arrays at least as long as the vocabulary.
    """
    md, kinds = header.metadata, dict(header.kinds)
    if TOKENS not in kinds and isinstance(md.get(TOKENS), list):  # a header built in code
        kinds[TOKENS] = (_ARRAY, _STRING, len(md[TOKENS]))
    if TOKENS not in kinds:
        if str(md.get("tokenizer.ggml.model", "")) in ("none", "no_vocab"):
            return "it has no vocabulary (tokenizer.ggml.model is 'none'): it cannot chat"
        return f"it has no vocabulary (no {TOKENS} in its metadata)"
    vtype, etype, n = kinds[TOKENS]
    if vtype != _ARRAY or etype != _STRING:
        return f"its {TOKENS} is not an array of strings"
    for key, allowed in (("tokenizer.ggml.scores", (6, _INT32)),
                         ("tokenizer.ggml.token_type", (_INT32,))):
        if key in kinds:
            kt, ke, kn = kinds[key]
            if kt != _ARRAY or ke not in allowed:
                return f"its {key} is not an array of {' or '.join(_TYPE_NAMES[a] for a in allowed)}"
            if kn < n:
                return f"its {key} has {kn} entries for {n} tokens"
    merges = kinds.get("tokenizer.ggml.merges")
    if merges is not None and (merges[0] != _ARRAY or merges[1] != _STRING):
        return "its tokenizer.ggml.merges is not an array of strings"
    if header.duplicate_tokens is not None:
        j, i = header.duplicate_tokens
        tokens = md.get(TOKENS)
        word = (tokens[i] or f"[EMPTY_{i}]") if tokens is not None else "?"
        return (f"its vocabulary has the token text {word[:40]!r} twice (ids {j} and {i}), "
                "which makes llama.cpp abort")
    return None


def check_vocabulary(header: GgufHeader) -> None:
    problem = vocabulary_problem(header)
    if problem is not None:
        raise ModelFileError(f"{header.path}: {problem} — this file cannot be used")


def check_complete(header: GgufHeader) -> None:
    """Raise :class:`DamagedFile` when the file is shorter than its tensor table says."""
    if header.file_size < header.data_end:
        raise DamagedFile(
            f"{header.path}: truncated GGUF file ({_mb(header.file_size)} of "
            f"{_mb(header.data_end)}) — delete it and fetch it again")


def split_index(name: str) -> tuple[int, int] | None:
    """``(part, count)`` for a split file name (``x-00002-of-00003.gguf`` → (2, 3)), else None."""
    m = _SPLIT_RE.match(name)
    return (int(m["idx"]), int(m["count"])) if m else None


def split_parts(path: Path) -> list[Path]:
    """All files of a split GGUF (``name-00001-of-00003.gguf``), or just ``[path]``."""
    m = _SPLIT_RE.match(path.name)
    if not m:
        return [path]
    count = int(m["count"])
    return [path.with_name(f"{m['stem']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]


def validate(path: Path | str, *, vocabulary: bool = True) -> GgufHeader:
    """Check that a model file (and every part of a split one) is a complete GGUF, and (with
    ``vocabulary``) that llama.cpp can load its vocabulary without aborting.

    Returns the first part's header (metadata without token texts).
    """
    path = Path(path).expanduser()
    if not path.is_file():
        read_header(path)  # raises "model file not found" / "not a file"
    parts = split_parts(path)
    known = _validated.get(str(path), parts)
    if known is not None and (known[1] or not vocabulary):
        return known[0]  # a check with the vocabulary answers one without it, not the reverse
    first: GgufHeader | None = None
    seen: list[tuple[int, int]] = []
    for part in parts:
        if not part.exists():
            raise ModelFileError(f"{path}: split model is missing its part {part.name}")
        check = vocabulary and first is None
        header = read_header(part, token_texts=check, texts_of=VOCAB_TEXTS if check else None)
        check_complete(header)
        seen.append((header.file_size, header.data_start))
        if first is None:
            if vocabulary:
                check_vocabulary(header)
                header = _without_texts(header)
            first = header
    assert first is not None
    _validated.put(str(path), parts, seen, (first, vocabulary))
    return first


# path → (the header, whether the vocabulary was checked): opening a pair validates each file
# three times (the catalog, the pair check, the loader), a quarter of a second each for a
# 150k-token vocabulary.
_validated: WhileUnchanged[tuple[GgufHeader, bool]] = WhileUnchanged()


# The token texts without the merges (as many strings again, which nothing here reads).
VOCAB_TEXTS = frozenset([TOKENS])


def _without_texts(h: GgufHeader) -> GgufHeader:
    """The header as ``token_texts=False`` reads it (string arrays dropped: the vocabulary of a
    large model is tens of MB as Python strings)."""
    meta = {k: (None if h.kinds[k][:2] == (_ARRAY, _STRING) else v)
            for k, v in h.metadata.items()}
    return GgufHeader(h.path, h.version, meta, h.tensors, h.data_start, h.file_size, h.kinds,
                      False, h.duplicate_tokens)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"
