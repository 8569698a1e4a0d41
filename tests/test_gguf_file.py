from __future__ import annotations

from pathlib import Path

import pytest

from specchat.errors import ModelFileError
from specchat.formats.gguf_file import read_header, split_parts, validate


def test_header_of_a_tiny_model(tiny_target: Path) -> None:
    h = read_header(tiny_target)
    assert h.architecture == "llama"
    assert h.metadata["tokenizer.ggml.model"] == "gpt2"
    assert len(h.metadata["tokenizer.ggml.tokens"]) == 52
    assert h.data_end == h.file_size
    assert h.n_params > 0


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="model file not found"):
        validate(tmp_path / "nope.gguf")


def test_not_gguf(tmp_path: Path) -> None:
    p = tmp_path / "x.gguf"
    p.write_bytes(b"<html>not a model</html>" * 10)
    with pytest.raises(ModelFileError, match="not a GGUF file"):
        validate(p)


@pytest.mark.parametrize("keep", [0.3, 0.95])
def test_truncated(tmp_path: Path, tiny_target: Path, keep: float) -> None:
    data = tiny_target.read_bytes()
    p = tmp_path / "cut.gguf"
    p.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ModelFileError, match="truncated"):
        validate(p)


def test_truncated_in_header(tmp_path: Path, tiny_target: Path) -> None:
    p = tmp_path / "cut.gguf"
    p.write_bytes(tiny_target.read_bytes()[:200])
    with pytest.raises(ModelFileError, match="truncated GGUF header"):
        validate(p)


def test_split_names(tmp_path: Path) -> None:
    p = tmp_path / "m-00001-of-00003.gguf"
    assert [x.name for x in split_parts(p)] == [
        "m-00001-of-00003.gguf", "m-00002-of-00003.gguf", "m-00003-of-00003.gguf"]
    assert split_parts(tmp_path / "m.gguf") == [tmp_path / "m.gguf"]


def test_split_missing_part(tmp_path: Path, tiny_target: Path) -> None:
    p = tmp_path / "m-00001-of-00002.gguf"
    p.write_bytes(tiny_target.read_bytes())
    with pytest.raises(ModelFileError, match="missing its part m-00002-of-00002.gguf"):
        validate(p)
