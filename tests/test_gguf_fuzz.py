"""Fuzz the GGUF header reader with mutated real headers (bit flips, cuts, length and count
fields set huge, fields overwritten): it either reads the header or raises ModelFileError, and
never allocates much more than the file's size."""

from __future__ import annotations

import contextlib
import struct
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specchat.devtools.hostile_gguf import Layout, layout
from specchat.devtools.tiny_models import TinySpec, write_tiny_model
from specchat.errors import ModelFileError
from specchat.formats.gguf_checks import vocabulary_problem
from specchat.formats.gguf_file import GgufHeader, TruncatedHeader, read_header, read_header_bytes
from specchat.models.compat import facts_from_headers

SMALL = TinySpec(n_embd=32, n_head=2, n_head_kv=2, n_layer=1, n_ff=64, seed=5)
HUGE = [1 << 32, 1 << 40, 1 << 62, (1 << 63) - 1, (1 << 64) - 1, 0xFFFFFFFF]
FUZZ = settings(max_examples=250, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, Layout]:
    path = write_tiny_model(tmp_path_factory.mktemp("fuzz") / "small.gguf", SMALL)
    data = path.read_bytes()
    return data, layout(data)


@st.composite
def mutated(draw: st.DrawFn, data: bytes, lay: Layout) -> bytes:
    header_end = lay.tensors[-1].offset_at + 8
    kind = draw(st.sampled_from(["flip", "cut", "length", "field", "window", "many"]))
    buf = bytearray(data)
    if kind == "flip":
        at = draw(st.integers(0, header_end - 1))
        buf[at] ^= 1 << draw(st.integers(0, 7))
    elif kind == "cut":
        return bytes(buf[: draw(st.integers(0, len(buf) - 1))])
    elif kind == "length":
        at = draw(st.sampled_from(lay.length_fields))
        value = draw(st.one_of(st.sampled_from(HUGE), st.integers(0, (1 << 64) - 1)))
        struct.pack_into("<Q", buf, at, value)
    elif kind == "field":
        t = draw(st.sampled_from(lay.tensors))
        at = draw(st.sampled_from([t.n_dims_at, t.type_at]))
        struct.pack_into("<I", buf, at, draw(st.integers(0, 0xFFFFFFFF)))
    elif kind == "window":
        at = draw(st.integers(0, header_end - 8))
        struct.pack_into("<Q", buf, at, draw(st.integers(0, (1 << 64) - 1)))
    else:
        for _ in range(draw(st.integers(2, 20))):
            buf[draw(st.integers(0, header_end - 1))] = draw(st.integers(0, 255))
    return bytes(buf)


def _exercise(h: GgufHeader) -> None:
    """What the rest of specchat does with a header that was read."""
    vocabulary_problem(h)
    facts = facts_from_headers("fuzz", [h])  # raises DamagedFile when cut
    facts.describe()
    _ = h.data_end, h.n_params, h.architecture


def _bounded(fn: Callable[[], None], limit: int) -> None:
    tracemalloc.start()
    try:
        with contextlib.suppress(ModelFileError):  # the one exception allowed
            fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < limit, f"peak {peak >> 20} MB"


@FUZZ
@given(data=st.data())
def test_mutated_headers_read_or_fail_with_a_model_file_error(
        real: tuple[bytes, Layout], data: st.DataObject) -> None:
    original, lay = real
    bad = data.draw(mutated(original, lay))
    limit = 8 * len(original) + (2 << 20)  # linear in the header, whatever its fields claim

    def whole_file() -> None:
        _exercise(read_header_bytes(bad, Path("fuzz.gguf"), len(bad)))

    def prefix_of_a_larger_file() -> None:  # as the Hub reader sees it
        with contextlib.suppress(TruncatedHeader):  # "fetch more": the caller's loop is bounded
            _exercise(read_header_bytes(bad[:4096], Path("fuzz.gguf"), 1 << 40))

    _bounded(whole_file, limit)
    _bounded(prefix_of_a_larger_file, limit)


def test_a_mutated_file_on_disk_reads_the_same_way(real: tuple[bytes, Layout],
                                                  tmp_path: Path) -> None:
    original, lay = real
    p = tmp_path / "m.gguf"
    for at in lay.length_fields:
        buf = bytearray(original)
        struct.pack_into("<Q", buf, at, (1 << 62) + at)
        p.write_bytes(bytes(buf))
        _bounded(lambda: _exercise(read_header(p)), 8 * len(original) + (2 << 20))
        with pytest.raises(ModelFileError):
            read_header(p)
