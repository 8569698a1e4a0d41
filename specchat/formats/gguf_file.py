"""A fast, strict reader of GGUF headers: metadata, tensor table and expected file size.

llama.cpp only logs to stderr when it cannot load a file; reading the header ourselves first
lets us say *why* ("not a GGUF file", "truncated: 41 MB of 98 MB") before handing it over.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from specchat.errors import ModelFileError

MAGIC = b"GGUF"
_SCALARS: dict[int, tuple[str, int]] = {
    0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4),
    6: ("<f", 4), 7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8),
}
_NUMPY: dict[int, str] = {
    0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?",
    10: "<u8", 11: "<i8", 12: "<f8",
}
_STRING, _ARRAY, _UINT32, _INT32 = 8, 9, 4, 5
_TYPE_NAMES = {0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32", 5: "int32",
               6: "float32", 7: "bool", 8: "string", 9: "array", 10: "uint64", 11: "int64",
               12: "float64"}
# llama.cpp's own limits (ggml.h): a tensor has at most 4 dimensions and a name under 64 bytes.
MAX_DIMS = 4
MAX_TENSOR_NAME = 64
_INT64_MAX = (1 << 63) - 1
TOKENS = "tokenizer.ggml.tokens"
DEFAULT_ALIGNMENT = 32


@dataclass
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(self.ggml_type)]
        return self.n_elements // block * type_size


@dataclass
class GgufHeader:
    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo] = field(default_factory=list)
    data_start: int = 0
    file_size: int = 0
    # What each key holds: (value type, element type of an array or -1, array length or -1).
    # Kept for the string arrays that are skipped when token texts are not read.
    kinds: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    token_texts: bool = True  # string arrays (the vocabulary) were read
    # The first two token ids whose texts llama.cpp sees as equal (compared as bytes), if the
    # texts were read; see vocabulary_problem.
    duplicate_tokens: tuple[int, int] | None = None

    @property
    def data_end(self) -> int:
        return self.data_start + max((t.offset + t.nbytes for t in self.tensors), default=0)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "unknown"))

    @property
    def n_params(self) -> int:
        return sum(t.n_elements for t in self.tensors)

    def arch_value(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(f"{self.architecture}.{key}", default)


class DamagedFile(ModelFileError):
    """The file is cut short or its header is inconsistent: fetch it again."""


class TruncatedHeader(DamagedFile):
    """The bytes end inside the header (a cut file, or a prefix too short to hold it)."""


class _Cursor:
    """Reads a header from ``buf`` (the whole file, or a prefix of a ``file_size``-byte file).

    Every length read from the file is checked against the bytes left in the file before
    anything is allocated for it, so memory stays linear in the header actually present.
    """

    def __init__(self, buf: mmap.mmap | bytes, path: Path, file_size: int) -> None:
        self.buf = buf
        self.pos = 0
        self.path = path
        self.file_size = file_size

    def fail(self, what: str, at: int, problem: str) -> DamagedFile:
        return DamagedFile(f"{self.path}: damaged GGUF header: {what} at byte {at}: {problem}"
                           " — fetch the file again")

    def beyond_file(self, what: str, at: int, problem: str) -> DamagedFile:
        if self.file_size == len(self.buf):  # the whole file: it may have been cut there
            return TruncatedHeader(f"{self.path}: truncated GGUF header (or a damaged length): "
                                   f"{what} at byte {at}: {problem} — fetch the file again")
        return self.fail(what, at, problem)

    def need(self, n: int, what: str) -> None:
        if self.pos + n > self.file_size:
            raise self.beyond_file(what, self.pos, f"{n:,} bytes needed, the file ends at byte "
                                   f"{self.file_size:,}")
        if self.pos + n > len(self.buf):
            raise TruncatedHeader(f"{self.path}: the first {len(self.buf):,} bytes end inside "
                                  "the GGUF header")

    def scalar(self, fmt: str, size: int, what: str) -> Any:
        self.need(size, what)
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return v

    def count(self, what: str, min_item: int) -> int:
        """An array or string length, which the rest of the file must be able to hold."""
        at = self.pos
        n = int(self.scalar("<Q", 8, what))
        if n * min_item > self.file_size - self.pos:
            raise self.beyond_file(what, at, f"length {n:,} does not fit in the "
                                   f"{self.file_size - self.pos:,} bytes left in the file")
        return n

    def string(self, what: str) -> str:
        n = self.count(f"{what} (string length)", 1)
        self.need(n, what)
        s = bytes(self.buf[self.pos : self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def skip_string(self, what: str) -> None:
        n = self.count(f"{what} (string length)", 1)
        self.need(n, what)
        self.pos += n

    def strings(self, count: int, keep: bool, what: str) -> list[str] | None:
        """``count`` strings (a vocabulary: 150k+), read in one tight loop; on the first length
        that does not fit, the checked readers above say what is wrong."""
        buf, pos, size = self.buf, self.pos, len(self.buf)
        out: list[str] | None = [] if keep else None
        unpack = struct.unpack_from
        for i in range(count):
            n = unpack("<Q", buf, pos)[0] if pos + 8 <= size else size
            if pos + 8 + n > size:
                self.pos = pos
                self.skip_string(f"{what}[{i}]")  # raises, naming the entry
            pos += 8
            if out is not None:
                out.append(buf[pos : pos + n].decode("utf-8", errors="replace"))
            pos += n
        self.pos = pos
        return out

    def value(self, vtype: int, keep_strings: bool, what: str) -> Any:
        if vtype in _SCALARS:
            return self.scalar(*_SCALARS[vtype], what)
        if vtype == _STRING:
            return self.string(what)
        if vtype != _ARRAY:
            raise self.fail(what, self.pos - 4, f"unknown value type {vtype}")
        at = self.pos
        etype = self.scalar("<I", 4, f"{what} (array type)")
        if etype in _NUMPY:
            dt = np.dtype(_NUMPY[etype])
            count = self.count(f"{what} (array length)", dt.itemsize)
            self.need(count * dt.itemsize, what)
            arr = np.frombuffer(self.buf, dtype=dt, count=count, offset=self.pos).copy()
            self.pos += count * dt.itemsize
            return arr
        if etype == _STRING:
            return self.strings(self.count(f"{what} (array length)", 8), keep_strings, what)
        if etype == _ARRAY:  # gguf-py writes these; llama.cpp refuses the whole file
            raise self.fail(what, at, "an array of arrays, which llama.cpp cannot read")
        raise self.fail(what, at, f"unknown array element type {etype}")


def read_header(path: Path | str, *, token_texts: bool = True,
                texts_of: frozenset[str] | None = None) -> GgufHeader:
    """Parse a GGUF header; raise :class:`ModelFileError` with a plain reason if it is bad.

    With ``token_texts=False`` string arrays (the vocabulary) are skipped, which is faster
    (``texts_of``: read only these keys' string arrays, e.g. ``gguf_checks.VOCAB_TEXTS``).
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise ModelFileError(f"model file not found: {path}")
    if not path.is_file():
        raise ModelFileError(f"not a file: {path}")
    size = path.stat().st_size
    if size < 24:
        raise ModelFileError(f"{path}: not a GGUF file (only {size} bytes)")
    with path.open("rb") as fh:
        if fh.read(4) != MAGIC:
            raise ModelFileError(f"{path}: not a GGUF file (wrong magic bytes)")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _parse(_Cursor(buf, path, size), token_texts, texts_of)


def _parse(cur: _Cursor, token_texts: bool, texts_of: frozenset[str] | None = None
           ) -> GgufHeader:
    cur.pos = 4
    version = cur.scalar("<I", 4, "version")
    if version not in (2, 3):
        raise ModelFileError(f"{cur.path}: unsupported GGUF version {version}")
    n_tensors = cur.count("tensor count", 24)  # name length, n_dims, type, offset
    n_kv = cur.count("metadata count", 13)  # key length, type, a one-byte value
    meta: dict[str, Any] = {}
    duplicate: tuple[int, int] | None = None
    kinds: dict[str, tuple[int, int, int]] = {}
    where: dict[str, int] = {}
    for i in range(n_kv):
        at = cur.pos
        key = cur.string(f"metadata key {i}")
        if key in meta:
            raise cur.fail(f"metadata key {key!r}", at, "the key appears twice")
        where[key] = cur.pos
        vtype = cur.scalar("<I", 4, f"metadata {key!r} (type)")
        if vtype == _ARRAY and cur.pos + 12 <= len(cur.buf):
            etype, count = struct.unpack_from("<IQ", cur.buf, cur.pos)
            kinds[key] = (vtype, etype, count)
        else:
            kinds[key] = (vtype, -1, -1)
        keep = token_texts if texts_of is None else key in texts_of
        start = cur.pos
        meta[key] = cur.value(vtype, keep, f"metadata {key!r}")
        if key == TOKENS and isinstance(meta[key], list):
            duplicate = _duplicate(meta[key], cur.buf, start)
    align = _alignment(cur, meta, kinds, where.get("general.alignment", 0))
    tensors: list[TensorInfo] = []
    offsets_at: list[int] = []
    names: set[str] = set()
    for i in range(n_tensors):
        at = cur.pos
        name = cur.string(f"tensor {i} name")
        what = f"tensor {i} ({name[:MAX_TENSOR_NAME]!r})"
        if len(name.encode("utf-8", errors="replace")) >= MAX_TENSOR_NAME:
            raise cur.fail(f"tensor {i} name", at, f"longer than {MAX_TENSOR_NAME - 1} bytes")
        if name in names:
            raise cur.fail(what, at, "the name appears twice")
        names.add(name)
        dims_at = cur.pos
        n_dims = cur.scalar("<I", 4, f"{what} n_dims")
        if n_dims > MAX_DIMS:
            raise cur.fail(f"{what} n_dims", dims_at, f"{n_dims} dimensions (at most {MAX_DIMS})")
        shape = tuple(cur.scalar("<Q", 8, f"{what} shape") for _ in range(n_dims))
        n = 1
        for d in shape:
            n *= d
        if any(d > _INT64_MAX for d in shape) or n > _INT64_MAX:
            raise cur.fail(f"{what} shape", dims_at + 4, f"{list(shape)} overflows")
        type_at = cur.pos
        ggml_type = cur.scalar("<I", 4, f"{what} type")
        sizes = _quant_sizes(ggml_type)
        if sizes is None:
            raise cur.fail(f"{what} type", type_at, f"unknown tensor type {ggml_type}")
        if shape and shape[0] % sizes[0]:
            raise cur.fail(f"{what} shape", dims_at + 4,
                           f"{shape[0]} values per row is not a multiple of its type's block "
                           f"size {sizes[0]}")
        offsets_at.append(cur.pos)
        offset = cur.scalar("<Q", 8, f"{what} offset")
        tensors.append(TensorInfo(name, shape, ggml_type, offset))
    data_start = (cur.pos + align - 1) // align * align
    expected = 0
    for i, t in enumerate(tensors):
        # As llama.cpp requires: tensors back to back in table order, each padded to alignment.
        if t.offset != expected:
            raise cur.fail(f"tensor {i} ({t.name!r}) offset", offsets_at[i],
                           f"{t.offset:,}, expected {expected:,}")
        expected += (t.nbytes + align - 1) // align * align
    return GgufHeader(cur.path, version, meta, tensors, data_start, cur.file_size, kinds,
                      token_texts, duplicate)


def _duplicate(texts: list[str], buf: mmap.mmap | bytes, start: int) -> tuple[int, int] | None:
    """The first pair of ids whose token texts llama.cpp would see as the same.

    llama.cpp compares the raw bytes, after naming an empty text ``[EMPTY_<id>]``. Decoded
    texts that are all distinct (the usual case, checked at C speed) have distinct bytes; only
    otherwise are the bytes (from ``start``, the array's header) walked: two invalid UTF-8
    sequences decode alike but are different tokens.
    """
    distinct = set(texts)
    if len(distinct) == len(texts) and "" not in distinct:
        return None
    pos = start + 12  # element type, count
    seen: dict[bytes, int] = {}
    for i in range(len(texts)):
        (n,) = struct.unpack_from("<Q", buf, pos)
        word = bytes(buf[pos + 8 : pos + 8 + n]) or f"[EMPTY_{i}]".encode()
        pos += 8 + n
        j = seen.setdefault(word, i)
        if j != i:
            return j, i
    return None


def _alignment(cur: _Cursor, meta: dict[str, Any], kinds: dict[str, tuple[int, int, int]],
               at: int) -> int:
    key = "general.alignment"
    if key not in meta:
        return DEFAULT_ALIGNMENT
    # llama.cpp reads it as a uint32 and aborts the process on any other type.
    value = meta[key]
    if kinds[key][0] != _UINT32:
        raise cur.fail(f"metadata {key!r}", at, f"type {_TYPE_NAMES.get(kinds[key][0])}, "
                       "expected uint32")
    if value <= 0 or value & (value - 1):
        raise cur.fail(f"metadata {key!r}", at, f"{value} is not a power of two")
    return int(value)


def _quant_sizes(ggml_type: int) -> tuple[int, int] | None:
    try:
        return GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        return None


def read_header_bytes(data: bytes, label: Path, file_size: int, *,
                      token_texts: bool = True) -> GgufHeader:
    """Parse a header from the first bytes of a file (e.g. fetched with a Range request).

    Raises :class:`TruncatedHeader` when ``data`` ends inside the header: fetch more.
    """
    if data[:4] != MAGIC:
        raise ModelFileError(f"{label}: not a GGUF file (wrong magic bytes)")
    return _parse(_Cursor(data, label, max(file_size, len(data))), token_texts)
