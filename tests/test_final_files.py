"""The files at final paths in the models folder: an incomplete one is named, moved aside with a
notice, and made again; a complete one is kept."""

from __future__ import annotations

from pathlib import Path

from specchat.models.final_files import broken_path, problem, settle
from specchat.models.progress import Progress


def test_incomplete_files_at_a_final_path_are_named(tiny_target: Path, tmp_path: Path) -> None:
    data = tiny_target.read_bytes()
    f = tmp_path / "m.gguf"
    assert problem(f) is None  # absent: nothing to say
    f.write_bytes(b"")
    assert problem(f) == "empty"
    f.write_bytes(data[: len(data) // 2])
    assert "truncated GGUF file" in (problem(f) or "")
    assert problem(f, len(data)) == f"{len(data) // 2 / 1000:.1f} KB ({len(data) // 2:,} bytes) " \
        f"where the file is {len(data):,} bytes"
    f.write_bytes(b"\0" * len(data))  # a file cut back and filled with zeros
    assert problem(f) == "not a GGUF file"
    f.write_bytes(data)
    assert problem(f, len(data)) is None and problem(f) is None


def test_settle_moves_an_incomplete_file_aside_with_a_notice(tiny_target: Path,
                                                            tmp_path: Path) -> None:
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 10)
    seen: list[Progress] = []
    assert settle(f, 100, seen.append) is False
    assert not f.exists() and broken_path(f).read_bytes() == b"GGUF" + b"\0" * 10
    assert [p.notice for p in seen] == [
        "m.gguf was not a complete file (14 B (14 bytes) where the file is 100 bytes): moved "
        "aside to m.gguf.broken; making it again"]
    assert settle(f, 100, seen.append) is False and len(seen) == 1  # absent: nothing to move
    data = tiny_target.read_bytes()
    f.write_bytes(data)
    assert settle(f, len(data), seen.append) is True and f.read_bytes() == data
    assert len(seen) == 1
