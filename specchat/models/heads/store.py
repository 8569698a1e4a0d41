"""Heads on disk: one folder per target file, keyed by the file's sha256.

``<data>/heads/<sha256[:16]>/`` holds the target's cached training text (``replies.jsonl``,
appended one reply at a time, so an interrupted run resumes), its hidden-state data
(``data-<key>.npz``) and its heads (``medusa.npz``). Every ``.npz`` is written to a temporary
file and renamed into place, so an interrupted write leaves nothing half-written. A heads file
records the sha256 of the file it was trained for and is refused for any other.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from specchat.errors import BusyError, SpecchatError
from specchat.models.hf_cache import sha256_file
from specchat.models.progress import ProgressFn, no_progress, waits
from specchat.paths import AppPaths

MEDUSA_FILE = "medusa.npz"


class HeadsError(SpecchatError):
    """Heads are missing, damaged, or were trained for another file."""


def heads_root(paths: AppPaths) -> Path:
    return paths.data_dir / "heads"


def target_sha256(paths: AppPaths, target: Path, report: ProgressFn = no_progress) -> str:
    """The target file's sha256, hashed once per (path, size, mtime) and remembered."""
    target = Path(target).resolve()
    st = target.stat()
    memo_file = heads_root(paths) / "sha256.json"
    key = str(target)
    stamp = [st.st_size, st.st_mtime_ns]
    memo: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        loaded = json.loads(memo_file.read_text(encoding="utf-8"))
        if isinstance(loaded, dict):
            memo = loaded
    hit = memo.get(key)
    if isinstance(hit, dict) and hit.get("stamp") == stamp and isinstance(hit.get("sha256"), str):
        return str(hit["sha256"])
    digest = sha256_file(target, f"hashing {target.name}", report)
    with contextlib.suppress(OSError, BusyError):  # a read-only data folder, a stuck other
        _remember(memo_file, key, {"stamp": stamp, "sha256": digest})  # process: hash again
    return digest


def _remember(memo_file: Path, key: str, value: dict[str, Any]) -> None:
    """Add one file's hash to the memo, under its lock: another process's entries stay."""
    from specchat.locks import held

    memo_file.parent.mkdir(parents=True, exist_ok=True)
    with held(memo_file, "remembering a file's sha256", timeout_s=5.0):
        memo: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            loaded = json.loads(memo_file.read_text(encoding="utf-8"))
            if isinstance(loaded, dict):
                memo = loaded
        memo[key] = value
        write_atomic(memo_file, lambda f: f.write(json.dumps(memo, indent=1).encode()))


def target_dir(paths: AppPaths, sha256: str) -> Path:
    return heads_root(paths) / sha256[:16]


def training(paths: AppPaths, sha256: str, target_name: str,
             report: ProgressFn = no_progress) -> contextlib.AbstractContextManager[bool]:
    """Hold a target's heads folder for a training run: two runs at once would append the
    same replies to its cache twice and time a machine the other keeps busy. A second one
    waits, saying so, then trains on the cache the first one filled."""
    from specchat.locks import held

    folder = target_dir(paths, sha256)
    folder.mkdir(parents=True, exist_ok=True)
    return held(folder / "training", f"training heads for {target_name}", waits(report))


@contextlib.contextmanager
def _tmp_for(dest: Path) -> Iterator[Path]:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, dest)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_atomic(dest: Path, write: Any) -> None:
    """``write(f)`` into a temporary file beside ``dest``, then rename it into place."""
    with _tmp_for(dest) as tmp, tmp.open("wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def save_npz(dest: Path, meta: Mapping[str, Any], arrays: Mapping[str, npt.NDArray[Any]]
             ) -> None:
    """Arrays plus a JSON ``meta`` record, atomically."""
    def write(f: IO[bytes]) -> None:
        named: dict[str, Any] = {"meta": np.array(json.dumps(dict(meta))), **arrays}
        np.savez(f, **named)

    write_atomic(dest, write)


def load_npz(path: Path) -> tuple[dict[str, Any], dict[str, npt.NDArray[Any]]]:
    """(meta, arrays) of a file written by :func:`save_npz`; HeadsError when damaged."""
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            arrays = {k: z[k] for k in z.files if k != "meta"}
    except (OSError, ValueError, KeyError, EOFError) as e:
        raise HeadsError(f"{path} is damaged ({e}); train the heads again") from None
    if not isinstance(meta, dict):
        raise HeadsError(f"{path} is damaged (no metadata); train the heads again")
    return meta, arrays


def check_target(meta: Mapping[str, Any], sha256: str, path: Path, target: Path) -> None:
    """Refuse heads trained for another file."""
    theirs = str(meta.get("target_sha256", ""))
    if theirs != sha256:
        raise HeadsError(f"{path.name} was trained for another file (sha256 {theirs[:12]}…), "
                         f"not {target.name} ({sha256[:12]}…); train heads for it with "
                         f"`specchat models train-heads {target}`")
