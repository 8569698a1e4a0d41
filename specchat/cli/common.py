"""State every command needs, built once in the entry point: paths, user config, catalog."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace
from functools import cached_property

from specchat.config import UserConfig, cap_threads, check_setting, load_config
from specchat.engine.decode.registry import names as drafter_names
from specchat.engine.decode.registry import parse_names
from specchat.engine.llama.model_settings import FLASH_ATTN_MODES, KV_CACHE_TYPES, ContextSettings
from specchat.engine.llama.offload import OffloadSettings, parse_gpu_layers
from specchat.engine.policy.gamma import GammaSetting, parse_gamma
from specchat.errors import SpecchatError
from specchat.loading import RuntimeOptions
from specchat.models.catalog import Catalog, load_catalog
from specchat.models.resolver import ModelResolver
from specchat.paths import AppPaths, app_paths
from specchat.runtime.opening import Runtime
from specchat.textsafe import safe_text


@dataclass
class Env:
    paths: AppPaths

    @cached_property
    def config(self) -> UserConfig:
        return load_config(self.paths.config_file)

    @cached_property
    def catalog(self) -> Catalog:
        return load_catalog(self.paths.user_catalog)

    @cached_property
    def resolver(self) -> ModelResolver:
        return ModelResolver(self.catalog, self.paths)

    def offload_settings(self, args: argparse.Namespace, config: UserConfig | None = None,
                         ) -> tuple[OffloadSettings, OffloadSettings]:
        """The target's and the draft's load settings: the config file, then the flags."""
        config = config or self.config
        shared = {k: getattr(args, k, None) for k in ("main_gpu", "flash_attn", "kv_type")}
        target = config.target_offload.with_(gpu_layers=getattr(args, "gpu_layers", None),
                                                  **shared)
        draft = config.draft_offload.with_(gpu_layers=getattr(args, "draft_gpu_layers", None),
                                                **shared)
        for role, s in (("target", target), ("draft", draft)):
            try:
                s.validate()
            except ValueError as e:
                raise SpecchatError(f"{role} model: {e}") from None
        return target, draft

    def runtime_options(self, args: argparse.Namespace,
                        config: UserConfig | None = None) -> RuntimeOptions:
        config = config or self.config
        threads, note = cap_threads(getattr(args, "threads", None) or config.n_threads)
        if note:
            sys.stderr.write(f"specchat: note: {note}\n")
        ctx_size = getattr(args, "ctx_size", None)
        ctx = ContextSettings(n_ctx=config.n_ctx if ctx_size is None else ctx_size,
                              n_threads=threads)
        target, draft = self.offload_settings(args, config)
        return RuntimeOptions(
            context=target.context_settings(ctx),
            target=replace(target.model_settings(), rpc=self.rpc(args, config)),
            draft=draft.model_settings(), draft_context=draft.context_settings(ctx),
            memory_check=self.memory_check(args, config),
        )

    def rpc(self, args: argparse.Namespace, config: UserConfig | None = None) -> tuple[str, ...]:
        """The target's RPC servers: --rpc (parsed by :func:`_rpc_arg`), else the config's."""
        given = getattr(args, "rpc", None)
        return given if isinstance(given, tuple) else (config or self.config).rpc

    def gamma(self, args: argparse.Namespace) -> GammaSetting:
        """γ from --gamma (parsed by :func:`gamma_arg`), else the config's (plan by default)."""
        g = getattr(args, "gamma", None)
        return g if isinstance(g, GammaSetting) else self.config.gamma

    def ngram(self, args: argparse.Namespace, config: UserConfig | None = None) -> bool | None:
        """--ngram / --no-ngram, else (unless --drafter says what drafts) the config's ``ngram:
        true``; None when nothing says (the default: see ``runtime.decoders.drafter_names``)."""
        flag = getattr(args, "ngram", None)
        if flag is not None:
            return bool(flag)
        if getattr(args, "drafter", None):
            return None
        return True if (config or self.config).ngram else None

    def drafters(self, args: argparse.Namespace,
                 config: UserConfig | None = None) -> tuple[str, ...] | None:
        """The drafters from --drafter, else the config's ``drafter`` (None: --ngram's or the
        default choice, see ``runtime.decoders.drafter_names``); --no-ngram takes n-gram lookup
        out of the config's list (none left: the default, the draft model)."""
        text = getattr(args, "drafter", None)
        if text:
            return parse_names(text)
        flag = getattr(args, "ngram", None)
        if flag:
            return None
        config = config or self.config
        names = parse_names(config.drafter) if config.drafter else None
        if flag is False and names:
            names = tuple(n for n in names if n != "ngram") or None
        return names

    def drafter_setting(self, args: argparse.Namespace, config: UserConfig) -> str | None:
        """The app's drafter setting after --drafter / --ngram / --no-ngram (the config's ``drafter``
        spelling; None: the default)."""
        names = self.drafters(args, config)
        if names:
            return ",".join(names)
        return "ngram,model" if self.ngram(args, config) else None

    def memory_check(self, args: argparse.Namespace, config: UserConfig | None = None) -> bool:
        flag = getattr(args, "memory_check", None)
        return (config or self.config).memory_check if flag is None else bool(flag)


