from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
        ("sampling: {temperature: -1}\n", "setting 'sampling.temperature' must be a number ≥ 0"),
        ("sampling: {tempreature: 1}\n", "unknown sampling setting 'tempreature'"),
        # A grammar is a request's (ask --json-schema, serve's response_format), not a default.
        ("sampling: {grammar: 'start: \"a\"'}\n", "unknown sampling setting 'grammar'"),
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


@pytest.mark.parametrize(("text", "kind", "n"), [
    ("", "plan", 4),  # the default: the planner
    ("gamma: plan\n", "plan", 4), ("gamma: planner\n", "plan", 4),
    ("gamma: auto\n", "auto", 4), ("gamma: pair\n", "pair", 4),  # old files' values
    ("gamma: 3\n", "fixed", 3), ("gamma: '0'\n", "fixed", 0),
])
def test_gamma_setting_reads_every_mode(tmp_path: Path, text: str, kind: str, n: int) -> None:
    f = tmp_path / "config.yaml"
    f.write_text(text)
    cfg = load_config(f)
    assert (cfg.gamma.kind, cfg.gamma.n) == (kind, n)
    save_config(f, cfg)
    assert load_config(f) == cfg
    assert ("gamma: 3" in f.read_text()) == (kind == "fixed" and n == 3)


@pytest.mark.parametrize("text", ["gamma: true\n", "gamma: 33\n", "gamma: -1\n", "gamma: [1]\n",
                                  "gamma: 2.5\n"])
def test_gamma_setting_errors_name_the_file_and_the_field(tmp_path: Path, text: str) -> None:
    f = tmp_path / "config.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(f))}:1: setting 'gamma' must be "):
        load_config(f)


def test_one_gamma_reader_for_cli_config_and_form() -> None:
    from specchat.cli.common import gamma_arg
    from specchat.engine.decode.step_policy import GAMMA_CAP
    from specchat.engine.policy.gamma import GammaSetting, parse_gamma
    from specchat.ui.chat_settings import parse_settings

    assert parse_gamma("plan") == gamma_arg("plan") == GammaSetting("plan")
    assert parse_gamma(GAMMA_CAP).n == GAMMA_CAP
    with pytest.raises(ValueError, match=f"between 0 and {GAMMA_CAP}"):
        parse_gamma(GAMMA_CAP + 1)
    import argparse
    with pytest.raises(argparse.ArgumentTypeError, match=f"between 0 and {GAMMA_CAP}"):
        gamma_arg(str(GAMMA_CAP + 1))
    with pytest.raises(ValueError, match=f"between 0 and {GAMMA_CAP}"):
        parse_settings("", "0", "1", "0", "0", "64", "", "fixed", str(GAMMA_CAP + 1), False,
                       UserConfig().sampling)


@pytest.mark.parametrize(
    ("name", "value"),
    [("gamma", True), ("n_ctx", True), ("n_ctx", 1.0), ("sampling.top_k", 1.5),
     ("sampling.seed", "x"), ("sampling.temperature", "hot"), ("sampling.temperature", False),
     ("sampling.max_tokens", 10**400), ("sampling.temperature", 10**400), ("ngram", 1),
     ("n_threads", -1), ("sampling.top_p", float("nan")), ("system_prompt", None),
     ("auto_calibrate", 1), ("auto_calibrate", "sometimes")],
)
def test_schema_refuses_wrong_types_and_ranges(tmp_path: Path, name: str, value: object) -> None:
    """Bools are not numbers, floats are not whole numbers, text is not a number."""
    import yaml

    section, _, key = name.rpartition(".")
    doc = {section: {key: value}} if section else {name: value}
    f = tmp_path / "config.yaml"
    f.write_text("# settings\n" + yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as e:
        load_config(f)
    assert str(e.value).startswith(f"{f}:{3 if section else 2}: setting '{name}' must be")


def test_sampling_ints_are_taken_as_floats(tmp_path: Path) -> None:
    f = tmp_path / "config.yaml"
    f.write_text("sampling: {temperature: 1, top_p: 1, min_p: 0}\n")
    s = load_config(f).sampling
    assert (s.temperature, s.top_p, s.min_p) == (1.0, 1.0, 0.0)
    assert isinstance(s.temperature, float)


_SCALARS = (st.none() | st.booleans() | st.integers(-(10**30), 10**30)
            | st.floats(allow_nan=True) | st.text(max_size=12))
_KEYS = st.sampled_from(["n_ctx", "n_threads", "gamma", "ngram", "memory_check", "system_prompt",
                         "default_pair", "sampling", "target_offload", "colour"])
_SUBKEYS = st.sampled_from(["temperature", "top_k", "top_p", "min_p", "seed", "max_tokens",
                            "gpu_layers", "main_gpu", "flash_attn", "kv_type", "stop"])
_DOCS = st.dictionaries(_KEYS, _SCALARS | st.dictionaries(_SUBKEYS, _SCALARS | st.lists(_SCALARS,
                                                                            max_size=2)),
                        max_size=4)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=_DOCS)
def test_config_fuzz_loads_or_says_where(tmp_path: Path, doc: dict[str, object]) -> None:
    """Any document either loads into settings the engine accepts, or is one ConfigError that
    names the file (and, for a bad value, its line)."""
    import yaml

    f = tmp_path / "config.yaml"
    f.write_text(yaml.safe_dump(doc))
    try:
        cfg = load_config(f)
    except ConfigError as e:
        assert str(e).startswith(f"{f}:") and "\n" not in str(e)
        return
    cfg.sampling.validate()
    cfg.target_offload.validate()
    assert all(not isinstance(v, bool) for v in (cfg.n_ctx, cfg.n_threads, cfg.gamma,
                                                 cfg.sampling.top_k, cfg.sampling.max_tokens))
    assert isinstance(cfg.sampling.temperature, float) and isinstance(cfg.sampling.top_k, int)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet=st.sampled_from(list("ab:- {}[]\n\t'\"#&*!|>%@`,?0.1e")), max_size=60))
def test_config_fuzz_any_bytes(tmp_path: Path, text: str) -> None:
    f = tmp_path / "config.yaml"
    f.write_text(text)
    try:
        load_config(f)
    except ConfigError as e:
        assert str(e).startswith(str(f)) and "\n" not in str(e)
