"""The user's settings file (``<config>/config.yaml``): default pair, sampling, context size,
and how each model of a pair is loaded (GPU layers, main GPU, flash attention, KV cache type).

Read once in the CLI entry point and passed in. A broken file gives a message naming the file
and the field; the app falls back to defaults rather than refusing to start.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.llama.offload import OffloadSettings
from specchat.engine.policy.gamma import GAMMA_HELP, GammaSetting, parse_gamma
from specchat.errors import BusyError, ConfigError
from specchat.mcp_config import McpServer, parse_servers


@dataclass(frozen=True)
class UserConfig:
    default_pair: str | None = None
    default_model: str | None = None
    system_prompt: str = "You are a helpful assistant."
    n_ctx: int = 4096
    n_threads: int = 0
    # plan (the planner: chain, tree or plain per step), auto, pair (its calibrated γ) or N;
    # see engine.policy.gamma.parse_gamma, the one reader of this field.
    gamma: GammaSetting = field(default_factory=GammaSetting)
    ngram: bool = False  # the old spelling of drafter "ngram,model"
    drafter: str | None = None  # drafters tried in turn, e.g. "ngram,model" (None: the draft model)
    sampling: SamplerSettings = field(default_factory=SamplerSettings)
    # Per model: gpu_layers (auto | all | N), main_gpu (auto | N), flash_attn, kv_type.
    target_offload: OffloadSettings = field(default_factory=OffloadSettings)
    draft_offload: OffloadSettings = field(default_factory=OffloadSettings)
    memory_check: bool = True  # refuse to load what would not fit in free memory
    # llama.cpp RPC servers ("HOST:PORT") the target's layers spread over (engine.llama.rpc).
    rpc: tuple[str, ...] = ()
    # Calibrate a pair the app opens uncalibrated (the first run's), in the background between
    # replies (session.auto_calibration).
    auto_calibrate: bool = True
    theme: str | None = None  # the app's Textual theme by name (None: Textual's default)
    # Named system prompts (name → prompt) the app's F9 and `ask --preset` offer, after
    # the built-in ones (BUILTIN_PRESETS; a preset of the same name replaces a built-in).
    presets: dict[str, str] = field(default_factory=dict)
    # MCP servers (name → server) whose tools a chat or `ask --tools` may offer (specchat.tools).
    mcp_servers: dict[str, McpServer] = field(default_factory=dict)
    max_tool_rounds: int = 8  # model replies with tool calls in one turn before it must stop
    file_limit_kb: int = 256  # the largest file a message may attach

    def __post_init__(self) -> None:
        if not isinstance(self.gamma, GammaSetting):  # UserConfig(gamma="auto"), gamma=3
            object.__setattr__(self, "gamma", parse_gamma(self.gamma, "setting 'gamma'"))

    def to_yaml(self) -> str:
        d = asdict(self)
        d["gamma"] = self.gamma.to_config()
        d["sampling"] = {k: v for k, v in d["sampling"].items() if k in _SAMPLING}
        d["rpc"] = list(self.rpc)
        d["mcp_servers"] = {n: s.to_config() for n, s in self.mcp_servers.items()}
        return yaml.safe_dump(d, sort_keys=False, allow_unicode=True)

    def with_(self, **changes: Any) -> UserConfig:
        return replace(self, **changes)

    def all_presets(self) -> dict[str, str]:
        """The built-in presets, then the user's (which may replace one)."""
        return {**BUILTIN_PRESETS, **self.presets}

    def preset(self, name: str) -> str:
        """A preset's system prompt; ConfigError naming the known ones if there is none."""
        found = self.all_presets()
        if name not in found:
            raise ConfigError(f"no system-prompt preset {name!r} (presets: "
                              f"{', '.join(found)}; add your own under 'presets:' in "
                              "config.yaml)")
        return found[name]