def gamma_arg(text: str) -> GammaSetting:
    """argparse type of every --gamma option (ask, race, the app): the one γ reader's rules."""
    try:
        return parse_gamma(text, "--gamma")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--gamma ")) from None


GAMMA_OPTION_HELP = ("plan (the planner: chain, tree or plain each step, from measured costs), "
                     "auto (an adaptive chain length), pair (the pair's calibrated γ) or N (a "
                     "fixed draft length; 0 = plain steps); default: the config file's gamma, "
                     "else plan")


# Each option that sets a config setting, checked by the config's own schema.
OPTION_SETTINGS = {
    "ctx_size": ("--ctx-size", "n_ctx"), "threads": ("--threads", "n_threads"),
    "temperature": ("--temperature", "sampling.temperature"),
    "top_k": ("--top-k", "sampling.top_k"), "top_p": ("--top-p", "sampling.top_p"),
    "min_p": ("--min-p", "sampling.min_p"), "seed": ("--seed", "sampling.seed"),
    "max_tokens": ("--max-tokens", "sampling.max_tokens"),
    "max_tool_rounds": ("--max-tool-rounds", "max_tool_rounds"),
    "file_limit_kb": ("--file-limit-kb", "file_limit_kb"),
}


def validate_args(args: argparse.Namespace) -> None:
    """Every option that mirrors a config setting, held to the same types and ranges."""
    for dest, (flag, setting) in OPTION_SETTINGS.items():
        value = getattr(args, dest, None)
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if v is None or v == "none":  # not given; --seed none
                continue
            try:
                check_setting(setting, v)
            except ValueError as e:
                raise SpecchatError(f"{flag} {e}") from None


def make_env() -> Env:
    return Env(app_paths())


def add_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--pair", help="a target/draft pair from the catalog (default: the configured "
                   "pair, else 'demo')")
    g.add_argument("--model", help="one model: a catalog id or a path to a .gguf file (plain "
                   "decoding)")
    p.add_argument("--draft", metavar="MODEL", help="a draft model for --model (catalog id or "
                   ".gguf path): speculative decoding with an ad-hoc pair")
    p.add_argument("--ctx-size", type=int, metavar="N",
                   help="context window in tokens (0 = the model's training context)")
    add_hardware_args(p)


def add_drafter_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--drafter", metavar="NAME[,NAME…]",
                   help="what drafts: " + ", ".join(drafter_names()) + "; several are tried in "
                   "turn (e.g. ngram,model). Default: the configured drafter, else the draft "
                   "model (--drafter model)")
    p.add_argument("--ngram", action=argparse.BooleanOptionalAction, default=None,
                   help="--ngram: the same as --drafter ngram,model (ngram alone with --model); "
                   "--no-ngram: no n-gram lookup, whatever the config file says (ngram: true, "
                   "or ngram in its drafter)")


def seed_arg(text: str) -> int | str:
    """--seed N, or none (a new seed each reply: the opposite of a seed in the config file)."""
    if text.strip().lower() in ("none", "random"):
        return "none"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number or 'none'") from None


def add_sampling_args(p: argparse.ArgumentParser, temperature: str = "the configured one",
                      max_tokens: str = "the configured number") -> None:
    """The sampler's settings, each overriding the config file's ``sampling`` section."""
    g = p.add_argument_group("sampling")
    g.add_argument("--temperature", type=float, metavar="T",
                   help=f"0 = greedy (default: {temperature})")
    g.add_argument("--top-k", type=int, metavar="K", help="0 = off")
    g.add_argument("--top-p", type=float, metavar="P", help="1 = off")
    g.add_argument("--min-p", type=float, metavar="P", help="0 = off")
    g.add_argument("--seed", type=seed_arg, metavar="N|none",
                   help="sampling seed; none = a new one each reply")
    g.add_argument("--max-tokens", type=int, metavar="N",
                   help=f"stop after N tokens (default: {max_tokens})")


