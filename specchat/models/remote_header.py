"""Read a Hub file's GGUF header without downloading the model.

The header (metadata, vocabulary, tensor table) sits at the start of the file: a few MB of a
5 GB download. Fetching just that with Range requests lets the wizard and ``models check`` say
whether a draft fits a target *before* the user spends minutes downloading either.
"""

from __future__ import annotations

from pathlib import Path

from specchat.errors import FetchError
from specchat.formats.gguf_file import GgufHeader, TruncatedHeader, read_header_bytes
from specchat.models.hub import (
    NO_RETRY,
    file_metadata,
    hub_config,
    hub_errors,
    lookup_timeout,
    offline_message,
)

FIRST_BYTES = 2 << 20  # enough for most headers; grown ×4 when the vocabulary is larger
MAX_HEADER = 160 << 20


def read_remote_header(repo: str, name: str, revision: str = "main", *,
                       token_texts: bool = True) -> GgufHeader:
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    cfg = hub_config()
    if cfg.offline:
        raise FetchError(offline_message(f"{repo}/{name}", cfg))
    url = hf_hub_url(repo, name, revision=revision, endpoint=cfg.endpoint)
    with hub_errors(repo, name):
        meta = file_metadata(url)
        headers = build_hf_headers()
        if _host(meta.location) != _host(url):
            headers.pop("authorization", None)
        data = b""
        want = FIRST_BYTES
        while True:
            data += _read_range(meta.location, headers, len(data), want)
            size = meta.size or len(data)
            try:
                return read_header_bytes(data, Path(name), size, token_texts=token_texts)
            except TruncatedHeader:
                if len(data) >= size:
                    raise FetchError(f"{repo}/{name} on the Hub is cut short: its GGUF header "
                                     "is incomplete") from None
                if want >= MAX_HEADER:
                    raise FetchError(f"{repo}/{name}: the GGUF header is larger than "
                                     f"{MAX_HEADER >> 20} MB; download the file to check it"
                                     ) from None
                want *= 4


def _read_range(url: str, headers: dict[str, str], start: int, end: int) -> bytes:
    """Bytes ``start``..``end - 1`` (fewer at the end of the file); stops reading early if the
    server ignores Range, so a 5 GB body is never pulled for a header."""
    from huggingface_hub.utils import hf_raise_for_status, http_stream_backoff

    h = dict(headers, Range=f"bytes={start}-{end - 1}")
    h["Accept-Encoding"] = "identity"
    out = bytearray()
    with http_stream_backoff("GET", url, headers=h, timeout=lookup_timeout(),
                             **NO_RETRY) as resp:
        hf_raise_for_status(resp)
        skip = start if resp.status_code == 200 else 0
        for chunk in resp.iter_bytes():
            if skip:
                cut = min(skip, len(chunk))
                chunk, skip = chunk[cut:], skip - cut
            out += chunk
            if len(out) >= end - start:
                break
    return bytes(out[: end - start])


def _host(url: str) -> str:
    from urllib.parse import urlsplit

    return urlsplit(url).netloc
