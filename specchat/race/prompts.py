"""Built-in race prompts: one of each kind, drawn from Spec-Bench (Apache-2.0), and three of our
own where the reply copies the prompt.

Kinds differ in how predictable the reply is, which is what speculation lives on: code and
lists repeat structure, translation follows its source, prose is the hardest to guess. The
copy-heavy ones (repeat a passage with one change, reformat it, edit code keeping most lines)
are where prompt lookup — a draft that costs almost nothing — pays even on a CPU.
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
    "rag": ("rag", "481"),
}
DEFAULT_KIND = "code"

_PASSAGE = (
    "The river rises in the hills above the old mill town and runs south for forty miles "
    "before it reaches the sea. For most of that way it is slow and brown, edged with willows "
    "and reed beds where herons wait for fish. In spring the river floods the water meadows, and "
    "the farmers move their sheep to higher ground until the water falls again. Barges once "
    "carried coal and grain down the river to the port, but the railway took that trade a "
    "century ago, and now the only boats are rowing boats and a few narrow holiday cruisers. "
    "People still walk the towpath on summer evenings, and the river is as quiet as it has "
    "ever been.")

_CODE = """def total_price(items, tax_rate=0.2, discount=None):
    \"\"\"Sum the items' prices, apply a discount if any, then add tax.\"\"\"
    subtotal = 0.0
    for item in items:
        if item.quantity <= 0:
            raise ValueError(f"bad quantity for {item.name}: {item.quantity}")
        subtotal += item.price * item.quantity
    if discount is not None:
        if not 0 <= discount < 1:
            raise ValueError("discount must be a fraction below 1")
        subtotal *= 1 - discount
    tax = subtotal * tax_rate
    return round(subtotal + tax, 2)


def receipt_lines(items, tax_rate=0.2, discount=None):
    lines = [f"{item.name:20} {item.quantity:3} x {item.price:8.2f}" for item in items]
    lines.append(f"{'total':20} {total_price(items, tax_rate, discount):16.2f}")
    return lines
"""

# kind → (category, text): written for specchat; the reply repeats most of the prompt.
OWN: dict[str, tuple[str, str]] = {
    "copy": ("copy", "Repeat the following paragraph exactly as it is, word for word, except "
             "that every 'river' becomes 'canal'. Reply with the paragraph only.\n\n" + _PASSAGE),
    "reformat": ("copy", "Rewrite the following paragraph as a Markdown bulleted list with one "
                 "sentence per bullet, keeping the wording of every sentence unchanged. Reply "
                 "with the list only.\n\n" + _PASSAGE),
    "edit-code": ("copy", "In the Python code below, rename the function total_price to "
                  "order_total (and its call) and change nothing else. Reply with the whole "
                  "code in one code block.\n\n```python\n" + _CODE + "```"),
}


@dataclass(frozen=True)
class RacePrompt:
    kind: str  # a KINDS or OWN key, or a Spec-Bench category
    category: str
    text: str

    @property
    def title(self) -> str:
        first = self.text.strip().splitlines()[0] if self.text.strip() else ""
        return f"{self.kind}: {first[:70]}{'…' if len(first) > 70 else ''}"


def _all(path: Path | None) -> list[BenchPrompt]:
    return load_prompts(path, per_category=10**6)


def builtin_prompts(path: Path | None = None) -> list[RacePrompt]:
    """One prompt of each kind, in KINDS order, then our copy-heavy ones."""
    by_id = {p.question_id: p for p in _all(path)}
    out = []
    for kind, (category, qid) in KINDS.items():
        p = by_id.get(qid)
        if p is not None:
            out.append(RacePrompt(kind, category, p.text))
    out += [RacePrompt(kind, category, text) for kind, (category, text) in OWN.items()]
    return out


def prompt_from(name: str, path: Path | None = None) -> RacePrompt:
    """A built-in kind (``code``, ``copy``…) or the first prompt of a Spec-Bench category."""
    for p in builtin_prompts(path):
        if p.kind == name:
            return p
    prompts = _all(path)
    for bp in prompts:
        if bp.category == name:
            return RacePrompt(name, bp.category, bp.text)
    names = sorted(set(KINDS) | set(OWN) | {p.category for p in prompts})
    raise SpecchatError(f"no built-in prompt '{name}' (choose from: {', '.join(names)})")
