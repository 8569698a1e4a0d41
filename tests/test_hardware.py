"""Devices and memory as llama.cpp and the OS report them; doctor's hardware section; the
placement read from llama.cpp's load log; the GPU proof run on this build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.devtools import gpu_proof
from specchat.engine.llama import hardware
from specchat.engine.llama.hardware import (
    Device,
    HostMemory,
    backend_label,
    devices,
    gpu_devices,
    math_cores,
)
from specchat.engine.llama.llama_lib import supports_gpu_offload
from specchat.engine.llama.load_report import LoadReport
from specchat.engine.llama.placement import ModelPlacement, Placement

GIB = 1024**3


def test_the_device_list_comes_from_llama_cpp() -> None:
    devs = devices()
    assert devs, "ggml's device API should be reachable in llama-cpp-python's libraries"
    cpu = [d for d in devs if d.kind == "cpu"]
    assert len(cpu) == 1 and cpu[0].backend == "CPU" and cpu[0].total and cpu[0].total > 0
    assert (len(gpu_devices(devs)) > 0) == supports_gpu_offload()
    label = backend_label()
    assert label == "CPU" if not supports_gpu_offload() else label != "CPU"


def test_a_build_without_the_device_api_degrades_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    bare = hardware._Ggml([])
    assert not bare.has("ggml_backend_dev_count") and bare.text("ggml_backend_dev_name", 0) == ""
    monkeypatch.setattr(hardware, "_ggml", lambda: bare)
    assert devices() == [] and not hardware.device_api_available()
    assert backend_label() == ("GPU" if supports_gpu_offload() else "CPU")


def dev(name: str, desc: str, kind: str = "gpu", backend: str = "CUDA") -> Device:
    return Device(name, desc, kind, backend)


@pytest.mark.parametrize(
    ("devs", "label"),
    [
        ([dev("CPU", "AMD EPYC", "cpu", "CPU")], "CPU"),
        ([dev("CUDA0", "NVIDIA H200"), dev("CPU", "x", "cpu", "CPU")], "CUDA: NVIDIA H200"),
        ([dev("CUDA0", "NVIDIA RTX 4090"), dev("CUDA1", "NVIDIA RTX 4090")],
         "CUDA: 2× NVIDIA RTX 4090"),
        ([dev("CUDA0", "A"), dev("CUDA1", "B")], "CUDA: A + B"),
        ([dev("MTL0", "Apple M2 Pro", backend="Metal")], "Metal: Apple M2 Pro"),
        ([dev("Vulkan0", "Intel Iris Xe", "igpu", "Vulkan")], "Vulkan: Intel Iris Xe"),
        # an integrated GPU is used only when there is no discrete one
        ([dev("Vulkan0", "Iris", "igpu", "Vulkan"), dev("CUDA0", "RTX 3060")], "CUDA: RTX 3060"),
    ],
)
def test_backend_label(devs: list[Device], label: str) -> None:
    assert backend_label(devs) == label


def test_host_memory_on_this_machine() -> None:
    mem = hardware.host_memory()
    assert mem.total and mem.available is not None and 0 < mem.available <= mem.total


def test_meminfo_and_cgroup_limits(tmp_path: Path) -> None:
    info = tmp_path / "meminfo"
    info.write_text("MemTotal:       24683656 kB\nMemFree:          500000 kB\n"
                    "MemAvailable:   23883584 kB\nCached:          1000000 kB\n")
    assert hardware._linux_meminfo(info) == HostMemory(23883584 * 1024, 24683656 * 1024,
                                                       "/proc/meminfo")
    info.write_text("MemTotal: 1000 kB\nMemFree: 100 kB\nCached: 200 kB\n")  # kernels < 3.14
    assert hardware._linux_meminfo(info).available == 300 * 1024
    cg = tmp_path / "cgroup"
    cg.mkdir()
    (cg / "memory.max").write_text(f"{4 * GIB}\n")
    (cg / "memory.current").write_text(f"{3 * GIB}\n")
    (cg / "memory.stat").write_text(f"anon {2 * GIB}\ninactive_file {GIB}\n")
    host = HostMemory(20 * GIB, 24 * GIB, "/proc/meminfo")
    assert hardware._cgroup_limited(host, cg) == HostMemory(2 * GIB, 4 * GIB, "cgroup memory.max")
    (cg / "memory.max").write_text("max\n")
    assert hardware._cgroup_limited(host, cg) == host
    assert hardware._cgroup_limited(host, tmp_path / "none") == host


def test_vm_stat_on_macos() -> None:
    text = ("Mach Virtual Memory Statistics: (page size of 16384 bytes)\n"
            "Pages free:                               10000.\n"
            "Pages active:                             99999.\n"
            "Pages inactive:                            2000.\n"
            "Pages speculative:                          500.\n"
            "Pages wired down:                         88888.\n")
    assert hardware._vm_stat_available(text) == 12500 * 16384


CUDA_LOG = """\
load_tensors: offloading output layer to GPU
load_tensors: offloading 31 repeating layers to GPU
load_tensors: offloaded 33/33 layers to GPU
load_tensors:        CUDA0 model buffer size =  4403.49 MiB
load_tensors:   CPU_Mapped model buffer size =   281.81 MiB
llama_context: flash_attn            = auto
llama_context:  CUDA_Host  output buffer size =     0.49 MiB
llama_kv_cache:      CUDA0 KV buffer size =  1024.00 MiB
resolve_fused_ops: Flash Attention enabled
sched_reserve:      CUDA0 compute buffer size =   560.00 MiB
sched_reserve:  CUDA_Host compute buffer size =    24.01 MiB
""".splitlines(keepends=True)


def test_load_report_reads_llama_cpps_log() -> None:
    rep = LoadReport.parse(CUDA_LOG)
    assert (rep.offloaded_layers, rep.offloadable_layers, rep.flash_attn) == (33, 33, True)
    mib = 1024 * 1024
    assert rep.gpu_bytes == int(4403.49 * mib) + 1024 * mib + 560 * mib
    assert rep.host_bytes == int(281.81 * mib) + int(0.49 * mib) + int(24.01 * mib)
    off = LoadReport.parse(["llama_context: flash_attn = auto\n",
                            "resolve_fused_ops: Flash Attention not supported, set to disabled\n"])
    assert off.flash_attn is False and off.offloaded_layers is None


def test_placement_label() -> None:
    def m(role: str, k: int, n: int) -> ModelPlacement:
        return ModelPlacement(role, role, k, n, True, "f16", 0, 0)

    assert Placement("CPU", (m("target", 0, 31),)).label == "CPU"
    assert Placement("CUDA: NVIDIA H200", (m("target", 33, 33), m("draft", 17, 17))).label == \
        "CUDA: NVIDIA H200 · target 33/33 · draft 17/17 layers on GPU"
    assert Placement("Metal: Apple M1", (m("target", 0, 33),)).label == \
        "CPU (GPU offload off; Metal: Apple M1)"
    assert m("draft", 10, 17).where == "10/17 layers on GPU"


def doctor(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPECCHAT_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "specchat", "doctor", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_doctor_lists_backend_devices_and_the_load_plan(tmp_path: Path, tiny_target: Path,
                                                        tiny_draft: Path) -> None:
    r = doctor(tmp_path / "home")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert f"backend:          {backend_label()}\n" in out
    for d in devices():
        assert any(line.split()[:2] == [d.name, d.kind] and "free of" in line
                   for line in out.splitlines()), out
    assert "host memory:" in out and "available of" in out
    assert "load plan for demo" in out and "not on disk yet" in out
    # An ad-hoc model: the plan with sizes, then an impossible context is a problem.
    r = doctor(tmp_path / "home", "--model", str(tiny_target), "--ctx-size", "2048")
    assert r.returncode == 0 and "KV cache 1 MB (2048 tokens, f16)" in r.stdout
    assert "— fits" in r.stdout
    r = doctor(tmp_path / "home", "--model", str(tiny_target), "--ctx-size", "2000000000")
    assert r.returncode == 1 and "problem: not enough" in r.stdout and "Traceback" not in r.stderr


def test_gpu_proof_runs_on_this_build(tmp_path: Path) -> None:
    """The proof script's CPU path: a real pair written, loaded, decoded, figures printed."""
    out = tmp_path / "proof.json"
    rc = gpu_proof.main(["--scale", "cpu", "--tokens", "12", "--prompts", "1", "--require-gpu",
                         "--out", str(tmp_path / "models"), "--json", str(out)])
    report = json.loads(out.read_text())
    assert report["backend"] == backend_label()
    assert [m["role"] for m in report["models"]] == ["target", "draft"]
    plain = [row for row in report["rows"] if row["decoder"] == "plain"]
    assert [row["sampling"] for row in plain] == ["greedy", "T=0.7"]
    assert all(row["tokens"] > 0 and row["tok_s"] > 0 for row in plain)
    if report["greedy_exact"] is not None:  # with the speculative engine merged
        assert report["greedy_exact"] is True
    if supports_gpu_offload():
        assert rc == 0 and all(m["gpu_layers"] == m["layers"] for m in report["models"])
    else:  # --require-gpu on a CPU build must fail, and say why
        assert rc == 1 and report["failures"] == ["not every layer was offloaded to the GPU"]