# A few system prompts worth having at hand; config.yaml's ``presets:`` adds to them.
BUILTIN_PRESETS: dict[str, str] = {
    "concise": "You are a helpful assistant. Answer briefly: a sentence or a short list, "
               "no preamble and no summary at the end.",
    "coder": "You are an expert programmer. Answer with working code first, in fenced code "
             "blocks that name their language, then explain it in a few sentences.",
    "teacher": "You are a patient teacher. Explain step by step, with a small example, for "
               "someone new to the topic, and end with one question that checks understanding.",
    "editor": "You are a careful editor. Correct the grammar, spelling and clarity of the "
              "user's text, keep its meaning and tone, and reply with the corrected text only.",
}
PRESET_NAME_CHARS = 40


_TOP = {f.name: f for f in fields(UserConfig)}
_SAMPLING = {f.name for f in fields(SamplerSettings)} - {"stop", "logprobs", "prediction",
                                                      "grammar"}  # per request
_OFFLOAD = {f.name for f in fields(OffloadSettings)}
MAX_CTX = (1 << 32) - 1  # llama.cpp keeps n_ctx in 32 bits; the memory check judges the rest


@dataclass(frozen=True)
class Setting:
    """One setting's type and range, checked the same way for config.yaml and the CLI.

    ``kind`` is int, float, str or bool; a bool is never a number (YAML reads ``true`` as one,
    Python counts it as an int) and a float is never a whole number.
    """

    kind: type
    minimum: float | None = None
    maximum: float | None = None
    optional: bool = False  # None (YAML null) allowed
    above: bool = False  # minimum itself excluded
    why: str = ""  # what the value means, after the range

    def describe(self) -> str:
        what = {int: "a whole number", float: "a number", str: "text", bool: "true or false"}
        text = what[self.kind]
        lo, hi = self.minimum, self.maximum
        if lo is not None and hi is not None:
            text += f" in {'(' if self.above else '['}{_num(lo)}, {_num(hi)}]"
        elif lo is not None:
            text += f" {'>' if self.above else '≥'} {_num(lo)}"
        return text + (f" ({self.why})" if self.why else "")

    def check(self, value: Any) -> Any:
        """``value`` (a float for a float setting given as an int), or ValueError."""
        if value is None and self.optional:
            return None
        ok = _is_kind(value, self.kind)
        v = value
        if ok and self.kind is float:
            try:
                v = float(value)
            except OverflowError:  # a 400-digit int
                ok = False
        if ok and self.kind in (int, float):
            lo, hi = self.minimum, self.maximum
            ok = ((isinstance(v, int) or math.isfinite(v))
                  and (lo is None or (v > lo if self.above else v >= lo))
                  and (hi is None or v <= hi))
        if not ok:
            raise ValueError(f"must be {self.describe()}, not {_shown(value)}")
        return v


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        text = "true" if value else "false"  # as YAML spells it
    else:
        text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_kind(value: Any, kind: type) -> bool:
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


# Every setting but gamma (its own parser, _gamma) and the offload tables (OffloadSettings).
SCHEMA: dict[str, Setting] = {
    "default_pair": Setting(str, optional=True),
    "default_model": Setting(str, optional=True),
    "system_prompt": Setting(str),
    "n_ctx": Setting(int, 0, MAX_CTX, why="0 = the model's training context"),
    "n_threads": Setting(int, 0, why="0 = automatic"),
    "ngram": Setting(bool),
    "memory_check": Setting(bool),
    "auto_calibrate": Setting(bool),
    "theme": Setting(str, optional=True),
    "sampling.temperature": Setting(float, 0, why="0 = greedy"),
    "sampling.top_k": Setting(int, 0, why="0 = off"),
    "sampling.top_p": Setting(float, 0, 1, above=True),
    "sampling.min_p": Setting(float, 0, 1),
    "sampling.seed": Setting(int, 0, optional=True, why="none = a new one each reply"),
    "sampling.max_tokens": Setting(int, 1, MAX_CTX),
    # Tool calls and attached files (the app, and `ask --tools` / `ask --file`).
    "max_tool_rounds": Setting(int, 1, 100),
    "file_limit_kb": Setting(int, 1, 1 << 20),
}


