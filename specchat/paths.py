"""Where specchat keeps its config, data (models, chats) and cache.

platformdirs picks the per-OS folders; ``SPECCHAT_HOME`` puts all three under one folder (tests
use it with temporary dirs). Nothing is created on import: call :meth:`AppPaths.ensure`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs

HOME_ENV = "SPECCHAT_HOME"


@dataclass(frozen=True)
class AppPaths:
    config_dir: Path
    data_dir: Path
    cache_dir: Path

    @property
    def models_dir(self) -> Path:
        return self.data_dir / "models"

    @property
    def chats_db(self) -> Path:
        return self.data_dir / "chats.sqlite3"

    @property
    def user_catalog(self) -> Path:
        return self.config_dir / "models.yaml"

    @property
    def config_file(self) -> Path:
        return self.config_dir / "config.yaml"

    @property
    def downloads_dir(self) -> Path:
        return self.cache_dir / "downloads"

    def ensure(self) -> AppPaths:
        for d in (self.config_dir, self.data_dir, self.cache_dir, self.models_dir):
            d.mkdir(parents=True, exist_ok=True)
        return self


def app_paths(env: Mapping[str, str] | None = None) -> AppPaths:
    env = os.environ if env is None else env
    home = env.get(HOME_ENV)
    if home:
        root = Path(home).expanduser()
        return AppPaths(root / "config", root / "data", root / "cache")
    return AppPaths(
        Path(platformdirs.user_config_dir("specchat", appauthor=False)),
        Path(platformdirs.user_data_dir("specchat", appauthor=False)),
        Path(platformdirs.user_cache_dir("specchat", appauthor=False)),
    )
