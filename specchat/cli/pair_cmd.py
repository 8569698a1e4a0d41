"""``specchat models check|calibrate|pair|self-draft|wizard``: pairing a draft with a target."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from specchat.cli.common import Env
from specchat.config import cap_threads
from specchat.errors import IncompatiblePairError, ModelFileError, SpecchatError
from specchat.models.catalog import ModelEntry, PairEntry
from specchat.models.compat import CompatReport, check_readable, facts_for_entry
from specchat.models.mtp import detect as detect_mtp
from specchat.models.progress import TextProgress
from specchat.models.vocab_compat import Level
from specchat.textsafe import safe_text

MARKS = {Level.OK: "✓", Level.WARN: "!", Level.BAD: "✗"}


def add_parsers(msub: Any) -> None:
    c = msub.add_parser("check", help="can DRAFT draft for TARGET? (from the files' headers)")
    c.add_argument("refs", nargs="+", metavar="PAIR | TARGET [DRAFT]",
                   help="a pair id, or two models: catalog ids, .gguf paths or REPO:FILE; one "
                   "model alone: what it can draft for itself with")
    c.set_defaults(func=cmd_check)
    cal = msub.add_parser("calibrate", help="measure a pair here: α, costs, best γ")
    cal.add_argument("refs", nargs="+", metavar="PAIR | TARGET DRAFT")
    cal.add_argument("--tokens", type=int, default=64, help="reply tokens per prompt (64)")
    cal.add_argument("--gamma-max", type=int, default=8, help="largest γ to consider (8)")
    cal.add_argument("--no-save", action="store_true", help="do not store γ with the pair")
    cal.set_defaults(func=cmd_calibrate)
    p = msub.add_parser("pair", help="check TARGET and DRAFT and save them as pair NAME")
    p.add_argument("name", metavar="NAME")
    p.add_argument("target", metavar="TARGET")
    p.add_argument("draft", metavar="DRAFT")
    p.add_argument("--gamma", type=int, help="draft length γ (default: from --calibrate)")
    p.add_argument("--calibrate", action="store_true", help="calibrate first; use its γ")
    p.add_argument("--default", action="store_true", help="make it the default pair")
    p.set_defaults(func=cmd_pair)
    s = msub.add_parser("self-draft", help="make a draft from the target itself",
                        description="A quantized copy of the target (--quant), or a layer-skip "
                        "draft holding some of its own blocks (--layers; 'auto' picks them by "
                        "measuring on this machine), recorded in your catalog.")
    s.add_argument("target", metavar="TARGET")
    s.add_argument("--layers", metavar="auto|LIST",
                   help="a layer-skip draft keeping these blocks, e.g. 0-11,14,27, or 'auto' "
                   "(use it with --drafter layerskip)")
    s.add_argument("--quant", default="Q4_0", choices=("Q4_0", "Q3_K_S", "Q2_K"))
    s.add_argument("--name", help="pair name (default: TARGET+self-QUANT)")
    s.add_argument("--force", action="store_true", help="even if the copy is too big to pay")
    s.add_argument("--no-calibrate", action="store_true")
    s.add_argument("--default", action="store_true", help="make it the default pair")
    s.set_defaults(func=cmd_self_draft)
    w = msub.add_parser("wizard", help="choose, download, check, calibrate and save a pair")
    w.set_defaults(func=cmd_wizard)


def entry_for(env: Env, ref: str) -> ModelEntry:
    """A catalog id, a .gguf path or a Hub file, as a catalog entry (new ones not saved yet)."""
    from specchat.models.entries import hub_model, path_entry

    if ref in env.catalog.models:
        return env.catalog.models[ref]
    p = Path(ref).expanduser()
    if p.exists():
        return path_entry(env.catalog, p)
    hub = hub_model(env.catalog, ref)
    if hub is not None:
        return hub
    if p.suffix.lower() == ".gguf":
        return path_entry(env.catalog, p)  # missing: the check says "model file not found"
    return env.catalog.model(ref)


def _two(env: Env, refs: list[str]) -> tuple[ModelEntry, ModelEntry, PairEntry | None]:
    if len(refs) == 1:
        pair = env.catalog.pair(refs[0])
        return env.catalog.model(pair.target), env.catalog.model(pair.draft), pair
    if len(refs) != 2:
        raise SpecchatError("give a pair id, or a target and a draft")
    return entry_for(env, refs[0]), entry_for(env, refs[1]), None


def compat_report(env: Env, target: ModelEntry, draft: ModelEntry) -> CompatReport:
    return check_readable(lambda: facts_for_entry(env.resolver, target),
                          lambda: facts_for_entry(env.resolver, draft), env.catalog)


def print_report(r: CompatReport, out: TextIO) -> None:
    lines = []  # names and metadata come from the files: shown, never obeyed (safe_text)
    for role, f in (("target", r.target), ("draft", r.draft)):
        if f is not None:
            note = f"  ({f.source_note})" if f.source_note else ""
            lines.append(f"{role:7} {f.label}: {f.describe()}{note}")
            if role == "target" and (heads := detect_mtp(f.header)) is not None:
                lines.append(f"        {heads.line()}")
    lines.append(f"verdict: {r.headline}")
    lines += [f"  {MARKS[f.level]} {f.what}: {f.message}" for f in r.findings]
    if r.suggestions:
        lines += ["what to do instead:", *(f"  - {s}" for s in r.suggestions)]
    out.write("".join(safe_text(line) + "\n" for line in lines))


def cmd_check(env: Env, args: argparse.Namespace) -> int:
    if len(args.refs) == 1 and args.refs[0] not in env.catalog.pairs:
        return check_alone(env, entry_for(env, args.refs[0]), sys.stdout)
    target, draft, _ = _two(env, args.refs)
    r = compat_report(env, target, draft)
    print_report(r, sys.stdout)
    return 1 if r.verdict is Level.BAD else 0


def check_alone(env: Env, target: ModelEntry, out: TextIO) -> int:
    """One model, no draft: its facts and the drafts it needs no second model for."""
    f = facts_for_entry(env.resolver, target)
    note = f"  ({f.source_note})" if f.source_note else ""
    lines = [f"target  {f.label}: {f.describe()}{note}"]
    heads = detect_mtp(f.header)
    if heads is not None:
        lines.append(f"        {heads.line()}")
    lines.append("to check a draft for it: specchat models check TARGET DRAFT")
    out.write("".join(safe_text(line) + "\n" for line in lines))
    return 0


def _refuse_if_incompatible(r: CompatReport) -> None:
    if r.headline == "damaged":
        raise ModelFileError(r.problems[0].message)
    if r.verdict is Level.BAD:
        raise IncompatiblePairError("the draft cannot draft for this target: "
                                    + r.problems[0].message)


def run_calibration(env: Env, target: ModelEntry, draft: ModelEntry, tokens: int = 64,
                    gamma_max: int = 8) -> int:
    from specchat.models.calibration import CalibrationOptions, calibrate, format_result
    from specchat.models.calibration_store import (
        calibrating,
        calibration_file,
        load_calibration,
        save_calibration,
        stored_at,
    )
    from specchat.models.compat import check_files

    progress = TextProgress()
    t_path = env.resolver.ensure(target, progress)
    d_path = env.resolver.ensure(draft, progress)
    _refuse_if_incompatible(check_files(t_path, d_path, env.catalog))
    threads, note = cap_threads(env.config.n_threads)
    if note:
        print(f"specchat: note: {note}", file=sys.stderr)
    opts = CalibrationOptions(max_tokens=tokens, gamma_max=gamma_max, n_threads=threads)
    before = stored_at(env.paths, t_path, d_path)
    with calibrating(env.paths, t_path, d_path, progress) as waited:
        theirs = load_calibration(env.paths, t_path, d_path) if waited and stored_at(
            env.paths, t_path, d_path) != before else None
        if theirs is not None:  # measured by the specchat it waited for: not again
            print(format_result(theirs))
            print(f"(measured by another specchat while this one waited; stored in "
                  f"{calibration_file(env.paths, t_path, d_path)})")
            return theirs.gamma
        result = calibrate(t_path, d_path, opts, progress)
        where = save_calibration(env.paths, result)
    print(format_result(result))
    print(f"(stored in {where})")
    return result.gamma


def cmd_calibrate(env: Env, args: argparse.Namespace) -> int:
    from specchat.models.user_catalog import update_user_catalog

    if args.tokens < args.gamma_max + 1 or args.gamma_max < 1:
        raise SpecchatError("--tokens must exceed --gamma-max, and --gamma-max be at least 1")
    target, draft, pair = _two(env, args.refs)
    gamma = run_calibration(env, target, draft, args.tokens, args.gamma_max)
    if pair is not None and not args.no_save:
        update_user_catalog(env.paths.user_catalog,
                            pairs=[PairEntry(pair.id, pair.target, pair.draft, gamma, pair.notes)])
        what = f"γ={gamma}" if gamma else "γ=0 (plain decoding: speculation does not pay here)"
        print(f"pair '{pair.id}' now uses {what} (saved in {env.paths.user_catalog})")
    return 0


def _save(env: Env, name: str, target: ModelEntry, draft: ModelEntry, gamma: int | None,
          make_default: bool) -> None:
    from specchat.models.pairing import save_pair

    pair, _ = save_pair(env.paths, env.catalog, name, target, draft, gamma,
                        make_default=make_default)
    g = f" γ={pair.gamma}" if pair.gamma is not None else ""
    print(f"saved pair '{pair.id}': {pair.target} ← {pair.draft}{g} in {env.paths.user_catalog}"
          + ("; it is now the default" if make_default else ""))


def cmd_pair(env: Env, args: argparse.Namespace) -> int:
    target, draft = entry_for(env, args.target), entry_for(env, args.draft)
    r = compat_report(env, target, draft)
    print_report(r, sys.stdout)
    _refuse_if_incompatible(r)
    gamma = args.gamma
    if args.calibrate:
        measured = run_calibration(env, target, draft)
        gamma = measured if gamma is None else gamma
    _save(env, args.name, target, draft, gamma, args.default)
    return 0


def cmd_self_draft(env: Env, args: argparse.Namespace) -> int:
    from specchat.models.compat import check_files
    from specchat.models.pairing import self_draft_options, self_draft_pair_name
    from specchat.models.self_draft import make_self_draft

    target = entry_for(env, args.target)
    if args.layers:
        return _layerskip_draft(env, target, args.layers)
    option = next(o for o in self_draft_options(facts_for_entry(env.resolver, target))
                  if o.quant == args.quant)
    print(f"{args.quant} copy of {target.id}: {option.reason}")
    if not option.pays and not args.force:
        raise SpecchatError(f"a {args.quant} copy would be {option.ratio:.2f}× the target's size "
                            "and cannot pay; pass --force to make it anyway")
    draft = make_self_draft(env.resolver, target, args.quant, TextProgress())
    t_path, d_path = env.resolver.ensure(target), env.resolver.ensure(draft)
    r = check_files(t_path, d_path, env.catalog)
    print_report(r, sys.stdout)
    _refuse_if_incompatible(r)
    gamma = None if args.no_calibrate else run_calibration(env, target, draft)
    name = args.name or self_draft_pair_name(env.catalog, target, args.quant)
    _save(env, name, target, draft, gamma, args.default)
    return 0


def _layerskip_draft(env: Env, target: ModelEntry, layers: str) -> int:
    from specchat.models.layer_search import format_layers
    from specchat.models.progress import format_bytes
    from specchat.models.self_draft import make_layerskip_draft

    made = make_layerskip_draft(env.resolver, target, layers, print, TextProgress())
    if made.search is not None:
        r, b = made.search, made.search.best
        print(f"chose {len(b.kept)} of {r.n_layer} blocks: α {b.alpha:.2f}, draft "
              f"{b.draft_s * 1e3:.1f} ms/token vs target {r.target_s * 1e3:.1f}, predicted "
              f"{b.speedup:.2f}× at γ {b.gamma}"
              + ("" if b.speedup >= 1.05 else " — it will not pay on this machine"))
    print(f"{made.entry.id}: {made.path} ({format_bytes(made.size)} on disk), blocks "
          f"{format_layers(made.kept)} of 0-{made.n_layer - 1}\n"
          f"  use it: specchat ask --model {target.id} --drafter layerskip")
    return 0


def cmd_wizard(env: Env, args: argparse.Namespace) -> int:
    from specchat.ui.wizard.app import run_wizard_app

    return run_wizard_app(env.paths)
