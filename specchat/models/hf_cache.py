"""Hub models live in the Hugging Face cache: find them there, or download them into it.

Everything goes through huggingface_hub (``HF_ENDPOINT``, ``HF_HOME``, ``HF_TOKEN`` and
``HF_HUB_OFFLINE`` work as usual). Downloads report byte progress through a tqdm stand-in.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from specchat.errors import FetchError
from specchat.models.catalog import HfSource
from specchat.models.progress import Progress, ProgressFn


def cached_path(src: HfSource) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(src.repo, src.filename, revision=src.revision)
    return Path(found) if isinstance(found, str) else None


def _progress_class(report: ProgressFn, task: str) -> type:
    from tqdm.auto import tqdm

    class _Report(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True  # we render; tqdm must not print
            super().__init__(*args, **kwargs)
            self._done = float(kwargs.get("initial") or 0)
            self._total = kwargs.get("total")

        def update(self, n: float | None = 1) -> bool | None:
            self._done += n or 0
            report(Progress(task, self._done, self._total))
            return None

    return _Report


def download(src: HfSource, report: ProgressFn) -> Path:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    first: Path | None = None
    for name in src.files:
        task = f"download {src.repo}/{name}"
        try:
            p = Path(hf_hub_download(src.repo, name, revision=src.revision,
                                     tqdm_class=_progress_class(report, task)))
        except GatedRepoError:
            raise FetchError(
                f"{src.repo} is gated: accept its licence on huggingface.co/{src.repo}, then log "
                "in (`hf auth login`) or set HF_TOKEN") from None
        except RepositoryNotFoundError:
            raise FetchError(f"no repository {src.repo} on the Hub (or it is private: set "
                             "HF_TOKEN)") from None
        except RevisionNotFoundError:
            raise FetchError(f"{src.repo} has no revision '{src.revision}'") from None
        except EntryNotFoundError:
            raise FetchError(f"{src.repo} has no file {name}") from None
        except (OfflineModeIsEnabled, LocalEntryNotFoundError):
            raise FetchError(f"cannot download {src.repo}/{name}: offline (HF_HUB_OFFLINE is set "
                             "or the Hub is unreachable), and it is not in the cache") from None
        except HfHubHTTPError as e:
            raise FetchError(f"the Hub refused {src.repo}/{name}: {e}") from None
        except OSError as e:
            raise FetchError(f"cannot download {src.repo}/{name}: {e}") from None
        report(Progress(task, p.stat().st_size, p.stat().st_size, finished=True))
        first = first or p
    assert first is not None
    if src.sha256:
        got = sha256_file(first)
        if got != src.sha256:
            raise FetchError(f"{src.filename}: sha256 mismatch (expected {src.sha256[:12]}…, "
                             f"got {got[:12]}…): delete it with `specchat models rm`")
    return first


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(4 << 20):
            h.update(block)
    return h.hexdigest()
