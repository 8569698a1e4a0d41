"""Calibration results on disk, keyed by the identity of the two model files.

``<data>/calibration/<target id>-<draft id>.json``; beside it, ``….no-auto`` says why the app
does not calibrate that pair on its own (the user cancelled it, or it failed). A file's identity
is its size plus a hash of its first and last MiB: cheap on a 5 GB file, stable when the file is
moved or re-linked, and different for another quantization or a re-upload. Results are per
machine (the data folder is).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from specchat.engine.policy.costs import CostCurve
from specchat.formats.gguf_checks import split_parts
from specchat.models.calibration import CalibrationResult
from specchat.models.progress import ProgressFn, no_progress, waits
from specchat.paths import AppPaths

_EDGE = 1 << 20


def file_identity(path: Path) -> str:
    h = hashlib.sha256()
    parts = split_parts(Path(path))
    for part in parts:
        size = part.stat().st_size
        h.update(str(size).encode())
        with part.open("rb") as f:
            h.update(f.read(_EDGE))
            if size > 2 * _EDGE:
                f.seek(size - _EDGE)
                h.update(f.read(_EDGE))
    return h.hexdigest()[:16]


def calibration_file(paths: AppPaths, target: Path, draft: Path) -> Path:
    return paths.data_dir / "calibration" / f"{file_identity(target)}-{file_identity(draft)}.json"


def save_calibration(paths: AppPaths, result: CalibrationResult) -> Path:
    dest = calibration_file(paths, Path(result.target), Path(result.draft))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}.tmp")
    tmp.write_text(result.to_json(), encoding="utf-8")
    os.replace(tmp, dest)
    return dest


def stored_at(paths: AppPaths, target: Path, draft: Path) -> int | None:
    """When the pair's calibration was last stored (ns), None if never: tells whether another
    process stored one meanwhile."""
    try:
        return calibration_file(paths, target, draft).stat().st_mtime_ns
    except FileNotFoundError:
        return None


def calibrating(paths: AppPaths, target: Path, draft: Path, report: ProgressFn = no_progress,
                cancelled: Callable[[], bool] | None = None
                ) -> contextlib.AbstractContextManager[bool]:
    """Hold the pair's calibration lock for a run: two processes timing the machine at once
    would each measure it busy, and store the worse. A second one waits (saying so); yields
    whether it waited (the other's result may be in the store then: see :func:`stored_at`)."""
    from specchat.locks import held

    f = calibration_file(paths, target, draft)
    f.parent.mkdir(parents=True, exist_ok=True)
    return held(f, f"calibrating {Path(target).name} with {Path(draft).name}", waits(report),
                cancelled)


def load_calibration(paths: AppPaths, target: Path, draft: Path) -> CalibrationResult | None:
    """The last calibration of exactly these two files on this machine, if any (a damaged
    record counts as none)."""
    f = calibration_file(paths, target, draft)
    if not f.exists():
        return None
    try:
        return CalibrationResult.from_json(f.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def load_target_curve(paths: AppPaths, target: Path) -> CostCurve | None:
    """The target's costs from the newest calibration of any pair with this exact target file
    on this machine (its verify curve is the target's own; the draft's cost comes along but
    belongs to that pair's draft). None when there is none, or it does not read."""
    folder = paths.data_dir / "calibration"
    try:
        found = sorted(folder.glob(f"{file_identity(target)}-*.json"),
                       key=lambda f: f.stat().st_mtime, reverse=True)
    except OSError:
        return None
    for f in found:
        try:
            return CalibrationResult.from_json(f.read_text(encoding="utf-8")).costs
        except (OSError, ValueError, TypeError, KeyError):
            continue
    return None


def no_auto_file(paths: AppPaths, target: Path, draft: Path) -> Path:
    return calibration_file(paths, target, draft).with_suffix(".no-auto")


def set_no_auto(paths: AppPaths, target: Path, draft: Path, why: str) -> None:
    """Remember not to calibrate these files in the background again (``why``: for a reader)."""
    f = no_auto_file(paths, target, draft)
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(why + "\n", encoding="utf-8")


def no_auto_reason(paths: AppPaths, target: Path, draft: Path) -> str | None:
    """Why these files are not calibrated in the background (None: they may be)."""
    try:
        return no_auto_file(paths, target, draft).read_text(encoding="utf-8").strip() or "-"
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return "unreadable"
