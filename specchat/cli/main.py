"""The ``specchat`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from specchat import __version__
from specchat.cli import ask, bench_cmd, chats_cmd, doctor, models_cmd, prove_cmd, race_cmd
from specchat.cli.common import Env, add_drafter_args, add_model_args, make_env
from specchat.errors import SpecchatError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specchat",
        description="Chat with local GGUF models, sped up by speculative decoding you can see.",
    )
    parser.add_argument("--version", action="version", version=f"specchat {__version__}")
    add_model_args(parser)
    add_drafter_args(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    ask.add_parser(sub)
    models_cmd.add_parser(sub)
    bench_cmd.add_parser(sub)
    race_cmd.add_parser(sub)
    prove_cmd.add_parser(sub)
    doctor.add_parser(sub)
    chats_cmd.add_parsers(sub)
    return parser


def run_app(env: Env, args: argparse.Namespace) -> int:
    from specchat.cli.app import launch  # Textual loads only when the app runs

    return launch(env, args)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    env = make_env()
    func = getattr(args, "func", run_app)
    try:
        return int(func(env, args) or 0)
    except SpecchatError as e:
        sys.stderr.write(f"specchat: error: {e}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("specchat: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
