"""A tiny model that replies with terminal escape sequences, for the terminal-safety tests.

Its reply is made only of two tokens: ``ESC]0;PWNED BEL`` (would rename the terminal) and
``ESC]52;c;UFdORUQ= BEL`` (would write "PWNED" to the clipboard, OSC 52). Their output rows are
``+v`` and ``-v`` and every other row is zero, so for any hidden state one of the two has the
highest logit: every sampled token is one of them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specchat.devtools.tiny_models import TinySpec, vocabulary, write_tiny_model

TITLE = "\x1b]0;PWNED\x07"  # OSC 0: set the window/pane title
CLIPBOARD = "\x1b]52;c;UFdORUQ=\x07"  # OSC 52: set the clipboard to base64("PWNED")
HOSTILE = (TITLE, CLIPBOARD)


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte-level BPE alphabet: how a token's bytes are spelled in a GGUF vocab."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {b: chr(b) for b in printable}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


def bpe_spelling(text: str) -> str:
    chars = _byte_chars()
    return "".join(chars[b] for b in text.encode("utf-8"))


def write_hostile_model(path: Path | str, seed: int = 7) -> Path:
    tokens = vocabulary() + [bpe_spelling(t) for t in HOSTILE]
    first = len(tokens) - len(HOSTILE)

    def only_hostile(w: dict[str, np.ndarray]) -> None:
        out = w["output.weight"]
        v = np.random.default_rng(seed).standard_normal((out.shape[1],)).astype(np.float32)
        out[:] = 0.0
        out[first] = v * 4.0
        out[first + 1] = -v * 4.0

    return write_tiny_model(path, TinySpec(seed=seed), tokens=tokens, name="hostile\x1b]0;PWNED\x07",
                            weights_hook=only_hostile)
