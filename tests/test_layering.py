"""The engine and every other non-UI module must work without the UI toolkit."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import specchat


def non_ui_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(specchat.__path__, "specchat."):
        if info.name.startswith(("specchat.ui", "specchat.cli.app")) or info.name.endswith("__main__"):
            continue
        names.append(info.name)
    return names


def test_non_ui_modules_do_not_import_textual() -> None:
    mods = non_ui_modules()
    assert "specchat.engine.plain" in mods and "specchat.models.catalog" in mods
    code = (
        "import importlib, sys\n"
        f"for m in {mods!r}:\n"
        "    importlib.import_module(m)\n"
        "bad = sorted(k for k in sys.modules if k == 'textual' or k.startswith('textual.'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"textual imported by a non-UI module: {out.stdout}"


def test_package_data_catalog_matches_top_level_file() -> None:
    from pathlib import Path

    top = Path(__file__).resolve().parent.parent / "models.yaml"
    from specchat.models.catalog import shipped_catalog_text

    assert top.read_text(encoding="utf-8") == shipped_catalog_text()
