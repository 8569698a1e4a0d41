"""Web pages calling `specchat serve`: preflights and origins over raw HTTP, and a real browser
(headless Chromium, from Debian's `chromium` package) whose page, served from another local
port, streams a chat completion with `fetch`."""

from __future__ import annotations

import http.server
import json
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specchat.serve.server import Serving
from tests.serve_helpers import cli_server, raw

EXTRA = "http://example.com:3000"
CHAT = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}).encode()
# What a browser sends before the OpenAI SDK's POST (JSON body, Authorization, its headers).
PREFLIGHT = {"Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization,content-type,x-stainless-os"}


@pytest.fixture(scope="module")
def server(tiny_target: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serving]:
    home = tmp_path_factory.mktemp("cors-home")
    with cli_server(home, "--model", str(tiny_target), "--ctx-size", "256",
                    "--cors-origin", EXTRA + "/") as s:
        assert s.host.state == "ready", s.host.error
        yield s


@pytest.mark.parametrize("origin", ["http://localhost:5173", "https://127.0.0.1",
                                    "http://127.0.0.1:8080", EXTRA])
def test_an_allowed_origins_preflight_and_request(server: Serving, origin: str) -> None:
    status, _, headers = _raw(server.url, "OPTIONS", "/v1/chat/completions",
                              headers={"Origin": origin, **PREFLIGHT})
    assert status == 204
    assert headers["access-control-allow-origin"] == origin
    assert "POST" in headers["access-control-allow-methods"]
    assert set(PREFLIGHT["Access-Control-Request-Headers"].split(",")) <= {
        h.strip() for h in headers["access-control-allow-headers"].split(",")}
    status, doc, headers = raw(server.url, "POST", "/v1/chat/completions", CHAT,
                               {"Origin": origin, "Content-Type": "application/json"})
    assert status == 200 and doc["usage"]["completion_tokens"] == 3
    assert headers["access-control-allow-origin"] == origin


@pytest.mark.parametrize("origin", ["http://example.com", "http://localhost.evil.com",
                                    "http://127.0.0.1.nip.io:8000", "null"])
def test_another_origin_gets_no_allow_header_and_is_refused(server: Serving,
                                                             origin: str) -> None:
    before = server.host.counts["served"]
    status, doc, headers = raw(server.url, "OPTIONS", "/v1/chat/completions",
                               headers={"Origin": origin, **PREFLIGHT})
    assert status == 403 and "access-control-allow-origin" not in headers
    assert doc["error"]["code"] == "origin_not_allowed" and "--cors-origin" in doc["error"][
        "message"]
    status, doc, headers = raw(server.url, "POST", "/v1/chat/completions", CHAT,
                               {"Origin": origin, "Content-Type": "application/json"})
    assert status == 403 and "access-control-allow-origin" not in headers
    assert doc["error"]["type"] == "permission_error"
    assert server.host.counts["served"] == before  # nothing ran


def test_requests_without_an_origin_are_not_cross_origin(server: Serving) -> None:
    status, _, headers = raw(server.url, "POST", "/v1/chat/completions", CHAT,
                             {"Content-Type": "application/json"})
    assert status == 200 and "access-control-allow-origin" not in headers


def _raw(url: str, method: str, path: str, headers: dict[str, str]
         ) -> tuple[int, bytes, dict[str, str]]:
    """A request whose answer may have no body (a preflight's 204)."""
    import http.client
    from urllib.parse import urlparse

    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        conn.request(method, path, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read(), {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


# ------------------------------------------------------------------------ a real browser

PAGE = """<!doctype html><html><body><pre id="out">waiting</pre><script>
async function run() {
  let report;
  try {
    const r = await fetch(API + "/v1/chat/completions", {method: "POST",
      headers: {"Content-Type": "application/json", "Authorization": "Bearer anything"},
      body: JSON.stringify({messages: [{role: "user", content: "hi"}], max_tokens: 6,
                            stream: true, stream_options: {include_usage: true}})});
    const reader = r.body.getReader(), decoder = new TextDecoder();
    let text = "", chunks = 0, usage = null, buffer = "";
    for (;;) {
      const {done, value} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true});
      const events = buffer.split("\\n\\n");
      buffer = events.pop();
      for (const e of events) {
        const data = e.replace(/^data: /, "");
        if (data === "[DONE]") continue;
        const doc = JSON.parse(data);
        chunks += 1;
        if (doc.usage) usage = doc.usage;
        for (const c of doc.choices) text += c.delta.content || "";
      }
    }
    report = {ok: true, status: r.status, text, chunks, usage};
  } catch (e) {
    report = {ok: false, error: String(e)};
  }
  document.getElementById("out").textContent = JSON.stringify(report);
  await fetch("/result", {method: "POST", body: JSON.stringify(report)});
}
run();
</script></body></html>"""


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class _Pages(http.server.BaseHTTPRequestHandler):
    """The page (GET /) and the place its result comes back to (POST /result)."""

    page = b""
    results: queue.Queue[dict[str, Any]]

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(self.page)))
        self.end_headers()
        self.wfile.write(self.page)

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length", "0"))
        self.results.put(json.loads(self.rfile.read(n)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def _in_browser(api_url: str, page_host: str, tmp_path: Path) -> dict[str, Any]:
    """Open a page served from ``page_host`` (another port) that calls ``api_url``."""
    chromium = _chromium()
    assert chromium is not None
    results: queue.Queue[dict[str, Any]] = queue.Queue()
    handler = type("Handler", (_Pages,), {
        "page": PAGE.replace("API +", json.dumps(api_url) + " +").encode(),
        "results": results})
    pages = http.server.ThreadingHTTPServer((page_host, 0), handler)
    threading.Thread(target=pages.serve_forever, daemon=True).start()
    page_url = f"http://{page_host}:{pages.server_address[1]}/"
    browser = subprocess.Popen(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={tmp_path / 'chromium'}", "--remote-debugging-port=0", page_url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        return _report(results, browser)
    finally:
        browser.terminate()
        try:
            browser.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            browser.kill()
            browser.communicate()
        pages.shutdown()
        pages.server_close()


def _report(results: queue.Queue[dict[str, Any]], browser: subprocess.Popen[str],
            limit_s: float = 150.0) -> dict[str, Any]:
    """The report the page posts back; a browser that ends first fails the test with its
    own last words (it runs until terminated, so it should not)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            return results.get(timeout=1)
        except queue.Empty:
            if browser.poll() is None:
                continue
        try:  # the browser has ended: a post on its way still counts
            return results.get(timeout=2)
        except queue.Empty:
            _, err = browser.communicate()
            pytest.fail(f"Chromium ended without the page's report: {err[-800:]}")
    pytest.fail(f"no report from the page within {limit_s:.0f} s")


@pytest.mark.skipif(_chromium() is None,
                    reason="no Chromium on PATH: install Debian's `chromium` package to run "
                    "the browser test")
def test_a_page_on_another_local_port_streams_a_chat_in_chromium(server: Serving,
                                                                  tmp_path: Path) -> None:
    got = _in_browser(server.url, "127.0.0.1", tmp_path)
    assert got["ok"] and got["status"] == 200, got
    assert got["text"] and got["usage"]["completion_tokens"] == 6, got
    assert got["chunks"] >= 3, got  # the role, the tokens, the finish, the usage
    # A page of an origin not allowed (127.0.0.2 is this machine too, but not a default
    # origin): the browser sees a network error and nothing runs.
    before = server.host.counts["served"]
    got = _in_browser(server.url, "127.0.0.2", tmp_path)
    assert not got["ok"] and "TypeError" in got["error"], got
    assert server.host.counts["served"] == before
