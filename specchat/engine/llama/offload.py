"""Per-model load settings as a user states them: GPU layers, main GPU, flash attention, KV type.

The same four settings exist for the target and for the draft (LM Studio users learnt the hard
way that a draft left on the CPU wastes the speed-up). "auto" means: every layer on the GPU when
the build can offload, fewer if free memory is short, none on a CPU-only build.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from specchat.engine.llama.model_settings import (
    FLASH_ATTN_MODES,
    KV_CACHE_TYPES,
    ContextSettings,
    ModelSettings,
)


@dataclass(frozen=True)
class OffloadSettings:
    gpu_layers: int | str = "auto"  # "auto" (all that fit), "all", or a count (0 = CPU only)
    main_gpu: int | str = "auto"  # "auto": spread over every GPU; N: the whole model on GPU N
    flash_attn: str = "auto"  # auto | on | off
    kv_type: str = "f16"  # f32 f16 bf16 q8_0 q5_1 q5_0 q4_1 q4_0 iq4_nl

    def validate(self) -> OffloadSettings:
        """Raise ValueError whose message starts with the field's name; return self."""
        g = self.gpu_layers
        if not (g in ("auto", "all") or (isinstance(g, int) and _is_int(g) and g >= 0)):
            raise ValueError("gpu_layers must be 'auto', 'all' or a whole number ≥ 0")
        m = self.main_gpu
        if not (m == "auto" or (isinstance(m, int) and _is_int(m) and m >= 0)):
            raise ValueError("main_gpu must be 'auto' or a GPU index ≥ 0")
        if self.flash_attn not in FLASH_ATTN_MODES:
            raise ValueError(f"flash_attn must be one of {', '.join(FLASH_ATTN_MODES)}")
        if self.kv_type not in KV_CACHE_TYPES:
            raise ValueError(f"kv_type must be one of {', '.join(KV_CACHE_TYPES)}")
        if self.kv_type not in ("f32", "f16", "bf16") and self.flash_attn == "off":
            raise ValueError(f"kv_type needs flash attention when quantized ({self.kv_type}): set "
                             "flash_attn to 'auto' or 'on', or use f16")
        return self

    def with_(self, **changes: Any) -> OffloadSettings:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def model_settings(self, base: ModelSettings | None = None) -> ModelSettings:
        g = self.gpu_layers
        return replace(base or ModelSettings(), n_gpu_layers=-1 if g in ("auto", "all") else int(g),
                       fit_layers=g == "auto",
                       main_gpu=None if self.main_gpu == "auto" else int(self.main_gpu))

    def context_settings(self, base: ContextSettings | None = None) -> ContextSettings:
        return replace(base or ContextSettings(), flash_attn=self.flash_attn, type_k=self.kv_type,
                       type_v=self.kv_type)


def parse_gpu_layers(text: str) -> int | str:
    """``--gpu-layers`` value: auto, all, or a count (-1 is accepted as llama.cpp's "all")."""
    t = text.strip().lower()
    if t in ("auto", "all"):
        return t
    try:
        n = int(t)
    except ValueError:
        raise ValueError(f"'{text}' is not 'auto', 'all' or a number of layers") from None
    if n < -1:
        raise ValueError(f"'{text}' is not 'auto', 'all' or a number of layers")
    return "all" if n == -1 else n


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
