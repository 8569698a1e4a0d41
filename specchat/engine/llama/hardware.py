"""What this machine and this llama.cpp build can run on: backend devices and free memory.

llama-cpp-python does not bind ggml's backend-device API, so the few functions needed are bound
here with ctypes against the libraries it ships. A missing symbol (an older or a differently
packaged build) degrades to "no device list" rather than an error: offload then follows
``llama_supports_gpu_offload`` alone.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from specchat.engine.llama.llama_lib import (
    GgmlSymbols,
    ensure_backend,
    ggml_libs,
    supports_gpu_offload,
)

# enum ggml_backend_dev_type (ggml-backend.h)
_DEVICE_KINDS = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}
# Registry names as users know them (ggml-metal registers as "MTL", its devices as "MTL0"...).
_BACKEND_NAMES = {"MTL": "Metal"}


@dataclass(frozen=True)
class Device:
    """One ggml backend device, e.g. ``CUDA0`` (an NVIDIA H200) or ``CPU``."""

    name: str
    description: str
    kind: str  # cpu | gpu | igpu | accel | meta | unknown
    backend: str  # the registry it belongs to: CUDA, Metal, Vulkan, CPU, BLAS...
    free: int | None = None  # bytes; None when the device does not say
    total: int | None = None
    handle: int = field(default=0, compare=False, repr=False)  # ggml_backend_dev_t


@dataclass(frozen=True)
class HostMemory:
    available: int | None  # bytes a new allocation can get without swapping
    total: int | None
    source: str  # where the reading came from, for `specchat doctor`


class _Ggml(GgmlSymbols):
    """The backend-device functions, looked up in llama.cpp's own libraries."""

    _SIGNATURES: ClassVar[dict[str, tuple[list[Any], Any]]] = {
        "ggml_backend_dev_count": ([], ctypes.c_size_t),
        "ggml_backend_dev_get": ([ctypes.c_size_t], ctypes.c_void_p),
        "ggml_backend_dev_name": ([ctypes.c_void_p], ctypes.c_char_p),
        "ggml_backend_dev_description": ([ctypes.c_void_p], ctypes.c_char_p),
        "ggml_backend_dev_type": ([ctypes.c_void_p], ctypes.c_int),
        "ggml_backend_dev_memory": (
            [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)],
            None,
        ),
        "ggml_backend_dev_backend_reg": ([ctypes.c_void_p], ctypes.c_void_p),
        "ggml_backend_reg_name": ([ctypes.c_void_p], ctypes.c_char_p),
    }

    def __init__(self, libs: list[ctypes.CDLL]) -> None:
        super().__init__(self._SIGNATURES, libs)


@lru_cache(maxsize=1)
def _ggml() -> _Ggml:
    ensure_backend()
    supports_gpu_offload()  # loads dynamically built backends, if this build has them
    return _Ggml(ggml_libs())


def device_api_available() -> bool:
    return _ggml().has("ggml_backend_dev_count", "ggml_backend_dev_get")


def devices(with_memory: bool = True) -> list[Device]:
    """Every device llama.cpp can use, in its registry order (GPUs first, CPU last).

    Memory readings are taken now (``free`` changes as other programs allocate).
    """
    g = _ggml()
    if not g.has("ggml_backend_dev_count", "ggml_backend_dev_get"):
        return []
    out = []
    for i in range(int(g.funcs["ggml_backend_dev_count"]())):
        dev = g.funcs["ggml_backend_dev_get"](i)
        if not dev:
            continue
        kind = "unknown"
        if g.has("ggml_backend_dev_type"):
            kind = _DEVICE_KINDS.get(int(g.funcs["ggml_backend_dev_type"](dev)), "unknown")
        backend = ""
        if g.has("ggml_backend_dev_backend_reg", "ggml_backend_reg_name"):
            reg = g.funcs["ggml_backend_dev_backend_reg"](dev)
            backend = g.text("ggml_backend_reg_name", reg) if reg else ""
        free = total = None
        if with_memory and g.has("ggml_backend_dev_memory"):
            f, t = ctypes.c_size_t(0), ctypes.c_size_t(0)
            g.funcs["ggml_backend_dev_memory"](dev, ctypes.byref(f), ctypes.byref(t))
            if t.value:
                free, total = int(f.value), int(t.value)
        name = g.text("ggml_backend_dev_name", dev)
        backend = backend or _backend_from_name(name)
        out.append(Device(name=name, description=g.text("ggml_backend_dev_description", dev),
                          kind=kind, backend=_BACKEND_NAMES.get(backend, backend), free=free,
                          total=total, handle=int(dev)))
    return out


