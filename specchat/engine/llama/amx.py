"""llama.cpp's AMX kernels, tried in a child process before a model uses them.

A llama.cpp build compiled on a CPU with Intel AMX (Xeon Sapphire Rapids and later) repacks
the weights of quantized models for its AMX kernels. On some machines those kernels die with an
illegal instruction at the first batch of tokens (seen on a virtual machine whose CPU reports
AMX; llama.cpp pull request 26954 describes the tile state the kernels fail to set up). An
illegal instruction kills the whole process with no message, so before a model is loaded for
the first time, a child process loads it the same way and decodes a batch. If the child dies,
models load without the AMX kernels but with llama.cpp's weight repacking for its AVX-512/AVX2
kernels (see :mod:`cpu_kernels`); a second child checks that load on the model first, and
only if it dies too do models load on the plain kernels. The verdicts are kept per llama.cpp
build (the repacked load's per set of weights). The AMX one is handed to child processes in
``SPECCHAT_AMX``, which a user may also set (``on`` or ``off``).
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

from specchat.engine.llama import cpu_kernels
from specchat.engine.llama.cpu_kernels import Kernels
from specchat.formats.gguf_file import GgufHeader
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
REPACK_FLAG = "--repack"  # the child loads the model as the "repack" choice does
REBUILD_ADVICE = ("Reinstalling llama-cpp-python built without AMX (CMAKE_ARGS=\"-DGGML_NATIVE=OFF "
                  "-DGGML_AVX2=ON -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON\") may bring them back.")

_lock = threading.Lock()
_verdict: bool | None = None  # this process's: may models use the AMX kernels?
_repack: dict[str, bool] = {}  # this process's verdicts on repacked loads, by Kernels.digest
_note: str | None = None


def build_has_amx() -> bool:
    """Whether this llama.cpp build offers its AMX buffer type on this CPU (its CPU device's
    extra buffer types say so; its system info where those cannot be read)."""
    names = [name for name, _ in cpu_kernels.extra_buffer_types()]
    if names:
        return cpu_kernels.AMX_NAME in names
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


def kernels_for(model_path: Path | str, header: GgufHeader, n_gpu_layers: int = 0) -> Kernels:
    """The CPU kernels ``model_path`` (read as ``header``) loads for, and why: llama.cpp's own
    choice where AMX works or is absent, its weight repacking without AMX where the AMX kernels
    crash, the plain kernels where ``SPECCHAT_REPACK=off`` or the repacked load crashes too.
    ``n_gpu_layers``: the layers the load offloads (their weights are not the CPU's)."""
    simd = cpu_kernels.simd_label(cpu_kernels.cpu_features())
    if cpu_kernels.repack_off():
        return Kernels("plain", "plain", f"{cpu_kernels.REPACK_ENV}=off")
    if not build_has_amx():
        return Kernels("default", f"llama.cpp's choice: repacked {simd} where its kernels take "
                                  "the weights", "this build has no AMX kernels for this CPU")
    types = {t.ggml_type for t in header.tensors}
    if amx_allowed(model_path, types):
        if not AMX_TYPES.intersection(types):
            return Kernels("default", "llama.cpp's choice", "no weights for the AMX kernels")
        forced = os.environ.get(ENV, "").strip().lower() == "on" and _verdict is None
        return Kernels("default", "AMX (llama.cpp's choice)",
                       "SPECCHAT_AMX=on, unchecked" if forced
                       else "the AMX kernels work on this machine (checked)")
    plan = cpu_kernels.repacked_plan(header, n_gpu_layers)
    crash = ("SPECCHAT_AMX=off" if _verdict is None
             else "the AMX kernels crash on this machine (checked)")
    if not plan:
        return Kernels("plain", "plain, AMX left out",
                       f"{crash}; none of these weights have repacked {simd} kernels")
    chosen = Kernels("repack", f"repacked {simd}, AMX left out (as a build without AMX)", crash,
                     tuple(plan))
    if not repack_allowed(model_path, chosen, n_gpu_layers):
        return Kernels("plain", "plain, AMX left out",
                       f"{crash}, and so does the repacked load (checked)")
    return chosen


def amx_allowed(model_path: Path | str, weight_types: Collection[int] | None = None) -> bool:
    """Whether ``model_path`` may load with llama.cpp's AMX kernels.

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
                     "them, with weight repacking kept for the other CPU kernels.")
        return cached


def repack_allowed(model_path: Path | str, chosen: Kernels, n_gpu_layers: int = 0) -> bool:
    """Whether the repacked load ``chosen`` works: a child process loads ``model_path`` that
    way and decodes a batch (once per build and set of weights). A child without a verdict (a
    failure of its own) means the plain kernels this time, and a check next time."""
    global _note
    digest = chosen.digest()
    with _lock:
        if digest in _repack:
            return _repack[digest]
        key = f"{build_id()}:repack:{digest}"
        verdict = _read_cache(key)
        if verdict is None:
            verdict = probe(model_path, repack=True, n_gpu_layers=n_gpu_layers)
            if verdict is not None:
                _write_cache(key, verdict)
        works = verdict is True
        _repack[digest] = works
        if verdict is False:
            _note = ("llama.cpp's AMX kernels crash on this machine, and so did its weight "
                     "repacking without them: models load on the plain CPU kernels (slower). "
                     + REBUILD_ADVICE)
        return works


def probe(model_path: Path | str, command: list[str] | None = None, *, repack: bool = False,
          n_gpu_layers: int = 0) -> bool | None:
    """Run the child: True (the kernels work), False (it died: they crash here) or None (the
    model puts no weights in the AMX buffer, so this model says nothing about them). With
    ``repack`` the child loads the model as the "repack" choice does, for ``n_gpu_layers``.
    ``command`` replaces the child's command line (tests)."""
    cmd = command or [sys.executable, "-m", "specchat.engine.llama.amx", str(model_path)]
    if repack and command is None:
        cmd += [REPACK_FLAG, str(n_gpu_layers)]
    env = {**os.environ}
    env.pop(ENV, None)
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                             env=env, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None  # no verdict: leave llama.cpp's defaults alone
    if out.returncode < 0 and -out.returncode in (signal.SIGILL, signal.SIGSEGV, signal.SIGBUS,
                                                   signal.SIGABRT):
        return False
    last = out.stdout.strip().splitlines()[-1:] if out.stdout.strip() else []
    if out.returncode == 0 and last == [WORKS]:
        return True
    return None  # UNUSED, or a failure of its own (an unreadable file): the load will say


def _cache_file() -> Path:
    return app_paths().cache_dir / _CACHE_NAME


def _read_all() -> dict[str, object]:
    try:
        d = json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}
    return d if isinstance(d, dict) else {}