def check_setting(name: str, value: Any) -> Any:
    """The value checked against :data:`SCHEMA` (raises ValueError "must be …, not …")."""
    return SCHEMA[name].check(value)


def _gamma(value: Any) -> GammaSetting:
    """γ: plan, auto, pair or a number (old files' values all still read), by the engine's one
    reader of a γ setting; the message follows "setting 'gamma'"."""
    try:
        return parse_gamma(value, "γ")
    except ValueError as e:
        if isinstance(value, int) and not isinstance(value, bool):  # a number out of range
            raise ValueError(str(e).removeprefix("γ ")) from None
        raise ValueError(f"must be {GAMMA_HELP}, not {_shown(value)}") from None


def _drafter(value: Any) -> str | None:
    """Drafter names, comma-separated ("ngram,model"), as ``--drafter`` takes them."""
    from specchat.engine.decode.registry import parse_names
    from specchat.errors import SpecchatError

    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"must be drafter names such as 'ngram,model', not {_shown(value)}")
    try:
        return ",".join(parse_names(value))
    except SpecchatError as e:
        raise ValueError(f"is wrong: {e}") from None


def _rpc(value: Any) -> tuple[str, ...]:
    """RPC servers: "HOST:PORT" or a list of them (``--rpc`` takes them comma-separated)."""
    from specchat.engine.llama.rpc import parse_endpoints
    from specchat.errors import SpecchatError

    if value is not None and not isinstance(value, (str, list)):
        raise ValueError(f"must be HOST:PORT or a list of them, not {_shown(value)}")
    try:
        return parse_endpoints(value, "rpc")
    except SpecchatError as e:
        raise ValueError(f"is wrong: {str(e).removeprefix('rpc: ')}") from None


def load_config(path: Path) -> UserConfig:
    if not path.exists():
        return UserConfig()
    try:
        text = path.read_text(encoding="utf-8")
        doc = yaml.safe_load(text) or {}
        lines = _key_lines(text)
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    except (yaml.YAMLError, RecursionError, ValueError) as e:  # ValueError: a 5000-digit int
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: not valid YAML") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a mapping of settings")

    def bad(key: str, why: str) -> ConfigError:
        """``why`` follows "setting 'KEY'"; one that starts with "!" is the whole message."""
        line = lines.get(key) or lines.get(key.split(".")[0])
        where = f"{path}:{line}" if line else str(path)
        return ConfigError(f"{where}: {why[1:]}" if why.startswith("!")
                           else f"{where}: setting '{key}' {why}")

    values: dict[str, Any] = {}
    for key, value in doc.items():
        if not isinstance(key, str) or key not in _TOP:
            raise bad(str(key), f"!unknown setting {key!r} (known: {', '.join(_TOP)})")
        try:
            if key == "sampling":
                values[key] = _sampling(value, bad)
            elif key in ("target_offload", "draft_offload"):
                values[key] = _offload(key, value, bad)
            elif key == "gamma":
                values[key] = _gamma(value)
            elif key == "drafter":
                values[key] = _drafter(value)
            elif key == "presets":
                values[key] = _presets(value, bad)
            elif key == "rpc":
                values[key] = _rpc(value)
            elif key == "mcp_servers":
                values[key] = parse_servers(value, bad)
            else:
                values[key] = check_setting(key, value)
        except ValueError as e:
            raise bad(key, str(e)) from None
    return UserConfig(**values)


def _key_lines(text: str) -> dict[str, int]:
    """Each key's line (1-based), as "key" or "section.key", for messages."""
    lines: dict[str, int] = {}
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if not isinstance(root, yaml.MappingNode):
        return lines
    for k, v in root.value:
        name = str(k.value)
        lines.setdefault(name, k.start_mark.line + 1)
        if isinstance(v, yaml.MappingNode):
            for k2, _ in v.value:
                lines.setdefault(f"{name}.{k2.value}", k2.start_mark.line + 1)
    return lines


BadFn = Callable[[str, str], ConfigError]


