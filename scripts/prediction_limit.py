"""A predicted output against its physical limit on this machine: renaming a variable in a
40-line function, with the function as the prediction.

On one loaded pair (qwen-coder by default), greedy: each round runs the edit plainly and with
the function as the prediction (the defaults otherwise: the planner, prompt lookup and the
draft model beside it), the order alternating, and prints decode tokens per second and their
ratio. Then it times the target's verify curve on this machine — a pass over n = 1..32 tokens
with logits on every row, the fastest of three — and prints the physical limit: the speed-up
over plain if every check were right, max over n of n·T(1)/T(n) (a check of n tokens commits
n of them), and the run's ratio to it. Outputs are checked equal.

    python scripts/prediction_limit.py --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's specchat, not another one installed

from specchat.engine.decode.chat import ChatEngine  # noqa: E402
from specchat.engine.decode.decoding import run_to_end  # noqa: E402
from specchat.engine.decode.messages import Message  # noqa: E402
from specchat.engine.decode.sampling import SamplerSettings  # noqa: E402
from specchat.engine.llama.model_settings import ContextSettings  # noqa: E402
from specchat.engine.policy.costs import verify_costs  # noqa: E402
from specchat.loading import RuntimeOptions, select  # noqa: E402
from specchat.models.catalog import load_catalog  # noqa: E402
from specchat.models.resolver import ModelResolver  # noqa: E402
from specchat.paths import app_paths  # noqa: E402
from specchat.runtime.opening import Runtime  # noqa: E402

FUNCTION = '''def summarize_orders(orders, tax_rate, discount_codes):
    """Totals per customer, with tax, after the best discount each order qualifies for."""
    totals = {}
    for order in orders:
        customer = order["customer"]
        subtotal = 0.0
        for item in order["items"]:
            price = item["price"]
            quantity = item.get("quantity", 1)
            if quantity <= 0:
                raise ValueError(f"bad quantity in order {order['id']}")
            subtotal += price * quantity
        best = 0.0
        for code in order.get("codes", []):
            rule = discount_codes.get(code)
            if rule is None:
                continue
            if rule["kind"] == "percent":
                saving = subtotal * rule["value"] / 100
            elif rule["kind"] == "fixed":
                saving = min(rule["value"], subtotal)
            else:
                raise ValueError(f"unknown discount kind {rule['kind']}")
            best = max(best, saving)
        subtotal -= best
        tax = subtotal * tax_rate
        totals.setdefault(customer, 0.0)
        totals[customer] += subtotal + tax
    report = []
    for customer, total in sorted(totals.items()):
        report.append({"customer": customer, "total": round(total, 2)})
    grand = sum(entry["total"] for entry in report)
    if grand < 0:
        raise ValueError("negative grand total")
    return {
        "customers": report,
        "grand_total": round(grand, 2),
        "orders": len(orders),
    }
'''
PROMPT = ("Rename the variable `subtotal` to `order_amount` everywhere in this function. "
          "Reply with the whole function only, in a code block.\n\n```python\n" + FUNCTION
          + "```")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", default="qwen-coder")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=600)
    a = ap.parse_args()
    cat = load_catalog()
    res = ModelResolver(cat, app_paths())
    opts = RuntimeOptions(context=ContextSettings(n_ctx=4096, n_threads=a.threads))
    rt = Runtime.open(select(cat, pair=a.pair), res, opts, fetch=False)
    tc = rt.target_ctx
    plain = rt.decoder(plain=True)
    spec = rt.decoder(prediction=True)  # one decoder across rounds, as a server's
    prompt = ChatEngine(plain).tokenize_chat([Message("user", PROMPT)])
    predicted = tuple(rt.target.tokenize("```python\n" + FUNCTION + "```",
                                         add_special=False, parse_special=False))
    s = SamplerSettings(temperature=0, max_tokens=a.max_tokens)
    ratios, plain_tps, pred_tps = [], [], []
    kept = drafted = 0
    print(f"{rt.selection.label}: rename in a {FUNCTION.count(chr(10))}-line function, greedy, "
          f"{a.threads} threads; prediction {len(predicted)} tokens")
    for r in range(a.rounds):
        runs = {}
        for name in (("plain", "prediction") if r % 2 == 0 else ("prediction", "plain")):
            tc.clear()  # each run reads the prompt itself
            if rt.draft_ctx is not None:
                rt.draft_ctx.clear()
            dec, st = (plain, s) if name == "plain" else (spec, s.with_(prediction=predicted))
            runs[name] = run_to_end(dec, prompt, st, threading.Event())
        p, q = runs["plain"], runs["prediction"]
        if p.tokens != q.tokens:
            print("  note: outputs differ (batched and single-token logits differ slightly on "
                  "a CPU, and a near-tie can flip)")
        tp = (p.stats.generated_tokens - 1) / p.stats.decode_s
        tq = (q.stats.generated_tokens - 1) / q.stats.decode_s
        plain_tps.append(tp)
        pred_tps.append(tq)
        ratios.append(tq / tp)
        d = q.stats.detail
        kept += d.accepted_by_drafter.get("prediction", 0)
        drafted += d.drafted_by_drafter.get("prediction", 0)
        print(f"round {r + 1}: plain {tp:.1f} tok/s · prediction {tq:.1f} tok/s "
              f"({tq / tp:.2f}×) · {q.stats.generated_tokens} tokens in {q.stats.steps} steps, "
              f"by drafter {dict(d.steps_by_drafter)}", flush=True)
    # The verify curve, on the reply's own tokens after the prompt.
    tc.clear()
    reply = runs["plain"].tokens
    table = verify_costs(tc, prompt, (reply * 2)[:32], 32)
    best_n = max(range(1, 33), key=lambda n: n * table[0] / table[n - 1])
    limit = best_n * table[0] / table[best_n - 1]
    ratio = statistics.median(ratios)
    print("verify curve (ms): " + " ".join(f"{n}:{table[n - 1] * 1000:.0f}"
                                           for n in (1, 2, 4, 8, 16, 32)))
    print(f"physical limit: {limit:.2f}× plain (every check right, {best_n} tokens a check)")
    print(f"prediction: median {ratio:.2f}× plain over {a.rounds} rounds = {ratio / limit:.2f} "
          f"of the limit; prediction tokens kept {kept} of {drafted} drafted")
    rt.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