def _read_cache(key: str) -> bool | None:
    value = _read_all().get(key)
    return value if isinstance(value, bool) else None


def _write_cache(key: str, value: bool) -> None:
    """Keep ``key``'s verdict with the others of the same build (another build's go)."""
    path = _cache_file()
    build = key.split(":", 1)[0]
    kept = {k: v for k, v in _read_all().items() if k.split(":", 1)[0] == build}
    kept[key] = value
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(kept))
        tmp.replace(path)
    except OSError:
        pass  # a cache that cannot be written costs a check next time, nothing else


def _child(path: str, repack_gpu_layers: int | None = None) -> str:
    """Load ``path`` with the AMX kernels (or, given ``repack_gpu_layers``, as the "repack"
    choice loads it) and decode a batch: it crashes where those kernels do.

    llama.cpp's own API, not LlamaModel: that would ask this check again, in a child of its own."""
    from specchat.engine.llama.llama_lib import capture_log, ensure_backend
    from specchat.formats.gguf_file import read_header

    ensure_backend()
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0
    overrides = None
    if repack_gpu_layers is not None:
        plan = cpu_kernels.repacked_plan(read_header(path, token_texts=False), repack_gpu_layers)
        overrides = Kernels("repack", "", "", tuple(plan)).overrides()
        params.use_extra_bufts = False
        if overrides is not None:  # held in a local for the whole load
            params.tensor_buft_overrides = overrides.pointer
    with capture_log() as lines:
        model = llama_cpp.llama_model_load_from_file(path.encode(), params)
    if not model:
        raise SystemExit(2)
    wanted = cpu_kernels.REPACK_NAME if repack_gpu_layers is not None else cpu_kernels.AMX_NAME
    if not any(f"{wanted} model buffer size" in line for line in lines):
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
    gpu_layers = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == REPACK_FLAG else None
    print(_child(sys.argv[1], gpu_layers), flush=True)