def add_system_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--system", metavar="TEXT",
                   help='system prompt (default: the configured one; --system "" for none)')


def add_app_args(p: argparse.ArgumentParser) -> None:
    """The app's own choices (``specchat`` with no command): this session's, until changed."""
    p.add_argument("--gamma", type=gamma_arg, metavar="plan|auto|pair|N", help=GAMMA_OPTION_HELP)
    add_system_arg(p)
    add_sampling_args(p)
    p.add_argument("--theme", metavar="NAME",
                   help="the app's colour theme by name (default: the configured one, else "
                   "Textual's; Ctrl+P → Theme lists them)")
    p.add_argument("--auto-calibrate", action=argparse.BooleanOptionalAction, default=None,
                   help="calibrate a pair that was never calibrated on this machine in the "
                   "background, between replies (default: the config file's auto_calibrate, "
                   "else on)")
    add_tool_limit_args(p)


def add_tool_limit_args(p: argparse.ArgumentParser, max_rounds: str = "",
                        file_limit: str = "") -> None:
    """The tool-round cap and the attached-file limit (the app's, and ``ask``'s with its own
    words: shared, so either side of the subcommand means the same)."""
    p.add_argument("--max-tool-rounds", type=int, metavar="N",
                   help=max_rounds or "replies that call tools in one turn before the turn is "
                   "stopped (default: the config file's max_tool_rounds, else 8)")
    p.add_argument("--file-limit-kb", type=int, metavar="N",
                   help=file_limit or "the largest file a message may attach, in KB (default: "
                   "the config file's file_limit_kb, else 256)")


SAMPLING_OPTIONS = ("temperature", "top_k", "top_p", "min_p", "seed", "max_tokens")


def sampling_changes(args: argparse.Namespace) -> dict[str, object]:
    """What the sampling options changed (``--seed none`` is a seed of None)."""
    changes: dict[str, object] = {}
    for k in SAMPLING_OPTIONS:
        v = getattr(args, k, None)
        if v is not None:
            changes[k] = None if v == "none" else v
    return changes


def _layers(text: str) -> int | str:
    try:
        return parse_gpu_layers(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _rpc_arg(text: str) -> tuple[str, ...]:
    from specchat.engine.llama.rpc import parse_endpoints

    try:
        return parse_endpoints(text, "--rpc")
    except SpecchatError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--rpc: ")) from None


def _gpu_index(text: str) -> int | str:
    if text == "auto":
        return text
    if text.isdigit():
        return int(text)
    raise argparse.ArgumentTypeError(f"'{text}' is not 'auto' or a GPU index (0, 1, ...)")


def add_hardware_args(p: argparse.ArgumentParser) -> None:
    """Where and how the models run; each overrides the config file's setting."""
    g = p.add_argument_group("hardware")
    g.add_argument("--gpu-layers", type=_layers, metavar="N",
                   help="target layers on the GPU: auto (all that fit), all, or a count (0 = CPU)")
    g.add_argument("--draft-gpu-layers", type=_layers, metavar="N",
                   help="the draft model's layers on the GPU (same values; default auto)")
    g.add_argument("--main-gpu", type=_gpu_index, metavar="I",
                   help="put the models on GPU I only (default auto: spread over every GPU)")
    g.add_argument("--flash-attn", choices=FLASH_ATTN_MODES, help="flash attention (default auto)")
    g.add_argument("--kv-type", choices=tuple(KV_CACHE_TYPES),
                   help="KV cache type (default f16; quantized types need flash attention)")
    g.add_argument("--threads", type=int, metavar="N", help="CPU threads (default: automatic)")
    g.add_argument("--rpc", type=_rpc_arg, metavar="HOST:PORT[,...]",
                   help="spread the target's layers over llama.cpp rpc-server processes (the "
                   "draft stays here; needs llama-cpp-python built with -DGGML_RPC=on; default: "
                   "the config file's rpc)")
    g.add_argument("--memory-check", action=argparse.BooleanOptionalAction, default=None,
                   help="refuse to load what the estimate says will not fit (default: the "
                   "config file's memory_check, else on); --no-memory-check loads anyway")


def print_notices(runtime: Runtime) -> None:
    """How the models were loaded, where the user should know it (on stderr: the output stays
    the command's own)."""
    for notice in runtime.notices():
        sys.stderr.write(f"[{safe_text(notice)}]\n")
