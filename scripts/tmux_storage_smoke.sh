#!/usr/bin/env bash
# The chat database failing under the real app in a real terminal (tmux), on the demo pair:
#   1. disk full: SPECCHAT_HOME on a 3 MB tmpfs, filled up between two messages: the app says
#      "not saved yet", keeps the reply, and saves it once space is freed;
#   2. kill -9 mid-reply: the reply is in the database up to its last checkpoint, "interrupted";
#   3. a damaged database: the next start keeps it aside, repairs, and says so.
# Needs root (mount) and the demo pair's files (see tmux_smoke.sh).
#
#   sudo scripts/tmux_storage_smoke.sh [MODELS_DIR]
#
# Prints "tmux storage smoke: OK" (exit 0), or what was missing and the screen (exit 1).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
models=${1:-${SPECCHAT_TEST_MODELS:-$repo/.cache/test-models}/data/models}
python=${PYTHON:-python}
session="specchat-storage-$$"
home=$(mktemp -d)
screen="$home.screen.txt"

cleanup() {
    tmux kill-session -t "$session" 2>/dev/null || true
    umount -l "$home" 2>/dev/null || true
    rm -rf "$home" "$screen"
}
trap cleanup EXIT

command -v tmux >/dev/null || { echo "tmux storage smoke: tmux is not installed" >&2; exit 1; }
mount -t tmpfs -o size=3m tmpfs "$home" || { echo "tmux storage smoke: cannot mount a tmpfs" \
    "(run as root)" >&2; exit 1; }
mkdir -p "$home/data/models" "$home/config"
ln -s "$models"/SmolLM2-135M-Instruct.*.gguf "$home/data/models/"
printf 'sampling:\n  temperature: 0\n  max_tokens: 48\n' > "$home/config/config.yaml"

capture() { tmux capture-pane -p -t "$session" > "$screen"; }
wait_for() {  # wait_for REGEX SECONDS WHAT
    local deadline=$((SECONDS + $2))
    while (( SECONDS < deadline )); do
        capture
        if grep -Eq "$1" "$screen"; then return 0; fi
        sleep 0.5
    done
    echo "tmux storage smoke: FAILED waiting for $3; the screen was:" >&2
    cat "$screen" >&2
    exit 1
}
start() {
    tmux kill-session -t "$session" 2>/dev/null || true
    tmux new-session -d -s "$session" -x 120 -y 36 \
        "cd '$repo' && SPECCHAT_HOME='$home' exec $python -m specchat --pair demo --threads 1"
    wait_for "palette" 120 "the chat screen"
}
ask() { tmux send-keys -t "$session" "$1"; tmux send-keys -t "$session" Enter; }
specchat() { (cd "$repo" && SPECCHAT_HOME="$home" $python -m specchat "$@"); }

# 1. disk full
start
ask "Name three primary colours."
wait_for "[0-9]+ tokens · [0-9.]+ tok/s" 120 "the first reply"
dd if=/dev/zero of="$home/ballast" bs=4k 2>/dev/null || true  # the disk is full now
ask "And three secondary colours?"
wait_for "not saved yet" 120 "the 'not saved' mark"
wait_for "disk is full" 30 "the notice"
rm "$home/ballast"
wait_for "saved again" 30 "the retry"
tmux send-keys -t "$session" C-q
sleep 3
specchat chats | grep -Eq " 4  demo" || { echo "tmux storage smoke: not 4 messages saved" >&2; exit 1; }

# 2. kill -9 mid-reply
printf 'sampling:\n  temperature: 0\n  max_tokens: 400\n' > "$home/config/config.yaml"
start
tmux send-keys -t "$session" C-n
ask "Write a long story about a robot."
wait_for "generating" 60 "the long reply"
sleep 4
kill -9 "$(tmux list-panes -t "$session" -F '#{pane_pid}')"
sleep 1
specchat export 2 | grep -q "## Assistant (interrupted)" \
    || { echo "tmux storage smoke: no interrupted reply after kill -9" >&2; exit 1; }

# 3. a damaged database
$python - "$home/data/chats.sqlite3" <<'PY'
import sqlite3, sys
path = sys.argv[1]
c = sqlite3.connect(path)
c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
root = c.execute("SELECT rootpage FROM sqlite_master WHERE name = 'messages'").fetchone()[0]
size = c.execute("PRAGMA page_size").fetchone()[0]
c.close()
with open(path, "r+b") as f:
    f.seek((root - 1) * size)
    f.write(b"\xde\xad" * (size // 2))
PY
start
wait_for "history was damaged" 30 "the repair notice"
ls "$home/data" | grep -q "chats.sqlite3.damaged-" \
    || { echo "tmux storage smoke: the damaged file was not kept" >&2; exit 1; }
tmux send-keys -t "$session" C-q
sleep 2
echo "tmux storage smoke: OK"
