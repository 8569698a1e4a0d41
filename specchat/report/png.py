"""A minimal PNG encoder: 8-bit RGB, no interlace, one IDAT chunk (zlib + struct + numpy)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import numpy.typing as npt

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def encode_png(rgb: npt.NDArray[np.uint8]) -> bytes:
    """``rgb``: an (height, width, 3) uint8 array → the bytes of a PNG file."""
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise ValueError("expected an (height, width, 3) uint8 array")
    height, width = rgb.shape[:2]
    if not (height and width):
        raise ValueError("an image needs at least one pixel")
    # Each scanline starts with its filter type; 0 (none) — zlib does the compressing.
    raw = np.zeros((height, width * 3 + 1), dtype=np.uint8)
    raw[:, 1:] = rgb.reshape(height, width * 3)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit, truecolour
    return (SIGNATURE + _chunk(b"IHDR", header)
            + _chunk(b"IDAT", zlib.compress(raw.tobytes(), 9)) + _chunk(b"IEND", b""))


def write_png(path: Path, rgb: npt.NDArray[np.uint8]) -> Path:
    path.write_bytes(encode_png(rgb))
    return path
