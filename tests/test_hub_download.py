"""Hub listing and downloads through the real huggingface_hub against a local Hub stand-in."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest

from specchat.devtools.local_hub import LocalHub, RepoFile
from specchat.errors import Cancelled, FetchError
from specchat.models import hf_cache
from specchat.models.catalog import HfSource
from specchat.models.hub import list_gguf, parse_hub_ref, quant_of
from specchat.models.progress import Progress

REPO = "tiny-org/Tiny-GGUF"


def test_listing_groups_split_parts_and_puts_projectors_last(hub: LocalHub) -> None:
    hub.add(REPO, {
        "tiny-q8_0.gguf": b"x" * 300,
        "tiny-f16-00001-of-00002.gguf": b"a" * 200,
        "tiny-f16-00002-of-00002.gguf": b"b" * 250,
        "mmproj-tiny-f16.gguf": b"m" * 10,
        "README.md": b"hello",
    })
    listing = list_gguf(REPO)
    names = [f.name for f in listing.files]
    assert names == ["tiny-q8_0.gguf", "tiny-f16-00001-of-00002.gguf", "mmproj-tiny-f16.gguf"]
    split = listing.files[1]
    assert split.parts == ("tiny-f16-00001-of-00002.gguf", "tiny-f16-00002-of-00002.gguf")
    assert split.size == 450 and split.quant == "F16"
    assert split.sha256[0] == hashlib.sha256(b"a" * 200).hexdigest()
    assert listing.files[2].is_projector and not listing.files[0].is_projector
    assert listing.commit and listing.gated is False


def test_refs_and_quant_names() -> None:
    assert parse_hub_ref("Qwen/Qwen3-0.6B-GGUF:Qwen3-0.6B-Q8_0.gguf").file == "Qwen3-0.6B-Q8_0.gguf"
    assert parse_hub_ref("org/repo@v2").revision == "v2"
    assert parse_hub_ref("./local.gguf") is None and parse_hub_ref("demo") is None
    assert quant_of("Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf") == "Q4_K_M"
    assert quant_of("qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf") == "Q4_K_M"


def test_download_lands_in_the_hf_cache_and_is_reused(hub: LocalHub, tiny_target: Path,
                                                      tmp_path: Path) -> None:
    hub.add(REPO, {"tiny.gguf": tiny_target})
    seen: list[Progress] = []
    src = HfSource(REPO, ("tiny.gguf",))
    path = hf_cache.download(src, seen.append)
    assert path.read_bytes() == tiny_target.read_bytes()
    assert "models--tiny-org--Tiny-GGUF" in str(path) and str(tmp_path / "hf") in str(path)
    assert path.is_symlink() and path.resolve().parent.name == "blobs"
    assert seen[-1].finished and any(p.task.startswith("verify") for p in seen)
    assert hf_cache.cached_path(src) == path
    before = len(hub.gets("tiny.gguf"))
    assert hf_cache.download(src) == path
    assert len(hub.gets("tiny.gguf")) == before  # cached: no second transfer


def test_split_files_download_every_part(hub: LocalHub) -> None:
    hub.add(REPO, {"m-00001-of-00002.gguf": b"1" * 100, "m-00002-of-00002.gguf": b"2" * 50})
    src = HfSource(REPO, ("m-00001-of-00002.gguf", "m-00002-of-00002.gguf"))
    first = hf_cache.download(src)
    assert first.name == "m-00001-of-00002.gguf"
    assert (first.parent / "m-00002-of-00002.gguf").read_bytes() == b"2" * 50


def test_a_dropped_connection_resumes_with_a_range_request(hub: LocalHub,
                                                           tiny_target: Path) -> None:
    hub.add(REPO, {"tiny.gguf": tiny_target})
    hub.cut(REPO, "tiny.gguf", 0.5)
    path = hf_cache.download(HfSource(REPO, ("tiny.gguf",)))
    assert path.read_bytes() == tiny_target.read_bytes()
    gets = hub.gets("tiny.gguf")
    half = tiny_target.stat().st_size // 2
    assert gets[0].range is None and gets[1].range == f"bytes={half}-"


def test_an_interrupted_download_resumes_in_a_later_run(hub: LocalHub, home,
                                                        tiny_target: Path) -> None:
    hub.add(REPO, {"tiny.gguf": tiny_target})
    # half the body, then the network is gone for longer than the retries last
    hub.cut(REPO, "tiny.gguf", 0.5, *[0.0] * hf_cache.RETRIES)
    src = HfSource(REPO, ("tiny.gguf",))
    with pytest.raises(FetchError, match="run the same command again to resume"):
        hf_cache.download(src)
    assert hf_cache.cached_path(src) is None  # nothing looks complete
    partial = hf_cache.partial_files(src)
    assert len(partial) == 1 and 0 < partial[0].stat().st_size < tiny_target.stat().st_size
    kept = partial[0].stat().st_size
    path = hf_cache.download(src)
    assert path.read_bytes() == tiny_target.read_bytes()
    assert hub.gets("tiny.gguf")[-1].range == f"bytes={kept}-"
    assert hf_cache.partial_files(src) == []


def test_cancel_keeps_the_part_for_a_resume(hub: LocalHub) -> None:
    data = bytes(range(256)) * (3 * 4096 + 7)  # ~3 MB: several 1 MiB chunks
    hub.add(REPO, {"big.gguf": data})
    cancel = threading.Event()

    def report(p: Progress) -> None:
        if p.done >= 1 << 20:
            cancel.set()

    src = HfSource(REPO, ("big.gguf",))
    with pytest.raises(Cancelled, match="resumes from there"):
        hf_cache.download(src, report, cancel)
    assert hf_cache.cached_path(src) is None
    (part,) = hf_cache.partial_files(src)
    kept = part.stat().st_size
    assert 1 << 20 <= kept < len(data)
    assert hf_cache.download(src).read_bytes() == data
    assert hub.gets("big.gguf")[-1].range == f"bytes={kept}-"


def test_sha_mismatch_removes_the_file(hub: LocalHub) -> None:
    hub.add(REPO, {"bad.gguf": RepoFile(b"payload" * 100, advertised_sha256="0" * 64)})
    src = HfSource(REPO, ("bad.gguf",))
    with pytest.raises(FetchError, match="sha256 mismatch .* the bad file was removed"):
        hf_cache.download(src)
    assert hf_cache.cached_path(src) is None and hf_cache.partial_files(src) == []


def test_catalog_sha_is_checked_too(hub: LocalHub) -> None:
    hub.add(REPO, {"ok.gguf": b"payload"})
    with pytest.raises(FetchError, match="sha256 mismatch"):
        hf_cache.download(HfSource(REPO, ("ok.gguf",), sha256="1" * 64))


def test_gated_repo_needs_a_token_with_access(hub: LocalHub,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    hub.add(REPO, {"tiny.gguf": b"data"}, gated="manual", tokens=("hf_good",))
    src = HfSource(REPO, ("tiny.gguf",))
    with pytest.raises(FetchError, match=r"is gated: accept its licence on .*HF_TOKEN"):
        hf_cache.download(src)
    monkeypatch.setenv("HF_TOKEN", "hf_other")
    with pytest.raises(FetchError, match="your token has no access yet"):
        hf_cache.download(src)
    monkeypatch.setenv("HF_TOKEN", "hf_good")
    assert hf_cache.download(src).read_bytes() == b"data"
    assert list_gguf(REPO).gated == "manual"


def test_missing_repo_and_missing_file(hub: LocalHub) -> None:
    hub.add(REPO, {"tiny.gguf": b"data"})
    with pytest.raises(FetchError, match="has no file nope.gguf"):
        hf_cache.download(HfSource(REPO, ("nope.gguf",)))
    with pytest.raises(FetchError, match="no repository nobody/nothing"):
        hf_cache.download(HfSource("nobody/nothing", ("x.gguf",)))
    with pytest.raises(FetchError, match="no repository nobody/nothing"):
        list_gguf("nobody/nothing")


def test_offline_mode_uses_the_cache_and_never_the_network(
        hub: LocalHub, monkeypatch: pytest.MonkeyPatch) -> None:
    hub.add(REPO, {"a.gguf": b"aaaa", "b.gguf": b"bbbb"})
    a = hf_cache.download(HfSource(REPO, ("a.gguf",)))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    n = len(hub.requests)
    assert hf_cache.download(HfSource(REPO, ("a.gguf",))) == a
    with pytest.raises(FetchError, match="not in the Hugging Face cache .* HF_HUB_OFFLINE"):
        hf_cache.download(HfSource(REPO, ("b.gguf",)))
    with pytest.raises(FetchError, match="HF_HUB_OFFLINE is set"):
        list_gguf(REPO)
    assert len(hub.requests) == n


def test_unreachable_hub_is_a_clear_error(hub: LocalHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens
    with pytest.raises(FetchError, match="cannot reach the Hub at http://127.0.0.1:9"):
        list_gguf(REPO)


def test_remove_deletes_link_and_blob(hub: LocalHub) -> None:
    hub.add(REPO, {"a.gguf": b"aaaa"})
    src = HfSource(REPO, ("a.gguf",))
    path = hf_cache.download(src)
    blob = path.resolve()
    removed = hf_cache.remove(src)
    assert path in removed and blob in removed and not blob.exists()
    assert hf_cache.cached_path(src) is None
