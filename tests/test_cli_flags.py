"""Every config choice can be made, and unmade, on the command line; and what ran is recorded
(``ask --json``'s stats line, the race's report)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specchat.cli.app import session_config
from specchat.cli.common import Env
from specchat.cli.main import build_parser
from specchat.cli.race_cmd import race_setup
from specchat.config import SCHEMA, UserConfig, load_config
from specchat.engine.policy.gamma import GammaSetting
from specchat.paths import app_paths
from specchat.store import ChatStore
from specchat.ui.services import AppServices

# Each config setting → the flag that sets it for the app (``specchat`` alone) and the flag
# or value that says its opposite. The test below fails when config.py grows a setting the
# command line cannot express.
FLAGS: dict[str, tuple[str, str]] = {
    "default_pair": ("--pair", "--model"),
    "default_model": ("--model", "--pair"),
    "system_prompt": ("--system", '--system ""'),
    "n_ctx": ("--ctx-size", "--ctx-size 0"),
    "n_threads": ("--threads", "--threads 0"),
    "gamma": ("--gamma", "--gamma plan"),
    "ngram": ("--ngram", "--no-ngram"),
    "drafter": ("--drafter", "--drafter model"),
    "memory_check": ("--memory-check", "--no-memory-check"),
    "auto_calibrate": ("--auto-calibrate", "--no-auto-calibrate"),
    "theme": ("--theme", "--theme textual-dark"),
    "sampling.temperature": ("--temperature", "--temperature 0"),
    "sampling.top_k": ("--top-k", "--top-k 0"),
    "sampling.top_p": ("--top-p", "--top-p 1"),
    "sampling.min_p": ("--min-p", "--min-p 0"),
    "sampling.seed": ("--seed", "--seed none"),
    "sampling.max_tokens": ("--max-tokens", "--max-tokens N"),
    "target_offload.gpu_layers": ("--gpu-layers", "--gpu-layers 0"),
    "draft_offload.gpu_layers": ("--draft-gpu-layers", "--draft-gpu-layers 0"),
    "target_offload.main_gpu": ("--main-gpu", "--main-gpu auto"),
    "target_offload.flash_attn": ("--flash-attn", "--flash-attn off"),
    "target_offload.kv_type": ("--kv-type", "--kv-type f16"),
    "max_tool_rounds": ("--max-tool-rounds", "--max-tool-rounds 8"),
    "file_limit_kb": ("--file-limit-kb", "--file-limit-kb 256"),
}


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


def subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            return a.choices[name]
    raise AssertionError(name)


def test_every_config_setting_has_a_flag_and_its_opposite() -> None:
    settings = set(SCHEMA) | {"gamma", "drafter"} | {
        f"target_offload.{k}" for k in ("gpu_layers", "main_gpu", "flash_attn", "kv_type")
    } | {"draft_offload.gpu_layers"}
    assert settings <= set(FLAGS), settings - set(FLAGS)
    top = options(build_parser())
    for flag, opposite in FLAGS.values():
        for f in (flag, opposite.split()[0]):
            assert f in top, f
    ask, race = options(subparser("ask")), options(subparser("race"))
    for flag in ("--drafter", "--no-ngram", "--gamma", "--system", "--seed", "--top-p",
                 "--no-memory-check", "--memory-check"):
        assert flag in ask and flag in race, flag


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(app_paths({"SPECCHAT_HOME": str(tmp_path / "home")}))


def write_config(env: Env, text: str) -> None:
    env.paths.config_file.parent.mkdir(parents=True, exist_ok=True)
    env.paths.config_file.write_text(text)


def test_no_ngram_undoes_the_config_files_ngram(env: Env) -> None:
    parse = build_parser().parse_args
    write_config(env, "ngram: true\n")
    assert env.ngram(parse(["ask", "q"])) is True
    assert env.ngram(parse(["ask", "q", "--no-ngram"])) is False
    assert env.drafters(parse(["ask", "q", "--no-ngram"])) is None  # the default: the model
    assert env.ngram(parse(["--no-ngram", "ask", "q"])) is False  # before the command too
    env.__dict__.pop("config")  # (a cached property)
    write_config(env, "drafter: ngram,model\n")
    assert env.drafters(parse(["ask", "q"])) == ("ngram", "model")
    assert env.drafters(parse(["ask", "q", "--no-ngram"])) == ("model",)
    assert env.drafters(parse(["ask", "q", "--drafter", "tree"])) == ("tree",)


def test_memory_check_and_seed_have_opposites(env: Env) -> None:
    parse = build_parser().parse_args
    write_config(env, "memory_check: false\nsampling:\n  seed: 5\n")
    assert env.memory_check(parse(["ask", "q"])) is False
    assert env.memory_check(parse(["ask", "q", "--memory-check"])) is True
    args = parse(["race", "--seed", "none"])
    assert race_setup(env, args).settings.seed not in (None, 5)  # a new one for this race
    assert race_setup(env, parse(["race"])).settings.seed == 5
    defaults = race_setup(env, parse(["race"])).settings
    assert defaults.temperature == 0 and defaults.max_tokens == 128  # the race's own defaults
    from specchat.cli.ask import sampler_from_args

    assert sampler_from_args(env, parse(["ask", "q", "--seed", "none"])).seed is None
    assert sampler_from_args(env, parse(["--temperature", "0.3", "ask", "q"])).temperature == 0.3


def test_subcommands_with_options_of_their_own_keep_their_defaults() -> None:
    args = build_parser().parse_args(["bench"])
    assert args.max_tokens == 128 and args.temperature == (0.0, 0.7) and args.seed == 1
    args = build_parser().parse_args(["prove"])
    assert args.temperature == 0.9


def test_the_apps_flags_are_this_sessions_and_never_saved(env: Env, tmp_path: Path) -> None:
    write_config(env, "ngram: true\nmemory_check: true\nsampling:\n  temperature: 0.7\n")
    args = build_parser().parse_args(["--no-ngram", "--gamma", "3", "--no-memory-check",
                                      "--temperature", "0", "--theme", "nord"])
    file_config = env.config
    config = session_config(env, args, file_config)
    assert (config.ngram, config.drafter, config.gamma) == (False, None, GammaSetting("fixed", 3))
    assert config.memory_check is False and config.sampling.temperature == 0
    assert config.theme == "nord"
    from_file = {k: getattr(file_config, k) for k in ("ngram", "memory_check", "theme")}
    services = AppServices(store=ChatStore.open(tmp_path / "c.sqlite3"), config=config,
                           open_runtime=lambda _r: None,  # type: ignore[arg-type,return-value]
                           label="x", config_path=env.paths.config_file, from_file=from_file)
    services.save_theme("gruvbox")  # any save writes the file: the flags' values stay out
    saved = load_config(env.paths.config_file)
    assert saved.ngram is True and saved.memory_check is True and saved.theme == "gruvbox"
    services.store.close()


def test_the_tool_limits_are_app_flags_and_ask_flags(env: Env) -> None:
    write_config(env, "max_tool_rounds: 5\nfile_limit_kb: 64\n")
    parse = build_parser().parse_args
    config = session_config(env, parse(["--max-tool-rounds", "3", "--file-limit-kb", "9"]),
                            env.config)
    assert (config.max_tool_rounds, config.file_limit_kb) == (3, 9)
    assert session_config(env, parse([]), env.config).max_tool_rounds == 5  # the file's
    # The same options before or after `ask`; ask still reads them itself.
    for argv in (["--max-tool-rounds", "2", "ask", "q"], ["ask", "q", "--max-tool-rounds", "2"]):
        assert parse(argv).max_tool_rounds == 2
    assert parse(["ask", "q", "--file-limit-kb", "7"]).file_limit_kb == 7


def specchat(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPECCHAT_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "specchat", *args], capture_output=True,
                          text=True, env=env, timeout=120, check=False)


def test_ask_json_records_the_drafter_and_gamma_mode_in_force(tmp_path: Path,
                                                              tiny_target: Path) -> None:
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.yaml").write_text(yaml.safe_dump({"ngram": True, "gamma": 2}))
    base = ["ask", "the cat", "--model", str(tiny_target), "--temperature", "0",
            "--max-tokens", "6", "--threads", "1"]
    r = specchat(home, *base, "--json")
    assert r.returncode == 0, r.stderr
    stats = json.loads(r.stdout.splitlines()[-1])
    assert stats["type"] == "stats"
    assert (stats["decoder"], stats["drafters"], stats["gamma_mode"]) == \
        ("speculative", ["ngram"], "fixed 2")  # the config file's n-gram, said
    r = specchat(home, *base, "--json", "--no-ngram")
    stats = json.loads(r.stdout.splitlines()[-1])
    assert (stats["decoder"], stats["drafters"], stats["gamma_mode"]) == ("plain", [], "off")
    r = specchat(home, *base)
    assert "drafter ngram · γ fixed 2" in r.stderr  # the human summary says it too
    assert UserConfig().ngram is False


def test_race_reports_record_the_drafter_and_gamma_mode(tmp_path: Path,
                                                        tiny_target: Path) -> None:
    report = tmp_path / "report"
    r = specchat(tmp_path / "home", "race", "the cat sat on the mat", "--model",
                 str(tiny_target), "--drafter", "ngram", "--gamma", "3", "--max-tokens", "8",
                 "--runs", "1", "--threads", "1", "--no-replay", "--report", str(report))
    assert r.returncode == 0, r.stderr
    assert "speculative side: drafter ngram · γ mode fixed 3" in r.stdout
    doc = json.loads((report / "race.json").read_text())
    assert doc["speculative"] == {"drafters": ["ngram"], "gamma_mode": "fixed 3"}
    assert doc["sampling"]["temperature"] == 0 and doc["plain"]["tokens"] >= 1
    assert "**speculative side:** drafter ngram, γ mode fixed 3" in \
        (report / "report.md").read_text()
    assert "drafter ngram · γ fixed 3" in (report / "race.svg").read_text()
