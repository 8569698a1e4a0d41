#!/usr/bin/env bash
# End-to-end smoke test of the app in a real terminal: run `specchat --pair demo` inside tmux,
# type a question, wait for the reply, capture the pane and check what is on screen, type right
# after Ctrl+L and after a click in the transcript and check the text reached the message box,
# then quit and check the chat was saved.
#
#   scripts/tmux_smoke.sh [MODELS_DIR]
#
# MODELS_DIR holds the demo pair's files (SmolLM2-135M-Instruct.F32.gguf and .Q3_K_S.gguf);
# default: $SPECCHAT_TEST_MODELS/data/models, else .cache/test-models/data/models (where the
# test suite fetches them). They are linked into a temporary SPECCHAT_HOME, never copied.
# Prints the captured screen and "tmux smoke: OK" (exit 0), or what was missing (exit 1).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
models=${1:-${SPECCHAT_TEST_MODELS:-$repo/.cache/test-models}/data/models}
python=${PYTHON:-python}
question="Name three primary colours."
session="specchat-smoke-$$"
home=$(mktemp -d)
screen="$home/screen.txt"

cleanup() {
    tmux kill-session -t "$session" 2>/dev/null || true
    rm -rf "$home"
}
trap cleanup EXIT

command -v tmux >/dev/null || { echo "tmux smoke: tmux is not installed" >&2; exit 1; }
for f in SmolLM2-135M-Instruct.F32.gguf SmolLM2-135M-Instruct.Q3_K_S.gguf; do
    [[ -f "$models/$f" ]] || { echo "tmux smoke: $models/$f is missing (run the test suite" \
        "once, or pass the folder)" >&2; exit 1; }
done
mkdir -p "$home/data/models" "$home/config"
ln -s "$models"/SmolLM2-135M-Instruct.*.gguf "$home/data/models/"
# Greedy and short, so the check does not depend on sampling luck or machine speed.
printf 'sampling:\n  temperature: 0\n  max_tokens: 48\n' > "$home/config/config.yaml"

capture() { tmux capture-pane -p -t "$session" > "$screen"; }

wait_for() {  # wait_for REGEX SECONDS WHAT
    local deadline=$((SECONDS + $2))
    while (( SECONDS < deadline )); do
        capture
        if grep -Eq "$1" "$screen"; then return 0; fi
        sleep 0.5
    done
    echo "tmux smoke: FAILED waiting for $3; the screen was:" >&2
    cat "$screen" >&2
    exit 1
}

tmux new-session -d -s "$session" -x 120 -y 36 \
    "cd '$repo' && SPECCHAT_HOME='$home' $python -m specchat --pair demo; echo \"EXITED \$?\"; sleep 600"

wait_for "\^p palette|palette" 90 "the chat screen"
tmux send-keys -t "$session" "$question"
tmux send-keys -t "$session" Enter
# The summary line under a finished reply: "N tokens · X tok/s ...".
wait_for "[0-9]+ tokens · [0-9.]+ tok/s" 120 "the reply"
capture
cat "$screen"

fail=0
check() {  # check REGEX WHAT
    if ! grep -Eq "$1" "$screen"; then echo "tmux smoke: missing on screen: $2" >&2; fail=1; fi
}
check "You" "the user's label"
check "Name three primary colours" "the question"
check "Assistant" "the assistant's label"
check "tok/s" "the stats bar"
check "CPU|CUDA|Metal|Vulkan|GPU" "the backend"
check "SmolLM2 135M Instruct F32" "the target model's name"
check "Esc|esc" "the footer keys"
# The reply itself: the line after the "Assistant" header holds text.
reply=$(awk '/Assistant/ {getline; print; exit}' "$screen" | sed 's/[▎▊█│ ]//g')
[[ -n "$reply" ]] || { echo "tmux smoke: the reply is empty" >&2; fail=1; }

# Nothing typed is lost: right after Ctrl+L (hide, show: the chat list takes the focus) and
# right after a click in the transcript (an SGR mouse report, as a terminal sends), the text
# lands in the message box (its line starts with the box's edge, ▊).
tmux send-keys -t "$session" C-l C-l "typed after ctrl l"
wait_for "▊ typed after ctrl l" 10 "the text typed after Ctrl+L in the message box"
tmux send-keys -t "$session" C-a BSpace
tmux send-keys -t "$session" -l $'\e[<0;70;6M\e[<0;70;6m'
tmux send-keys -t "$session" "typed after a click"
wait_for "▊ typed after a click" 10 "the text typed after a click in the message box"
tmux send-keys -t "$session" C-a BSpace

tmux send-keys -t "$session" C-q
wait_for "EXITED 0" 30 "a clean exit"

export_md=$(SPECCHAT_HOME="$home" "$python" -m specchat export 1)
grep -q "^## You" <<<"$export_md" || { echo "tmux smoke: the question was not saved" >&2; fail=1; }
grep -q "^## Assistant" <<<"$export_md" || { echo "tmux smoke: the reply was not saved" >&2; fail=1; }

if (( fail )); then exit 1; fi
echo "tmux smoke: OK"