def _sysfs(root: Path, siblings: list[str], core: str | None = None,
           atom: str | None = None) -> Path:
    for i, s in enumerate(siblings):
        d = root / "devices" / "system" / "cpu" / f"cpu{i}" / "topology"
        d.mkdir(parents=True)
        (d / "thread_siblings").write_text(s + "\n")
    for kind, cpus in (("cpu_core", core), ("cpu_atom", atom)):
        if cpus is not None:
            (root / "devices" / kind).mkdir(parents=True)
            (root / "devices" / kind / "cpus").write_text(cpus + "\n")
    return root


def test_threads_one_per_physical_core_and_performance_cores_only(tmp_path: Path) -> None:
    # llama.cpp's default (cpu_get_num_math). 4 cores with SMT: siblings (0,4) (1,5)...
    smt = _sysfs(tmp_path / "smt", ["11", "22", "44", "88"] * 2)
    assert math_cores(smt, set(range(8))) == 4
    # 6 cores without SMT: all six (half the logical CPUs would leave three idle).
    flat = _sysfs(tmp_path / "flat", [f"{1 << i:x}" for i in range(6)])
    assert math_cores(flat, set(range(6))) == 6
    # A hybrid CPU: 2 performance cores with SMT (cpus 0-3) and 4 efficiency cores (4-7).
    hybrid = _sysfs(tmp_path / "hybrid", ["3", "3", "c", "c", "10", "20", "40", "80"],
                    core="0-3", atom="4-7")
    assert math_cores(hybrid, set(range(8))) == 2
    # Only the CPUs the process may run on count (a container's cpuset).
    assert math_cores(smt, {0, 4}) == 1
    # No sysfs: half the logical CPUs above four.
    assert math_cores(tmp_path / "none", set(range(8))) == 4
