"""The first run's intro says what is true of the demo's files: to fetch (and how much, from
the catalog) or already on this computer, never "about 100 MB from PyPI" for files on disk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specchat.paths import app_paths
from specchat.ui.app import FIRST_RUN_INTRO
from specchat.ui.wizard.screen import WizardScreen

DEMO_FILES = ("SmolLM2-135M-Instruct.F32.gguf", "SmolLM2-135M-Instruct.Q3_K_S.gguf")


def test_the_intro_says_the_demo_is_to_fetch_then_on_disk(tmp_path: Path) -> None:
    models = Path(os.environ.get("SPECCHAT_TEST_MODELS", "")) / "data" / "models"
    if not all((models / f).exists() for f in DEMO_FILES):
        pytest.skip("needs the demo pair's files (SPECCHAT_TEST_MODELS)")
    paths = app_paths({"SPECCHAT_HOME": str(tmp_path / "home")})
    intro = WizardScreen(paths, intro=FIRST_RUN_INTRO).intro or ""
    assert "to fetch" in intro and "on disk once made" in intro and "{demo}" not in intro
    assert "already on this computer" not in intro
    paths.models_dir.mkdir(parents=True)
    for f in DEMO_FILES:
        (paths.models_dir / f).symlink_to(models / f)
    intro = WizardScreen(paths, intro=FIRST_RUN_INTRO).intro or ""
    assert "(SmolLM2-135M, already on this computer (" in intro
    assert "fetch" not in intro and "PyPI" not in intro
