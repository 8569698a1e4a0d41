"""Where loaded models actually run: layers offloaded, buffers per device, flash attention.

llama.cpp reports these facts only in its load log, so they are read from the lines captured
while a model or a context was created (``llama_lib.capture_log``). ``Placement`` is the small
value object the app's stats bar and ``specchat doctor`` show.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specchat.engine.model import LlamaContext, LlamaModel

_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_BUFFER = re.compile(r"(\S+)\s+(model|KV|compute|output) buffer size =\s*([\d.]+) MiB")
_FLASH_SET = re.compile(r"flash_attn\s+=\s+(enabled|disabled|auto)\b")
_FLASH_AUTO = re.compile(r"Flash Attention (enabled|not supported)")
_MIB = 1024 * 1024


@dataclass(frozen=True)
class Buffer:
    device: str  # llama.cpp's buffer-type name: CPU, CPU_Mapped, CUDA0, CUDA_Host, Metal...
    kind: str  # model | KV | compute | output
    bytes: int

    @property
    def on_host(self) -> bool:
        return "CPU" in self.device or self.device.endswith("_Host")


@dataclass(frozen=True)
class LoadReport:
    """What llama.cpp said while loading a model or creating a context."""

    offloaded_layers: int | None = None  # None: a CPU-only build (llama.cpp says nothing)
    offloadable_layers: int | None = None  # the repeating layers + the output layer
    buffers: tuple[Buffer, ...] = ()
    flash_attn: bool | None = None  # as resolved for a context; None if not reported

    @classmethod
    def parse(cls, lines: Sequence[str]) -> LoadReport:
        offloaded = offloadable = None
        flash: bool | None = None
        buffers = []
        for line in lines:
            if m := _OFFLOADED.search(line):
                offloaded, offloadable = int(m[1]), int(m[2])
            elif m := _BUFFER.search(line):
                buffers.append(Buffer(m[1], m[2], int(float(m[3]) * _MIB)))
            elif m := _FLASH_SET.search(line):
                flash = {"enabled": True, "disabled": False}.get(m[1])
            elif m := _FLASH_AUTO.search(line):
                flash = m[1] == "enabled"
        return cls(offloaded, offloadable, tuple(buffers), flash)

    @property
    def gpu_bytes(self) -> int:
        return sum(b.bytes for b in self.buffers if not b.on_host)

    @property
    def host_bytes(self) -> int:
        return sum(b.bytes for b in self.buffers if b.on_host)


@dataclass(frozen=True)
class ModelPlacement:
    role: str  # target | draft | model
    name: str
    gpu_layers: int  # layers offloaded, the output layer counted as one (llama.cpp's count)
    layers: int  # offloadable layers: n_layer + 1
    flash_attn: bool | None
    kv_type: str
    gpu_bytes: int  # model + KV + compute buffers on GPUs, as llama.cpp allocated them
    host_bytes: int

    @property
    def where(self) -> str:
        if self.gpu_layers <= 0:
            return "CPU"
        return f"{self.gpu_layers}/{self.layers} layers on GPU"


@dataclass(frozen=True)
class Placement:
    """Where a runtime's models run, for a status line: ``label`` or the parts of it."""

    backend: str  # "CPU", "CUDA: NVIDIA H200", "Metal: Apple M2 Pro"...
    models: tuple[ModelPlacement, ...]

    @property
    def on_gpu(self) -> bool:
        return any(m.gpu_layers > 0 for m in self.models)

    @property
    def label(self) -> str:
        if not self.on_gpu:
            return "CPU" if self.backend == "CPU" else f"CPU (GPU offload off; {self.backend})"
        parts = [f"{m.role} {m.gpu_layers}/{m.layers}" for m in self.models]
        return f"{self.backend} · " + " · ".join(parts) + " layers on GPU"

    @classmethod
    def of(cls, backend: str,
           loaded: Sequence[tuple[str, LlamaModel, LlamaContext]]) -> Placement:
        models = []
        for role, model, ctx in loaded:
            rep = model.load_report
            layers = rep.offloadable_layers or model.n_layer + 1
            models.append(ModelPlacement(
                role=role, name=model.name, gpu_layers=rep.offloaded_layers or 0, layers=layers,
                flash_attn=ctx.load_report.flash_attn, kv_type=ctx.settings.type_k,
                gpu_bytes=rep.gpu_bytes + ctx.load_report.gpu_bytes,
                host_bytes=rep.host_bytes + ctx.load_report.host_bytes))
        return cls(backend, tuple(models))
