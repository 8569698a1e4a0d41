"""GGUF model files already on this computer: specchat's models folder, the Hugging Face cache,
LM Studio's folders, and any folders in ``SPECCHAT_MODEL_DIRS`` (separated like PATH).

Vision projectors (mmproj), later parts of split models and unfinished downloads are skipped:
none of them can be loaded as a chat model on its own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from specchat.formats.gguf_checks import split_index, split_parts
from specchat.paths import AppPaths

MAX_DEPTH = 5  # LM Studio: models/<publisher>/<repo>/<file>; HF: models--x/snapshots/<sha>/<file>


@dataclass(frozen=True)
class LocalModel:
    path: Path
    size: int  # bytes, all parts of a split model together
    where: str  # "specchat", "Hugging Face cache", "LM Studio", or the folder


def model_dirs(paths: AppPaths) -> list[tuple[Path, str]]:
    from specchat.models.hub import hub_config

    home = Path.home()
    dirs = [(paths.models_dir, "specchat"), (hub_config().cache_dir, "Hugging Face cache"),
            (home / ".lmstudio" / "models", "LM Studio"),
            (home / ".cache" / "lm-studio" / "models", "LM Studio")]
    for d in os.environ.get("SPECCHAT_MODEL_DIRS", "").split(os.pathsep):
        if d.strip():
            p = Path(d.strip()).expanduser()
            dirs.append((p, str(p)))
    return dirs


def find_local_models(paths: AppPaths) -> list[LocalModel]:
    seen: set[Path] = set()
    out: list[LocalModel] = []
    for root, where in model_dirs(paths):
        for p in _walk(root, MAX_DEPTH):
            real = p.resolve()
            if real in seen:
                continue
            seen.add(real)
            split = split_index(p.name)
            if "mmproj" in p.name.lower() or (split and split[0] != 1):
                continue
            try:
                size = sum(part.resolve().stat().st_size for part in split_parts(p))
            except OSError:
                continue  # a dangling link or a missing part: not loadable
            out.append(LocalModel(p, size, where))
    return sorted(out, key=lambda m: (m.where, m.path.name.lower()))


def _walk(root: Path, depth: int) -> list[Path]:
    found: list[Path] = []
    if depth < 0 or not root.is_dir():
        return found
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return found
    for e in entries:
        if e.name.startswith(".") and e.name != ".cache":
            continue
        if e.is_dir() and not e.is_symlink():
            found += _walk(e, depth - 1)
        elif e.name.lower().endswith(".gguf") and e.is_file():
            found.append(e)
    return found
