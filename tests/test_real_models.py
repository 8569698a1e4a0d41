"""Integration on the real PyPI-shipped models (fetched once into the test-model cache)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.engine.llama.model import LlamaModel
from specchat.paths import AppPaths

pytestmark = pytest.mark.slow


def test_demo_files_are_the_derived_precisions(demo_files: tuple[Path, Path]) -> None:
    target, draft = demo_files
    t, d = LlamaModel(target), LlamaModel(draft)
    assert t.n_vocab == d.n_vocab == 49152
    assert t.chat_template and "im_start" in t.chat_template
    assert t.size_bytes > 4 * d.size_bytes  # F32 vs Q3_K_S


def test_ask_demo_pair_greedy(demo_files: tuple[Path, Path], real_paths: AppPaths) -> None:
    env = {**os.environ, "SPECCHAT_HOME": str(real_paths.config_dir.parent)}
    cmd = [sys.executable, "-m", "specchat", "ask", "Name three primary colours.", "--pair",
           "demo", "--temperature", "0", "--max-tokens", "32"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    text = r.stdout.lower()
    assert sum(c in text for c in ("red", "blue", "yellow", "green")) >= 2, r.stdout
    r = subprocess.run([*cmd, "--json"], capture_output=True, text=True, env=env, timeout=300,
                       check=False)
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert lines[-1]["type"] == "stats" and lines[-1]["decode_tps"] > 0
