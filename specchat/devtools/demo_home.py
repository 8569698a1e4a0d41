"""A throwaway SPECCHAT_HOME whose models folder links to existing model files (scripts)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def default_models_dir() -> Path:
    """Where the test suite keeps the demo pair's files."""
    base = Path(os.environ.get("SPECCHAT_TEST_MODELS", REPO / ".cache/test-models"))
    return base / "data" / "models"


@contextmanager
def linked_home(models: Path, config_yaml: str | None = None) -> Iterator[Path]:
    """A temporary home with ``models``' .gguf files linked in (never copied), set as
    SPECCHAT_HOME for this process and its children while the block runs."""
    old = os.environ.get("SPECCHAT_HOME")
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        (home / "data" / "models").mkdir(parents=True)
        (home / "config").mkdir()
        for f in models.glob("*.gguf"):
            (home / "data" / "models" / f.name).symlink_to(f)
        if config_yaml is not None:
            (home / "config" / "config.yaml").write_text(config_yaml, encoding="utf-8")
        os.environ["SPECCHAT_HOME"] = str(home)
        try:
            yield home
        finally:
            if old is None:
                os.environ.pop("SPECCHAT_HOME", None)
            else:
                os.environ["SPECCHAT_HOME"] = old
