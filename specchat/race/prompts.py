"""Built-in race prompts: one of each kind, drawn from Spec-Bench (Apache-2.0).

Kinds differ in how predictable the reply is, which is what speculation lives on: code and
lists repeat structure, translation follows its source, prose is the hardest to guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specchat.bench.prompts import BenchPrompt, load_prompts
from specchat.errors import SpecchatError

# kind → (Spec-Bench category, question_id)
KINDS: dict[str, tuple[str, str]] = {
    "code": ("coding", "121"),
    "list": ("stem", "150"),
    "prose": ("writing", "81"),
    "translation": ("translation", "161"),
    "math": ("math_reasoning", "401"),
    "qa": ("qa", "321"),
    "extraction": ("extraction", "131"),
    "summary": ("summarization", "241"),
}
DEFAULT_KIND = "code"


@dataclass(frozen=True)
class RacePrompt:
    kind: str  # a KINDS key, or a Spec-Bench category
    category: str
    text: str

    @property
    def title(self) -> str:
        first = self.text.strip().splitlines()[0] if self.text.strip() else ""
        return f"{self.kind}: {first[:70]}{'…' if len(first) > 70 else ''}"


def _all(path: Path | None) -> list[BenchPrompt]:
    return load_prompts(path, per_category=10**6)


def builtin_prompts(path: Path | None = None) -> list[RacePrompt]:
    """One prompt of each kind, in KINDS order."""
    by_id = {p.question_id: p for p in _all(path)}
    out = []
    for kind, (category, qid) in KINDS.items():
        p = by_id.get(qid)
        if p is not None:
            out.append(RacePrompt(kind, category, p.text))
    return out


def prompt_from(name: str, path: Path | None = None) -> RacePrompt:
    """A built-in kind (``code``, ``list``…) or the first prompt of a Spec-Bench category."""
    for p in builtin_prompts(path):
        if p.kind == name:
            return p
    prompts = _all(path)
    for bp in prompts:
        if bp.category == name:
            return RacePrompt(name, bp.category, bp.text)
    names = sorted(set(KINDS) | {p.category for p in prompts})
    raise SpecchatError(f"no built-in prompt '{name}' (choose from: {', '.join(names)})")
