"""Will a pair fit? Estimate each model's memory from its GGUF header before llama.cpp allocates.

Weights come from the tensor table, the KV cache from the attention shape (n_ctx × layers ×
K+V width × bytes of the cache type; sliding-window models get a full-size cache because the
engine asks for one so it can roll back), and a compute-buffer allowance from the batch size and
vocabulary. llama.cpp offloads the *last* ``n_gpu_layers`` of [block 0 … block n-1, output head];
token embeddings stay on the CPU. "auto" layer counts are lowered to what fits, the draft first
(a draft left on the CPU throws the speed-up away); explicit counts are checked and refused with
a suggestion instead of failing inside llama.cpp.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from specchat.engine.llama.hardware import (
    Device,
    HostMemory,
    devices,
    gpu_devices,
    host_memory,
    local_gpu_offload,
)
from specchat.engine.llama.model_settings import (
    KV_CACHE_TYPES,
    ContextSettings,
    ModelSettings,
    flash_attention,
)
from specchat.errors import NotEnoughMemoryError
from specchat.formats.gguf_file import GgufHeader

_BLOCK = re.compile(r"^blk\.(\d+)\.")
_OUTPUT = {"output.weight", "output.bias", "output_norm.weight", "output_norm.bias"}
_MIB = 1024 * 1024
_KV_PAD = 256  # llama.cpp sizes the cache in multiples of 256 cells


def fmt_bytes(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def kv_type_bytes(kv_type: str) -> float:
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType(KV_CACHE_TYPES[kv_type])]
    return size / block


@dataclass(frozen=True)
class Footprint:
    """The sizes that decide a model's memory, read from its GGUF header."""

    layer_weights: tuple[int, ...]  # bytes of each repeating block
    input_weights: int  # token embeddings and other tensors that stay on the CPU
    output_weights: int  # output head + norm: llama.cpp's last offloadable "layer"
    tied_output: int  # embeddings llama.cpp copies into an offloaded output layer (tied weights)
    kv_width: tuple[int, ...]  # K + V elements per token, per block
    n_vocab: int
    n_embd: int
    n_ff: int
    n_head: int
    n_ctx_train: int

    @property
    def n_layer(self) -> int:
        return len(self.layer_weights)

    @property
    def weights(self) -> int:
        return sum(self.layer_weights) + self.input_weights + self.output_weights

    @classmethod
    def of(cls, header: GgufHeader) -> Footprint:
        def num(key: str, default: int) -> int:
            v = header.arch_value(key, default)
            try:
                return int(max(v)) if isinstance(v, (np.ndarray, list)) else int(v)  # per layer
            except (TypeError, ValueError):
                return default

        n_layer = num("block_count", 0)
        layers = [0] * n_layer
        input_w = output_w = 0
        embd_bytes = 0
        has_output = False
        n_vocab = num("vocab_size", 0)
        for t in header.tensors:
            m = _BLOCK.match(t.name)
            if m and int(m[1]) < n_layer:
                layers[int(m[1])] += t.nbytes
            elif t.name in _OUTPUT:
                output_w += t.nbytes
                has_output |= t.name == "output.weight"
            else:
                input_w += t.nbytes
                if t.name == "token_embd.weight":
                    embd_bytes = t.nbytes
                    n_vocab = n_vocab or int(t.shape[-1])
        n_embd = num("embedding_length", 0)
        n_head = num("attention.head_count", 0)
        head_dim = n_embd // n_head if n_head else 0
        k_len = num("attention.key_length", head_dim)
        v_len = num("attention.value_length", head_dim)
        kv_heads = header.arch_value("attention.head_count_kv", n_head)
        per_layer = (list(kv_heads) if isinstance(kv_heads, (np.ndarray, list))
                     else [kv_heads] * n_layer)
        per_layer = (per_layer + [n_head] * n_layer)[:n_layer]
        kv_width = tuple(int(h) * (k_len + v_len) for h in per_layer)
        tied = 0 if has_output else embd_bytes
        return cls(tuple(layers), input_w, output_w, tied, kv_width, n_vocab, n_embd,
                   num("feed_forward_length", 4 * n_embd), n_head, num("context_length", 4096))

    def kv_bytes(self, n_ctx: int, kv_type: str) -> list[int]:
        cells = -(-n_ctx // _KV_PAD) * _KV_PAD
        per = kv_type_bytes(kv_type)
        return [int(cells * w * per) for w in self.kv_width]

    def compute_bytes(self, n_ctx: int, n_batch: int, flash_attn: str) -> int:
        """The graph's scratch buffer: activations and logits of one micro-batch, plus the
        attention score matrix unless flash attention is forced on (measured on SmolLM2:
        98 MiB at 4096 tokens with flash attention, 326 MiB without at 16384; this gives
        107 and 394)."""
        ub = min(n_batch, n_ctx)
        act = 4 * ub * (self.n_vocab + 2 * self.n_ff + 4 * self.n_embd)
        scores = 0 if flash_attn != "off" else 4 * ub * n_ctx * self.n_head
        return act + scores + 16 * _MIB


@dataclass(frozen=True)
class LoadRequest:
    """One model to load: what it is and how the user asked for it to be loaded."""

    role: str  # target | draft | model
    name: str
    header: GgufHeader
    model: ModelSettings
    context: ContextSettings


@dataclass(frozen=True)
class RemoteMemory:
    """The RPC servers a target spreads over, and their memory (``None``: not reported)."""

    endpoints: tuple[str, ...]
    free: int | None
    total: int | None = None


@dataclass(frozen=True)
class MemoryReadings:
    offload: bool  # this machine can offload to a GPU
    gpus: tuple[Device, ...]
    host: HostMemory
    remote: RemoteMemory | None = None  # the target's RPC servers, when it has some

    @classmethod
    def now(cls, remote: RemoteMemory | None = None) -> MemoryReadings:
        offload = local_gpu_offload()
        gpus = tuple(gpu_devices(devices())) if offload else ()
        return cls(offload, gpus, host_memory(), remote)

    @classmethod
    def unknown(cls, remote: RemoteMemory | None = None) -> MemoryReadings:
        return cls(local_gpu_offload(), (), HostMemory(None, None, "not read"),
                   RemoteMemory(remote.endpoints, None) if remote else None)

    def gpu_free(self, main_gpu: int | None = None) -> int | None:
        pool = self.gpus if main_gpu is None else self.gpus[main_gpu : main_gpu + 1]
        frees = [d.free for d in pool if d.free is not None]
        return sum(frees) if frees and len(frees) == len(pool) else None

    @property
    def unified(self) -> bool:
        """GPU memory is host memory (Apple silicon, integrated GPUs)."""
        return any(d.kind == "igpu" or d.backend == "Metal" for d in self.gpus)

    def gpu_name(self, main_gpu: int | None = None) -> str:
        pool = self.gpus if main_gpu is None else self.gpus[main_gpu : main_gpu + 1]
        return " + ".join(f"{d.name} ({d.description})" if d.description else d.name
                          for d in pool) or "GPU"


def _margin(free: int) -> int:
    # Driver workspaces, fragmentation and the app itself: never plan to the last byte.
    return 256 * _MIB + free // 50


@dataclass(frozen=True)
class LoadPlan:
    """One model's resolved placement and its estimated memory."""

    request: LoadRequest
    gpu_layers: int  # 0 … n_layer + 1 (the output head counts as one)
    layers: int  # n_layer + 1
    n_ctx: int
    weights: int
    kv: int
    compute: int
    gpu_bytes: int
    host_bytes: int

    @property
    def model_settings(self) -> ModelSettings:
        return replace(self.request.model, n_gpu_layers=self.gpu_layers)

    @property
    def remote(self) -> bool:
        """Its offloaded layers may go to RPC servers."""
        return bool(self.request.model.rpc)

    def describe(self) -> str:
        r = self.request
        on = f"RPC servers {', '.join(r.model.rpc)}" if self.remote else "GPU"
        where = "CPU" if self.gpu_layers == 0 else f"{self.gpu_layers}/{self.layers} layers on {on}"
        return (f"{r.role} {r.name}: {where}; weights {fmt_bytes(self.weights)}, KV cache "
                f"{fmt_bytes(self.kv)} ({self.n_ctx} tokens, {r.context.type_k}), buffers "
                f"{fmt_bytes(self.compute)}")


def _place(req: LoadRequest, fp: Footprint, k: int) -> LoadPlan:
    n_ctx = req.context.n_ctx or fp.n_ctx_train
    kv = fp.kv_bytes(n_ctx, req.context.type_k)
    compute = fp.compute_bytes(n_ctx, req.context.n_batch,
                               flash_attention(req.context.flash_attn, req.context.type_v))
    # Offloaded units are the last k of [block 0 … block n-1, output head].
    first_gpu = fp.n_layer + 1 - k
    host, gpu = fp.input_weights, 0
    for i, w in enumerate(fp.layer_weights):
        if i >= first_gpu:
            gpu += w + kv[i]
        else:
            host += w + kv[i]
    if k > 0:
        gpu += fp.output_weights + fp.tied_output + compute
        host += 4 * min(req.context.n_batch, n_ctx) * fp.n_embd * 2 + 16 * _MIB
    else:
        host += fp.output_weights + compute
    host += fp.n_vocab * 4 * 64  # logits rows handed back to Python
    return LoadPlan(req, k, fp.n_layer + 1, n_ctx, fp.weights, sum(kv), compute, gpu, host)


@dataclass(frozen=True)
class PairPlan:
    plans: tuple[LoadPlan, ...]
    readings: MemoryReadings

    def plan(self, role: str) -> LoadPlan:
        return next(p for p in self.plans if p.request.role == role)

    @property
    def gpu_need(self) -> int:
        return sum(p.gpu_bytes for p in self.plans)

    @property
    def host_need(self) -> int:
        return sum(p.host_bytes for p in self.plans)

    def shortfall(self) -> str | None:
        """What does not fit, as the start of a sentence; None when everything fits."""
        r = self.readings
        on_gpu = [p for p in self.plans if p.gpu_layers > 0]
        remote = r.remote if any(p.remote for p in on_gpu) else None
        if remote is not None and remote.free is not None:
            local = r.gpu_free() or 0
            room = remote.free - _margin(remote.free) + (local - _margin(local) if local else 0)
            if self.gpu_need > room:
                return self._short(self.gpu_need, remote.free + local,
                                   f"memory on the RPC servers {', '.join(remote.endpoints)}"
                                   + (f" and {r.gpu_name()}" if local else ""), True)
            on_gpu = [p for p in on_gpu if not p.remote]
        if on_gpu:
            free = r.gpu_free()
            need = sum(p.gpu_bytes for p in on_gpu)
            if free is not None and need > free - _margin(free):
                return self._short(need, free, f"GPU memory on {r.gpu_name()}", True)
            per_gpu: dict[int, int] = {}  # models pinned to one GPU with main_gpu
            for p in on_gpu:
                mg = p.request.model.main_gpu
                if mg is not None and mg < len(r.gpus):
                    per_gpu[mg] = per_gpu.get(mg, 0) + p.gpu_bytes
            for mg, need in per_gpu.items():
                free = r.gpu_free(mg)
                if free is not None and need > free - _margin(free):
                    return self._short(need, free, f"GPU memory on {r.gpu_name(mg)}", True)
        avail = r.host.available
        need = self.host_need + (self.gpu_need if r.unified else 0)
        if avail is not None and need > avail - _margin(avail):
            return self._short(need, avail, "RAM", False)
        return None

    def _short(self, need: int, free: int, where: str, gpu: bool) -> str:
        parts = [p for p in self.plans if (p.gpu_bytes if gpu else p.host_bytes) > 0]
        kv = sum(p.kv for p in parts)
        n_ctx = max(p.n_ctx for p in self.plans)
        return (f"not enough {where} for {' + '.join(p.request.name for p in self.plans)}: "
                f"needs ~{fmt_bytes(need)} (KV cache {fmt_bytes(kv)} at {n_ctx} tokens), "
                f"{fmt_bytes(free)} {'free' if gpu else 'available'}")

    def notices(self) -> list[str]:
        """What the user should know about the placement: layers "auto" left on the CPU."""
        out = []
        for p in self.plans:
            m = p.request.model
            if self.readings.offload and m.n_gpu_layers < 0 and p.gpu_layers < p.layers:
                out.append(f"{p.request.name}: {p.gpu_layers} of {p.layers} layers fit in free GPU "
                           "memory; the rest run on the CPU (slower)")
        return out

    def describe(self) -> list[str]:
        return [*(p.describe() for p in self.plans), self.summary(), *self.notices()]

    def summary(self) -> str:
        """``needs GPU ~1.2 GB of 23.5 GB free, RAM ~310 MB of 12.0 GB available — fits``"""
        r = self.readings
        need = []
        if any(p.gpu_layers for p in self.plans):
            free = r.gpu_free()
            if r.remote is not None and any(p.remote and p.gpu_layers for p in self.plans):
                rf = r.remote.free
                free = None if rf is None else rf + (free or 0)
                what = "GPU + RPC servers" if r.gpus else "RPC servers"
            else:
                what = "GPU"
            need.append(f"{what} ~{fmt_bytes(self.gpu_need)}"
                        + (f" of {fmt_bytes(free)} free" if free is not None else ""))
        avail = r.host.available
        need.append(f"RAM ~{fmt_bytes(self.host_need)}"
                    + (f" of {fmt_bytes(avail)} available" if avail is not None else ""))
        short = self.shortfall()
        return "needs " + ", ".join(need) + (" — fits" if short is None else " — does NOT fit")


def plan_load(requests: Sequence[LoadRequest], readings: MemoryReadings | None = None) -> PairPlan:
    """Resolve "auto" GPU layer counts and estimate memory; raises nothing (see ``check``)."""
    readings = readings if readings is not None else MemoryReadings.now()
    prints = {id(r): Footprint.of(r.header) for r in requests}
    def room_on(free: int | None) -> int | None:
        return None if free is None else free - _margin(free)

    room = room_on(readings.gpu_free())  # all GPUs together
    room_one = {i: room_on(readings.gpu_free(i)) for i in range(len(readings.gpus))}
    remote = readings.remote
    remote_room = room_on(remote.free) if remote is not None else None
    chosen: dict[int, LoadPlan] = {}
    # The draft first: it is small, and on the CPU it would cost more than it saves.
    for req in sorted(requests, key=lambda r: r.role != "draft"):
        fp = prints[id(req)]
        top = fp.n_layer + 1
        asked = req.model.n_gpu_layers
        spread = bool(req.model.rpc)  # over RPC servers (and this machine's GPUs)
        k = 0 if not (readings.offload or spread) else (top if asked < 0 else min(asked, top))
        plan = _place(req, fp, k)
        mg = req.model.main_gpu
        one = room_one.get(mg) if mg is not None else None
        limits = [x for x in (room, one) if x is not None]
        if spread:
            limits = [] if remote_room is None else [remote_room + max(room or 0, 0)]
        if asked < 0 and req.model.fit_layers and limits:
            while k > 0 and plan.gpu_bytes > min(limits):
                k -= 1
                plan = _place(req, fp, k)
        if spread and remote_room is not None:
            used = min(plan.gpu_bytes, max(remote_room, 0))
            remote_room -= used
            if room is not None:
                room -= plan.gpu_bytes - used
        elif room is not None:
            room -= plan.gpu_bytes
        if mg is not None and one is not None:
            room_one[mg] = one - plan.gpu_bytes
        chosen[id(req)] = plan
    return PairPlan(tuple(chosen[id(r)] for r in requests), readings)


def check(plan: PairPlan) -> None:
    """Refuse a plan that does not fit, with the changes that would make it fit."""
    short = plan.shortfall()
    if short is None:
        return
    tips = _suggestions(plan)
    tip = f" — try {' or '.join(tips)}" if tips else " — choose a smaller model or quantization"
    raise NotEnoughMemoryError(f"{short}{tip} (--no-memory-check loads anyway)")


def _suggestions(plan: PairPlan) -> list[str]:
    tips = []
    reqs = [p.request for p in plan.plans]
    # Another GPU layer count for a model whose count was given (a number or "all"): fewer when the GPU
    # is short, more when the host is and the GPU has room.
    for p in plan.plans:
        auto = p.request.model.n_gpu_layers < 0 and p.request.model.fit_layers
        if auto or not plan.readings.offload:
            continue
        fewer = range(p.gpu_layers - 1, -1, -1)
        more = range(p.gpu_layers + 1, p.layers + 1)
        for k in [*fewer, *more]:
            trial = [replace(r, model=replace(r.model, n_gpu_layers=k))
                     if r is p.request else r for r in reqs]
            if plan_load(trial, plan.readings).shortfall() is None:
                flag = "--draft-gpu-layers" if p.request.role == "draft" else "--gpu-layers"
                tips.append(f"{flag} {k}")
                break
    # A smaller context for both models.
    n_ctx = max(p.n_ctx for p in plan.plans)
    size = 1 << (n_ctx.bit_length() - 1)
    if size == n_ctx:
        size //= 2
    while size >= 512:
        trial = [replace(r, context=replace(r.context, n_ctx=size)) for r in reqs]
        if plan_load(trial, plan.readings).shortfall() is None:
            tips.append(f"--ctx-size {size}")
            break
        size //= 2
    return tips
