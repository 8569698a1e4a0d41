"""Can this draft draft for that target, and will it pay? The full pair check, from GGUF headers.

Builds on :mod:`vocab_compat` (the vocabulary must match: that decides *compatible*) and adds
what decides whether the pair is *worth it*: architecture and chat template (informative), the
draft's training context, and the size ratio — a draft at half the target's size or more costs
too much per token to pay. Each finding is a plain sentence; an incompatible or oversized pair
comes with what to do instead, from the catalog.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specchat.errors import CatalogError, FetchError, ModelFileError
from specchat.formats.gguf_checks import VOCAB_TEXTS, check_complete, split_parts
from specchat.formats.gguf_file import DamagedFile, GgufHeader, read_header
from specchat.models.catalog import Catalog, DerivedSource, HfSource, ModelEntry, PathSource
from specchat.models.families import format_params, guess_family, smaller_siblings
from specchat.models.progress import format_bytes
from specchat.models.resolver import ModelResolver
from specchat.models.vocab_compat import (
    TOKENS,
    Finding,
    Level,
    compare_vocab,
    cross_vocab_finding,
    shared_tokens,
    tokens_of,
    verdict,
    vocab_hash,
)

WONT_PAY_RATIO = 0.5  # draft/target weight bytes at or above which drafting cannot pay
VERDICT_WORDS = {Level.OK: "compatible", Level.WARN: "compatible with warnings",
                 Level.BAD: "incompatible"}


@dataclass(frozen=True)
class ModelFacts:
    """What the check needs to know about one model (all parts of a split file together)."""

    label: str  # how the user named it: a catalog id or a path
    header: GgufHeader  # the first part's, with token texts
    n_params: int
    weight_bytes: int
    estimated: bool = False  # sizes estimated (a derived model not made yet)
    source_note: str = ""  # e.g. "header read from the Hub"

    @property
    def name(self) -> str:
        md = self.header.metadata
        return str(md.get("general.name") or md.get("general.basename") or self.header.path.stem)

    @property
    def architecture(self) -> str:
        return self.header.architecture

    @property
    def n_vocab(self) -> int:
        toks = self.header.metadata.get(TOKENS)
        return len(toks) if toks is not None else 0

    @property
    def chat_template(self) -> str | None:
        t = self.header.metadata.get("tokenizer.chat_template")
        return str(t) if t else None

    @property
    def n_ctx_train(self) -> int | None:
        v = self.header.arch_value("context_length")
        return int(v) if v is not None else None

    def describe(self) -> str:
        md = self.header.metadata
        toks = md.get(TOKENS)
        vocab = f"vocab {len(toks)} ({md.get('tokenizer.ggml.model')}, #{vocab_hash(list(toks))})" \
            if toks is not None else "no vocabulary"
        approx = "≈" if self.estimated else ""
        return (f"{self.name} · {self.architecture} · {format_params(self.n_params)} params · "
                f"{approx}{format_bytes(self.weight_bytes)} · {vocab} · "
                f"BOS {md.get('tokenizer.ggml.bos_token_id')} EOS "
                f"{md.get('tokenizer.ggml.eos_token_id')} add_bos "
                f"{md.get('tokenizer.ggml.add_bos_token')}")


def facts_from_headers(label: str, headers: list[GgufHeader], note: str = "") -> ModelFacts:
    """Raises :class:`DamagedFile` when a part is shorter than its tensor table says."""
    for h in headers:
        check_complete(h)
    return ModelFacts(label, headers[0], sum(h.n_params for h in headers),
                      sum(max(0, h.file_size - h.data_start) for h in headers), source_note=note)


def facts_for_path(path: Path, label: str | None = None) -> ModelFacts:
    parts = split_parts(Path(path))
    headers = [read_header(parts[0], token_texts=True, texts_of=VOCAB_TEXTS)]
    headers += [read_header(p, token_texts=False) for p in parts[1:]]
    return facts_from_headers(label or str(path), headers)


def facts_for_hub(src: HfSource, label: str) -> ModelFacts:
    from specchat.models.remote_header import read_remote_header

    headers = [read_remote_header(src.repo, src.files[0], src.revision)]
    headers += [read_remote_header(src.repo, f, src.revision, token_texts=False)
                for f in src.files[1:]]
    return facts_from_headers(label, headers, "header read from the Hub, not downloaded")


def facts_for_entry(resolver: ModelResolver, entry: ModelEntry) -> ModelFacts:
    """From the file on disk, else from the Hub (header only), else from a derived model's base."""
    st = resolver.state(entry)
    if st.present and st.path is not None:
        return facts_for_path(st.path, entry.id)
    src = entry.source
    if isinstance(src, PathSource):
        return facts_for_path(src.path, entry.id)  # raises "model file not found: …"
    if isinstance(src, HfSource):
        return facts_for_hub(src, entry.id)
    if isinstance(src, DerivedSource):
        from specchat.models.quantize import estimated_size

        base = resolver.catalog.models.get(src.base)
        if base is None:
            raise CatalogError(f"model '{entry.id}' is derived from unknown '{src.base}'")
        b = facts_for_entry(resolver, base)
        if src.layers is not None:  # a layer-skip cut: about its share of the base's blocks
            n_layer = int(b.header.arch_value("block_count") or len(src.layers))
            share = len(src.layers) / max(1, n_layer)
            return ModelFacts(entry.id, b.header, int(b.n_params * share),
                              int(b.weight_bytes * share), estimated=True,
                              source_note=f"not made yet: estimated from {base.id}")
        return ModelFacts(entry.id, b.header, b.n_params, estimated_size(b.n_params, src.quant),
                          estimated=True, source_note=f"not made yet: estimated from {base.id}")
    raise FetchError(f"model '{entry.id}' is not on disk: run `specchat models pull {entry.id}`")


