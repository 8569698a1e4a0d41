"""Fuzz `specchat serve` with many generated request bodies (the suite runs 200).

Starts ``python -m specchat serve`` on two tiny models written for the run (random weights:
they load in milliseconds), sends N bodies from specchat.devtools.serve_fuzz_requests to 127.0.0.1, and
checks each answer (an OpenAI error object with a 4xx status, or a valid completion; the server
still healthy after it). Prints the answers by status and error code, and the first problems
found with their requests; exits 1 if there was any, or if the server logged a traceback.

    python scripts/fuzz_serve.py --examples 5000 [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's specchat (and its tests' server helper)

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402

from specchat.devtools.serve_fuzz_answers import Answer, health, problems, send  # noqa: E402
from specchat.devtools.serve_fuzz_requests import Request, requests  # noqa: E402
from specchat.devtools.tiny_models import TinySpec, write_tiny_model  # noqa: E402
from tests.serve_helpers import ServerProcess, raw, wait_until  # noqa: E402

MAX_BODY = 64 * 1024


def kind(answer: Answer) -> str:
    if answer.status == 200:
        return "200 " + ("stream" if answer.content_type.startswith("text/event") else "whole")
    try:
        return f"{answer.status} {json.loads(answer.body)['error']['code']}"
    except (ValueError, KeyError, TypeError):
        return f"{answer.status} (not an error object)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=2000, help="bodies to send (2000)")
    ap.add_argument("--seed", type=int, help="hypothesis seed (default: a random one)")
    ap.add_argument("--minutes", type=float, default=30.0, help="stop after this long (30)")
    args = ap.parse_args()
    seen: Counter[str] = Counter()
    found: list[str] = []
    deadline = time.monotonic() + args.minutes * 60
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        target = write_tiny_model(d / "target.gguf", TinySpec(seed=1), name="tiny-target")
        draft = write_tiny_model(d / "draft.gguf", TinySpec(seed=2), noise_from=TinySpec(seed=1),
                                 noise=0.6, name="tiny-draft")
        server = ServerProcess(d / "home", "--model", str(target), "--draft", str(draft),
                               "--gamma", "3", "--ctx-size", "256", "--max-tokens", "4",
                               "--max-body-mb", str(MAX_BODY / (1024 * 1024)))
        url = server.url or ""
        try:
            wait_until(lambda: raw(url, "GET", "/health")[0] == 200, "the load")

            # No shrinking and no stop at the first problem: a tally of everything sent.
            @settings(max_examples=args.examples, deadline=None, database=None,
                      phases=[Phase.generate], suppress_health_check=list(HealthCheck))
            @given(request=requests(MAX_BODY))
            def one(request: Request) -> None:
                if time.monotonic() > deadline:
                    return
                answer = send(url, request)
                seen[kind(answer)] += 1
                wrong = problems(answer, request)
                status, doc = health(url)
                if status != 200 or doc["queued"]:
                    wrong.append(f"unhealthy after it: {status} {doc}")
                if wrong and len(found) < 20:
                    found.append(f"{request!r}\n    -> {'; '.join(wrong)}")

            if args.seed is not None:
                one = __import__("hypothesis").seed(args.seed)(one)
            started = time.monotonic()
            one()
            took = time.monotonic() - started
        finally:
            server.stop()
    print(f"{sum(seen.values())} requests in {took:.0f} s; answers by status and code:")
    for what, n in seen.most_common():
        print(f"  {n:6d}  {what}")
    tracebacks = server.stderr.count("Traceback")
    for f in found:
        print("PROBLEM:", f)
    if tracebacks:
        print(f"the server logged {tracebacks} traceback(s); the last part of its log:")
        print(server.stderr[-4000:])
    print("OK" if not found and not tracebacks else "FAILED")
    return 0 if not found and not tracebacks else 1


if __name__ == "__main__":
    raise SystemExit(main())
