"""Where loaded models actually run, for the app's stats bar and ``specchat doctor``:
``Placement``, built from each model's and context's ``LoadReport``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel


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
