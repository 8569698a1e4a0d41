"""The documentation stays true to the code: its links resolve, its ``specchat`` command lines
parse against the real argument parser, and the README stays short (issue 53).

Nothing here loads a model or runs a command: a command line is parsed, not run.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import unicodedata
from pathlib import Path

import pytest

from specchat.cli.common import validate_args
from specchat.cli.main import build_parser
from specchat.engine.decode import registry
from specchat.errors import SpecchatError

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
ARCHITECTURE = REPO / "ARCHITECTURE.md"
PAGES = sorted((REPO / "docs").glob("*.md"))
DOCS = [README, ARCHITECTURE, *PAGES]

LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
# A command line: optional VAR=value assignments, then `specchat` or `python -m specchat`.
COMMAND = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S+\s+)*(?:python -m )?specchat(?:\s|$)")


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _prose(text: str) -> str:
    """The text outside fenced code blocks (a link inside one is code, not a link)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (hyphens and underscores
    kept), spaces to hyphens."""
    text = re.sub(r"`|\*\*|\*", "", heading.strip().lower())
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in _prose(_text(path)).splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            found.add(s if n == 0 else f"{s}-{n}")
    return found


def broken_links(path: Path) -> list[str]:
    """The relative links in ``path`` whose file (or, in a Markdown file, heading) is missing."""
    bad = []
    prose = re.sub(r"`[^`\n]*`", "", _prose(_text(path)))  # [x](y) in inline code is code
    for m in LINK.finditer(prose):
        target = m.group(1) or m.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            bad.append(f"{path.name}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{path.name}: {target} (no such heading)")
    return bad


def command_lines(path: Path) -> list[str]:
    """Every ``specchat …`` line of the shell code blocks in ``path``, continuations joined."""
    out = []
    for m in FENCE.finditer(_text(path)):
        if m.group(1) not in ("", "sh", "bash", "console"):
            continue
        body = m.group(2).replace("\\\n", " ")
        out += [line.strip() for line in body.splitlines() if COMMAND.match(line.strip())]
    return out


def parse_error(line: str) -> str | None:
    """What the real parser says about ``line`` (None: it parses), and the checks ``main`` makes
    before running anything: option values by the config's rules, --pair against --model, the
    drafters' names. Nothing is run."""
    words = shlex.split(line, comments=True)
    while words and re.match(r"[A-Z_][A-Z0-9_]*=", words[0]):
        words.pop(0)
    if words[:2] == ["python", "-m"]:
        words = words[2:]
    assert words[0] == "specchat", line
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args = build_parser().parse_args(words[1:])
        validate_args(args)
    except SystemExit as e:
        return err.getvalue().strip() or f"exit {e.code}"
    except SpecchatError as e:
        return str(e)
    if getattr(args, "pair", None) and getattr(args, "model", None):
        return "give --pair or --model, not both"
    drafters = getattr(args, "drafter", None)
    unknown = [d for d in (drafters or "").split(",") if d and d not in registry.names()]
    return f"no drafter {unknown}" if unknown else None


def test_the_readme_is_short() -> None:
    lines = len(_text(README).splitlines())
    assert lines <= 250, f"README.md has {lines} lines: depth belongs in docs/"


def test_architecture_is_short() -> None:
    lines = len(_text(ARCHITECTURE).splitlines())
    assert lines <= 150, f"ARCHITECTURE.md has {lines} lines"


def test_the_pages_the_readme_promises_exist() -> None:
    names = {p.name for p in PAGES}
    for page in ("app.md", "models.md", "serve.md", "performance.md", "exactness.md", "gpu.md",
                 "rpc.md", "troubleshooting.md"):
        assert page in names


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_the_link_check_catches_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A heading: with `code`\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md#a-heading-with-code) [gone](missing.md) "
                    "[bad anchor](there.md#nowhere) [web](https://example.com/x)\n"
                    "```sh\n[in code](not-a-link.md)\n```\n", encoding="utf-8")
    assert broken_links(page) == ["page.md: missing.md (no such file)",
                                  "page.md: there.md#nowhere (no such heading)"]


def test_the_docs_hold_command_lines() -> None:
    """The check below has something to check: the README's own use lines at least."""
    assert len(command_lines(README)) >= 10
    assert sum(len(command_lines(p)) for p in DOCS) >= 50


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_command_line_parses(path: Path) -> None:
    errors = {line: err for line in command_lines(path) if (err := parse_error(line))}
    assert errors == {}


def test_the_command_check_rejects_what_the_parser_rejects(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```sh\nspecchat ask hi --max-tokens 8   # fine\n"
                    "SPECCHAT_HOME=/tmp/h python -m specchat models pull demo\n"
                    "specchat serve --port 9000 \\\n  --no-such-flag\n"
                    "specchat ask hi --gamma many\nspecchat frobnicate\n"
                    "specchat ask hi --top-p 2\nspecchat ask hi --drafter nosuch\n"
                    "specchat --pair demo ask hi --model x.gguf\n```\n", encoding="utf-8")
    lines = command_lines(page)
    assert len(lines) == 8
    verdicts = [parse_error(line) for line in lines]
    assert verdicts[:2] == [None, None]
    assert "--no-such-flag" in (verdicts[2] or "")
    assert all(verdicts[2:]), verdicts


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    blocks = [m.group(2).strip() for m in FENCE.finditer(_text(README))]
    assert ci in blocks, f".ci/run's command {ci!r} is not a code block of README.md"
