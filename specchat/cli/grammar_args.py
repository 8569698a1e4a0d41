"""``--json-schema FILE`` and ``--grammar FILE``: a reply constrained to a JSON schema or a Lark
or GBNF grammar (``ask``, ``prove``), compiled by llguidance before any model is loaded, so a
schema that does not compile costs no load."""

from __future__ import annotations

import argparse

from specchat.engine.decode.grammar import GrammarError, compile_grammar
from specchat.errors import SpecchatError
from specchat.textsafe import safe_text


def add_grammar_args(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--json-schema", metavar="FILE",
                   help="constrain the reply to this JSON schema (a JSON file); every token is "
                        "masked to it, drafts included, and the reply is the masked target's")
    g.add_argument("--grammar", metavar="FILE",
                   help="constrain the reply to this grammar (Lark, or llama.cpp's GBNF)")


def read_text(flag: str, path: str) -> str:
    """A text file a flag names (a schema, a grammar, a predicted output), or a one-line error
    naming the flag (missing, unreadable, not UTF-8)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise SpecchatError(f"{flag}: no such file: {safe_text(path)}") from None
    except UnicodeDecodeError:
        raise SpecchatError(f"{flag}: {safe_text(path)} is not UTF-8 text") from None
    except OSError as e:
        raise SpecchatError(f"{flag}: cannot read {safe_text(path)}: "
                            f"{safe_text(e.strerror or str(e))}") from None


def grammar_from_args(args: argparse.Namespace) -> str | None:
    """The llguidance grammar the flags ask for; None for free text."""
    schema, grammar = getattr(args, "json_schema", None), getattr(args, "grammar", None)
    try:
        if schema is not None:
            return compile_grammar("json_schema", read_text("--json-schema", schema))
        if grammar is not None:
            return compile_grammar("grammar", read_text("--grammar", grammar))
    except GrammarError as e:
        flag = "--json-schema" if schema is not None else "--grammar"
        raise SpecchatError(f"{flag}: {safe_text(str(e))}") from None
    return None
