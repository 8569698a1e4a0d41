"""The command line, run as a user runs it: a subprocess with its own SPECCHAT_HOME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def specchat(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPECCHAT_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "specchat", *args], capture_output=True,
                          text=True, env=env, timeout=timeout, check=False)


@pytest.fixture
def home_dir(tmp_path: Path) -> Path:
    return tmp_path / "home"


def test_ask_streams_a_reply_and_a_stats_line(home_dir: Path, tiny_target: Path) -> None:
    r = specchat(home_dir, "ask", "hello", "--model", str(tiny_target), "--temperature", "0",
                 "--max-tokens", "12")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    assert "tok/s" in r.stderr and "Traceback" not in r.stderr


def test_ask_json_lines_parse(home_dir: Path, tiny_target: Path) -> None:
    r = specchat(home_dir, "ask", "hello", "--model", str(tiny_target), "--temperature", "0.8",
                 "--seed", "1", "--max-tokens", "10", "--json")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    tokens = [x for x in lines if x["type"] == "token"]
    assert tokens and all({"id", "text", "origin", "t"} <= set(t) for t in tokens)
    stats = lines[-1]
    assert stats["type"] == "stats" and "decode_tps" in stats and stats["generated_tokens"] >= 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "/nonexistent/model.gguf"], "model file not found: /nonexistent/model.gguf"),
        (["--model", "no-such-model"], "unknown model 'no-such-model'"),
        (["--pair", "dmeo"], "unknown pair 'dmeo' — did you mean demo?"),
        (["--model", "x", "--temperature", "-2"], "--temperature must be a number ≥ 0"),
    ],
)
def test_bad_input_is_one_line_without_traceback(home_dir: Path, args: list[str],
                                                 message: str) -> None:
    r = specchat(home_dir, "ask", "hi", *args)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == f"specchat: error: {message}" or message in r.stderr
    assert "Traceback" not in r.stderr


def test_not_gguf_and_truncated_files(home_dir: Path, tmp_path: Path, tiny_target: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_text("this is not a model")
    r = specchat(home_dir, "ask", "hi", "--model", str(junk))
    assert r.returncode == 1 and "not a GGUF file" in r.stderr and "Traceback" not in r.stderr
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_target.read_bytes()[: tiny_target.stat().st_size // 2])
    r = specchat(home_dir, "ask", "hi", "--model", str(cut))
    assert r.returncode == 1 and "truncated GGUF file" in r.stderr and "Traceback" not in r.stderr


def test_malformed_user_catalog_names_file_and_line(home_dir: Path) -> None:
    cfg = home_dir / "config"
    cfg.mkdir(parents=True)
    (cfg / "models.yaml").write_text("models:\n  - id: mine\n    source: {kind: path}\n")
    r = specchat(home_dir, "models", "list")
    assert r.returncode == 1
    assert f"{cfg / 'models.yaml'}:3: model 'mine' source: field 'path': is required" in r.stderr
    (cfg / "models.yaml").write_text("models: [oops\n")
    r = specchat(home_dir, "models", "list")
    assert r.returncode == 1 and "not valid YAML" in r.stderr and "Traceback" not in r.stderr


def test_broken_config_is_reported(home_dir: Path, tiny_target: Path) -> None:
    cfg = home_dir / "config"
    cfg.mkdir(parents=True)
    (cfg / "config.yaml").write_text("n_ctx: [1, 2\n")
    r = specchat(home_dir, "ask", "hi", "--model", str(tiny_target))
    assert r.returncode == 1 and "config.yaml" in r.stderr and "not valid YAML" in r.stderr


def test_models_list_and_doctor(home_dir: Path) -> None:
    r = specchat(home_dir, "models", "list")
    assert r.returncode == 0
    assert "smollm2-135m-instruct-f32" in r.stdout and "demo (default)" in r.stdout
    r = specchat(home_dir, "doctor")
    assert r.returncode == 0, r.stderr
    assert "GPU offload" in r.stdout and str(home_dir) in r.stdout


def test_pull_of_an_unknown_id_and_rm_of_an_absent_model(home_dir: Path) -> None:
    r = specchat(home_dir, "models", "pull", "nope")
    assert r.returncode == 1 and "unknown model 'nope'" in r.stderr
    r = specchat(home_dir, "models", "rm", "smollm2-135m-instruct-f16")
    assert r.returncode == 0 and "not on disk" in r.stdout
