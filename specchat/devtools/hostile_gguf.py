"""Damaged and hostile variants of a real tiny GGUF file, for regression and fuzz tests.

Each variant changes one thing in a model that :mod:`tiny_models` wrote (a patched field, a
metadata entry inserted, the file cut short), so every other byte is what llama.cpp loads.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from specchat.formats.gguf_file import _NUMPY, _SCALARS, _STRING, _Cursor

_ALIGN = 32  # tiny_models writes the default alignment


@dataclass(frozen=True)
class TensorFields:
    """Where one tensor-table entry's fields sit in the file."""

    name: str
    n_dims_at: int
    type_at: int
    offset_at: int


@dataclass(frozen=True)
class Layout:
    kv_start: int  # first metadata entry (after magic, version and the two counts)
    kv_end: int  # end of the metadata = start of the tensor table
    tensors: list[TensorFields]
    length_fields: list[int]  # offsets of every u64 length (strings, arrays) in the header


def layout(data: bytes) -> Layout:
    """Walk a well-formed header, noting where its fields are."""
    cur = _Cursor(data, Path("<bytes>"), len(data))
    lengths: list[int] = [8, 16]
    cur.pos = 8
    n_tensors = cur.scalar("<Q", 8, "n_tensors")
    n_kv = cur.scalar("<Q", 8, "n_kv")

    def skip_value(vtype: int) -> None:
        if vtype in _SCALARS:
            cur.pos += _SCALARS[vtype][1]
        elif vtype == _STRING:
            lengths.append(cur.pos)
            cur.pos += 8 + struct.unpack_from("<Q", data, cur.pos)[0]
        else:
            etype = struct.unpack_from("<I", data, cur.pos)[0]
            lengths.append(cur.pos + 4)
            count = struct.unpack_from("<Q", data, cur.pos + 4)[0]
            cur.pos += 12
            if etype in _NUMPY:
                cur.pos += count * _SCALARS[etype][1]
            else:
                for _ in range(count):
                    skip_value(etype)

    for _ in range(n_kv):
        skip_value(_STRING)
        vtype = struct.unpack_from("<I", data, cur.pos)[0]
        cur.pos += 4
        skip_value(vtype)
    kv_end = cur.pos
    tensors = []
    for _ in range(n_tensors):
        lengths.append(cur.pos)
        name = cur.string("name")
        n_dims_at = cur.pos
        n_dims = struct.unpack_from("<I", data, cur.pos)[0]
        type_at = n_dims_at + 4 + 8 * n_dims
        tensors.append(TensorFields(name, n_dims_at, type_at, type_at + 4))
        cur.pos = type_at + 12
    return Layout(24, kv_end, tensors, lengths)


def set_u32(data: bytes, at: int, value: int) -> bytes:
    return data[:at] + struct.pack("<I", value) + data[at + 4:]


def set_u64(data: bytes, at: int, value: int) -> bytes:
    return data[:at] + struct.pack("<Q", value) + data[at + 8:]


def _string(s: bytes) -> bytes:
    return struct.pack("<Q", len(s)) + s


def with_metadata(data: bytes, key: str, vtype: int, payload: bytes) -> bytes:
    """``data`` with one more metadata entry, first, and a filler string entry after it sized
    so the header grows by a multiple of the alignment: the tensor data stays where the table
    says it is."""
    entry = _string(key.encode()) + struct.pack("<I", vtype) + payload
    filler_key = _string(b"x.filler") + struct.pack("<I", _STRING)
    pad = -(len(entry) + len(filler_key) + 8) % _ALIGN
    filler = filler_key + _string(b"-" * pad)
    n_kv = struct.unpack_from("<Q", data, 16)[0]
    return data[:16] + struct.pack("<Q", n_kv + 2) + entry + filler + data[24:]


def nested_arrays(depth: int) -> bytes:
    """An array holding an array holding … ``depth`` levels, the innermost empty."""
    return struct.pack("<IQ", 9, 1) * (depth - 1) + struct.pack("<IQ", 4, 0)


def variants(model: Path, out: Path) -> dict[str, Path]:
    """The hostile cases of issue 12, each as a file next to the others in ``out``."""
    data = model.read_bytes()
    lay = layout(data)
    first = lay.tensors[0]
    cases = {
        "tensor-type-999": set_u32(data, first.type_at, 999),
        "n-dims-huge": set_u32(data, first.n_dims_at, 0xFFFFFFFF),
        "nested-arrays": with_metadata(data, "x.nested", 9, nested_arrays(20_000)),
        "alignment-0": with_metadata(data, "general.alignment", 4, struct.pack("<I", 0)),
        "alignment-u64": with_metadata(data, "general.alignment", 10, struct.pack("<Q", 32)),
        "string-length-huge": set_u64(data, lay.length_fields[2], 1 << 62),
        "tensor-count-huge": set_u64(data, 8, 1 << 40),
        "truncated-half": data[: len(data) // 2],
        "offset-wrong": set_u64(data, lay.tensors[-1].offset_at,
                                struct.unpack_from("<Q", data, lay.tensors[-1].offset_at)[0]
                                + _ALIGN),
    }
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, content in cases.items():
        p = out / f"{name}.gguf"
        p.write_bytes(content)
        paths[name] = p
    return paths
