"""Prompts in Spec-Bench's JSONL format: one object per line with ``question_id``,
``category`` and ``turns`` (the user turns; the benchmark uses the first)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specchat.errors import SpecchatError

# Shipped with the package (Apache-2.0; see benchmarks/spec_bench/README.md in the source tree).
DEFAULT_PROMPTS = Path(__file__).resolve().parents[1] / "data" / "spec_bench" / "question.jsonl"


@dataclass(frozen=True)
class BenchPrompt:
    question_id: str
    category: str
    text: str


def load_prompts(path: Path | None = None, categories: Sequence[str] = (),
                 per_category: int = 2) -> list[BenchPrompt]:
    """The first ``per_category`` prompts of each category (all categories, or those named)."""
    path = path or DEFAULT_PROMPTS
    if not path.is_file():
        raise SpecchatError(f"no prompts file at {path}: pass --prompts FILE (Spec-Bench JSONL)")
    found: dict[str, list[BenchPrompt]] = {}
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                prompt = BenchPrompt(str(obj["question_id"]), str(obj["category"]),
                                     str(obj["turns"][0]))
            except (ValueError, KeyError, IndexError, TypeError):
                raise SpecchatError(f"{path}:{n}: not a Spec-Bench line (needs question_id, "
                                    "category and turns)") from None
            found.setdefault(prompt.category, []).append(prompt)
    if categories:
        unknown = [c for c in categories if c not in found]
        if unknown:
            raise SpecchatError(f"no prompts in category '{unknown[0]}' "
                                f"(categories: {', '.join(sorted(found))})")
        found = {c: found[c] for c in categories}
    return [p for group in found.values() for p in group[:per_category]]
