"""The Hugging Face Hub, through huggingface_hub: settings, repo listings, and plain-words errors.

Settings are read from the environment at call time (``HF_ENDPOINT``, ``HF_HOME`` /
``HF_HUB_CACHE``, ``HF_HUB_OFFLINE``; huggingface_hub itself reads them once at import), so the
app and the tests see the same values a fresh process would. Every Hub failure becomes a
:class:`FetchError` that says what to do.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specchat.errors import FetchError
from specchat.formats.gguf_checks import split_parts

_TRUE = {"1", "true", "yes", "on"}
# Every small Hub request (a listing, a file's metadata, a header's first MB) waits at most this
# long for a connection or a reply, and is tried once: a Hub that cannot be reached must be
# reported in seconds, not after huggingface_hub's five back-offs (~25 s per request, minutes
# over a list of drafts), whose "Retrying in 8s" log lines would also land on the user's screen.
# HF_HUB_ETAG_TIMEOUT, huggingface_hub's own knob for such requests, overrides it.
LOOKUP_TIMEOUT_S = 6.0
NO_RETRY: dict[str, Any] = {"retry_on_exceptions": (), "retry_on_status_codes": ()}
_REPO_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_QUANT_RE = re.compile(r"(?i)(?:^|[-_.])((?:IQ|Q)\d(?:_[A-Z0-9]+)*|F16|F32|BF16)(?=[-_.]|$)")
_PARAMS_RE = re.compile(r"(?i)(?:^|[-_.])(\d+(?:\.\d+)?)([BM])(?=[-_.]|$)")


@dataclass(frozen=True)
class HubConfig:
    endpoint: str
    cache_dir: Path  # the Hugging Face cache ("hub" folder)
    offline: bool


def hub_config() -> HubConfig:
    from huggingface_hub import constants

    env = os.environ
    endpoint = (env.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
    if env.get("HF_HUB_CACHE"):
        cache = Path(env["HF_HUB_CACHE"])
    elif env.get("HF_HOME"):
        cache = Path(env["HF_HOME"]) / "hub"
    else:
        cache = Path(constants.HF_HUB_CACHE)
    offline_env = (env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE") or "").lower()
    offline = offline_env in _TRUE if offline_env else bool(constants.HF_HUB_OFFLINE)
    return HubConfig(endpoint, cache.expanduser(), offline)


@dataclass(frozen=True)
class HubRef:
    """``org/repo``, ``org/repo:file.gguf`` or ``org/repo:file.gguf@revision``."""

    repo: str
    file: str | None = None
    revision: str = "main"

    def __str__(self) -> str:
        return self.repo + (f":{self.file}" if self.file else "") + (
            f"@{self.revision}" if self.revision != "main" else "")


def parse_hub_ref(ref: str) -> HubRef | None:
    """A Hub reference, or None if ``ref`` does not look like one (or is a file on disk)."""
    ref = ref.strip()
    if ref.startswith("hf://"):
        ref = ref[5:]
    elif Path(ref).expanduser().exists() or ref.startswith(("/", ".", "~")):
        return None
    rest, _, revision = ref.partition("@")
    repo, _, file = rest.partition(":")
    if not _REPO_RE.match(repo) or (not file and repo.lower().endswith(".gguf")):
        return None  # "models/x.gguf" is a path that does not exist, not a repo
    return HubRef(repo, file or None, revision or "main")


@dataclass(frozen=True)
class HubFile:
    """One loadable model in a repo: a single .gguf or the parts of a split one."""

    parts: tuple[str, ...]
    size: int | None  # all parts together
    sha256: tuple[str | None, ...]  # per part, from the LFS pointer

    @property
    def name(self) -> str:
        return self.parts[0]

    @property
    def quant(self) -> str:
        return quant_of(self.name)

    @property
    def is_projector(self) -> bool:
        """A vision projector (mmproj): not a text model, never a target or draft."""
        return "mmproj" in self.name.lower()


@dataclass(frozen=True)
class RepoListing:
    repo: str
    revision: str
    commit: str | None
    gated: str | bool
    files: tuple[HubFile, ...]  # text models first, smallest first; projectors last

    def find(self, name: str) -> HubFile | None:
        for f in self.files:
            if name in f.parts:
                return f
        return None


def quant_of(filename: str) -> str:
    m = _QUANT_RE.findall(Path(filename).stem)
    return m[-1].upper() if m else ""


def params_of(filename: str) -> str:
    m = _PARAMS_RE.findall(Path(filename).stem)
    return f"{m[-1][0]}{m[-1][1].upper()}" if m else ""


def transport_errors() -> tuple[type[BaseException], ...]:
    """Network-level exceptions of whichever HTTP library this huggingface_hub uses.

    huggingface_hub 1.x uses httpx and 2.x its fork httpx2; both name the base class
    ``TransportError``. Neither is our dependency, so we ask the session for its module.
    """
    from huggingface_hub.utils import get_session

    lib = importlib.import_module(type(get_session()).__module__.split(".")[0])
    return (lib.TransportError,)


def lookup_timeout() -> float:
    try:
        return float(os.environ.get("HF_HUB_ETAG_TIMEOUT") or LOOKUP_TIMEOUT_S)
    except ValueError:
        return LOOKUP_TIMEOUT_S


class HubUnreachable(FetchError):
    """The Hub could not be reached at all (no connection, or no answer in time): every other
    look-up would fail the same way, so callers going through a list stop at the first."""


def file_metadata(url: str) -> Any:
    """``get_hf_file_metadata`` (HEAD on the resolve URL) tried once, within the look-up
    timeout; call inside :func:`hub_errors`."""
    from huggingface_hub import get_hf_file_metadata

    return get_hf_file_metadata(url, endpoint=hub_config().endpoint, timeout=lookup_timeout(),
                                retry_on_errors=False)


@contextmanager
def hub_errors(repo: str, what: str = "") -> Iterator[None]:
    """Turn huggingface_hub's exceptions into one-line :class:`FetchError` messages."""
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    cfg = hub_config()
    subject = f"{repo}/{what}" if what else repo
    try:
        yield
    except GatedRepoError as e:
        status = e.response.status_code if e.response is not None else 401
        page = f"{_site(cfg.endpoint)}/{repo}"
        if status == 403:
            raise FetchError(f"{repo} is gated and your token has no access yet: accept the "
                             f"licence on {page} (some repos need the author's approval), then "
                             "try again") from None
        raise FetchError(f"{repo} is gated: accept its licence on {page}, then log in with "
                         "`hf auth login` or set HF_TOKEN to a token of that account") from None
    except RepositoryNotFoundError:
        raise FetchError(f"no repository {repo} on the Hub (check the spelling; a private repo "
                         "needs HF_TOKEN)") from None
    except RevisionNotFoundError:
        raise FetchError(f"{repo} has no such revision") from None
    except EntryNotFoundError:
        raise FetchError(f"{repo} has no file {what or '?'} (see `specchat models files {repo}`)"
                         ) from None
    except (OfflineModeIsEnabled, LocalEntryNotFoundError):
        raise FetchError(offline_message(subject, cfg)) from None
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else "an error"
        raise FetchError(f"the Hub answered {status} for {subject}; try again later") from None
    except transport_errors() as e:
        raise HubUnreachable(f"cannot reach the Hub at {cfg.endpoint} for {subject} ({_short(e)}); "
                         "offline? Set HF_HUB_OFFLINE=1 to use only files already downloaded"
                         ) from None


