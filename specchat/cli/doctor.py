"""``specchat doctor``: versions, llama.cpp build, hardware and offload, folders, models present,
and how the configured pair would be loaded."""

from __future__ import annotations

import argparse
import platform
import sys
from importlib import metadata
from typing import Any

from specchat import __version__
from specchat.cli.common import Env, add_model_args
from specchat.errors import SpecchatError
from specchat.textsafe import safe_text


def add_parser(sub: Any) -> None:
    p = sub.add_parser("doctor", help="check the installation, the hardware and where things are")
    add_model_args(p)  # preview how a pair would be loaded with these settings
    p.set_defaults(func=run)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def run(env: Env, args: argparse.Namespace) -> int:
    from specchat.cli.doctor_hardware import write_hardware, write_load_plan, write_rpc
    from specchat.engine.llama.llama_lib import system_info

    def w(text: str) -> None:  # names and paths come from files: shown, never obeyed
        sys.stdout.write(safe_text(text))

    w(f"specchat {__version__} on Python {platform.python_version()} ({platform.platform()})\n")
    for dist in ("llama-cpp-python", "textual", "huggingface-hub", "gguf", "numpy"):
        w(f"  {dist:18} {_version(dist)}\n")
    w("\nllama.cpp\n")
    w(f"  system info:      {system_info()}\n")
    write_hardware(w)
    try:
        servers = env.rpc(args)
    except SpecchatError as e:  # the config file's
        w(f"\nRPC servers\n  problem: {e}\n")
        servers = ()
    problems, said = write_rpc(servers, w)
    w("\nfolders\n")
    p = env.paths
    for name, d in (("config", p.config_dir), ("data", p.data_dir), ("cache", p.cache_dir),
                    ("models", p.models_dir)):
        w(f"  {name:8} {d}\n")
    w(f"  user catalog: {p.user_catalog} ({'present' if p.user_catalog.exists() else 'none'})\n")
    w("\nmodels\n")
    try:
        catalog = env.catalog
        for m in catalog.models.values():
            st = env.resolver.state(m)
            w(f"  {'✓' if st.present else '·'} {m.id}\n")
        default = env.config.default_pair or catalog.default_pair
        w(f"\ndefault pair: {default}\n")
    except SpecchatError as e:
        problems += 1
        w(f"  problem: {e}\n")
    else:
        problems += write_load_plan(env, args, w, said)
    return 1 if problems else 0
