"""The user's settings file (``<config>/config.yaml``): default pair, sampling, context size,
and how each model of a pair is loaded (GPU layers, main GPU, flash attention, KV cache type).

Read once in the CLI entry point and passed in. A broken file gives a message naming the file
and the field; the app falls back to defaults rather than refusing to start.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from specchat.engine.offload import OffloadSettings
from specchat.engine.sampling import SamplerSettings
from specchat.errors import ConfigError


@dataclass(frozen=True)
class UserConfig:
    default_pair: str | None = None
    default_model: str | None = None
    system_prompt: str = "You are a helpful assistant."
    n_ctx: int = 4096
    n_threads: int = 0
    gamma: int | str = "pair"  # an int, "auto", or "pair" (the pair's recommended γ)
    ngram: bool = False  # the old spelling of drafter "ngram,model"
    drafter: str | None = None  # drafters tried in turn, e.g. "ngram,model" (None: the draft model)
    sampling: SamplerSettings = field(default_factory=SamplerSettings)
    # Per model: gpu_layers (auto | all | N), main_gpu (auto | N), flash_attn, kv_type.
    target_offload: OffloadSettings = field(default_factory=OffloadSettings)
    draft_offload: OffloadSettings = field(default_factory=OffloadSettings)
    memory_check: bool = True  # refuse to load what would not fit in free memory

    def to_yaml(self) -> str:
        d = asdict(self)
        d["sampling"] = {k: v for k, v in d["sampling"].items() if k != "stop"}
        return yaml.safe_dump(d, sort_keys=False, allow_unicode=True)

    def with_(self, **changes: Any) -> UserConfig:
        return replace(self, **changes)


_TOP = {f.name: f for f in fields(UserConfig)}
_SAMPLING = {f.name for f in fields(SamplerSettings)} - {"stop"}
_OFFLOAD = {f.name for f in fields(OffloadSettings)}


def load_config(path: Path) -> UserConfig:
    if not path.exists():
        return UserConfig()
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: not valid YAML") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a mapping of settings")
    values: dict[str, Any] = {}
    for key, value in doc.items():
        if key not in _TOP:
            raise ConfigError(f"{path}: unknown setting '{key}'")
        if key == "sampling":
            values[key] = _sampling(path, value)
        elif key in ("target_offload", "draft_offload"):
            values[key] = _offload(path, key, value)
        else:
            values[key] = value
    cfg = UserConfig(**values)
    _check(path, cfg)
    return cfg


def _sampling(path: Path, value: Any) -> SamplerSettings:
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: 'sampling' must be a mapping")
    unknown = set(value) - _SAMPLING
    if unknown:
        raise ConfigError(f"{path}: unknown sampling setting '{sorted(unknown)[0]}'")
    try:
        return SamplerSettings(**value).validate()
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{path}: sampling: {e}") from None


def _offload(path: Path, key: str, value: Any) -> OffloadSettings:
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: '{key}' must be a mapping (gpu_layers, main_gpu, flash_attn, "
                          "kv_type)")
    unknown = set(value) - _OFFLOAD
    if unknown:
        raise ConfigError(f"{path}: unknown setting '{key}.{sorted(unknown)[0]}'")
    # YAML reads on/off as booleans: accept them for flash_attn.
    if isinstance(value.get("flash_attn"), bool):
        value = {**value, "flash_attn": "on" if value["flash_attn"] else "off"}
    try:
        return OffloadSettings(**value).validate()
    except ValueError as e:
        field_name = str(e).split(" ", 1)[0]
        raise ConfigError(f"{path}: setting '{key}.{field_name}' {str(e).split(' ', 1)[1]}") from None


def _check(path: Path, cfg: UserConfig) -> None:
    def bad(name: str, why: str) -> ConfigError:
        return ConfigError(f"{path}: setting '{name}' {why}")

    for name in ("default_pair", "default_model"):
        v = getattr(cfg, name)
        if v is not None and not isinstance(v, str):
            raise bad(name, "must be a name")
    if not isinstance(cfg.system_prompt, str):
        raise bad("system_prompt", "must be text")
    if not isinstance(cfg.n_ctx, int) or isinstance(cfg.n_ctx, bool) or cfg.n_ctx < 0:
        raise bad("n_ctx", "must be a whole number ≥ 0")
    if not isinstance(cfg.n_threads, int) or cfg.n_threads < 0:
        raise bad("n_threads", "must be a whole number ≥ 0")
    if not (cfg.gamma in ("auto", "pair") or (isinstance(cfg.gamma, int) and 0 <= cfg.gamma <= 32)):
        raise bad("gamma", "must be 0-32, 'auto' or 'pair'")
    if not isinstance(cfg.ngram, bool):
        raise bad("ngram", "must be true or false")
    if cfg.drafter is not None:
        from specchat.engine.drafters import parse_names
        from specchat.errors import SpecchatError

        if not isinstance(cfg.drafter, str):
            raise bad("drafter", "must be drafter names, e.g. 'ngram,model'")
        try:
            parse_names(cfg.drafter)
        except SpecchatError as e:
            raise bad("drafter", f"is wrong: {e}") from None
    if not isinstance(cfg.memory_check, bool):
        raise bad("memory_check", "must be true or false")


def save_config(path: Path, cfg: UserConfig) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(cfg.to_yaml(), encoding="utf-8")
    tmp.replace(path)
