"""One-time llama.cpp set-up: backend init and a quiet log sink that keeps recent errors.

llama.cpp reports load failures only through its log; we keep the last lines so an error
message can say what llama.cpp said, and print nothing unless asked (``SPECCHAT_LLAMA_LOG=1``).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import sys
import threading
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import llama_cpp

_lock = threading.Lock()
_ready = False
_recent: collections.deque[tuple[int, str]] = collections.deque(maxlen=64)
_echo = os.environ.get("SPECCHAT_LLAMA_LOG", "") not in ("", "0")

# ggml_log_level: DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5 (continues the previous line).
_DEBUG, _WARN, _ERROR, _CONT = 1, 3, 4, 5
_last_level = 0
# Lines logged while a thread runs inside capture_log(), keyed by that thread.
_captures: dict[int, list[str]] = {}


@llama_cpp.llama_log_callback
def _log_sink(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    global _last_level
    if level == _CONT:
        level = _last_level
    _last_level = level
    msg = text.decode("utf-8", errors="replace")
    if level != _DEBUG:  # debug chatter would push the error lines out of the ring
        _recent.append((level, msg))
    captured = _captures.get(threading.get_ident())
    if captured is not None and level != _DEBUG:
        captured.append(msg)
    if _echo:
        sys.stderr.write(msg)


def ensure_backend() -> None:
    """Initialise llama.cpp once per process, with our log sink."""
    global _ready
    with _lock:
        if _ready:
            return
        llama_cpp.llama_log_set(_log_sink, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _ready = True


def clear_log() -> None:
    _recent.clear()


def last_error() -> str:
    """The most recent error (or warning) line llama.cpp logged, for user-facing messages."""
    for wanted in (_ERROR, _WARN):
        for level, msg in reversed(_recent):
            if level == wanted and msg.strip():
                return msg.strip()
    return ""


@contextlib.contextmanager
def capture_log() -> Iterator[list[str]]:
    """Collect what llama.cpp logs (info and above) from this thread inside the block.

    llama.cpp states facts nothing else exposes — layers offloaded, buffer sizes per device,
    whether flash attention was enabled — only in its log.
    """
    ident = threading.get_ident()
    lines: list[str] = []
    _captures[ident] = lines
    try:
        yield lines
    finally:
        _captures.pop(ident, None)


def system_info() -> str:
    ensure_backend()
    return bytes(llama_cpp.llama_print_system_info()).decode("utf-8", errors="replace").strip()


def supports_gpu_offload() -> bool:
    """Whether layers can be placed anywhere but the CPU: a GPU, or a registered RPC server.

    llama.cpp's own ``llama_supports_gpu_offload`` is true for any build with the RPC backend,
    servers or not; on a CPU with no server that would turn on what only pays with a GPU.
    """
    ensure_backend()
    if not llama_cpp.llama_supports_gpu_offload():
        return False
    return not llama_cpp.llama_supports_rpc() or _has_offload_device()


# enum ggml_backend_dev_type: GPU 1, IGPU 2 (an RPC server's devices count as GPUs)
_OFFLOAD_DEVICE_TYPES = (1, 2)
_BY_TYPE = "ggml_backend_dev_by_type"


def _has_offload_device() -> bool:
    g = GgmlSymbols({_BY_TYPE: ([ctypes.c_int], ctypes.c_void_p)}, ggml_libs())
    if not g.has(_BY_TYPE):
        return True  # cannot tell: trust llama.cpp's answer
    return any(g.funcs[_BY_TYPE](t) for t in _OFFLOAD_DEVICE_TYPES)


Signatures = dict[str, tuple[list[Any], Any]]


class GgmlSymbols:
    """ggml functions llama-cpp-python does not bind, looked up with ctypes in llama.cpp's own
    libraries. A symbol a build lacks is simply absent (``has``), never an error."""

    def __init__(self, signatures: Signatures, libs: list[ctypes.CDLL]) -> None:
        self.funcs: dict[str, Any] = {}
        for name, (argtypes, restype) in signatures.items():
            for lib in libs:
                fn = getattr(lib, name, None)  # FFI: the symbol, where this library has it
                if fn is not None:
                    fn.argtypes = argtypes
                    fn.restype = restype
                    self.funcs[name] = fn
                    break

    def has(self, *names: str) -> bool:
        return all(n in self.funcs for n in names)

    def text(self, name: str, arg: int) -> str:
        if name not in self.funcs:
            return ""
        raw = self.funcs[name](arg)
        return raw.decode("utf-8", errors="replace") if raw else ""


def _lib_dir() -> Path:
    override = os.environ.get("LLAMA_CPP_LIB_PATH")
    return Path(override) if override else Path(llama_cpp.__file__).resolve().parent / "lib"


@lru_cache(maxsize=1)
def ggml_libs() -> list[ctypes.CDLL]:
    """Where ggml's symbols are: libllama (its lookup reaches libggml on Linux and macOS), then
    the ggml libraries themselves."""
    libs: list[ctypes.CDLL] = []
    # FFI: llama-cpp-python's own handle on libllama (private, so read defensively)
    own = getattr(getattr(llama_cpp, "llama_cpp", None), "_lib", None)
    if isinstance(own, ctypes.CDLL):
        libs.append(own)
    names = {"linux": ["libggml.so", "libggml-base.so"],
             "darwin": ["libggml.dylib", "libggml.so", "libggml-base.dylib", "libggml-base.so"],
             "win32": ["ggml.dll", "libggml.dll", "ggml-base.dll", "libggml-base.dll"]}
    platform = "linux" if sys.platform.startswith(("linux", "freebsd")) else sys.platform
    for name in names.get(platform, []):
        path = _lib_dir() / name
        if path.exists():
            try:
                libs.append(ctypes.CDLL(str(path)))
            except OSError:
                continue
    return libs


def version() -> str:
    return str(getattr(llama_cpp, "__version__", "unknown"))  # FFI: a build may not say


# Names llama.cpp's system info gives its GPU backends ("CUDA : ARCHS = ... | CPU : ...").
_GPU_BACKENDS = ("CUDA", "Metal", "Vulkan", "ROCm", "HIP", "MUSA", "SYCL", "OpenCL", "CANN",
                 "Kompute")


def backend_name(info: str | None = None, gpu_offload: bool | None = None) -> str:
    """The compute backend this build runs models on: "CUDA", "Metal", ... or "CPU"."""
    if gpu_offload is None:
        gpu_offload = supports_gpu_offload()
    if not gpu_offload:
        return "CPU"
    info = system_info() if info is None else info
    for part in info.split("|"):
        name = part.split(":", 1)[0].strip() if ":" in part else ""
        for known in _GPU_BACKENDS:
            if name.lower() == known.lower():
                return known
    return "GPU"
