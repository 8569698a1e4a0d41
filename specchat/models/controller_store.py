"""What a pair's γ controllers learnt, kept between processes, so a fresh ``specchat ask`` starts
warm instead of paying the warm-up again.

``<data>/controllers/<target id>-<draft id>.json`` (the file identities of
:mod:`specchat.models.calibration_store`; per machine, as the data folder is): a small versioned
JSON object holding the last state of each kind of controller (``Planner``, ``AutoGamma``).
Anything unreadable — a damaged file, another version, a state that does not load — counts as
nothing saved: the controller starts from the calibration instead, and the next save replaces
the file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from specchat.models.calibration_store import file_identity
from specchat.paths import AppPaths

VERSION = 1
LOCK_S = 5.0  # a save takes milliseconds; a process stuck holding it costs only this save
UNREADABLE = (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError)


def controller_file(paths: AppPaths, target: Path, draft: Path) -> Path:
    return paths.data_dir / "controllers" / f"{file_identity(target)}-{file_identity(draft)}.json"


def load_states(path: Path) -> dict[str, dict[str, Any]]:
    """Kind → saved state; empty when there is no file or it cannot be read."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (*UNREADABLE, UnicodeDecodeError):
        return {}
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        return {}
    states = doc.get("states")
    if not isinstance(states, dict):
        return {}
    return {str(k): v for k, v in states.items() if isinstance(v, dict)}


def save_state(path: Path, kind: str, state: dict[str, Any]) -> None:
    """Replace ``kind``'s saved state (the others stay); atomic, so a crash leaves the old file.

    Read and written under the file's lock, so the app and ``specchat serve`` saving the same
    pair's controllers at once both keep their kind's state (BusyError if it stays held)."""
    from specchat.locks import held

    path.parent.mkdir(parents=True, exist_ok=True)
    with held(path, "saving what the γ controllers learnt", timeout_s=LOCK_S):
        states = load_states(path)
        states[kind] = state
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"version": VERSION, "states": states}), encoding="utf-8")
        os.replace(tmp, path)