def _backend_from_name(name: str) -> str:
    return re.sub(r"\d+$", "", name) or "?"


def gpu_devices(devs: list[Device] | None = None) -> list[Device]:
    """This machine's devices llama.cpp offloads layers to (``main_gpu`` indexes this list);
    RPC servers are not among them (see :func:`rpc_devices`)."""
    devs = devices() if devs is None else devs
    gpus = [d for d in devs if d.kind == "gpu" and d.backend != "RPC"]
    # llama.cpp uses integrated GPUs only when there is no discrete one.
    return gpus or [d for d in devs if d.kind == "igpu"]


def rpc_devices(devs: list[Device] | None = None) -> list[Device]:
    """The devices of the RPC servers registered in this process."""
    devs = devices() if devs is None else devs
    return [d for d in devs if d.backend == "RPC"]


def local_gpu_offload() -> bool:
    """Whether this machine has a device to offload to (RPC servers do not count)."""
    if not device_api_available():
        return supports_gpu_offload()
    return bool(gpu_devices(devices(with_memory=False)))


def backend_label(devs: list[Device] | None = None) -> str:
    """A short name for where the models run: ``CPU``, ``CUDA: NVIDIA H200``, ``Metal``..."""
    if devs is None:
        devs = devices(with_memory=False)
        if not devs and local_gpu_offload():
            return "GPU"
    gpus = gpu_devices(devs)
    if not gpus:
        return "CPU"
    backend = gpus[0].backend
    names = [d.description or d.name for d in gpus]
    if len(set(names)) == 1:
        what = names[0] if len(names) == 1 else f"{len(names)}× {names[0]}"
    else:
        what = " + ".join(names)
    if not what or what == backend:
        return backend
    return f"{backend}: {what}"


