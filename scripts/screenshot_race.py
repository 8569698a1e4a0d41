#!/usr/bin/env python
"""Save an SVG screenshot of a finished race on a real pair (docs/performance.md shows it).

Runs the app headless on a pair (default: demo) from a models folder, opens the race screen
on a built-in prompt (greedy), waits for the recording and the real-time replay to finish,
saves the screen and prints the figures it shows:

    python scripts/screenshot_race.py [--pair demo] [--prompt-from code] [--threads 1]
                                      [--out assets/race-demo.svg]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's specchat, whatever else is installed

from specchat.devtools.demo_home import default_models_dir, linked_home  # noqa: E402


async def shoot(args: argparse.Namespace) -> None:
    from specchat.cli.app import build_services
    from specchat.cli.common import make_env
    from specchat.engine.decode.sampling import SamplerSettings
    from specchat.race.prompts import prompt_from
    from specchat.race.runner import RaceSetup
    from specchat.ui.app import SpecchatApp
    from specchat.ui.screens.race import RaceScreen

    cli = argparse.Namespace(pair=args.pair, model=None, ctx_size=None, threads=args.threads,
                             gpu_layers=None)
    services = build_services(make_env(), cli)
    prompt = prompt_from(args.prompt_from)
    setup = RaceSetup(prompt.text, SamplerSettings(temperature=0, seed=1,
                                                   max_tokens=args.max_tokens),
                      services.config.system_prompt or None, prompt.category)
    app = SpecchatApp(services, race=setup)
    async with app.run_test(size=(args.width, args.height)) as pilot:
        while not (isinstance(app.screen, RaceScreen) and app.screen.state in ("done", "failed")):
            await asyncio.sleep(0.2)
        await pilot.pause(0.5)
        screen = app.screen
        args.out.parent.mkdir(parents=True, exist_ok=True)
        app.save_screenshot(args.out.name, path=str(args.out.parent))
        result = screen.result
        if result is None:
            print("the race failed:", screen.query_one("#race-summary").render())
        else:
            print("\n".join(result.summary_lines()))
            if args.report:
                from specchat.report.race_report import write_race_report

                print("report:", write_race_report(result, args.report).markdown)
    services.store.close()
    print(f"wrote {args.out}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", default="demo")
    p.add_argument("--prompt-from", default="code")
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=REPO / "assets" / "race-demo.svg")
    p.add_argument("--report", type=Path, help="also write the race's report to this folder")
    p.add_argument("--width", type=int, default=140)
    p.add_argument("--height", type=int, default=40)
    p.add_argument("--models", type=Path, default=default_models_dir())
    args = p.parse_args()
    with linked_home(args.models):
        asyncio.run(shoot(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
