"""llama.cpp's RPC backend: a target's layers spread over ``rpc-server`` processes elsewhere.

``--rpc HOST:PORT[,HOST:PORT…]`` does what llama.cpp's own ``--rpc`` does: each server is added
to ggml's device registry (``ggml_backend_rpc_add_server``), and a model loaded afterwards puts
its offloaded layers on those devices, split by their free memory. Only the model that asks for
them does (the target); every other model is loaded onto this machine's own devices, so the
draft stays local.

llama.cpp aborts the whole process when a server cannot be reached or stops answering. So a
server is first probed in a child process (reachable? how much memory?), and once servers are in
use an abort hook turns a server dropping mid-reply into a clear message: the listeners (the
app) are told and the failing thread is parked, so what was written is kept; with no listener
the message is printed and the process exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import llama_cpp

from specchat.engine.llama.llama_lib import ensure_backend
from specchat.errors import SpecchatError

REBUILD = ('CMAKE_ARGS="-DGGML_RPC=on" pip install "llama-cpp-python>=0.3.36,<0.4" '
           "--force-reinstall --no-cache-dir")
NO_RPC = ("this llama-cpp-python was built without llama.cpp's RPC backend; rebuild it with "
          f"{REBUILD}")
PROBE_TIMEOUT_S = 20.0


class RpcError(SpecchatError):
    """An RPC server cannot be used (unreachable, another llama.cpp version, no RPC build)."""


def available() -> bool:
    """Whether this llama-cpp-python build has the RPC backend."""
    ensure_backend()
    return bool(llama_cpp.llama_supports_rpc())


def parse_endpoints(value: object, where: str = "--rpc") -> tuple[str, ...]:
    """``"a:50052,b:50052"`` (or a list of them) → ("a:50052", "b:50052"), each checked."""
    if value is None or value == "":
        return ()
    items: Iterable[object] = value.split(",") if isinstance(value, str) else \
        value if isinstance(value, (list, tuple)) else [value]
    out: list[str] = []
    for item in items:
        text = str(item).strip()
        if not text:
            continue
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SpecchatError(f"{where}: '{text}' is not HOST:PORT (e.g. 192.168.1.20:50052)")
        if text in out:
            raise SpecchatError(f"{where}: {text} is named twice")
        out.append(text)
    return tuple(out)


def _split(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


# ---------------------------------------------------------------------------- the ggml calls

_GPU, _IGPU = 1, 2  # enum ggml_backend_dev_type


class _Ggml:
    _SIGNATURES: dict[str, tuple[list[Any], Any]] = {  # noqa: RUF012 - a constant table
        "ggml_backend_reg_by_name": ([ctypes.c_char_p], ctypes.c_void_p),
        "ggml_backend_reg_get_proc_address": ([ctypes.c_void_p, ctypes.c_char_p], ctypes.c_void_p),
        "ggml_backend_register": ([ctypes.c_void_p], None),
        "ggml_backend_reg_dev_count": ([ctypes.c_void_p], ctypes.c_size_t),
        "ggml_backend_reg_dev_get": ([ctypes.c_void_p, ctypes.c_size_t], ctypes.c_void_p),
        "ggml_backend_dev_count": ([], ctypes.c_size_t),
        "ggml_backend_dev_get": ([ctypes.c_size_t], ctypes.c_void_p),
        "ggml_backend_dev_name": ([ctypes.c_void_p], ctypes.c_char_p),
        "ggml_backend_dev_backend_reg": ([ctypes.c_void_p], ctypes.c_void_p),
        "ggml_backend_dev_type": ([ctypes.c_void_p], ctypes.c_int),
        "ggml_backend_reg_name": ([ctypes.c_void_p], ctypes.c_char_p),
        "ggml_backend_dev_memory": (
            [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)],
            None),
        "ggml_set_abort_callback": ([ctypes.c_void_p], ctypes.c_void_p),
    }

    def __init__(self) -> None:
        ensure_backend()
        lib = getattr(getattr(llama_cpp, "llama_cpp", None), "_lib", None)
        self.f: dict[str, Any] = {}
        for name, (args, res) in self._SIGNATURES.items():
            fn = getattr(lib, name, None)  # libllama's lookup reaches libggml's symbols
            if fn is not None:
                fn.argtypes, fn.restype = args, res
                self.f[name] = fn

    def reg(self) -> int:
        if not available():
            raise RpcError(NO_RPC)
        missing = [n for n in ("ggml_backend_reg_by_name", "ggml_backend_reg_get_proc_address",
                               "ggml_backend_register", "ggml_backend_reg_dev_count",
                               "ggml_backend_reg_dev_get") if n not in self.f]
        reg = self.f["ggml_backend_reg_by_name"](b"RPC") if not missing else None
        if not reg:
            raise RpcError(f"llama.cpp's RPC backend cannot be reached from Python here "
                           f"({', '.join(missing) or 'no RPC registry'})")
        return int(reg)

    def add_server(self, endpoint: str) -> int:
        """The endpoint's registry (connects; llama.cpp aborts when it cannot)."""
        proc = self.f["ggml_backend_reg_get_proc_address"](self.reg(), b"ggml_backend_rpc_add_server")
        if not proc:
            raise RpcError("this llama.cpp's RPC backend has no ggml_backend_rpc_add_server")
        add = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(proc)
        reg = add(endpoint.encode())
        if not reg:
            raise RpcError(f"the RPC server at {endpoint} offers no device")
        return int(reg)

    def reg_devices(self, reg: int) -> list[int]:
        n = int(self.f["ggml_backend_reg_dev_count"](reg))
        return [int(self.f["ggml_backend_reg_dev_get"](reg, i)) for i in range(n)]

    def memory(self, dev: int) -> tuple[int, int]:
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        self.f["ggml_backend_dev_memory"](dev, ctypes.byref(free), ctypes.byref(total))
        return int(free.value), int(total.value)

    def name(self, dev: int) -> str:
        raw = self.f["ggml_backend_dev_name"](dev)
        return raw.decode("utf-8", "replace") if raw else "?"

    def local_offload_devices(self) -> list[int]:
        """The devices llama.cpp's default selection would offload to, RPC servers left out:
        the GPUs, else the integrated GPUs."""
        gpus: list[int] = []
        igpus: list[int] = []
        for i in range(int(self.f["ggml_backend_dev_count"]())):
            dev = int(self.f["ggml_backend_dev_get"](i))
            reg = self.f["ggml_backend_dev_backend_reg"](dev)
            if (self.f["ggml_backend_reg_name"](reg) if reg else b"") == b"RPC":
                continue
            kind = int(self.f["ggml_backend_dev_type"](dev))
            (gpus if kind == _GPU else igpus if kind == _IGPU else []).append(dev)
        return gpus or igpus


