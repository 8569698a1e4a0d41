"""llama.cpp's AMX kernels, tried in a child process before a model uses them.

A llama.cpp build compiled on a CPU with Intel AMX (Xeon Sapphire Rapids and later) repacks
the weights of quantized models for its AMX kernels. On some machines those kernels die with an
illegal instruction at the first batch of tokens (seen on a virtual machine whose CPU reports
AMX; llama.cpp pull request 26954 describes the tile state the kernels fail to set up). An
illegal instruction kills the whole process with no message, so before a model is loaded for
the first time, a child process loads it the same way and decodes a batch. If the child dies,
models load without llama.cpp's extra buffer types (the AMX kernels and weight repacking):
slower on the CPU, but working. The verdict is kept per llama.cpp build and handed to child
processes in ``SPECCHAT_AMX``, which a user may also set (``on`` or ``off``).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Collection
from pathlib import Path

import llama_cpp

from specchat.paths import app_paths

ENV = "SPECCHAT_AMX"
PROBE_TOKENS = 32  # a batch this long runs the matrix kernels that crashed
PROBE_TIMEOUT_S = 120.0
_CACHE_NAME = "amx-verdict.json"
# The weight types llama.cpp's AMX kernels take (enum ggml_type): Q4_0, Q4_1, Q8_0, Q4_K, Q5_K,
# Q6_K, IQ4_XS. A model without any of them never reaches the kernels.
AMX_TYPES = frozenset({2, 3, 8, 12, 13, 14, 23})
# The child prints one of these on its last line.
UNUSED, WORKS = "unused", "works"

_lock = threading.Lock()
_verdict: bool | None = None  # this process's: may models use the extra buffer types?
_note: str | None = None


def build_has_amx() -> bool:
    """Whether this llama.cpp build has AMX kernels for this CPU (its system info says so)."""
    info = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace")
    return "AMX_INT8 = 1" in info


def build_id() -> str:
    """Names this llama.cpp build: the CPU library's path, size and time (a rebuild changes it)."""
    lib = Path(llama_cpp.__file__).parent / "lib"
    parts = [llama_cpp.__version__]
    for f in sorted(lib.glob("libggml-cpu*")):
        st = f.stat()
        parts.append(f"{f.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def note() -> str | None:
    """What a user should hear about the check, once it found the kernels crash (else None)."""
    return _note


def extra_buffers_allowed(model_path: Path | str,
                          weight_types: Collection[int] | None = None) -> bool:
    """Whether ``model_path`` may load with llama.cpp's extra buffer types (AMX, repacking).

    True at once on a build without AMX kernels, for a model whose ``weight_types`` (its
    tensors' ggml types, when known) the kernels do not take, or when ``SPECCHAT_AMX`` or an
    earlier check decided; otherwise a child process tries the model (a second or two, once
    per build)."""
    global _verdict, _note
    forced = os.environ.get(ENV, "").strip().lower()
    if forced in ("on", "off"):
        return forced == "on"
    if _verdict is not None:
        return _verdict
    if weight_types is not None and not AMX_TYPES.intersection(weight_types):
        return True  # (unit tests' F32 models: no child process per load)
    if not build_has_amx():
        return True
    with _lock:
        if _verdict is not None:
            return _verdict
        key = build_id()
        cached = _read_cache(key)
        if cached is None:
            outcome = probe(model_path)
            if outcome is None:  # this model has nothing for the AMX kernels: ask again later
                return True
            cached = outcome
            _write_cache(key, cached)
        _verdict = cached
        os.environ[ENV] = "on" if cached else "off"  # child processes need not ask again
        if not cached:
            _note = ("llama.cpp's AMX kernels crash on this machine, so models load without "
                     "them and without weight repacking (which can be slower). Reinstalling "
                     "llama-cpp-python built without them (CMAKE_ARGS=\"-DGGML_NATIVE=OFF "
                     "-DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON\") brings the repacking back.")
        return cached


def probe(model_path: Path | str, command: list[str] | None = None) -> bool | None:
    """Run the child: True (the kernels work), False (it died: they crash here) or None (the
    model puts no weights in the AMX buffer, so this model says nothing about them).
    ``command`` replaces the child's command line (tests)."""
    cmd = command or [sys.executable, "-m", "specchat.engine.llama.amx", str(model_path)]
    env = {**os.environ}
    env.pop(ENV, None)
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                             env=env, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None  # no verdict: leave llama.cpp's defaults alone
    if out.returncode < 0 and -out.returncode in (signal.SIGILL, signal.SIGSEGV, signal.SIGBUS):
        return False
    last = out.stdout.strip().splitlines()[-1:] if out.stdout.strip() else []
    if out.returncode == 0 and last == [WORKS]:
        return True
    return None  # UNUSED, or a failure of its own (an unreadable file): the load will say


def _cache_file() -> Path:
    return app_paths().cache_dir / _CACHE_NAME


def _read_cache(key: str) -> bool | None:
    try:
        d = json.loads(_cache_file().read_text())
        value = d.get(key) if isinstance(d, dict) else None
    except (OSError, ValueError):
        return None
    return value if isinstance(value, bool) else None


def _write_cache(key: str, value: bool) -> None:
    path = _cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({key: value}))
        tmp.replace(path)
    except OSError:
        pass  # a cache that cannot be written costs a check next time, nothing else


def _child(path: str) -> str:
    """Load ``path`` with the extra buffer types and decode a batch (crashes where they do).

    llama.cpp's own API, not LlamaModel: that would ask this check again, in a child of its own."""
    from specchat.engine.llama.llama_lib import capture_log, ensure_backend

    ensure_backend()
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0
    with capture_log() as lines:
        model = llama_cpp.llama_model_load_from_file(path.encode(), params)
    if not model:
        raise SystemExit(2)
    if not any("AMX" in line and "buffer size" in line for line in lines):
        return UNUSED
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx = 2 * PROBE_TOKENS
    cparams.n_batch = PROBE_TOKENS
    cparams.n_threads = cparams.n_threads_batch = max(1, min(4, os.cpu_count() or 1))
    ctx = llama_cpp.llama_init_from_model(model, cparams)
    if not ctx:
        raise SystemExit(2)
    vocab = llama_cpp.llama_model_get_vocab(model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    batch = llama_cpp.llama_batch_init(PROBE_TOKENS, 0, 1)
    for i in range(PROBE_TOKENS):
        batch.token[i] = (i * 7919 + 13) % n_vocab
        batch.pos[i] = i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = 1
    batch.n_tokens = PROBE_TOKENS
    if llama_cpp.llama_decode(ctx, batch) != 0:
        raise SystemExit(2)
    return WORKS


if __name__ == "__main__":
    print(_child(sys.argv[1]), flush=True)
