"""llama.cpp's own tools as a reference measured in the same run: ``llama-speculative-simple``
(draft-model speculation, greedy) on the same prompts and γ, and ``llama-bench`` (plain
generation speed of each model)."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from specchat.errors import SpecchatError

_DECODED = re.compile(r"decoded\s+(\d+)\s+tokens in\s+([\d.]+)\s+seconds")
_ACCEPT = re.compile(r"accept\s+=\s+([\d.]+)%")
_DRAFTED = re.compile(r"n_drafted\s+=\s+(\d+)")
_ACCEPTED = re.compile(r"n_accept\s+=\s+(\d+)")
_ENCODED = re.compile(r"encoded\s+(\d+)\s+tokens")


@dataclass(frozen=True)
class SpecRun:
    tokens: int
    seconds: float
    drafted: int
    accepted: int
    prompt_tokens: int = 0

    @property
    def tok_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def tool(bin_dir: Path, name: str) -> Path:
    path = bin_dir / name
    if not path.is_file():
        raise SpecchatError(f"{name} not found in {bin_dir} (build llama.cpp's tools there, or "
                            "drop --llama-bin)")
    return path


def speculative_simple(bin_dir: Path, target: Path, draft: Path, prompt: str, gamma: int,
                       max_tokens: int, threads: int, n_ctx: int = 4096,
                       timeout: float = 900, attempts: int = 2) -> SpecRun:
    """One greedy run of ``llama-speculative-simple --spec-type draft-simple``.

    Seen here: with very fast (tiny) models the tool sometimes exits 0 before its asynchronous
    log printed the summary; such a run is repeated once.
    """
    for attempt in range(attempts):
        try:
            return _speculative_simple(bin_dir, target, draft, prompt, gamma, max_tokens,
                                       threads, n_ctx, timeout)
        except SpecchatError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def _speculative_simple(bin_dir: Path, target: Path, draft: Path, prompt: str, gamma: int,
                        max_tokens: int, threads: int, n_ctx: int, timeout: float) -> SpecRun:
    # -p, not -f: -f drops the file's final newline, which the chat template's generation
    # prompt ends with; --no-escape keeps backslashes in the prompt as they are.
    cmd = [str(tool(bin_dir, "llama-speculative-simple")), "-m", str(target), "-md", str(draft),
           "--spec-type", "draft-simple", "--spec-draft-n-max", str(gamma),
           "-p", prompt, "--no-escape", "-n", str(max_tokens), "--temp", "0",
           "-t", str(threads), "-c", str(n_ctx), "-ngl", "0", "-ngld", "0", "-s", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, errors="replace")
    log = out.stdout + out.stderr
    m = _DECODED.search(log)
    if out.returncode != 0 or not m:
        tail = " | ".join(log.strip().splitlines()[-3:])
        raise SpecchatError(f"llama-speculative-simple failed ({out.returncode}): {tail}")
    drafted = _DRAFTED.search(log)
    accepted = _ACCEPTED.search(log)
    encoded = _ENCODED.search(log)
    return SpecRun(int(m[1]), float(m[2]), int(drafted[1]) if drafted else 0,
                   int(accepted[1]) if accepted else 0, int(encoded[1]) if encoded else 0)


def llama_bench(bin_dir: Path, model: Path, n_gen: int, threads: int,
                repetitions: int = 3, timeout: float = 900) -> float:
    """Plain generation speed (tokens/s) of ``model`` for ``n_gen`` tokens (``-p 0 -n N``)."""
    cmd = [str(tool(bin_dir, "llama-bench")), "-m", str(model), "-p", "0", "-n", str(n_gen),
           "-t", str(threads), "-r", str(repetitions), "-ngl", "0", "-o", "json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, errors="replace")
    try:
        rows = json.loads(out.stdout)
        return float(next(r["avg_ts"] for r in rows if r.get("n_gen", 0) > 0))
    except (ValueError, StopIteration, KeyError, TypeError):
        tail = " | ".join((out.stdout + out.stderr).strip().splitlines()[-3:])
        raise SpecchatError(f"llama-bench failed ({out.returncode}): {tail}") from None