_ggml_lock = threading.Lock()
_ggml_one: _Ggml | None = None


def _ggml() -> _Ggml:
    global _ggml_one
    with _ggml_lock:
        if _ggml_one is None:
            _ggml_one = _Ggml()
        return _ggml_one


# ---------------------------------------------------------------------------- probing

@dataclass(frozen=True)
class ServerInfo:
    """What one RPC server said when asked (``specchat doctor --rpc``)."""

    endpoint: str
    reachable: bool
    devices: int = 0
    free: int | None = None  # bytes, over its devices
    total: int | None = None
    error: str = ""


def probe(endpoint: str, timeout: float = PROBE_TIMEOUT_S) -> ServerInfo:
    """Connect, hand-shake and read the server's memory, in a child process: llama.cpp aborts
    the process that fails to reach a server, so this one must not be it."""
    host, port = _split(endpoint)
    try:
        with socket.create_connection((host, port), timeout=min(timeout, 5.0)):
            pass
    except OSError as e:
        why = "connection refused (is rpc-server running there?)" \
            if isinstance(e, ConnectionRefusedError) else \
            "no answer (timed out)" if isinstance(e, TimeoutError) else str(e) or type(e).__name__
        return ServerInfo(endpoint, False, error=why)
    try:
        done = subprocess.run([sys.executable, "-m", "specchat.engine.llama.rpc", endpoint],
                              capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return ServerInfo(endpoint, False, error=f"no handshake within {timeout:.0f} s")
    last = done.stdout.strip().splitlines()[-1:] or [""]
    try:
        data = json.loads(last[0])
    except json.JSONDecodeError:
        said = [ln.split(": ", 1)[-1] for ln in done.stderr.strip().splitlines() if ln.strip()]
        why = next((s for s in reversed(said) if "version" in s.lower()), said[-1] if said else "")
        return ServerInfo(endpoint, False, error=f"the handshake failed: {why}" if why else
                          f"the handshake failed (exit code {done.returncode})")
    if "error" in data:
        return ServerInfo(endpoint, False, error=str(data["error"]))
    return ServerInfo(endpoint, True, int(data["devices"]), int(data["free"]), int(data["total"]))


def _probe_here(endpoint: str) -> dict[str, object]:
    g = _ggml()
    try:
        devs = g.reg_devices(g.add_server(endpoint))
    except RpcError as e:
        return {"error": str(e)}
    mem = [g.memory(d) for d in devs]
    return {"devices": len(devs), "free": sum(f for f, _ in mem), "total": sum(t for _, t in mem)}


# ---------------------------------------------------------------------------- using them

_used: dict[str, list[int]] = {}  # endpoint → its devices, once registered in this process


def connect(endpoints: Sequence[str]) -> list[ServerInfo]:
    """Register the servers with llama.cpp (once per process), each probed first; a clear
    error for a build without RPC or a server that cannot be used."""
    if not endpoints:
        return []
    if not available():
        raise RpcError(NO_RPC)
    infos = []
    for ep in endpoints:
        if ep in _used:
            continue
        info = probe(ep)
        if not info.reachable:
            raise RpcError(f"the RPC server at {ep} cannot be used: {info.error}")
        infos.append(info)
    guard_aborts(endpoints)
    g = _ggml()
    for ep in endpoints:
        if ep not in _used:
            reg = g.add_server(ep)
            g.f["ggml_backend_register"](reg)
            _used[ep] = g.reg_devices(reg)
    return infos


def in_use() -> tuple[str, ...]:
    return tuple(_used)


def device_list(endpoints: Sequence[str]) -> ctypes.Array[ctypes.c_void_p] | None:
    """``llama_model_params.devices`` for a model that uses ``endpoints``' servers (none: this
    machine's devices only); None when no server is registered (llama.cpp's default: all)."""
    if not _used:
        return None
    # The servers first, as llama.cpp's own selection puts them (fewer network transfers).
    chosen = [d for ep in endpoints for d in _used.get(ep, [])] + _ggml().local_offload_devices()
    return (ctypes.c_void_p * (len(chosen) + 1))(*chosen, None)


def remote_memory(endpoints: Sequence[str]) -> tuple[int, int] | None:
    """Free and total bytes over the servers' devices (registered ones), for the memory plan."""
    devs = [d for ep in endpoints for d in _used.get(ep, [])]
    if not devs:
        return None
    g = _ggml()
    mem = [g.memory(d) for d in devs]
    return sum(f for f, _ in mem), sum(t for _, t in mem)


# ---------------------------------------------------------------------------- a server drops

_listeners: list[Callable[[str], object]] = []
_guarded = False
_failure: str | None = None
_ABORT_FN = ctypes.CFUNCTYPE(None, ctypes.c_char_p)


def on_failure(listener: Callable[[str], object]) -> Callable[[], None]:
    """Call ``listener(message)`` (on llama.cpp's failing thread) when a server drops; the
    returned function removes it."""
    _listeners.append(listener)
    return lambda: _listeners.remove(listener) if listener in _listeners else None


def failure() -> str | None:
    """The message of the drop that happened in this process, if one did."""
    return _failure


def failure_message(raw: str, endpoints: Sequence[str]) -> str:
    down = [ep for ep in endpoints if not _reachable(ep)]
    who = (f"the RPC server at {', '.join(down)}" if down else
           f"an RPC server ({', '.join(endpoints)})")
    said = raw.split(": ", 1)[-1].strip()
    return (f"{who} stopped answering mid-reply (llama.cpp: {said}); what was written is "
            "kept. The target cannot run until specchat is restarted with the server back.")


def _reachable(endpoint: str) -> bool:
    host, port = _split(endpoint)
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _aborted(raw: bytes | None) -> None:
    global _failure
    text = (raw or b"").decode("utf-8", "replace")
    msg = failure_message(text, in_use())
    first = _failure is None
    _failure = _failure or msg
    if first:
        for listener in list(_listeners):
            with contextlib.suppress(Exception):  # one listener must not stop the others
                listener(msg)
    if not _listeners:
        sys.stdout.flush()
        sys.stderr.write(f"\nspecchat: {msg}\n")
        sys.stderr.flush()
        os._exit(75)  # EX_TEMPFAIL: llama.cpp would abort() the process right after this
    threading.Event().wait()  # park the failing thread: returning would abort the process


_abort_cb = _ABORT_FN(_aborted)


def guard_aborts(endpoints: Sequence[str] = ()) -> None:
    """Install the abort hook (once); it reports a failure as :func:`failure_message` says."""
    global _guarded
    if _guarded:
        return
    setter = _ggml().f.get("ggml_set_abort_callback")
    if setter is not None:
        setter(ctypes.cast(_abort_cb, ctypes.c_void_p))
        _guarded = True


if __name__ == "__main__":  # the child of probe(): one JSON line, or llama.cpp's abort
    print(json.dumps(_probe_here(sys.argv[1])), flush=True)
