#!/usr/bin/env python
"""Save an SVG screenshot of the chat screen mid-reply (for the README / assets).

Runs the app headless on a pair (default: demo) from a models folder, asks one question and,
once the reply has streamed ``--at-tokens`` tokens, shows the rejected drafts and saves the
screen while the reply is still being written: tokens coloured by their fate (accepted,
corrected, bonus, rejected) and the stats bar live. γ is fixed (``--gamma``, default 3) so
that the screenshot shows drafting: on a CPU the default planner mostly decodes plainly on
prose, which would leave nothing to colour.

    python scripts/screenshot_app.py [--pair demo] [--out assets/chat-screen.svg]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's specchat, whatever else is installed

from specchat.devtools.demo_home import default_models_dir, linked_home  # noqa: E402

QUESTION = "Name the three primary colours and say one thing about each."


async def shoot(args: argparse.Namespace) -> None:
    from specchat.cli.app import build_services
    from specchat.cli.common import make_env
    from specchat.ui.app import SpecchatApp
    from specchat.ui.screens.chat import ChatScreen

    cli = argparse.Namespace(pair=args.pair, model=None, ctx_size=None, threads=None,
                             gpu_layers=None)
    services = build_services(make_env(), cli)
    app = SpecchatApp(services)
    async with app.run_test(size=(args.width, args.height)) as pilot:
        while not (isinstance(app.screen, ChatScreen) and app.screen.is_mounted):
            await asyncio.sleep(0.1)
        await pilot.pause()
        chat = app.screen
        chat.replies.send_text(QUESTION)
        while chat.job is not None and chat.stats_bar.stats.tokens < args.at_tokens:
            await asyncio.sleep(0.05)
        if chat.job is None:
            raise SystemExit(f"the reply ended before {args.at_tokens} tokens: lower --at-tokens")
        await pilot.press("ctrl+r")  # rejected drafts shown, mid-reply
        await pilot.pause(0.2)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        app.save_screenshot(args.out.name, path=str(args.out.parent))
        await pilot.press("escape")  # stop the reply; what was written is kept
        while chat.job is not None:
            await asyncio.sleep(0.1)
    services.store.close()
    print(f"wrote {args.out}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", default="demo")
    p.add_argument("--out", type=Path, default=REPO / "assets" / "chat-screen.svg")
    p.add_argument("--width", type=int, default=120)
    p.add_argument("--height", type=int, default=36)
    p.add_argument("--models", type=Path, default=default_models_dir())
    p.add_argument("--gamma", type=int, default=3, help="draft length (fixed, so it drafts)")
    p.add_argument("--at-tokens", type=int, default=70, help="shoot once this many tokens came")
    args = p.parse_args()
    config = f"gamma: {args.gamma}\nauto_calibrate: false\nsampling:\n  temperature: 0\n  max_tokens: 160\n"
    with linked_home(args.models, config):
        asyncio.run(shoot(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
