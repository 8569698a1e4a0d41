"""The AMX check: a child that dies of an illegal instruction means "load without the extra
buffer types", a verdict is kept per build, and the user can decide instead."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from specchat.engine.llama import amx
from specchat.paths import AppPaths


@pytest.fixture
def fresh_amx(home: AppPaths, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No verdict in this process or the environment (restored afterwards)."""
    saved = os.environ.get(amx.ENV)  # (the check sets it itself, past monkeypatch)
    monkeypatch.setattr(amx, "_verdict", None)
    monkeypatch.setattr(amx, "_note", None)
    monkeypatch.delenv(amx.ENV, raising=False)
    yield
    if saved is None:
        os.environ.pop(amx.ENV, None)
    else:
        os.environ[amx.ENV] = saved


def _child(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_child_killed_by_an_illegal_instruction_means_the_kernels_crash() -> None:
    died = _child("import os, signal; os.kill(os.getpid(), signal.SIGILL)")
    assert amx.probe("unused.gguf", died) is False
    segv = _child("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert amx.probe("unused.gguf", segv) is False


def test_what_else_a_child_says() -> None:
    assert amx.probe("x", _child(f"print('{amx.WORKS}')")) is True
    assert amx.probe("x", _child(f"print('{amx.UNUSED}')")) is None
    # A failure of its own (an unreadable file) is no verdict on the kernels: the load says why.
    assert amx.probe("x", _child("raise SystemExit(2)")) is None
    assert amx.probe("x", _child("import os, signal; os.kill(os.getpid(), signal.SIGTERM)")) is None
    assert amx.probe("x", ["/nonexistent/python"]) is None


def test_the_real_child_on_a_model_without_weights_for_the_kernels(tiny_target: Path) -> None:
    # F32 weights never go to the AMX buffer: the child says so, whatever the build.
    out = subprocess.run([sys.executable, "-m", "specchat.engine.llama.amx", str(tiny_target)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == amx.UNUSED
    assert amx.probe(tiny_target) is None


def test_the_user_decides_with_the_environment(fresh_amx: None,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*_a: object) -> bool:
        raise AssertionError("no check when the user decided")

    monkeypatch.setattr(amx, "probe", never)
    monkeypatch.setattr(amx, "build_has_amx", lambda: True)
    monkeypatch.setenv(amx.ENV, "off")
    assert amx.amx_allowed("m.gguf") is False
    monkeypatch.setenv(amx.ENV, "ON")
    assert amx.amx_allowed("m.gguf") is True


def test_a_build_without_the_kernels_is_not_checked(fresh_amx: None,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(amx, "build_has_amx", lambda: False)
    monkeypatch.setattr(amx, "probe", lambda *_a: pytest.fail("checked"))
    assert amx.amx_allowed("m.gguf") is True
    assert amx.ENV not in os.environ and amx.note() is None


def test_a_model_without_weights_for_the_kernels_is_not_checked(
        fresh_amx: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(amx, "build_has_amx", lambda: True)
    monkeypatch.setattr(amx, "probe", lambda *_a: False)
    assert amx.amx_allowed("f32.gguf", {0, 1}) is True  # F32, F16: no child
    assert amx.ENV not in os.environ
    assert amx.amx_allowed("q4.gguf", {0, 12}) is False  # Q4_K: checked


def test_a_crash_is_found_once_kept_per_build_and_told(fresh_amx: None, home: AppPaths,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def crashes(path: str, command: list[str] | None = None) -> bool | None:
        calls.append(path)
        return None if path == "f32.gguf" else False

    monkeypatch.setattr(amx, "build_has_amx", lambda: True)
    monkeypatch.setattr(amx, "probe", crashes)
    # A model with nothing for the kernels says nothing: the next model is checked.
    assert amx.amx_allowed("f32.gguf") is True
    assert amx.amx_allowed("q4.gguf") is False
    assert amx.amx_allowed("other.gguf") is False  # this process knows now
    assert calls == ["f32.gguf", "q4.gguf"]
    assert os.environ[amx.ENV] == "off"  # for the processes it starts
    assert "crash" in (amx.note() or "")
    # A new process on the same build reads the verdict instead of checking again.
    monkeypatch.setattr(amx, "_verdict", None)
    monkeypatch.delenv(amx.ENV)
    assert amx.amx_allowed("q4.gguf") is False
    assert calls == ["f32.gguf", "q4.gguf"]
    # A rebuilt llama.cpp is checked again.
    monkeypatch.setattr(amx, "_verdict", None)
    monkeypatch.delenv(amx.ENV)
    monkeypatch.setattr(amx, "build_id", lambda: "rebuilt")
    assert amx.amx_allowed("q4.gguf") is False
    assert calls == ["f32.gguf", "q4.gguf", "q4.gguf"]


def test_a_broken_verdict_file_costs_a_check(fresh_amx: None, home: AppPaths,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    home.cache_dir.mkdir(parents=True)
    (home.cache_dir / "amx-verdict.json").write_text("{not json")
    monkeypatch.setattr(amx, "build_has_amx", lambda: True)
    monkeypatch.setattr(amx, "probe", lambda *_a: True)
    assert amx.amx_allowed("q4.gguf") is True
    assert amx.note() is None
    assert '": true' in (home.cache_dir / "amx-verdict.json").read_text()


def test_the_build_is_named_by_its_cpu_library() -> None:
    assert amx.build_id() == amx.build_id() and len(amx.build_id()) == 16
    assert isinstance(amx.build_has_amx(), bool)
