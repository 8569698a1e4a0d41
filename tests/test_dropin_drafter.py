"""A drafter is one module (issue 39): a new file in the drafters package is found by name,
listed by ``--drafter``, chosen with it, and verified by the one verification module — with no
other file changed. The file is docs/examples/bigram.py, the worked example of ARCHITECTURE.md's
"Add a drafter"."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import specchat.engine.drafters
from specchat.cli.main import main
from specchat.engine.decode import arms, registry

# The worked example of ARCHITECTURE.md, loaded as it is written, not a copy of it.
EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "bigram.py"
PROMPT = "the cat sat on the mat, the cat sat on the mat, the cat"


@pytest.fixture
def dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The drafters package with one more module in it (a folder on its search path)."""
    folder = tmp_path / "drafters"
    folder.mkdir()
    (folder / "bigram.py").write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(specchat.engine.drafters, "__path__",
                        [*specchat.engine.drafters.__path__, str(folder)])
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path / "home"))
    return folder


def _ask(capsys: pytest.CaptureFixture[str], model: Path, *flags: str) -> tuple[list[int], dict]:
    rc = main(["ask", PROMPT, "--model", str(model), "--temperature", "0", "--max-tokens", "40",
               "--json", *flags])
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    tokens = [e["id"] for e in lines if e["type"] == "token"]
    return tokens, next(e for e in lines if e["type"] == "stats")


def test_a_new_drafter_module_is_found_listed_chosen_and_verified(
        dropped: Path, tiny_target: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "bigram" in registry.names()
    with pytest.raises(SystemExit):
        main(["ask", "--help"])
    assert "bigram" in capsys.readouterr().out  # --drafter's help lists it
    plain, _ = _ask(capsys, tiny_target, "--plain")
    spec, stats = _ask(capsys, tiny_target, "--drafter", "bigram", "--gamma", "3")
    assert spec == plain  # greedy: the target's own tokens, whatever was drafted
    detail = stats["detail"]
    drafted, kept = detail["drafted_by_drafter"]["bigram"], detail["accepted_by_drafter"]["bigram"]
    assert 0 < kept < drafted  # drafts were made, kept and rejected by the one rule


def _first_plan(folder: Path, arm_line: str) -> str:
    """The first plan a fresh planner makes over the drop-in alone, on a GPU-like curve, with
    the example module as written plus ``arm_line``: its reason, as the stats bar shows it."""
    from specchat.engine.policy.auto_gamma import AutoGammaSeed
    from specchat.engine.policy.costs import CostCurve
    from specchat.engine.policy.planner import Planner

    (folder / "bigram.py").write_text(EXAMPLE.read_text(encoding="utf-8") + arm_line,
                                      encoding="utf-8")
    sys.modules.pop(f"{registry.PACKAGE}.bigram", None)  # import the file as now written
    flat = CostCurve(0.0015, tuple(0.010 + 0.00005 * n for n in range(1, 33)))
    p = Planner(seed=AutoGammaSeed(flat, 0.7), clock=lambda: 0.0)
    p.begin("the cat sat")
    return p.next_plan(("bigram",)).reason


def test_a_drop_in_declares_its_arm_and_is_planned_as_a_lookup(dropped: Path) -> None:
    """One line declares the drop-in a lookup (engine/decode/arms.py): the planner then scores
    it from its first step, where as a chain drafter (no ARM) it is first probed to time it.
    Nothing else changes: no planner edit names it."""
    assert registry.arm("bigram").kind is arms.ArmKind.CHAIN  # as written: no ARM
    assert _first_plan(dropped, "") == "probe"
    lookup = _first_plan(dropped, "\nfrom specchat.engine.decode import arms\nARM = arms.lookup()\n")
    assert registry.arm("bigram").kind is arms.ArmKind.LOOKUP
    assert lookup.startswith("bigram ") and "probe" not in lookup  # a scored chain: "bigram 6"
