"""The hardware part of ``specchat doctor``: backend, devices and memory, and a dry run of how
the configured pair would be loaded (layers per device, memory estimate) without loading it."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from specchat.cli.common import Env
from specchat.engine.llama import amx, cpu_kernels, rpc
from specchat.engine.llama.hardware import backend_label, device_api_available, devices, host_memory
from specchat.engine.llama.llama_lib import supports_gpu_offload
from specchat.engine.llama.memory_plan import MemoryReadings, RemoteMemory, fmt_bytes, plan_load
from specchat.engine.llama.model_settings import default_threads
from specchat.engine.llama.rpc import ServerInfo
from specchat.errors import SpecchatError
from specchat.formats.gguf_file import GgufHeader
from specchat.loading import check_main_gpu, load_requests, select

Write = Callable[[str], object]


def write_hardware(w: Write) -> None:
    offload = supports_gpu_offload()
    devs = devices()
    w("\nhardware\n")
    w(f"  backend:          {backend_label(devs)}\n")
    w(f"  GPU offload:      {'yes' if offload else 'no (CPU-only build; see docs/gpu.md)'}\n")
    if devs:
        w("  devices:\n")
        for d in devs:
            mem = (f"{fmt_bytes(d.free)} free of {fmt_bytes(d.total)}"
                   if d.free is not None and d.total else "memory not reported")
            w(f"    {d.name:10} {d.kind:5} {d.description[:36]:36} {mem}\n")
    elif not device_api_available():
        w("  devices:          (this llama.cpp build does not expose its device list)\n")
    host = host_memory()
    if host.available is not None and host.total:
        w(f"  host memory:      {fmt_bytes(host.available)} available of "
          f"{fmt_bytes(host.total)} ({host.source})\n")
    else:
        w("  host memory:      unknown (the memory check only covers the GPU)\n")
    w(f"  threads:          {default_threads()} by default ({os.cpu_count()} logical CPUs)\n")
    extra = [name for name, _ in cpu_kernels.extra_buffer_types()]
    w(f"  CPU weight types: {', '.join(extra) or 'none'} besides the plain CPU buffer "
      f"({cpu_kernels.simd_label(cpu_kernels.cpu_features())} build)\n")


def write_cpu_kernels(role: str, path: Path, header: GgufHeader, gpu_layers: int,
                      w: Write) -> None:
    """Which CPU kernels a model's weights run on (AMX, repacked AVX-512/AVX2, plain) and why.
    On a build with AMX kernels this runs the AMX check the first load would run."""
    kernels = amx.kernels_for(path, header, gpu_layers)
    w(f"  {role + ':':8}{kernels.label} ({kernels.why})\n")
    if kernels.kind == "plain" or "AVX2" not in cpu_kernels.cpu_features():
        return  # (the repack rule restated is x86's)
    if kernels.kind == "default" and amx.build_has_amx():
        return  # AMX takes what it can; what it leaves is llama.cpp's business
    repacked = kernels.repacked or tuple(cpu_kernels.repacked_plan(header, gpu_layers))
    share = sum(t.nbytes for t in repacked)
    total = sum(t.nbytes for t in header.tensors) or 1
    w(f"          repacked: {100 * share / total:.0f} % of the weights ({fmt_bytes(share)} of "
      f"{fmt_bytes(total)}), the rest on the plain kernels\n")


def write_rpc(endpoints: Sequence[str], w: Write) -> tuple[int, list[ServerInfo]]:
    """Each RPC server: reachable, its devices and memory. Returns (problems, what they said)."""
    if not endpoints:
        return 0, []
    w("\nRPC servers (the target's layers)\n")
    if not rpc.available():
        w(f"  problem: {rpc.NO_RPC}\n")
        return 1, []
    infos = [rpc.probe(ep) for ep in endpoints]
    for i in infos:
        if i.reachable:
            mem = (f"{fmt_bytes(i.free)} free of {fmt_bytes(i.total)}"
                   if i.free is not None and i.total else "memory not reported")
            w(f"  {i.endpoint:22} reachable, {i.devices} device{'s' * (i.devices != 1)}, {mem}\n")
        else:
            w(f"  {i.endpoint:22} NOT reachable: {i.error}\n")
    return sum(not i.reachable for i in infos), infos


def remote_memory(endpoints: Sequence[str], infos: Sequence[ServerInfo]) -> RemoteMemory | None:
    if not endpoints:
        return None
    known = len(infos) == len(endpoints) and all(i.reachable and i.free is not None
                                                  for i in infos)
    return RemoteMemory(tuple(endpoints), sum(i.free or 0 for i in infos) if known else None,
                        sum(i.total or 0 for i in infos) if known else None)


def write_load_plan(env: Env, args: argparse.Namespace, w: Write,
                    servers: Sequence[ServerInfo] = ()) -> int:
    """How the configured (or given) pair would be placed; returns the number of problems."""
    try:
        selection = select(env.catalog, getattr(args, "pair", None), getattr(args, "model", None),
                           env.config.default_pair)
        options = env.runtime_options(args)
        check_main_gpu(options)
    except SpecchatError as e:
        w(f"\nload plan\n  problem: {e}\n")
        return 1
    w(f"\nload plan for {selection.label} ({options.context.n_ctx or 'training'}-token context)\n")
    target, draft = env.offload_settings(args)
    missing = []
    for role, entry, s in (("target", selection.target, target), ("draft", selection.draft, draft)):
        if entry is None:
            continue
        w(f"  {role + ' settings:':18}gpu_layers {s.gpu_layers}, main_gpu {s.main_gpu}, flash_attn "
          f"{s.flash_attn}, kv_type {s.kv_type}\n")
        if not env.resolver.state(entry).present:
            missing.append(entry.id)
    if missing:
        w(f"  not on disk yet: {', '.join(missing)} (`specchat models pull {selection.label}`); "
          "no estimate\n")
        return 0
    try:
        target_path = env.resolver.ensure(selection.target, fetch=False)
        draft_path = (env.resolver.ensure(selection.draft, fetch=False)
                      if selection.draft is not None else None)
        reqs = load_requests(selection, target_path, draft_path, options)
    except SpecchatError as e:
        w(f"  problem: {e}\n")
        return 1
    remote = remote_memory(options.target.rpc, servers)
    readings = MemoryReadings.now(remote) if options.memory_check else \
        MemoryReadings.unknown(remote)
    plan = plan_load(reqs, readings)
    for line in plan.describe():
        w(f"  {line}\n")
    w("\nCPU kernels (the weights left on the CPU)\n")
    for p, path in zip(plan.plans, (target_path, draft_path), strict=False):
        if path is not None:
            write_cpu_kernels(p.request.role, path, p.request.header, p.gpu_layers, w)
    short = plan.shortfall()
    if short is not None and options.memory_check:
        w(f"  problem: {short}\n")
        return 1
    return 0