@dataclass(frozen=True)
class CompatReport:
    target: ModelFacts | None
    draft: ModelFacts | None
    findings: list[Finding]
    suggestions: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> Level:
        return verdict(self.findings)

    @property
    def headline(self) -> str:
        if any(f.what == DAMAGED for f in self.findings):
            return "damaged"
        return VERDICT_WORDS[self.verdict]

    @property
    def size_ratio(self) -> float | None:
        if self.target is None or self.draft is None or not self.target.weight_bytes:
            return None
        return self.draft.weight_bytes / self.target.weight_bytes

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.level is not Level.OK]


DAMAGED = "damaged file"


def unreadable(role: str, error: ModelFileError) -> Finding:
    if isinstance(error, DamagedFile):
        return Finding(Level.BAD, DAMAGED, f"the {role} is damaged: {error}")
    return Finding(Level.BAD, "file", f"the {role} cannot be read: {error} — pick a complete "
                   ".gguf model file")


def check_files(target: Path, draft: Path, catalog: Catalog | None = None) -> CompatReport:
    """Like :func:`check_pair` for two files; an unreadable file is an incompatible verdict."""
    return check_readable(lambda: facts_for_path(target), lambda: facts_for_path(draft), catalog)


def check_readable(read_target: Callable[[], ModelFacts], read_draft: Callable[[], ModelFacts],
                   catalog: Catalog | None = None) -> CompatReport:
    """:func:`check_pair` on facts still to be read; an unreadable model is the verdict."""
    facts: dict[str, ModelFacts | None] = {}
    findings: list[Finding] = []
    for role, read in (("target", read_target), ("draft", read_draft)):
        try:
            facts[role] = read()
        except ModelFileError as e:
            facts[role] = None
            findings.append(unreadable(role, e))
    t, d = facts["target"], facts["draft"]
    if t is None or d is None:
        return CompatReport(t, d, findings)
    return check_pair(t, d, catalog)


def check_pair(target: ModelFacts, draft: ModelFacts, catalog: Catalog | None = None
               ) -> CompatReport:
    findings = vocab_findings(target, draft)
    findings += _fit_findings(target, draft)
    order = {Level.BAD: 0, Level.WARN: 1, Level.OK: 2}
    findings.sort(key=lambda f: order[f.level])
    report = CompatReport(target, draft, findings)
    needs_advice = report.verdict is Level.BAD or any(f.what == "size" and f.level is Level.WARN
                                                      for f in findings)
    if needs_advice:
        return CompatReport(target, draft, findings, advice(target, draft, catalog))
    return report


def vocab_findings(target: ModelFacts, draft: ModelFacts) -> list[Finding]:
    out = compare_vocab(target.header, draft.header)
    bad = [f for f in out if f.level is Level.BAD]
    if bad:
        if any(f.what == "vocabulary" for f in bad) or (
                any(f.what == "tokenizer" for f in bad)
                and shared_tokens(target.header, draft.header) is None):
            return bad  # unusable, or tokens that cannot be matched: BOS/EOS mean nothing then
        # Different vocabularies: drafting goes through the tokens both have (TLI).
        return [cross_vocab_finding(target.header, draft.header,
                                    calibration_mass(target.header, draft.header))]
    toks = tokens_of(target.header)
    out.append(Finding(Level.OK, "vocabulary",
                       f"same vocabulary: {min(target.n_vocab, draft.n_vocab)} shared "
                       f"tokens (#{vocab_hash(toks)})"))
    return out


