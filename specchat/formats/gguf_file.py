"""A fast, strict reader of GGUF headers: metadata, tensor table and expected file size.

llama.cpp only logs to stderr when it cannot load a file; reading the header ourselves first
lets us say *why* ("not a GGUF file", "truncated: 41 MB of 98 MB") before handing it over.
"""

from __future__ import annotations

import mmap
import re
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
_STRING, _ARRAY = 8, 9
_SPLIT_RE = re.compile(r"^(?P<stem>.*)-(?P<idx>\d{5})-of-(?P<count>\d{5})\.gguf$")


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


class TruncatedHeader(ModelFileError):
    """The bytes end inside the header (a cut file, or a prefix too short to hold it)."""


class _Cursor:
    def __init__(self, buf: mmap.mmap | bytes, path: Path) -> None:
        self.buf = buf
        self.pos = 0
        self.path = path

    def need(self, n: int) -> None:
        if self.pos + n > len(self.buf):
            raise TruncatedHeader(f"{self.path}: truncated GGUF header (ends at byte {len(self.buf)})")

    def scalar(self, fmt: str, size: int) -> Any:
        self.need(size)
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return v

    def string(self) -> str:
        n = self.scalar("<Q", 8)
        self.need(n)
        s = bytes(self.buf[self.pos : self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, vtype: int, keep_strings: bool) -> Any:
        if vtype in _SCALARS:
            return self.scalar(*_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype = self.scalar("<I", 4)
            count = self.scalar("<Q", 8)
            if etype in _NUMPY:
                dt = np.dtype(_NUMPY[etype])
                self.need(count * dt.itemsize)
                arr = np.frombuffer(self.buf, dtype=dt, count=count, offset=self.pos).copy()
                self.pos += count * dt.itemsize
                return arr
            if etype == _STRING:
                if keep_strings:
                    return [self.string() for _ in range(count)]
                for _ in range(count):  # skip: lengths must still be walked
                    n = self.scalar("<Q", 8)
                    self.pos += n
                self.need(0)
                return None
            return [self.value(etype, keep_strings) for _ in range(count)]
        raise ModelFileError(f"{self.path}: corrupt GGUF header (unknown value type {vtype})")


def read_header(path: Path | str, *, token_texts: bool = True) -> GgufHeader:
    """Parse a GGUF header; raise :class:`ModelFileError` with a plain reason if it is bad.

    With ``token_texts=False`` string arrays (the vocabulary) are skipped, which is faster.
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
            header = _parse(_Cursor(buf, path), token_texts)
    header.file_size = size
    return header


def _parse(cur: _Cursor, token_texts: bool) -> GgufHeader:
    cur.pos = 4
    version = cur.scalar("<I", 4)
    if version not in (2, 3):
        raise ModelFileError(f"{cur.path}: unsupported GGUF version {version}")
    n_tensors = cur.scalar("<Q", 8)
    n_kv = cur.scalar("<Q", 8)
    if n_tensors > 1_000_000 or n_kv > 1_000_000:
        raise ModelFileError(f"{cur.path}: corrupt GGUF header (absurd counts)")
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string()
        vtype = cur.scalar("<I", 4)
        meta[key] = cur.value(vtype, token_texts)
    tensors = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.scalar("<I", 4)
        shape = tuple(cur.scalar("<Q", 8) for _ in range(n_dims))
        ggml_type = cur.scalar("<I", 4)
        offset = cur.scalar("<Q", 8)
        tensors.append(TensorInfo(name, shape, ggml_type, offset))
    align = int(meta.get("general.alignment", 32))
    data_start = (cur.pos + align - 1) // align * align
    return GgufHeader(cur.path, version, meta, tensors, data_start)


def read_header_bytes(data: bytes, label: Path, file_size: int, *,
                      token_texts: bool = True) -> GgufHeader:
    """Parse a header from the first bytes of a file (e.g. fetched with a Range request).

    Raises :class:`TruncatedHeader` when ``data`` ends inside the header: fetch more.
    """
    if data[:4] != MAGIC:
        raise ModelFileError(f"{label}: not a GGUF file (wrong magic bytes)")
    header = _parse(_Cursor(data, label), token_texts)
    header.file_size = file_size
    return header


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


def validate(path: Path | str) -> GgufHeader:
    """Check that a model file (and every part of a split one) is a complete GGUF.

    Returns the first part's header (metadata without token texts).
    """
    path = Path(path).expanduser()
    if not path.is_file():
        read_header(path)  # raises "model file not found" / "not a file"
    first: GgufHeader | None = None
    for part in split_parts(path):
        if not part.exists():
            raise ModelFileError(f"{path}: split model is missing its part {part.name}")
        header = read_header(part, token_texts=False)
        if header.file_size < header.data_end:
            raise ModelFileError(
                f"{part}: truncated GGUF file ({_mb(header.file_size)} of {_mb(header.data_end)})"
                " — delete it and fetch it again"
            )
        first = first or header
    assert first is not None
    return first


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"
