"""``specchat prove --json-schema`` / ``--grammar`` on the tiny pair whose vocabulary has JSON's
punctuation: the exact rule passes with drafts made and rejected on the masked distributions,
a biased rule fails, and a schema or grammar that does not compile is one line."""

from __future__ import annotations

import json
import re
from functools import partial
from pathlib import Path

import pytest

from specchat.cli.main import main
from specchat.engine.decode import target_pass, verify
from specchat.paths import AppPaths
from tests.test_grammar import STRINGS
from tests.test_prove import sqrt_rule


def prove(target: Path, draft: Path, flag: str, file: Path, capsys: pytest.CaptureFixture[str],
          *more: str) -> tuple[int, str]:
    rc = main(["prove", "--model", str(target), "--draft", str(draft), flag, str(file),
               "--seed", "11", "--threads", "1", *more])
    return rc, capsys.readouterr().out


def test_prove_with_a_json_schema_passes_the_rule_and_fails_a_biased_one(
        tiny_json_target: Path, tiny_json_draft: Path, home: AppPaths, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    schema = tmp_path / "strings.json"
    schema.write_text(json.dumps(STRINGS), encoding="utf-8")
    rc, out = prove(tiny_json_target, tiny_json_draft, "--json-schema", schema, capsys)
    assert rc == 0 and "PASS" in out, out
    drafted, accepted, rejected, share = re.search(
        r"(\d+) tokens drafted.*?(\d+) accepted, (\d+) rejected.*?\((\d+)%\) went through a "
        r"rejection", out).groups()
    assert int(drafted) > 1000 and int(accepted) > 500 and int(rejected) > 200, out
    assert int(share) >= 20, out
    monkeypatch.setattr(target_pass, "verify_tree", partial(verify.verify_tree, keep=sqrt_rule))
    rc, out = prove(tiny_json_target, tiny_json_draft, "--json-schema", schema, capsys)
    assert rc == 1 and "FAIL" in out, out


def test_prove_with_a_grammar_passes(tiny_json_target: Path, tiny_json_draft: Path,
                                     home: AppPaths, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    grammar = tmp_path / "words.gbnf"
    grammar.write_text('root ::= [a-z ]+ "."\n', encoding="utf-8")
    rc, out = prove(tiny_json_target, tiny_json_draft, "--grammar", grammar, capsys,
                    "--samples", "400")
    assert rc == 0 and "PASS" in out, out


@pytest.mark.parametrize(("flag", "text", "says"), [
    ("--json-schema", '{"type": "foo"}', "--json-schema: the JSON schema does not compile: "
                                         "Invalid type: foo"),
    ("--json-schema", "{", "--json-schema: the JSON schema is not valid JSON"),
    ("--grammar", "start: foo", '--grammar: the grammar does not compile: '),
])
def test_a_bad_schema_or_grammar_is_one_line_before_any_load(
        flag: str, text: str, says: str, home: AppPaths, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "bad"
    file.write_text(text, encoding="utf-8")
    for command in ("prove", "ask"):
        args = [command, "--model", str(tmp_path / "no-such.gguf"), flag, str(file)]
        rc = main([*args, "hi"] if command == "ask" else args)
        err = capsys.readouterr().err
        assert rc != 0 and says in err, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    rc = main(["ask", "--model", str(tmp_path / "x.gguf"), flag, str(tmp_path / "none"), "hi"])
    assert rc != 0 and f"{flag}: no such file" in capsys.readouterr().err
