"""The ``specchat`` command."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Iterator, Sequence
from typing import NoReturn

from specchat import __version__
from specchat.cli import (
    ask,
    bench_cmd,
    chats_cmd,
    doctor,
    mcp_cmd,
    models_cmd,
    prove_cmd,
    race_cmd,
    serve_cmd,
)
from specchat.cli.common import (
    Env,
    add_app_args,
    add_drafter_args,
    add_model_args,
    make_env,
    validate_args,
)
from specchat.errors import SpecchatError
from specchat.textsafe import safe_text


class Parser(argparse.ArgumentParser):
    """argparse with its errors on one line, like every other specchat error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {safe_text(message)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="specchat",
        description="Chat with local GGUF models, sped up by speculative decoding you can see.",
    )
    parser.add_argument("--version", action="version", version=f"specchat {__version__}")
    add_model_args(parser)
    add_drafter_args(parser)
    add_app_args(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    ask.add_parser(sub)
    models_cmd.add_parser(sub)
    bench_cmd.add_parser(sub)
    race_cmd.add_parser(sub)
    prove_cmd.add_parser(sub)
    doctor.add_parser(sub)
    serve_cmd.add_parser(sub)
    chats_cmd.add_parsers(sub)
    mcp_cmd.add_parser(sub)
    share_options(parser)
    return parser


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for p in dict.fromkeys(action.choices.values()):  # aliases name one parser
                yield p
                yield from _subparsers(p)


def share_options(parser: argparse.ArgumentParser) -> None:
    """Make an option that the top level and a subcommand both define one setting.

    argparse copies a subcommand's defaults over what was parsed before it, so
    ``specchat --model M ask hi`` would lose ``--model``. With the subcommand's default
    suppressed, the option means the same before or after the subcommand (after wins when both
    are given). Any option added to both places alike (same type, no default of its own) is
    shared: nothing to list here. One a subcommand defines its own way (bench's --temperature
    takes a list, prove's --gamma a number, bench's --max-tokens defaults to 128) stays its own.
    """
    top = {a.dest: a for a in parser._actions if a.dest not in (argparse.SUPPRESS, "help")
           and not isinstance(a, argparse._SubParsersAction)}
    for p in _subparsers(parser):
        for action in p._actions:
            mine = top.get(action.dest)
            if mine is not None and action.default is None and action.type == mine.type \
                    and type(action) is type(mine):
                action.default = argparse.SUPPRESS


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "pair", None) and getattr(args, "model", None):
        # One group per parser: given on either side of the subcommand, argparse sees no clash.
        parser.error("give --pair or --model, not both")
    env = make_env()
    func = getattr(args, "func", run_app)
    try:
        validate_args(args)
        code = int(func(env, args) or 0)
        sys.stdout.flush()  # a full disk shows here, not as a traceback at exit
        return code
    except SpecchatError as e:
        sys.stderr.write(f"specchat: error: {safe_text(str(e))}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("specchat: interrupted\n")
        return 130
    except BrokenPipeError:  # `specchat ... | head`: the reader has what it wanted
        _drop_stdout()
        return 0
    except OSError as e:
        if e.errno not in OUTPUT_ERRORS:
            raise
        _drop_stdout()
        where = f" {e.filename}" if e.filename else " to standard output"
        sys.stderr.write(f"specchat: error: cannot write{where}: {e.strerror or e}\n")
        return 1


# Writing output failed for want of room (or the device): a one-line error, not a traceback.
OUTPUT_ERRORS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EIO}


def _drop_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush at exit cannot fail again."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError):
        pass


def run_app(env: Env, args: argparse.Namespace) -> int:
    if args.draft and not args.model:  # before "needs a terminal": say what is wrong first
        raise SpecchatError("--draft needs --model (the target it drafts for), e.g. "
                            "specchat --model TARGET.gguf --draft DRAFT.gguf")
    from specchat.cli.app import launch  # Textual loads only when the app runs

    return launch(env, args)


if __name__ == "__main__":
    raise SystemExit(main())
