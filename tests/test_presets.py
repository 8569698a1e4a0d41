"""Named system-prompt presets: config.yaml's ``presets:`` section (checked like the rest of
the file), the built-in ones, ``specchat ask --preset``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.config import BUILTIN_PRESETS, UserConfig, load_config, save_config
from specchat.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_presets_read_add_to_the_built_in_ones_and_survive_a_save(tmp_path: Path) -> None:
    path = write(tmp_path, "system_prompt: Be kind.\npresets:\n  pirate: Talk like a pirate.\n"
                 "  coder: |\n    You write Rust.\n    Only Rust.\n")
    cfg = load_config(path)
    assert cfg.presets == {"pirate": "Talk like a pirate.", "coder": "You write Rust.\nOnly Rust.\n"}
    everything = cfg.all_presets()
    assert list(everything)[: len(BUILTIN_PRESETS)] == list(BUILTIN_PRESETS)  # built-ins first
    assert everything["coder"] == "You write Rust.\nOnly Rust.\n"  # the user's replaces it
    assert everything["concise"] == BUILTIN_PRESETS["concise"]
    assert cfg.preset("pirate") == "Talk like a pirate."
    save_config(path, cfg.with_(theme="nord"))  # the app saving a theme keeps the presets
    assert load_config(path).presets == cfg.presets
    assert UserConfig().presets == {} and UserConfig().all_presets() == BUILTIN_PRESETS


@pytest.mark.parametrize(("text", "message"), [
    ("presets: 3\n", "config.yaml:1: setting 'presets' must be a mapping of names to system "
                     "prompts"),
    ("presets:\n  ok: fine\n  bad: 3\n", "config.yaml:3: preset 'bad' must be its system "
                                         "prompt as text, not 3"),
    ("presets:\n  empty: ''\n", "config.yaml:2: preset 'empty' must be its system prompt as "
                                "text, not ''"),
    ("presets:\n  listy: [a, b]\n", "preset 'listy' must be its system prompt as text"),
    ("presets:\n  1: one\n", "config.yaml:1: preset names must be text, not 1"),
    ("presets:\n  ' pad': x\n", "preset name ' pad' must be at most 40 characters"),
])
def test_a_broken_preset_is_one_clear_message(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_an_unknown_preset_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="no system-prompt preset 'nope' .*concise, coder.*mine"):
        UserConfig(presets={"mine": "x"}).preset("nope")


def specchat(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPECCHAT_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "specchat", *args], capture_output=True,
                          text=True, env=env, timeout=120, check=False)


def prompt_tokens(r: subprocess.CompletedProcess[str]) -> int:
    assert r.returncode == 0, r.stderr
    return int(json.loads(r.stdout.splitlines()[-1])["prompt_tokens"])


def test_ask_preset_sends_the_presets_system_prompt(tmp_path: Path, tiny_target: Path) -> None:
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    long_prompt = "You are a ship's parrot. " * 6
    (home / "config" / "config.yaml").write_text(f"presets:\n  parrot: \"{long_prompt}\"\n")
    base = ["ask", "hi", "--model", str(tiny_target), "--temperature", "0", "--max-tokens", "2",
            "--json", "--threads", "1"]
    by_name = prompt_tokens(specchat(home, *base, "--preset", "parrot"))
    by_text = prompt_tokens(specchat(home, *base, "--system", long_prompt))
    default = prompt_tokens(specchat(home, *base))
    assert by_name == by_text > default  # the preset's prompt, not the default one
    builtin = prompt_tokens(specchat(home, *base, "--preset", "teacher"))
    assert builtin == prompt_tokens(specchat(home, *base, "--system", BUILTIN_PRESETS["teacher"]))
    r = specchat(home, *base, "--preset", "nope")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "no system-prompt preset 'nope'" in r.stderr and "parrot" in r.stderr
    r = specchat(home, *base, "--preset", "parrot", "--system", "x")
    assert r.returncode == 1 and "--system and --preset both set the system prompt" in r.stderr
