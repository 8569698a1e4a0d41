"""``specchat`` with no command: build the app's services from the CLI's state and run it."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from specchat.cli.common import Env, sampling_changes
from specchat.config import UserConfig
from specchat.engine.llama import rpc
from specchat.engine.policy.gamma import GammaSetting
from specchat.errors import ConfigError, SpecchatError
from specchat.loading import LOAD_TASK, RuntimeOptions, Selection, select, select_label
from specchat.models.catalog import Catalog, load_catalog
from specchat.models.choices import Choice, all_choices, choice_for
from specchat.models.progress import Progress, ProgressFn
from specchat.models.resolver import ModelResolver
from specchat.race.runner import RaceSetup
from specchat.runtime.opening import Runtime
from specchat.store.repair import open_for_app
from specchat.ui.app import SpecchatApp
from specchat.ui.services import AppServices, PairOpener


def build_services(env: Env, args: argparse.Namespace) -> AppServices:
    """Everything that can fail before the app starts fails here, as a one-line error;
    fetching and loading the models happen later, inside the app, with progress."""
    problem = None
    try:
        config = env.config
    except ConfigError as e:
        config, problem = UserConfig(), str(e)  # start with defaults; say so in the app
    file_config = config
    config = session_config(env, args, config)
    from_file = {k: getattr(file_config, k) for k in SESSION_KEYS
                 if getattr(config, k) != getattr(file_config, k)}
    model = args.model
    if model is None and args.pair is None and not config.default_pair:
        model = config.default_model  # a single model configured instead of a pair
    first_run = (problem is None and not env.paths.config_file.exists() and args.pair is None
                 and model is None and not config.default_pair)
    selection = select(env.catalog, args.pair, model, config.default_pair,
                       getattr(args, "draft", None))
    options = env.runtime_options(args, config)
    env.paths.ensure()
    store, store_problem = open_for_app(env.paths.chats_db)  # damaged: repaired, said in the app
    first = opener(selection, env.resolver, options)

    def open_pair(pair_id: str) -> PairOpener:
        # The wizard has just written the pair into the user catalog: read it again.
        catalog = load_catalog(env.paths.user_catalog)
        return opener(select(catalog, pair_id, None, None), ModelResolver(catalog, env.paths),
                      options)

    def race_pairs() -> list[str]:
        catalog = load_catalog(env.paths.user_catalog)  # with pairs the wizard saved since
        resolver = ModelResolver(catalog, env.paths)
        return [p.id for p in catalog.pairs.values()
                if all(resolver.state(catalog.model(m)).present for m in (p.target, p.draft))]

    def open_race_pair(pair: str) -> Runtime:
        catalog = load_catalog(env.paths.user_catalog)
        return Runtime.open(select(catalog, pair), ModelResolver(catalog, env.paths), options,
                            fetch=False)

    def fresh() -> tuple[Catalog, ModelResolver]:
        catalog = load_catalog(env.paths.user_catalog)  # with what the wizard saved since
        return catalog, ModelResolver(catalog, env.paths)

    def pair_choices() -> list[Choice]:
        return all_choices(*fresh())

    def label_choice(label: str) -> Choice | None:
        try:
            return choice_for(*fresh(), label)
        except SpecchatError:
            return None  # a catalog that does not load: the chat just goes on

    def open_label(label: str) -> PairOpener:
        catalog, resolver = fresh()
        return opener(select_label(catalog, label), resolver, options)

    return AppServices(store=store, config=config, open_runtime=first.open_runtime,
                       label=first.label, pair_gamma=first.pair_gamma,
                       config_path=env.paths.config_file, config_problem=problem,
                       store_problem=store_problem,
                       open_pair=open_pair, paths=env.paths, first_run=first_run,
                       race_pairs=race_pairs, open_race_pair=open_race_pair,
                       from_file=from_file, pair_choices=pair_choices,
                       choice_for=label_choice, open_label=open_label)


SESSION_KEYS = ("drafter", "ngram", "gamma", "system_prompt", "memory_check", "theme", "sampling",
                "auto_calibrate", "max_tool_rounds", "file_limit_kb")


def session_config(env: Env, args: argparse.Namespace, config: UserConfig) -> UserConfig:
    """The config file's settings with what the command line changed for this session (until
    changed in the app, whose Ctrl+S saves what it then shows): drafter, n-gram, γ, system
    prompt, sampling, memory check, theme, background calibration, the tool-round cap and
    the attached-file limit."""
    changes: dict[str, Any] = {}
    if getattr(args, "drafter", None) or getattr(args, "ngram", None) is not None:
        changes.update(drafter=env.drafter_setting(args, config), ngram=False)
    if isinstance(getattr(args, "gamma", None), GammaSetting):
        changes["gamma"] = args.gamma
    if getattr(args, "system", None) is not None:
        changes["system_prompt"] = args.system
    if getattr(args, "memory_check", None) is not None:
        changes["memory_check"] = bool(args.memory_check)
    if getattr(args, "theme", None):
        changes["theme"] = args.theme
    if getattr(args, "auto_calibrate", None) is not None:
        changes["auto_calibrate"] = bool(args.auto_calibrate)
    for key in ("max_tool_rounds", "file_limit_kb"):
        if getattr(args, key, None) is not None:
            changes[key] = getattr(args, key)
    sampling = sampling_changes(args)
    if sampling:
        try:
            changes["sampling"] = config.sampling.with_(**sampling).validate()
        except ValueError as e:
            raise SpecchatError(str(e)) from None
    return config.with_(**changes) if changes else config


def opener(selection: Selection, resolver: ModelResolver, options: RuntimeOptions) -> PairOpener:
    def open_runtime(report: ProgressFn) -> Runtime:
        for entry in (selection.target, selection.draft):
            if entry is not None:
                resolver.ensure(entry, report)  # fetch/derive what is missing, with progress
        report(Progress(LOAD_TASK))  # until the memory plan is made: a spinner
        return Runtime.open(selection, resolver, options, report)

    return PairOpener(selection.label, selection.pair.gamma if selection.pair else None,
                      open_runtime)


def launch(env: Env, args: argparse.Namespace, race: RaceSetup | None = None) -> int:
    """Run the app; with ``race``, it opens on the race screen (over the chat)."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise SpecchatError("the chat app needs a terminal; for scripts use "
                            "`specchat ask \"...\"`")
    services = build_services(env, args)
    app = SpecchatApp(services, race=race)
    try:
        app.run()
    finally:
        dropped = rpc.failure()
        app.shutdown_engine()  # after a drop: saves what was shown, frees nothing
        services.store.close()
    if dropped is not None:  # a worker is parked inside llama.cpp: the process cannot wind down
        sys.stderr.write(f"specchat: {dropped}\n")
        sys.stderr.flush()
        os._exit(75)
    if app.rescued is not None:
        sys.stderr.write(f"specchat: some messages could not be saved in the chat database; "
                         f"they are in {app.rescued}\n")
    return app.return_code or 0
