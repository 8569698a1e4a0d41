"""Everything the app needs from outside, built once by the CLI (or a test) and passed in.

The app never reads the environment, the catalog or the file system on its own: a test gives
it a runtime on tiny models and a temporary store; ``specchat`` gives it the real ones.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specchat.config import UserConfig, save_config
from specchat.engine.decode.decoding import Decoder
from specchat.errors import ConfigError, SpecchatError
from specchat.models.calibration import CalibrationOptions
from specchat.models.choices import Choice
from specchat.models.progress import ProgressFn
from specchat.paths import AppPaths
from specchat.runtime.decoders import DEFAULT_PAIR_DRAFTERS
from specchat.runtime.opening import Runtime
from specchat.store import ChatStore
from specchat.tools.hub import McpHub
from specchat.ui.chat_settings import ChatSettings

DecoderFactory = Callable[[Runtime, ChatSettings], Decoder]


def runtime_decoder(runtime: Runtime, settings: ChatSettings) -> Decoder:
    """The one place the app turns its settings into a decoder: speculative for a pair, with
    the γ setting's policy (a learning one — plan, auto — is new for each decoder: one per chat
    session, another for a race) and the chosen drafter, plain for a single model unless a
    drafter that needs no draft model is chosen.
    Sampling settings go with each request (an attached file's tokens, as the prediction,
    too)."""
    names = tuple(n for n in settings.drafter.split(",") if n)
    if names == DEFAULT_PAIR_DRAFTERS and runtime.draft_ctx is None:
        names = ()  # the default on one model is plain decoding, as on the command line
    usable = runtime.usable_drafters(names)
    # A speculative chat also drafts from the files attached to a message (their tokens ride
    # in SamplerSettings.prediction; with none the prediction drafter proposes nothing). A
    # plain one stays plain: it never pays a drafting step it was not asked for.
    return runtime.decoder(gamma=settings.gamma_setting, drafters=usable,
                           prediction=settings.predicted_outputs and bool(usable))


@dataclass(frozen=True)
class PairOpener:
    label: str
    pair_gamma: int | None
    open_runtime: Callable[[ProgressFn], Runtime]


@dataclass
class AppServices:
    store: ChatStore
    config: UserConfig
    open_runtime: Callable[[ProgressFn], Runtime]  # runs in a worker thread; may fetch models
    label: str  # what is being opened ("demo", a model id), for the loading screen
    pair_gamma: int | None = None  # the pair's recommended γ, for γ mode "pair"
    config_path: Path | None = None  # where settings are saved (None: not saved)
    config_problem: str | None = None  # why the config file could not be read, if it couldn't
    store_problem: str | None = None  # what happened to the chat database at start (repaired...)
    backend: str | None = None  # "CPU", "CUDA", "Metal"...; None: ask llama.cpp
    export_dir: Path = field(default_factory=Path.cwd)
    make_decoder: DecoderFactory = runtime_decoder
    # Opening another pair (after the wizard saved one): its label, γ and opener; None: the app
    # cannot switch pairs (tests that hand it one runtime).
    open_pair: Callable[[str], PairOpener] | None = None
    paths: AppPaths | None = None  # for the wizard (None: no wizard)
    first_run: bool = False  # no settings yet and nothing chosen: the wizard opens first
    # The race screen's pair switcher: pairs whose files are on disk, and opening one (in a
    # worker thread; never fetches).
    race_pairs: Callable[[], list[str]] = list
    open_race_pair: Callable[[str], Runtime] = field(default=lambda pair: _no_pairs(pair))
    # The background calibration of a pair opened uncalibrated (config's auto_calibrate): its
    # sizes (None: session.auto_calibration.OPTIONS; tests pass tiny ones) and how long the chat
    # must be quiet (open, no reply) before it starts or goes on.
    calibration_options: CalibrationOptions | None = None
    calibrate_quiet_s: float = 3.0
    # The config file's values of the settings the command line changed for this session
    # (--no-ngram, --temperature, ...): what is saved keeps them, unless the user changes that
    # very setting in the app, so a flag never leaks into config.yaml.
    from_file: dict[str, Any] = field(default_factory=dict)

    def _for_file(self, *changed: str) -> UserConfig:
        return self.config.with_(**{k: v for k, v in self.from_file.items() if k not in changed})
    # The chat's pair switcher and a chat's own pair: every pair and model of the catalog with
    # whether it is on disk; what a saved chat's pair label stands for now (None: cannot
    # tell); an opener for any such label (None: the app cannot switch).
    pair_choices: Callable[[], list[Choice]] = list
    choice_for: Callable[[str], Choice | None] = field(default=lambda label: None)
    open_label: Callable[[str], PairOpener] | None = None

    _hub: McpHub | None = field(default=None, init=False, repr=False)

    def tool_hub(self) -> McpHub | None:
        """The MCP servers of config.yaml's ``mcp_servers`` (each started when a chat first
        calls for its tools, stopped by :meth:`close_tools`); None when none are configured."""
        if self._hub is None and self.config.mcp_servers:
            self._hub = McpHub(self.config.mcp_servers)
        return self._hub

    def close_tools(self) -> None:
        """Stop the MCP servers the app started (the app is quitting)."""
        hub, self._hub = self._hub, None
        if hub is not None:
            hub.close()

    def settings(self) -> ChatSettings:
        return ChatSettings.from_config(self.config, self.pair_gamma)

    def save_settings(self, settings: ChatSettings) -> str | None:
        """Save to the config file; return a note for the user when something else happened."""
        self.config = settings.to_config(self.config)
        for k in SETTINGS_KEYS:  # saved as shown: the user's choice now
            self.from_file.pop(k, None)
        if self.config_path is None:
            return None
        note = None
        if self.config_problem and self.config_path.exists():
            # The broken file may hold edits the user wants back: keep it beside the new one.
            backup = self.config_path.with_name(self.config_path.name + ".broken")
            shutil.copy2(self.config_path, backup)
            note = f"your unreadable settings file was kept as {backup}"
            self.config_problem = None
        try:  # only what it shows: what another specchat saved meanwhile stays
            save_config(self.config_path, self._for_file(),
                        None if note else SETTINGS_KEYS)
        except OSError as e:
            raise ConfigError(f"cannot save settings to {self.config_path}: {e.strerror or e}") \
                from None
        return note

    def save_theme(self, theme: str) -> None:
        """Remember the theme picked in the app for the next start (a config file that could
        not be read is left alone, as for the default pair)."""
        self.config = self.config.with_(theme=theme)
        self.from_file.pop("theme", None)
        if self.config_path is not None and not self.config_problem:
            try:
                save_config(self.config_path, self._for_file(), ("theme",))
            except OSError as e:
                raise ConfigError(f"cannot save the theme to {self.config_path}: "
                                  f"{e.strerror or e}") from None

    def first_run_done(self) -> None:
        """Write the settings file, so the next start opens the chat, not the wizard."""
        if self.config_path is not None and not self.config_path.exists():
            with contextlib.suppress(OSError):  # else the wizard shows again next time
                save_config(self.config_path, self._for_file())

    def switch_to(self, label: str) -> PairOpener:
        """Make ``label`` (a pair, a model) what the app opens next, for this session only (the
        default in config.yaml stays: F3's wizard is where a default is chosen)."""
        if self.open_label is None:
            raise SpecchatError("switching pairs is not available here")
        opener = self.open_label(label)
        self.label, self.pair_gamma = opener.label, opener.pair_gamma
        self.open_runtime = opener.open_runtime
        return opener

    def use_pair(self, pair_id: str) -> PairOpener:
        """Make ``pair_id`` what the app opens, now and (saved as the default) next time."""
        assert self.open_pair is not None
        opener = self.open_pair(pair_id)
        self.label, self.pair_gamma = opener.label, opener.pair_gamma
        self.open_runtime = opener.open_runtime
        self.config = self.config.with_(default_pair=pair_id, default_model=None)
        if self.config_path is not None and not self.config_problem:
            try:
                save_config(self.config_path, self._for_file(), ("default_pair", "default_model"))
            except OSError as e:
                raise ConfigError(f"cannot save the default pair to {self.config_path}: "
                                  f"{e.strerror or e}") from None
        return opener


# What the settings screen saves (ChatSettings.to_config).
SETTINGS_KEYS = ("system_prompt", "sampling", "gamma", "drafter", "ngram")


def _no_pairs(pair: str) -> Runtime:
    raise SpecchatError(f"cannot open the {pair} pair here")
