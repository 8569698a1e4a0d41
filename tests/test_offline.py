"""With the Hub unreachable, every look-up fails fast with one clear line and no retry noise.

Two ways of being unreachable, both real sockets on this machine: a port nobody listens on
(the connection is refused at once) and a socket that accepts connections but never answers
(the read times out). The bounds asserted are hang guards, not timings.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from specchat.cli.main import main
from specchat.models import hf_cache
from specchat.models.catalog import HfSource, load_catalog
from specchat.models.compat import facts_for_path
from specchat.models.entries import path_entry
from specchat.models.hub import HubUnreachable, list_gguf
from specchat.models.pairing import draft_candidates
from specchat.models.remote_header import read_remote_header
from specchat.models.resolver import ModelResolver
from specchat.paths import AppPaths

HANG_GUARD_S = 30.0  # far above the few seconds expected; only a hang or a retry loop exceeds it


@pytest.fixture(params=["refused", "silent"])
def dead_hub(request: pytest.FixtureRequest, home: AppPaths, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    if request.param == "refused":
        sock.close()  # nothing listens on the port any more
    else:
        sock.listen(64)  # the kernel completes the handshake; nobody ever reads or answers
        monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "1")  # the user's knob: keeps the test short
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for var in ("HF_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hf_cache, "BACKOFF_S", 0.01)
    yield request.param
    sock.close()


def _one_clear_line(e: BaseException) -> None:
    text = str(e)
    assert "\n" not in text and "cannot reach the Hub at http://127.0.0.1:" in text
    assert "HF_HUB_OFFLINE=1" in text


@pytest.mark.parametrize("call", ["list", "header", "download"])
def test_each_lookup_fails_fast_with_one_line_and_no_retries(
        dead_hub: str, call: str, caplog: pytest.LogCaptureFixture) -> None:
    calls = {
        "list": lambda: list_gguf("org/Repo-GGUF"),
        "header": lambda: read_remote_header("org/Repo-GGUF", "m-Q4_K_M.gguf"),
        "download": lambda: hf_cache.download(HfSource("org/Repo-GGUF", ("m-Q4_K_M.gguf",))),
    }
    start = time.monotonic()
    with caplog.at_level(logging.DEBUG), pytest.raises(HubUnreachable) as info:
        calls[call]()
    assert time.monotonic() - start < HANG_GUARD_S
    _one_clear_line(info.value)
    assert "timed out" in str(info.value) if dead_hub == "silent" else "refused" in str(info.value)
    assert not [r for r in caplog.records if "Retry" in r.getMessage()]


def test_draft_checks_stop_at_the_first_unreachable_hub(dead_hub: str, home: AppPaths,
                                                        tiny_target: Path) -> None:
    cat = load_catalog()
    hub_drafts = [m for m in cat.models.values()
                  if m.family == "qwen2.5-coder" and isinstance(m.source, HfSource)]
    assert len(hub_drafts) >= 3  # the case the wizard hung on: several drafts to look up
    target = replace(path_entry(cat, tiny_target), family="qwen2.5-coder")
    resolver = ModelResolver(cat, home)
    start = time.monotonic()
    cands = draft_candidates(resolver, target, facts_for_path(tiny_target), [])
    assert time.monotonic() - start < HANG_GUARD_S
    by_id = {c.entry.id: c for c in cands}
    reasons = [by_id[m.id].reason for m in hub_drafts]
    assert sum(r.startswith("could not check: cannot reach the Hub") for r in reasons) == 1
    assert reasons.count("not checked: the Hub cannot be reached") == len(hub_drafts) - 1
    assert all(by_id[m.id].level is None for m in hub_drafts)


def test_the_cli_says_it_in_one_line(dead_hub: str, tiny_target: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["models", "pull", "org/Repo-GGUF:m.gguf"], ["models", "files", "org/Repo-GGUF"],
                 ["models", "check", str(tiny_target), "org/Repo-GGUF:m.gguf"]):
        start = time.monotonic()
        rc = main(args)
        out = capsys.readouterr()
        assert time.monotonic() - start < HANG_GUARD_S
        assert rc == 1, args
        lines = [line for line in out.err.splitlines() if line.strip()]
        assert len(lines) == 1 and "cannot reach the Hub at http://127.0.0.1:" in lines[0], out.err
        assert "Retry" not in out.err + out.out