def offline_message(subject: str, cfg: HubConfig | None = None) -> str:
    cfg = cfg or hub_config()
    return (f"{subject} is not in the Hugging Face cache ({cfg.cache_dir}) and HF_HUB_OFFLINE is "
            "set, so it cannot be downloaded: unset HF_HUB_OFFLINE to fetch it")


def _site(endpoint: str) -> str:
    return endpoint.removeprefix("https://").removeprefix("http://")


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:120] if text else type(e).__name__


def list_gguf(repo: str, revision: str = "main") -> RepoListing:
    """The repo's GGUF models with sizes and sha256 (split parts grouped into one entry)."""
    from huggingface_hub import HfApi

    cfg = hub_config()
    if cfg.offline:
        raise FetchError(f"cannot list {repo}: HF_HUB_OFFLINE is set (unset it to browse the "
                         "Hub)")
    with hub_errors(repo):
        info = HfApi(endpoint=cfg.endpoint).model_info(repo, revision=revision,
                                                       files_metadata=True,
                                                       timeout=lookup_timeout())
    sizes: dict[str, int | None] = {}
    shas: dict[str, str | None] = {}
    for s in info.siblings or []:
        if s.rfilename.lower().endswith(".gguf"):
            sizes[s.rfilename] = s.size
            shas[s.rfilename] = s.lfs.sha256 if s.lfs else None
    files: list[HubFile] = []
    seen: set[str] = set()
    for name in sorted(sizes):
        if name in seen:
            continue
        parts = tuple(_relative(name, p) for p in split_parts(Path(name)))
        if not all(p in sizes for p in parts):
            parts = (name,)  # an odd name that only looks split
        seen.update(parts)
        total = sum(sizes[p] or 0 for p in parts) if all(sizes[p] for p in parts) else None
        files.append(HubFile(parts, total, tuple(shas[p] for p in parts)))
    files.sort(key=lambda f: (f.is_projector, f.size or 0, f.name))
    return RepoListing(repo, revision, info.sha, info.gated or False, tuple(files))


def _relative(template: str, part: Path) -> str:
    folder = template.rsplit("/", 1)[0] + "/" if "/" in template else ""
    return folder + part.name
