"""`python -m specchat serve` as a user starts it, under load: requests one after another and
at once all come back whole, and the server's memory does not creep with the request count."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest

from tests.serve_helpers import ServerProcess, client, raw, wait_until

# KiB the server may grow between request 10 and request 50 (one allocator arena's slack,
# nothing proportional to the 40 requests in between: a leak of even 100 KB a request fails).
RSS_SLACK_KB = 16 * 1024


@pytest.fixture(scope="module")
def server(tiny_target: Path, tiny_draft: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("serve-load")
    proc = ServerProcess(home, "--model", str(tiny_target), "--draft", str(tiny_draft),
                         "--gamma", "3", "--ctx-size", "512")
    try:
        assert proc.url is not None
        wait_until(lambda: raw(proc.url or "", "GET", "/health")[0] == 200, "the load")
        yield proc
    finally:
        assert proc.stop() in (0, -15), proc.stderr  # stopped by SIGTERM: a clean exit
    assert "Traceback" not in proc.stderr


def test_fifty_requests_in_a_row_and_memory_stays_flat(server: ServerProcess) -> None:
    api = client(server.url or "")
    model = _model(api)
    rss: dict[int, int] = {}
    for i in range(1, 51):
        stream = i % 2 == 0
        r = api.chat.completions.create(
            model=model, messages=[{"role": "user", "content": f"request number {i}"}],
            max_tokens=8, stream=stream, stream_options={"include_usage": True} if stream
            else openai.NOT_GIVEN)
        if stream:
            chunks = list(r)
            assert chunks[-1].usage.completion_tokens == 8
        else:
            assert r.usage.completion_tokens == 8 and r.choices[0].message.content
        if i in (10, 50):
            rss[i] = server.rss_kb()
    assert rss[50] - rss[10] < RSS_SLACK_KB, rss


def test_eight_at_once_all_served_none_lost(server: ServerProcess) -> None:
    api = client(server.url or "")
    model = _model(api)

    def one(i: int) -> tuple[int, str]:
        r = api.chat.completions.create(
            model=model, messages=[{"role": "user", "content": f"caller {i}"}],
            max_tokens=6, temperature=0)
        assert r.usage.completion_tokens == 6
        return i, r.choices[0].message.content or ""

    with ThreadPoolExecutor(8) as pool:
        results = dict(pool.map(one, range(8)))
    assert sorted(results) == list(range(8)) and all(results.values())
    # Each was generated for its own prompt: the same as asking alone, one at a time.
    for i in (0, 7):
        assert one(i)[1] == results[i]
    status, health, _ = raw(server.url or "", "GET", "/health")
    assert status == 200 and health["queued"] == 0 and health["failed"] == 0


def _model(api: openai.OpenAI) -> str:
    return api.models.list().data[0].id