def calibration_mass(target: GgufHeader, draft: GgufHeader) -> float | None:
    """Of the calibration prompts' text in the target's tokenisation, the share of tokens the
    draft also has (the target's empirical probability mass there that drafting can reach);
    None when the target's file is not on disk or its tokenizer cannot be loaded."""
    from specchat.models.vocab_compat import token_keys

    tk, dk = token_keys(target), token_keys(draft)
    if tk is None or dk is None or not Path(target.path).is_file():
        return None
    from specchat.engine.llama.model import LlamaModel
    from specchat.engine.llama.model_settings import ModelSettings
    from specchat.models.calibration import builtin_prompts

    try:
        tm = LlamaModel(target.path, ModelSettings(n_gpu_layers=0, vocab_only=True))
    except ModelFileError:
        return None
    try:
        tokens = [t for p in builtin_prompts() for t in tm.tokenize(p.prompt)]
    finally:
        tm.close()
    have = {k for k in dk if k is not None}
    hits = sum(1 for t in tokens if t < len(tk) and tk[t] is not None and tk[t] in have)
    return hits / len(tokens) if tokens else None


def _fit_findings(target: ModelFacts, draft: ModelFacts) -> list[Finding]:
    out: list[Finding] = []
    if target.architecture != draft.architecture:
        out.append(Finding(Level.OK, "architecture",
                           f"different architectures ({target.architecture} target, "
                           f"{draft.architecture} draft): fine, only the vocabulary must match"))
    tt, dt = target.chat_template, draft.chat_template
    if tt and dt and tt.strip() != dt.strip():
        out.append(Finding(Level.WARN, "chat template",
                           "the chat templates differ: the draft reads prompts in the target's "
                           "format, and if it was tuned on another one it agrees less often "
                           "(calibration measures how much)"))
    tc, dc = target.n_ctx_train, draft.n_ctx_train
    if tc and dc and dc < tc:
        out.append(Finding(Level.WARN, "context",
                           f"the draft was trained on {dc} tokens of context, the target on {tc}:"
                           f" past {dc} tokens the draft guesses worse"))
    if target.weight_bytes:
        ratio = draft.weight_bytes / target.weight_bytes
        sizes = (f"{format_bytes(draft.weight_bytes)} draft, {format_bytes(target.weight_bytes)}"
                 f" target; {format_params(draft.n_params)} vs {format_params(target.n_params)}"
                 " params")
        if ratio >= 1:
            out.append(Finding(Level.WARN, "size",
                               f"the draft is as large as the target ({ratio:.2f}×: {sizes}): "
                               "drafting cannot be faster than the target alone"))
        elif ratio >= WONT_PAY_RATIO:
            out.append(Finding(Level.WARN, "size",
                               f"the draft is {ratio:.2f}× the target's size ({sizes}): each "
                               "draft token costs too much to pay; drafts under 0.2× pay best"))
        else:
            out.append(Finding(Level.OK, "size", f"the draft is {ratio:.2f}× the target's size "
                               f"({sizes})"))
    return out


def advice(target: ModelFacts, draft: ModelFacts, catalog: Catalog | None) -> list[str]:
    """What to try instead: smaller catalog models of the target's family, or a self-draft."""
    out: list[str] = []
    family = None
    if catalog is not None:
        md = target.header.metadata
        texts = [target.label, target.header.path.name, str(md.get("general.name") or ""),
                 str(md.get("general.basename") or "")]
        family = guess_family(texts, catalog)
    if family and catalog is not None:
        sibs = smaller_siblings(catalog, family, float(target.n_params),
                                exclude=(target.label, draft.label))
        if sibs:
            names = ", ".join(m.id for m in sibs[:3])
            out.append(f"same family ({family}), smaller size: try {names}")
    if target.weight_bytes and target.n_params:
        bits = 8 * target.weight_bytes / target.n_params
        if bits >= 7.5:  # F32/F16/Q8_0: a 4-bit copy is a quarter of the size or less
            out.append(("or make" if out else "make") + " a draft from the target itself: "
                       f"`specchat models self-draft {target.label} --quant Q4_0`")
    if not out:
        out.append("look on the Hub for a much smaller model of the same family, ideally from "
                   "the same uploader (`specchat models files REPO` lists a repo's files)")
    return out
