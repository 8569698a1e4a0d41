"""Hostile output and careless input at the command line (issue 12 items 1, 2, 4, 8, 10).

A tiny model whose every token is an escape sequence (rename the terminal, write the clipboard)
must reach the terminal shown, not obeyed; exports never overwrite by accident nor onto
specchat's own files; an option means the same before or after the subcommand; wrong values are
one-line errors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.cli.main import build_parser
from specchat.devtools.hostile_models import CLIPBOARD, TITLE, write_hostile_model
from specchat.paths import AppPaths
from specchat.store import ChatStore
from specchat.textsafe import is_safe


def specchat(home: Path, *args: str, stdout: int | None = None,
             cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPECCHAT_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "specchat", *args], text=True, env=env,
                          timeout=120, check=False, cwd=cwd, stderr=subprocess.PIPE,
                          stdout=subprocess.PIPE if stdout is None else stdout)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_hostile_model(tmp_path_factory.mktemp("hostile") / "hostile.gguf")


def one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


# --- 1. terminal safety -------------------------------------------------------------------


def test_ask_shows_escape_sequences_instead_of_obeying_them(home: AppPaths, hostile: Path
                                                            ) -> None:
    base = ["ask", "hi", "--model", str(hostile), "--temperature", "0", "--max-tokens", "8",
            "--threads", "1"]
    raw = specchat(home.config_dir.parent, *base, "--json")
    assert raw.returncode == 0, raw.stderr
    texts = [e["text"] for e in map(json.loads, raw.stdout.splitlines()) if e["type"] == "token"]
    assert set(texts) == {TITLE, CLIPBOARD}  # the model really says both (the control)
    assert "\x1b" not in raw.stdout and "\\u001b" in raw.stdout  # JSON keeps them escaped

    shown = specchat(home.config_dir.parent, *base)
    assert shown.returncode == 0, shown.stderr
    assert is_safe(shown.stdout) and is_safe(shown.stderr)
    assert "␛]0;PWNED␇" in shown.stdout and "␛]52;c;UFdORUQ=␇" in shown.stdout


def test_race_output_is_safe(home: AppPaths, hostile: Path) -> None:
    r = specchat(home.config_dir.parent, "race", "hi", "--model", str(hostile), "--draft",
                 str(hostile), "--max-tokens", "6", "--no-replay", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert is_safe(r.stdout) and is_safe(r.stderr) and "␛]" in r.stdout


def test_model_metadata_is_shown_safely(home: AppPaths, hostile: Path) -> None:
    r = specchat(home.config_dir.parent, "models", "check", str(hostile), str(hostile))
    assert "Traceback" not in r.stderr
    assert is_safe(r.stdout) and is_safe(r.stderr)


@pytest.fixture
def hostile_chat(home: AppPaths) -> int:
    home.ensure()
    store = ChatStore.open(home.chats_db)
    chat = store.create_chat(f"title {TITLE}", pair="p\x9b2J")
    store.add_message(chat, "user", "hi")
    store.add_message(chat, "assistant", f"ok {TITLE}{CLIPBOARD} done")
    store.close()
    return chat


def test_chats_and_export_to_stdout_are_safe(home: AppPaths, hostile_chat: int,
                                              tmp_path: Path) -> None:
    root = home.config_dir.parent
    listing = specchat(root, "chats")
    assert listing.returncode == 0 and is_safe(listing.stdout) and "␛]0;PWNED␇" in listing.stdout
    out = specchat(root, "export", str(hostile_chat))
    assert out.returncode == 0, out.stderr
    assert is_safe(out.stdout) and "ok ␛]0;PWNED␇␛]52;c;UFdORUQ=␇ done" in out.stdout
    # A file keeps the exact text: nothing the model wrote is lost.
    f = tmp_path / "chat.md"
    r = specchat(root, "export", str(hostile_chat), "-o", str(f))
    assert r.returncode == 0, r.stderr
    assert f"ok {TITLE}{CLIPBOARD} done" in f.read_text(encoding="utf-8")


# --- 2. export ------------------------------------------------------------------------------


def test_export_never_overwrites_without_force(home: AppPaths, hostile_chat: int,
                                               tmp_path: Path) -> None:
    root = home.config_dir.parent
    f = tmp_path / "notes.md"
    f.write_text("precious")
    msg = one_line_error(specchat(root, "export", str(hostile_chat), "-o", str(f)))
    assert msg == f"specchat: error: {f} already exists: use --force to replace it"
    assert f.read_text() == "precious"
    r = specchat(root, "export", str(hostile_chat), "-o", str(f), "--force")
    assert r.returncode == 0 and "## Assistant" in f.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "notes.md"]  # no temp left


def test_export_refuses_specchat_s_own_files(home: AppPaths, hostile_chat: int,
                                             tmp_path: Path) -> None:
    root = home.config_dir.parent
    home.config_file.write_text("n_ctx: 2048\n")
    db_before = home.chats_db.read_bytes()
    link = tmp_path / "link.md"
    link.symlink_to(home.chats_db)
    hard = tmp_path / "hard.md"
    os.link(home.chats_db, hard)
    for target in (home.chats_db, home.config_file, link, hard,
                   Path(os.path.relpath(home.chats_db, tmp_path))):
        msg = one_line_error(specchat(root, "export", str(hostile_chat), "-o", str(target),
                                      "--force", cwd=tmp_path))
        assert "will not write the export onto" in msg and "specchat's own data" in msg
    assert home.chats_db.read_bytes() == db_before
    assert home.config_file.read_text() == "n_ctx: 2048\n"
    assert ChatStore.open(home.chats_db).get_chat(hostile_chat).n_messages == 2


def test_export_to_a_full_disk_is_one_line(home: AppPaths, hostile_chat: int) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    root = home.config_dir.parent
    with open("/dev/full", "w") as full:
        r = specchat(root, "export", str(hostile_chat), stdout=full.fileno())
    msg = one_line_error(r)
    assert msg == "specchat: error: cannot write to standard output: No space left on device"
    r = specchat(root, "export", str(hostile_chat), "-o", "/dev/full/x.md")
    assert "cannot write" in one_line_error(r)


# --- 4. one namespace for options -----------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [("--model", "t.gguf"), ("--pair", "demo"), ("--threads", "3"), ("--ctx-size", "512"),
     ("--draft", "d.gguf"), ("--gpu-layers", "3"), ("--kv-type", "q8_0"),
     ("--no-memory-check", None)],
)
@pytest.mark.parametrize("command", [["ask", "hi"], ["race"], ["bench"], ["doctor"]])
def test_an_option_means_the_same_before_or_after_the_subcommand(
        option: str, value: str | None, command: list[str]) -> None:
    given = [option] + ([value] if value is not None else [])
    extra = ["--model", "t.gguf"] if option == "--draft" else []
    before = build_parser().parse_args([*extra, *given, *command])
    after = build_parser().parse_args([*extra, *command, *given])
    assert vars(before) == vars(after)
    # --no-memory-check is the off side of --memory-check: its value is False, not None
    dest = "memory_check" if option == "--no-memory-check" else option.lstrip("-").replace("-", "_")
    assert getattr(before, dest) == getattr(build_parser().parse_args([*extra, *given]), dest)
    assert getattr(before, dest) is not None
    assert getattr(before, dest) is not False or option == "--no-memory-check"


@pytest.mark.parametrize("where", ["before", "after"])
def test_global_options_reach_the_command(home: AppPaths, where: str) -> None:
    root = home.config_dir.parent

    def run(*opts: str) -> str:
        args = [*opts, "ask", "hi"] if where == "before" else ["ask", "hi", *opts]
        return one_line_error(specchat(root, *args))

    assert run("--model", "/nonexistent/m.gguf") == \
        "specchat: error: model file not found: /nonexistent/m.gguf"
    assert "unknown pair 'dmeo'" in run("--pair", "dmeo")
    assert run("--ctx-size", "-5").startswith("specchat: error: --ctx-size must be a whole number")


def test_pair_and_model_clash_on_either_side() -> None:
    r = subprocess.run([sys.executable, "-m", "specchat", "--pair", "demo", "ask", "hi",
                        "--model", "x.gguf"], capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "give --pair or --model, not both" in one_line_error(r)


def test_the_app_opens_the_ad_hoc_pair(home: AppPaths, tiny_target: Path,
                                       tiny_draft: Path) -> None:
    from specchat.cli.app import build_services
    from specchat.cli.common import make_env

    args = build_parser().parse_args(["--model", str(tiny_target), "--draft", str(tiny_draft),
                                      "--threads", "1"])
    services = build_services(make_env(), args)
    try:
        assert services.label == f"{tiny_target} + {tiny_draft}"
        runtime = services.open_runtime(lambda p: None)
        try:
            assert runtime.draft_ctx is not None  # speculative, not plain
        finally:
            runtime.close()
    finally:
        services.store.close()


def test_draft_without_model_is_a_clear_message(home: AppPaths) -> None:
    msg = one_line_error(specchat(home.config_dir.parent, "--draft", "d.gguf"))
    assert msg.startswith("specchat: error: --draft needs --model")


# --- 8 and 10. values checked once, one line each -------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ask", "hi", "--ctx-size", "-5"], "--ctx-size must be a whole number in [0, 4294967295]"),
        (["ask", ""], "the prompt is empty"),
        (["ask", "  \n "], "the prompt is empty"),
        (["ask", "hi", "--top-k", "-1"], "--top-k must be a whole number ≥ 0"),
        (["ask", "hi", "--seed", "-3"], "--seed must be a whole number ≥ 0"),
        (["ask", "hi", "--temperature", "nan"], "--temperature must be a number ≥ 0"),
        (["ask", "hi", "--top-p", "1.5"], "--top-p must be a number in (0, 1]"),
        (["ask", "hi", "--max-tokens", "0"], "--max-tokens must be a whole number in [1,"),
        (["ask", "hi", "--top-k", "1.5"], "argument --top-k: invalid int value: '1.5'"),
        (["race", "--max-tokens", "-1"], "--max-tokens must be a whole number in [1,"),
    ],
)
def test_bad_values_are_one_line(home: AppPaths, args: list[str], message: str) -> None:
    assert message in one_line_error(specchat(home.config_dir.parent, *args))


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("n_ctx: 100\ngamma: true\n", 2,
         "setting 'gamma' must be plan, auto, pair or a whole number 0-32, not true"),
        ("sampling:\n  temperature: 0.5\n  top_k: 1.5\n", 3,
         "setting 'sampling.top_k' must be a whole number ≥ 0 (0 = off), not 1.5"),
        ("sampling: {seed: x}\n", 1, "setting 'sampling.seed' must be a whole number ≥ 0"),
        ("\nsampling:\n  temperature: hot\n", 3,
         "setting 'sampling.temperature' must be a number ≥ 0 (0 = greedy), not 'hot'"),
        ("n_threads: true\n", 1, "setting 'n_threads' must be a whole number ≥ 0"),
        ("memory_check: 1\n", 1, "setting 'memory_check' must be true or false, not 1"),
    ],
)
def test_config_errors_name_file_line_and_field(home: AppPaths, text: str, line: int,
                                                message: str) -> None:
    home.config_dir.mkdir(parents=True)
    home.config_file.write_text(text)
    msg = one_line_error(specchat(home.config_dir.parent, "ask", "hi"))
    assert msg.startswith(f"specchat: error: {home.config_file}:{line}: {message}")


def test_threads_are_capped_to_the_machine(home: AppPaths, tiny_target: Path) -> None:
    cpus = os.cpu_count() or 1
    for opts in (["--threads", "100000"], []):
        if not opts:
            home.config_file.write_text("n_threads: 100000\n")
        r = specchat(home.config_dir.parent, *opts, "ask", "hi", "--model", str(tiny_target),
                     "--max-tokens", "2", "--temperature", "0")
        assert r.returncode == 0, r.stderr
        assert (f"specchat: note: 100000 threads is more than this machine's {cpus} CPUs: "
                f"using {cpus}") in r.stderr
        home.config_dir.mkdir(parents=True, exist_ok=True)
