"""What llama.cpp said while loading a model or creating a context: layers offloaded, buffers
per device, flash attention.

llama.cpp reports these facts only in its load log, so they are read from the lines captured
while a model or a context was created (``llama_lib.capture_log``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

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
