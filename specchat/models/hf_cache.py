"""Hub model files in the Hugging Face cache: find them, download them (resumably), delete them.

Why not just ``hf_hub_download``: since huggingface_hub 1.18 every attempt writes a unique temp
file that is deleted on failure, so a 5 GB download cut at 90% starts again from zero (and
Xet-backed files never resumed). For model files that is the difference between usable and
not, so the transfer itself is ours, built from huggingface_hub's own pieces:

1. ``get_hf_file_metadata`` (HEAD on ``{endpoint}/{repo}/resolve/{revision}/{file}``) gives the
   ETag (the sha256 for LFS files), size, commit and download location — with the user's token,
   proxies and ``HF_ENDPOINT``, exactly as huggingface_hub does it;
2. the bytes stream through ``http_stream_backoff`` (huggingface_hub's HTTP session) into
   ``<specchat cache>/downloads/hf/<repo>/<etag>.partial``; a later attempt sends
   ``Range: bytes=<have>-`` and appends, so it resumes — across retries *and* across runs;
3. the finished file is checked against its sha256 (the catalog's, else the LFS one): a bad file
   is deleted, never left looking complete;
4. it is moved to ``blobs/<etag>`` in the HF cache and ``hf_hub_download`` is called once more,
   which finds the blob and creates the snapshot link and ref itself — so the cache layout stays
   huggingface_hub's own and other tools see the file.

Xet-backed files come over the Hub's plain-HTTP route (the resolve redirect), which gives up
Xet's parallel chunk transfer in exchange for resuming.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
import time
from pathlib import Path

from specchat.errors import Cancelled, FetchError
from specchat.models.catalog import HfSource
from specchat.models.hub import (
    NO_RETRY,
    HubConfig,
    file_metadata,
    hub_config,
    hub_errors,
    lookup_timeout,
    offline_message,
    transport_errors,
)
from specchat.models.progress import Progress, ProgressFn, format_bytes, no_progress, waits

RETRIES = 4  # consecutive failed attempts (no byte received) before giving up
BACKOFF_S = 0.5  # doubled after each failed attempt
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _folder(repo: str) -> str:
    return "models--" + repo.replace("/", "--")


def _cached(cfg: HubConfig, repo: str, name: str, revision: str) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo, name, revision=revision, cache_dir=cfg.cache_dir)
    return Path(found) if isinstance(found, str) else None


def cached_path(src: HfSource) -> Path | None:
    """The first file, if it and every split part are in the cache."""
    cfg = hub_config()
    paths = [_cached(cfg, src.repo, name, src.revision) for name in src.files]
    return paths[0] if all(paths) else None


def default_work_dir() -> Path:
    from specchat.paths import app_paths

    return app_paths().downloads_dir / "hf"


def partial_files(src: HfSource, work_dir: Path | None = None) -> list[Path]:
    folder = (work_dir or default_work_dir()) / _folder(src.repo)
    return sorted(folder.glob("*.partial")) if folder.is_dir() else []


def download(src: HfSource, report: ProgressFn = no_progress,
             cancel: threading.Event | None = None, work_dir: Path | None = None) -> Path:
    """Every file of ``src`` in the HF cache (downloading what is missing); the first's path."""
    cfg = hub_config()
    work = work_dir or default_work_dir()
    first: Path | None = None
    for i, name in enumerate(src.files):
        path = _cached(cfg, src.repo, name, src.revision)
        if path is None:
            if cfg.offline:
                raise FetchError(offline_message(f"{src.repo}/{name}", cfg))
            sha = src.sha256 if i == 0 else None
            path = _download_file(cfg, src.repo, name, src.revision, sha, report, cancel, work)
        first = first or path
    assert first is not None
    return first


def _download_file(cfg: HubConfig, repo: str, name: str, revision: str, sha256: str | None,
                   report: ProgressFn, cancel: threading.Event | None, work: Path) -> Path:
    from huggingface_hub import hf_hub_download, hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    from specchat.locks import held

    url = hf_hub_url(repo, name, revision=revision, endpoint=cfg.endpoint)
    with hub_errors(repo, name):
        meta = file_metadata(url)
    if not meta.commit_hash or not meta.etag:
        raise FetchError(f"{cfg.endpoint} did not answer like the Hugging Face Hub for "
                         f"{repo}/{name} (is HF_ENDPOINT right?)")
    etag = meta.etag
    expected = sha256 or (etag if _SHA256.match(etag) else None)
    blob = cfg.cache_dir / _folder(repo) / "blobs" / etag
    part = work / _folder(repo) / f"{etag}.partial"
    part.parent.mkdir(parents=True, exist_ok=True)
    # One writer per partial file; the lock file is the one earlier versions took (through
    # huggingface_hub's WeakFileLock), so they and this one still exclude each other.
    with held(part, f"downloading {name}", waits(report),
              cancel.is_set if cancel is not None else None, lock_file=part.with_suffix(".lock")):
        if not blob.exists():
            headers = build_hf_headers()
            if _host(meta.location) != _host(url):
                headers.pop("authorization", None)  # never send the token to a CDN
            task = f"download {name}"
            try:
                with hub_errors(repo, name):
                    _fetch(meta.location, headers, part, meta.size, task, report, cancel)
            except BaseException:
                report(Progress(task, failed=True))
                raise
            if expected:
                got = sha256_file(part, f"verify {name}", report, cancel)
                if got != expected:
                    part.unlink(missing_ok=True)
                    raise FetchError(f"{repo}/{name}: sha256 mismatch (expected {expected[:12]}…,"
                                     f" got {got[:12]}…); the bad file was removed — try again")
            blob.parent.mkdir(parents=True, exist_ok=True)
            tmp = blob.with_name(f"{etag}.{os.getpid()}.specchat-tmp")
            shutil.move(part, tmp)  # a rename when both are on one disk
            os.replace(tmp, blob)
    with hub_errors(repo, name):  # links snapshots/<commit>/<name> -> the blob, writes the ref
        return Path(hf_hub_download(repo, name, revision=revision, cache_dir=cfg.cache_dir,
                                    endpoint=cfg.endpoint, etag_timeout=lookup_timeout()))


