"""Lint and type checks run with the suite, so CI enforces them (ruff, mypy are test extras)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_ruff_is_clean() -> None:
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "specchat", "tests"], cwd=REPO,
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_on_the_engine_is_clean() -> None:
    r = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stdout + r.stderr
