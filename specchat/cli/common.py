"""State every command needs, built once in the entry point: paths, user config, catalog."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from functools import cached_property

from specchat.config import UserConfig, load_config
from specchat.engine.model import ContextSettings, ModelSettings
from specchat.models.catalog import Catalog, load_catalog
from specchat.models.resolver import ModelResolver
from specchat.paths import AppPaths, app_paths
from specchat.runtime import RuntimeOptions


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

    def runtime_options(self, args: argparse.Namespace,
                        config: UserConfig | None = None) -> RuntimeOptions:
        config = config or self.config
        ctx = ContextSettings(
            n_ctx=getattr(args, "ctx_size", None) or config.n_ctx,
            n_threads=getattr(args, "threads", None) or config.n_threads,
        )
        ngl = getattr(args, "gpu_layers", None)
        model = ModelSettings() if ngl is None else ModelSettings(n_gpu_layers=ngl)
        return RuntimeOptions(context=ctx, target=model, draft=model)


def make_env() -> Env:
    return Env(app_paths())


def add_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--pair", help="a target/draft pair from the catalog (default: the configured "
                   "pair, else 'demo')")
    g.add_argument("--model", help="one model: a catalog id or a path to a .gguf file (plain "
                   "decoding)")
    p.add_argument("--ctx-size", type=int, metavar="N", help="context window in tokens")
    p.add_argument("--threads", type=int, metavar="N", help="CPU threads")
    p.add_argument("--gpu-layers", type=int, metavar="N",
                   help="layers to offload to the GPU (-1 = all, 0 = none)")