def _host(url: str) -> str:
    from urllib.parse import urlsplit

    return urlsplit(url).netloc


class _Busy(Exception):
    """A status worth another try (rate limit, server error)."""


def _fetch(url: str, headers: dict[str, str], part: Path, size: int | None, task: str,
           report: ProgressFn, cancel: threading.Event | None) -> None:
    """Bring ``part`` to ``size`` bytes, resuming from what it holds; retry network failures."""
    from huggingface_hub import constants
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.utils import hf_raise_for_status, http_stream_backoff

    # retried here, quietly and resuming; huggingface_hub's own retries would log to the screen
    retryable: tuple[type[BaseException], ...] = (*transport_errors(), ConnectionError,
                                                  _Busy)
    have = part.stat().st_size if part.exists() else 0
    if size is None or have > size:
        part.unlink(missing_ok=True)  # unknown size: no safe resume; too big: not ours
        have = 0
    failures = 0
    report(Progress(task, have, size))
    while size is None or have < size:
        h = dict(headers, **({"Range": f"bytes={have}-"} if have else {}))
        h["Accept-Encoding"] = "identity"
        try:
            with http_stream_backoff("GET", url, headers=h, **NO_RETRY,
                                     timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT) as resp:
                try:
                    hf_raise_for_status(resp)
                except HfHubHTTPError as e:
                    if resp.status_code in (429, 500, 502, 503, 504):
                        raise _Busy(f"the Hub answered {resp.status_code}") from e
                    raise
                if have and resp.status_code != 206:
                    have = 0  # the server ignored Range: start over rather than corrupt
                with part.open("ab" if have else "wb") as f:
                    for chunk in resp.iter_bytes():  # as received: a cut loses nothing
                        if cancel is not None and cancel.is_set():
                            raise Cancelled(f"download cancelled; {format_bytes(have)} kept, "
                                            "it resumes from there next time")
                        f.write(chunk)
                        have += len(chunk)
                        failures = 0
                        report(Progress(task, have, size))
            if size is None:
                break
            if have < size:
                raise ConnectionError(f"the connection closed at {format_bytes(have)}")
        except retryable as e:
            failures += 1
            have = part.stat().st_size if part.exists() else 0
            if failures > RETRIES:
                pct = f"{have / size:.0%}" if size else format_bytes(have)
                raise FetchError(f"download of {part.parent.name.split('--', 1)[-1]} stopped at "
                                 f"{pct} ({type(e).__name__}); run the same command again to "
                                 "resume") from None
            if cancel is not None and cancel.wait(BACKOFF_S * 2 ** (failures - 1)):
                raise Cancelled("download cancelled; the part already fetched is kept") from None
            if cancel is None:
                time.sleep(BACKOFF_S * 2 ** (failures - 1))
    report(Progress(task, have, have, finished=True))


def sha256_file(path: Path, task: str = "", report: ProgressFn = no_progress,
                cancel: threading.Event | None = None) -> str:
    h = hashlib.sha256()
    total = path.stat().st_size
    done = 0
    with path.open("rb") as f:
        while block := f.read(4 << 20):
            if cancel is not None and cancel.is_set():
                raise Cancelled("cancelled while checking the download")
            h.update(block)
            done += len(block)
            if task:
                report(Progress(task, done, total))
    if task:
        report(Progress(task, done, total, finished=True))
    return h.hexdigest()


def remove(src: HfSource, work_dir: Path | None = None) -> list[Path]:
    """Delete the model's files from the HF cache (links and the blobs they point to) and any
    partial download. Blobs another snapshot still links to are kept."""
    cfg = hub_config()
    removed: list[Path] = []
    repo_dir = cfg.cache_dir / _folder(src.repo)
    for name in src.files:
        for link in sorted(repo_dir.glob(f"snapshots/*/{name}")):
            blob = link.resolve() if link.is_symlink() else None
            link.unlink(missing_ok=True)
            removed.append(link)
            if blob is not None and blob.exists() and not _linked_elsewhere(repo_dir, blob):
                blob.unlink()
                removed.append(blob)
    for p in partial_files(src, work_dir):
        p.unlink(missing_ok=True)
        removed.append(p)
    return removed


def _linked_elsewhere(repo_dir: Path, blob: Path) -> bool:
    links = repo_dir.glob("snapshots/**/*")
    return any(link.is_symlink() and link.resolve() == blob for link in links)