def math_cores(sys_root: Path | None = None, cpus: set[int] | None = None) -> int:
    """Threads for matrix work, as llama.cpp counts them for its default: one per physical core
    (SMT siblings share one core's vector units), and on a hybrid CPU only the performance
    cores (efficiency cores hold every lockstep step back). Counted among the CPUs this process
    may run on (``cpus``; its affinity by default). Linux reads the topology from sysfs
    (``sys_root`` replaces /sys in tests), macOS asks sysctl for its performance cores;
    elsewhere, half the logical CPUs above four."""
    if cpus is None:
        try:
            cpus = set(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = set(range(os.cpu_count() or 1))
    n = max(1, len(cpus))
    root = sys_root or Path("/sys")
    cpu_dir = root / "devices" / "system" / "cpu"
    if sys_root is None and sys.platform == "darwin":
        return _macos_cores() or (n // 2 if n > 4 else n)
    if not cpu_dir.is_dir():
        return n // 2 if n > 4 else n
    # Hybrid Intel CPUs list their performance cores in cpu_core/cpus, the others in cpu_atom.
    perf = _cpu_list(root / "devices" / "cpu_core" / "cpus")
    if perf and _cpu_list(root / "devices" / "cpu_atom" / "cpus"):
        cpus = (cpus & perf) or cpus
    cores = set()
    for cpu in cpus:
        try:
            cores.add((cpu_dir / f"cpu{cpu}" / "topology" / "thread_siblings").read_text().strip())
        except OSError:
            cores.add(f"cpu{cpu}")
    return max(1, len(cores))


def _macos_cores() -> int | None:
    for key in ("hw.perflevel0.physicalcpu", "hw.physicalcpu"):
        try:
            out = subprocess.run(["sysctl", "-n", key], capture_output=True, text=True,
                                 timeout=5, check=True).stdout
            return max(1, int(out.strip()))
        except (OSError, subprocess.SubprocessError, ValueError):
            continue
    return None


def _cpu_list(path: Path) -> set[int]:
    """A sysfs CPU list ("0-7,16,18") as a set; empty if absent."""
    try:
        text = path.read_text().strip()
    except OSError:
        return set()
    out: set[int] = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        try:
            out.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            return set()
    return out


def host_memory() -> HostMemory:
    """Memory available to this process on the host, from the best source on this OS."""
    if sys.platform.startswith("linux"):
        reading = _linux_meminfo()
        if reading.available is not None:
            return _cgroup_limited(reading)
    if sys.platform == "darwin":
        return _macos_memory()
    if sys.platform == "win32":
        return _windows_memory()
    return _sysconf_memory()


def _linux_meminfo(path: Path = Path("/proc/meminfo")) -> HostMemory:
    try:
        fields = {}
        for line in path.read_text().splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                fields[key] = int(parts[0]) * 1024  # values are in kB
    except OSError:
        return HostMemory(None, None, "unreadable /proc/meminfo")
    available = fields.get("MemAvailable")
    if available is None and "MemFree" in fields:  # kernels before 3.14
        available = fields["MemFree"] + fields.get("Cached", 0)
    return HostMemory(available, fields.get("MemTotal"), "/proc/meminfo")


def _cgroup_limited(reading: HostMemory, root: Path = Path("/sys/fs/cgroup")) -> HostMemory:
    """A container's memory limit (cgroup v2) caps what the host reading promises."""
    try:
        limit_text = (root / "memory.max").read_text().strip()
        if limit_text == "max":
            return reading
        limit = int(limit_text)
        used = int((root / "memory.current").read_text().strip())
        stat = dict(line.split() for line in (root / "memory.stat").read_text().splitlines())
        used -= int(stat.get("inactive_file", 0))  # reclaimable page cache
    except (OSError, ValueError):
        return reading
    room = max(0, limit - used)
    if reading.available is None or room < reading.available:
        total = min(limit, reading.total) if reading.total else limit
        return HostMemory(room, total, "cgroup memory.max")
    return reading


def _sysconf_memory() -> HostMemory:
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        total = os.sysconf("SC_PHYS_PAGES") * page
        avail = os.sysconf("SC_AVPHYS_PAGES") * page if "SC_AVPHYS_PAGES" in os.sysconf_names \
            else None
    except (OSError, ValueError, AttributeError):
        return HostMemory(None, None, "unknown")
    return HostMemory(avail, total, "sysconf")


def _macos_memory() -> HostMemory:
    total = None
    try:
        out = subprocess.run(["sysctl", "-n", "hw.memsize"], capture_output=True, text=True,
                             timeout=5, check=True).stdout
        total = int(out.strip())
    except (OSError, subprocess.SubprocessError, ValueError):
        total = _sysconf_memory().total
    available = None
    try:
        out = subprocess.run(["vm_stat"], capture_output=True, text=True, timeout=5,
                             check=True).stdout
        available = _vm_stat_available(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    return HostMemory(available, total, "vm_stat" if available is not None else "sysctl")


def _vm_stat_available(text: str) -> int:
    """Free, inactive and speculative pages: what macOS hands out without swapping."""
    page = int(m.group(1)) if (m := re.search(r"page size of (\d+) bytes", text)) else 4096
    pages = {}
    for line in text.splitlines()[1:]:
        key, _, value = line.partition(":")
        value = value.strip().rstrip(".")
        if value.isdigit():
            pages[key.strip()] = int(value)
    return page * sum(pages.get(k, 0) for k in ("Pages free", "Pages inactive", "Pages speculative"))


def _windows_memory() -> HostMemory:
    class MemoryStatusEx(ctypes.Structure):
        _fields_ = [("dwLength", ctypes.c_ulong), ("dwMemoryLoad", ctypes.c_ulong),
                    ("ullTotalPhys", ctypes.c_ulonglong), ("ullAvailPhys", ctypes.c_ulonglong),
                    ("ullTotalPageFile", ctypes.c_ulonglong),
                    ("ullAvailPageFile", ctypes.c_ulonglong),
                    ("ullTotalVirtual", ctypes.c_ulonglong),
                    ("ullAvailVirtual", ctypes.c_ulonglong),
                    ("ullAvailExtendedVirtual", ctypes.c_ulonglong)]

    status = MemoryStatusEx()
    status.dwLength = ctypes.sizeof(MemoryStatusEx)
    try:
        ok = ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status))  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        ok = 0
    if not ok:
        return HostMemory(None, None, "unknown")
    return HostMemory(int(status.ullAvailPhys), int(status.ullTotalPhys), "GlobalMemoryStatusEx")