def _presets(value: Any, bad: BadFn) -> dict[str, str]:
    """``presets:`` is a mapping of names to system prompts (text)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("must be a mapping of names to system prompts, e.g. "
                         "'coder: You are an expert programmer.'")
    out: dict[str, str] = {}
    for name, prompt in value.items():
        key = f"presets.{name}"
        if not isinstance(name, str) or not name.strip():
            raise bad("presets", f"!preset names must be text, not {_shown(name)}")
        if len(name) > PRESET_NAME_CHARS or name != name.strip():
            raise bad(key, f"!preset name {_shown(name)} must be at most {PRESET_NAME_CHARS} "
                      "characters, without spaces around it")
        if not isinstance(prompt, str) or not prompt.strip():
            raise bad(key, f"!preset '{name}' must be its system prompt as text, "
                      f"not {_shown(prompt)}")
        out[name] = prompt
    return out


def _sampling(value: Any, bad: BadFn) -> SamplerSettings:
    if not isinstance(value, dict):
        raise ValueError("must be a mapping")
    out: dict[str, Any] = {}
    for k, v in value.items():
        if k not in _SAMPLING:
            raise bad(f"sampling.{k}", f"!unknown sampling setting {k!r} (known: "
                      + ", ".join(sorted(_SAMPLING)) + ")")
        try:
            out[k] = check_setting(f"sampling.{k}", v)
        except ValueError as e:
            raise bad(f"sampling.{k}", str(e)) from None
    try:
        return SamplerSettings(**out).validate()
    except ValueError as e:  # what the engine refuses beyond each field's own range
        raise bad("sampling", str(e)) from None


def _offload(key: str, value: Any, bad: BadFn) -> OffloadSettings:
    if not isinstance(value, dict):
        raise ValueError("must be a mapping (gpu_layers, main_gpu, flash_attn, kv_type)")
    for k in value:
        if k not in _OFFLOAD:
            raise bad(f"{key}.{k}", f"!unknown setting '{key}.{k}' (known: "
                      + ", ".join(sorted(_OFFLOAD)) + ")")
        if isinstance(value[k], (list, dict)):
            raise bad(f"{key}.{k}", "must be a single value")
    # YAML reads on/off as booleans: accept them for flash_attn.
    if isinstance(value.get("flash_attn"), bool):
        value = {**value, "flash_attn": "on" if value["flash_attn"] else "off"}
    try:
        return OffloadSettings(**value).validate()
    except (TypeError, ValueError) as e:
        field_name, _, why = str(e).partition(" ")
        if field_name not in _OFFLOAD:
            raise bad(key, str(e)) from None
        raise bad(f"{key}.{field_name}", why) from None


def cap_threads(n: int, cpus: int | None = None) -> tuple[int, str | None]:
    """Threads no more than the machine's CPUs (llama.cpp crashes asked for 100,000), with a
    note when capped."""
    cpus = cpus or os.cpu_count() or 1
    if n <= cpus:
        return n, None
    return cpus, f"{n} threads is more than this machine's {cpus} CPUs: using {cpus}"


CONFIG_LOCK_S = 10.0  # a write takes milliseconds: longer means the other one is stuck


def save_config(path: Path, cfg: UserConfig, keys: Iterable[str] | None = None) -> None:
    """Write ``cfg`` to ``path``; with ``keys``, only those settings: the rest is what the file
    holds now (another specchat may have changed it since ``cfg`` was read).

    Under the file's lock, through a temporary file of this process renamed into place, so
    two processes saving at once never leave a torn file or mix their halves.
    """
    from specchat.locks import held

    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with held(path, f"writing {path.name}", timeout_s=CONFIG_LOCK_S):
            if keys is not None:
                try:
                    now = load_config(path)
                except ConfigError:
                    now = cfg  # unreadable now: ours is the file to have
                cfg = now.with_(**{k: getattr(cfg, k) for k in keys})
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            try:
                tmp.write_text(cfg.to_yaml(), encoding="utf-8")
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
    except BusyError as e:
        raise ConfigError(f"cannot save {path}: {e}") from None
