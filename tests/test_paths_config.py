from __future__ import annotations

from pathlib import Path

import pytest

from specchat.config import UserConfig, load_config, save_config
from specchat.errors import ConfigError
from specchat.paths import app_paths


def test_specchat_home_puts_everything_under_one_folder(tmp_path: Path) -> None:
    p = app_paths({"SPECCHAT_HOME": str(tmp_path)})
    for d in (p.config_dir, p.data_dir, p.cache_dir, p.models_dir, p.chats_db):
        assert tmp_path in d.parents
    assert not p.config_dir.exists()  # nothing is created until ensure()
    p.ensure()
    assert p.models_dir.is_dir()


def test_platform_dirs_without_home() -> None:
    p = app_paths({})
    assert "specchat" in str(p.config_dir) and "specchat" in str(p.data_dir)


def test_config_round_trip(tmp_path: Path) -> None:
    cfg = UserConfig(default_pair="demo", gamma="auto")
    cfg = cfg.with_(sampling=cfg.sampling.with_(temperature=0.2, seed=7))
    save_config(tmp_path / "config.yaml", cfg)
    assert load_config(tmp_path / "config.yaml") == cfg


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("n_ctx: lots\n", "setting 'n_ctx' must be a whole number"),
        ("colour: red\n", "unknown setting 'colour'"),
        ("sampling: {temperature: -1}\n", "temperature must be"),
        ("sampling: {tempreature: 1}\n", "unknown sampling setting 'tempreature'"),
        ("gamma: many\n", "setting 'gamma'"),
        ("a: [\n", "not valid YAML"),
        ("- 1\n", "expected a mapping"),
    ],
)
def test_broken_config_is_a_clear_error(tmp_path: Path, text: str, match: str) -> None:
    f = tmp_path / "config.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_config(f)
