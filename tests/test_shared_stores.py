"""The stores two specchat processes share: two calibrations of one pair (real subprocesses), and
settings and catalog writes that keep what another process saved or say that it is stuck."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from specchat.models.calibration_store import calibrating, calibration_file, load_calibration
from specchat.paths import AppPaths
from tests.test_locks import holder
from tests.test_shared_home import Specchat, wait_until


def test_two_calibrations_of_one_pair_store_one_result_and_a_whole_catalog(
        home: AppPaths, tiny_target: Path, tiny_draft: Path) -> None:
    home.config_dir.mkdir(parents=True)
    home.user_catalog.write_text(
        f"models:\n  - id: pt\n    source: {{kind: path, path: {tiny_target}}}\n"
        f"  - id: pd\n    source: {{kind: path, path: {tiny_draft}}}\n"
        "pairs:\n  - id: pp\n    target: pt\n    draft: pd\n")
    args = ("models", "calibrate", "pp", "--tokens", "12", "--gamma-max", "3")
    with calibrating(home, tiny_target, tiny_draft):  # both start while this one "calibrates"
        runs = [Specchat(*args), Specchat(*args)]
        wait_until(lambda: all("waiting for another specchat" in r.stderr for r in runs),
                   "both calibrations to wait")
    assert [r.wait() for r in runs] == [0, 0], [r.stderr for r in runs]
    assert all(f"(process {os.getpid()}) calibrating" in r.stderr for r in runs)
    took = [r for r in runs if "measured by another specchat while this one waited" in r.out]
    assert len(took) == 1  # the second waited for the first, and used its result
    stored = load_calibration(home, tiny_target, tiny_draft)
    assert stored is not None
    assert str(calibration_file(home, tiny_target, tiny_draft)) in took[0].out
    pair = yaml.safe_load(home.user_catalog.read_text())["pairs"][0]
    assert pair["id"] == "pp" and pair["gamma"] == stored.gamma
    assert not list(home.user_catalog.parent.glob("*.tmp"))


def test_a_config_save_keeps_what_another_specchat_saved_and_says_when_it_is_stuck(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specchat import config
    from specchat.config import UserConfig, load_config, save_config
    from specchat.errors import CatalogError, ConfigError
    from specchat.models import user_catalog

    path = tmp_path / "config.yaml"
    mine = UserConfig()  # read before another specchat set the default pair
    save_config(path, mine.with_(default_pair="other"))
    save_config(path, mine.with_(theme="nord"), ("theme",))
    assert (load_config(path).default_pair, load_config(path).theme) == ("other", "nord")
    proc = holder(path)
    monkeypatch.setattr(config, "CONFIG_LOCK_S", 0.3)
    monkeypatch.setattr(user_catalog, "LOCK_S", 0.3)
    cat = tmp_path / "models.yaml"
    try:
        with pytest.raises(ConfigError, match=rf"cannot save {path}: Another specchat \(process "
                           rf"{proc.pid}\) is still writing config.yaml"):
            save_config(path, mine)
        other = holder(cat)
        try:
            with pytest.raises(CatalogError, match="not saved: Another specchat"):
                user_catalog.update_user_catalog(cat, remove_pairs=["x"])
        finally:
            other.kill()
            other.wait(10)
    finally:
        proc.kill()
        proc.wait(10)
    assert load_config(path).theme == "nord"  # untouched by the save that gave up
    assert not list(tmp_path.glob("*.tmp"))
