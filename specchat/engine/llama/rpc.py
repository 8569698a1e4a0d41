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
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import llama_cpp

from specchat.engine.llama.hardware import Device, devices, gpu_devices, rpc_devices
from specchat.engine.llama.llama_lib import GgmlSymbols, Signatures, ensure_backend, ggml_libs
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

_REG: Signatures = {
    "ggml_backend_reg_by_name": ([ctypes.c_char_p], ctypes.c_void_p),
    "ggml_backend_reg_get_proc_address": ([ctypes.c_void_p, ctypes.c_char_p], ctypes.c_void_p),
    "ggml_backend_register": ([ctypes.c_void_p], None),
}
_ABORT = "ggml_set_abort_callback"


@lru_cache(maxsize=1)
def _ggml() -> GgmlSymbols:
    ensure_backend()
    return GgmlSymbols({**_REG, _ABORT: ([ctypes.c_void_p], ctypes.c_void_p)}, ggml_libs())


def _register(endpoint: str) -> None:
    """Add the server to ggml's device registry (connects: llama.cpp aborts when it cannot)."""
    if not available():
        raise RpcError(NO_RPC)
    g = _ggml()
    reg = g.funcs["ggml_backend_reg_by_name"](b"RPC") if g.has(*_REG) else None
    if not reg:
        raise RpcError("llama.cpp's RPC backend cannot be reached from Python here")
    proc = g.funcs["ggml_backend_reg_get_proc_address"](reg, b"ggml_backend_rpc_add_server")
    if not proc:
        raise RpcError("this llama.cpp's RPC backend has no ggml_backend_rpc_add_server")
    server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(proc)(endpoint.encode())
    if not server:
        raise RpcError(f"the RPC server at {endpoint} offers no device")
    g.funcs["ggml_backend_register"](server)


def _devices_of(endpoints: Sequence[str], with_memory: bool = False) -> list[Device]:
    # An RPC device's description is its server's endpoint.
    return [d for d in rpc_devices(devices(with_memory)) if d.description in endpoints]


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
    try:
        _register(endpoint)
    except RpcError as e:
        return {"error": str(e)}
    devs = _devices_of((endpoint,), with_memory=True)
    return {"devices": len(devs), "free": sum(d.free or 0 for d in devs),
            "total": sum(d.total or 0 for d in devs)}


# ---------------------------------------------------------------------------- using them

_used: list[str] = []  # the endpoints registered in this process (llama.cpp keeps them)


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
    guard_aborts()
    for ep in endpoints:
        if ep not in _used:
            _register(ep)
            _used.append(ep)
    return infos


def in_use() -> tuple[str, ...]:
    return tuple(_used)


def device_list(endpoints: Sequence[str]) -> ctypes.Array[ctypes.c_void_p] | None:
    """``llama_model_params.devices`` for a model that uses ``endpoints``' servers (none: this
    machine's devices only); None when no server is registered (llama.cpp's default: all)."""
    if not _used:
        return None
    # The servers first, as llama.cpp's own selection puts them (fewer network transfers).
    here = gpu_devices(devices(with_memory=False))
    chosen = [d.handle for d in [*_devices_of(endpoints), *here]]
    return (ctypes.c_void_p * (len(chosen) + 1))(*chosen, None)


def remote_memory(endpoints: Sequence[str]) -> tuple[int, int] | None:
    """Free and total bytes over the servers' devices (registered ones), for the memory plan."""
    devs = _devices_of(endpoints, with_memory=True)
    if not devs:
        return None
    return sum(d.free or 0 for d in devs), sum(d.total or 0 for d in devs)


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
    # Asked a few times: a server that was just killed may still accept for a moment (its
    # connection to us closes before its listening socket does).
    host, port = _split(endpoint)
    for attempt in range(3):
        if attempt:
            time.sleep(0.1)
        try:
            with socket.create_connection((host, port), timeout=1.0):
                pass
        except OSError:
            return False
    return True


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


def guard_aborts() -> None:
    """Install the abort hook (once); it reports a failure as :func:`failure_message` says."""
    global _guarded
    if _guarded:
        return
    setter = _ggml().funcs.get(_ABORT)
    if setter is not None:
        setter(ctypes.cast(_abort_cb, ctypes.c_void_p))
        _guarded = True


if __name__ == "__main__":  # the child of probe(): one JSON line, or llama.cpp's abort
    print(json.dumps(_probe_here(sys.argv[1])), flush=True)
