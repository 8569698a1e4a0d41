#!/usr/bin/env python
"""Save an SVG screenshot of the chat screen after a real reply (for the README / assets).

Runs the app headless on a pair (default: demo) from a models folder, asks one question,
waits for the reply, switches to the token-fate view with rejected drafts shown, and saves
the screen:

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
        chat.send_text(QUESTION)
        while chat.job is not None:
            await asyncio.sleep(0.2)
        await pilot.press("ctrl+r")  # token view, rejected drafts shown
        await pilot.pause(0.5)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        app.save_screenshot(args.out.name, path=str(args.out.parent))
    services.store.close()
    print(f"wrote {args.out}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", default="demo")
    p.add_argument("--out", type=Path, default=REPO / "assets" / "chat-screen.svg")
    p.add_argument("--width", type=int, default=120)
    p.add_argument("--height", type=int, default=36)
    p.add_argument("--models", type=Path, default=default_models_dir())
    args = p.parse_args()
    with linked_home(args.models, "sampling:\n  temperature: 0\n  max_tokens: 120\n"):
        asyncio.run(shoot(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
