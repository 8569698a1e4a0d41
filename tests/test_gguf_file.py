from __future__ import annotations

from pathlib import Path

import pytest

from specchat.errors import ModelFileError
from specchat.formats.gguf_checks import split_parts, validate
from specchat.formats.gguf_file import read_header


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


def test_a_repeat_validation_is_remembered_until_the_bytes_it_read_change(
        tmp_path: Path, tiny_target: Path) -> None:
    p = tmp_path / "m.gguf"
    data = tiny_target.read_bytes()
    p.write_bytes(data)
    unchecked = validate(p, vocabulary=False)
    first = validate(p)
    assert first is not unchecked  # the vocabulary was not checked the first time
    assert validate(p) is first  # remembered: the header's bytes are the same
    assert validate(p, vocabulary=False) is first
    with p.open("r+b") as fh:  # the tensor data is not what validate reads
        fh.seek(first.data_start)
        fh.write(bytes([data[first.data_start] ^ 0xFF]))
    assert validate(p) is first
    with p.open("r+b") as fh:  # the header rewritten in place, at once, to the same size
        fh.seek(4)
        fh.write((7).to_bytes(4, "little"))
    with pytest.raises(ModelFileError, match="unsupported GGUF version 7"):
        validate(p)
    p.write_bytes(data)
    assert validate(p) is first  # the same bytes again: the same answer
    p.write_bytes(data[: len(data) - 1])
    with pytest.raises(ModelFileError, match="truncated"):
        validate(p)


def test_a_split_model_is_read_again_when_a_later_part_changes(tmp_path: Path,
                                                                 tiny_target: Path) -> None:
    data = tiny_target.read_bytes()
    a, b = tmp_path / "m-00001-of-00002.gguf", tmp_path / "m-00002-of-00002.gguf"
    a.write_bytes(data)
    b.write_bytes(data)
    first = validate(a)
    assert validate(a) is first
    b.write_bytes(data[:200])
    with pytest.raises(ModelFileError, match="truncated GGUF header"):
        validate(a)
