"""A local stand-in for the Hugging Face Hub, for tests and for trying the wizard offline.

It answers the few routes huggingface_hub uses to list and download model files:

- ``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{rev}``: id, sha, gated, and
  ``siblings`` with sizes and LFS sha256 (``pointerSize`` included: model_info needs it);
- ``HEAD``/``GET /{repo}/resolve/{rev}/{file}``: ``X-Repo-Commit``, ``ETag`` (the quoted sha256,
  as for LFS files), ``Content-Length``, and ``Range`` → 206.

Gated repos answer 401 without a token and 403 with a token that has no access, with the Hub's
``X-Error-Code: GatedRepo``; unknown repos 401 ``RepoNotFound``; unknown files 404
``EntryNotFound``. Faults can be injected: cut a body mid-way (``cut``), or serve bytes whose
sha256 is not the advertised one (``RepoFile(advertised_sha256=...)``).

Run it by hand: ``python -m specchat.devtools.local_hub org/repo=path/to/model.gguf ...`` and
point ``HF_ENDPOINT`` at the address it prints.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


@dataclass
class RepoFile:
    data: bytes
    advertised_sha256: str | None = None  # set to lie about the content (checksum tests)

    @property
    def sha256(self) -> str:
        return self.advertised_sha256 or hashlib.sha256(self.data).hexdigest()


@dataclass
class Repo:
    files: dict[str, RepoFile] = field(default_factory=dict)
    gated: str | bool = False  # False, "auto" or "manual", as the Hub says
    tokens: frozenset[str] = frozenset()  # tokens granted access to a gated repo

    def commit(self, repo_id: str) -> str:
        return hashlib.sha1(repo_id.encode()).hexdigest()


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    range: str | None
    authorized: bool


class LocalHub:
    """``with LocalHub() as hub: hub.add(...); hub.url``. Threaded; one per test is cheap."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[Request] = []
        self.cuts: dict[tuple[str, str], list[float]] = {}  # (repo, file) -> fractions to send
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- content ------------------------------------------------------------------------

    def add(self, repo_id: str, files: dict[str, bytes | Path | RepoFile],
            gated: str | bool = False, tokens: tuple[str, ...] = ()) -> Repo:
        repo = Repo(gated=gated, tokens=frozenset(tokens))
        for name, content in files.items():
            if isinstance(content, RepoFile):
                repo.files[name] = content
            else:
                data = content.read_bytes() if isinstance(content, Path) else content
                repo.files[name] = RepoFile(data)
        self.repos[repo_id] = repo
        return repo

    def cut(self, repo_id: str, filename: str, *fractions: float) -> None:
        """Drop the connection during the next bodies of this file, after sending these
        fractions of each (default: one body cut half-way; 0 = nothing sent)."""
        self.cuts[(repo_id, filename)] = list(fractions or (0.5,))

    def gets(self, filename: str) -> list[Request]:
        return [r for r in self.requests if r.method == "GET" and r.path.endswith("/" + filename)]

    # -- server -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._server is not None, "the hub is not running"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> LocalHub:
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> LocalHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+?)(?:/revision/(?P<rev>[^/]+))?/?$")
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


class _Handler(BaseHTTPRequestHandler):
    hub: LocalHub
    protocol_version = "HTTP/1.0"  # one request per connection: a cut body is unambiguous

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: tests read hub.requests instead

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _error(self, status: int, code: str, message: str, commit: str | None = None) -> None:
        payload = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        if commit:
            self.send_header("X-Repo-Commit", commit)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _serve(self, body: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        auth = self.headers.get("Authorization")
        with self.hub.lock:
            self.hub.requests.append(Request(self.command, path, self.headers.get("Range"),
                                             bool(auth)))
        if m := _INFO.match(path):
            self._model_info(m["repo"], m["rev"] or "main")
        elif m := _RESOLVE.match(path):
            self._resolve(m["repo"], m["file"], auth, body)
        else:
            self._error(404, "NotFound", f"no route {path}")

    def _repo(self, repo_id: str) -> Repo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(401, "RepoNotFound", "Repository not found")
        return repo

    def _model_info(self, repo_id: str, rev: str) -> None:
        repo = self._repo(repo_id)
        if repo is None:
            return
        siblings = [
            {"rfilename": name, "size": len(f.data),
             "lfs": {"sha256": f.sha256, "size": len(f.data), "pointerSize": 134}}
            for name, f in repo.files.items()
        ]
        payload = json.dumps({"id": repo_id, "modelId": repo_id, "sha": repo.commit(repo_id),
                              "gated": repo.gated, "private": False, "tags": ["gguf"],
                              "siblings": siblings}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _resolve(self, repo_id: str, name: str, auth: str | None, body: bool) -> None:
        repo = self._repo(repo_id)
        if repo is None:
            return
        commit = repo.commit(repo_id)
        if repo.gated:
            token = (auth or "").removeprefix("Bearer ").strip()
            if not token:
                self._error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You "
                            "must have access to it and be authenticated to access it.")
                return
            if token not in repo.tokens:
                self._error(403, "GatedRepo", f"Access to model {repo_id} is restricted and you "
                            "are not in the authorized list.")
                return
        f = repo.files.get(name)
        if f is None:
            self._error(404, "EntryNotFound", f"{name} does not exist on main", commit)
            return
        start, end = 0, len(f.data) - 1
        status = 200
        rng = self.headers.get("Range")
        if rng and (m := _RANGE.match(rng.strip())):
            start = int(m[1])
            end = min(int(m[2]), end) if m[2] else end
            status = 206
            if start > end:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(f.data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        chunk = f.data[start : end + 1]
        self.send_response(status)
        self.send_header("X-Repo-Commit", commit)
        self.send_header("ETag", f'"{f.sha256}"')
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(chunk)))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(f.data)}")
        self.end_headers()
        if not body:
            return
        with self.hub.lock:
            queue = self.hub.cuts.get((repo_id, name))
            keep = queue.pop(0) if queue else None
        if keep is not None:
            self.wfile.write(chunk[: int(len(chunk) * keep)])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(chunk)


@contextmanager
def running(files: dict[str, dict[str, bytes | Path | RepoFile]]) -> Iterator[LocalHub]:
    with LocalHub() as hub:
        for repo, content in files.items():
            hub.add(repo, content)
        yield hub


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve GGUF files as a local Hugging Face Hub.")
    parser.add_argument("files", nargs="+", metavar="ORG/REPO=FILE.gguf")
    args = parser.parse_args()
    hub = LocalHub()
    for spec in args.files:
        repo, _, file = spec.partition("=")
        p = Path(file)
        existing = hub.repos.get(repo)
        if existing is None:
            hub.add(repo, {p.name: p})
        else:
            existing.files[p.name] = RepoFile(p.read_bytes())
    hub.start()
    print(f"HF_ENDPOINT={hub.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        hub.stop()


if __name__ == "__main__":
    main()
