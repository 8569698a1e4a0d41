"""``specchat doctor``: versions, llama.cpp build and offload support, folders, models present."""

from __future__ import annotations

import argparse
import platform
import sys
from importlib import metadata
from typing import Any

from specchat import __version__
from specchat.cli.common import Env
from specchat.errors import SpecchatError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("doctor", help="check the installation and show where things are")
    p.set_defaults(func=run)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def run(env: Env, args: argparse.Namespace) -> int:
    from specchat.engine.llama_lib import supports_gpu_offload, system_info

    w = sys.stdout.write
    w(f"specchat {__version__} on Python {platform.python_version()} ({platform.platform()})\n")
    for dist in ("llama-cpp-python", "textual", "huggingface-hub", "gguf", "numpy"):
        w(f"  {dist:18} {_version(dist)}\n")
    w("\nllama.cpp\n")
    offload = supports_gpu_offload()
    w(f"  GPU offload:      {'yes' if offload else 'no (CPU build)'}\n")
    w(f"  system info:      {system_info()}\n")
    w("\nfolders\n")
    p = env.paths
    for name, d in (("config", p.config_dir), ("data", p.data_dir), ("cache", p.cache_dir),
                    ("models", p.models_dir)):
        w(f"  {name:8} {d}\n")
    w(f"  user catalog: {p.user_catalog} ({'present' if p.user_catalog.exists() else 'none'})\n")
    w("\nmodels\n")
    problems = 0
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
    return 1 if problems else 0
