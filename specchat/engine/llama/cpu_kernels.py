"""Which CPU kernels a model's weights run on, and the load parameters that choose them.

llama.cpp puts each weight of a layer on the CPU in the first of its CPU buffer types whose
kernels take it: the AMX buffer (a build for a CPU with Intel AMX), then ``CPU_REPACK`` (weights
repacked for its AVX-512/AVX2 or NEON GEMM kernels, which take 4 or more rows at once), then the
plain CPU buffer. Three choices follow:

- ``default``: llama.cpp's own order. Where AMX works, or where the build has no AMX.
- ``repack``: the AMX kernels crash here (see :mod:`amx`). llama.cpp's only switch,
  ``use_extra_bufts``, would drop the repacking with them, so the model loads with it off and
  per-tensor buffer overrides (``tensor_buft_overrides``) put the weights ``CPU_REPACK`` takes
  there: what a build without AMX does by itself.
- ``plain``: no extra buffer types (``SPECCHAT_REPACK=off``, or the repacked load crashed too).

Which weights ``CPU_REPACK`` takes is llama.cpp's rule (ggml-cpu/repack.cpp,
``ggml_repack_get_optimal_repack_type``; the op of each tensor, llama-arch.cpp), restated here
for the x86 CPUs that have AMX: the matrix weights of a Q4_0, Q4_K, IQ4_NL or MXFP4 type (AVX2)
or Q2_K (AVX-512) with a multiple of 8 rows. A weight left out by mistake runs on the plain
kernels; one put there by mistake would crash the load, which the child process of :mod:`amx`
finds first, the model loaded the same way.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, ClassVar

from specchat.engine.llama.llama_lib import GgmlSymbols, ensure_backend, ggml_libs, system_info
from specchat.formats.gguf_file import GgufHeader, TensorInfo

REPACK_ENV = "SPECCHAT_REPACK"  # "off": no extra buffer types at all (llama-server --no-repack)
REPACK_NAME = "CPU_REPACK"
AMX_NAME = "AMX"
_CPU_DEVICE = 0  # enum ggml_backend_dev_type: GGML_BACKEND_DEVICE_TYPE_CPU

# ggml_type -> the instruction set whose repacked kernels take it (x86: repack.cpp).
_REPACK_TYPES = {2: "AVX2", 12: "AVX2", 20: "AVX2", 39: "AVX2",  # Q4_0 Q4_K IQ4_NL MXFP4
                 10: "AVX512"}  # Q2_K
_ROWS = 8  # the x86 kernels interleave 8 rows
# The weights llama.cpp multiplies as matrices (GGML_OP_MUL_MAT, 2-D) or per expert
# (GGML_OP_MUL_MAT_ID, 3-D), by their GGUF names.
_MATRICES = ("attn_q", "attn_k", "attn_v", "attn_qkv", "attn_output", "attn_q_a", "attn_q_b",
             "attn_kv_a_mqa", "attn_kv_b", "ffn_gate", "ffn_up", "ffn_down", "ffn_gate_shexp",
             "ffn_up_shexp", "ffn_down_shexp")
_EXPERTS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_gate_up_exps")
_LAYER_WEIGHT = re.compile(r"blk\.(\d+)\.([a-z_]+)\.weight")


class _Override(ctypes.Structure):
    """struct llama_model_tensor_buft_override (llama.h)."""

    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


_GET_EXTRA_BUFTS = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)


class _Ggml(GgmlSymbols):
    _SIGNATURES: ClassVar[dict[str, tuple[list[Any], Any]]] = {
        "ggml_backend_dev_by_type": ([ctypes.c_int], ctypes.c_void_p),
        "ggml_backend_dev_backend_reg": ([ctypes.c_void_p], ctypes.c_void_p),
        "ggml_backend_reg_get_proc_address": ([ctypes.c_void_p, ctypes.c_char_p],
                                              ctypes.c_void_p),
        "ggml_backend_buft_name": ([ctypes.c_void_p], ctypes.c_char_p),
    }

    def __init__(self) -> None:
        super().__init__(self._SIGNATURES, ggml_libs())


@lru_cache(maxsize=1)
def extra_buffer_types() -> tuple[tuple[str, int], ...]:
    """The CPU device's extra buffer types in llama.cpp's order of preference, by name
    (``AMX``, ``CPU_REPACK``, ...), each with its ``ggml_backend_buffer_type_t``; empty when
    this build does not say (a symbol missing)."""
    ensure_backend()
    g = _Ggml()
    if not g.has(*_Ggml._SIGNATURES):
        return ()
    dev = g.funcs["ggml_backend_dev_by_type"](_CPU_DEVICE)
    reg = g.funcs["ggml_backend_dev_backend_reg"](dev) if dev else None
    addr = g.funcs["ggml_backend_reg_get_proc_address"](reg, b"ggml_backend_dev_get_extra_bufts") \
        if reg else None
    if not addr:
        return ()
    array = _GET_EXTRA_BUFTS(addr)(dev)
    out = []
    i = 0
    while array and array[i]:
        buft = int(array[i])
        out.append((g.text("ggml_backend_buft_name", buft), buft))
        i += 1
    return tuple(out)


def buffer_type(name: str) -> int | None:
    return dict(extra_buffer_types()).get(name)


def cpu_features(info: str | None = None) -> frozenset[str]:
    """The instruction sets this llama.cpp build's CPU code was compiled for (its system info:
    ``AVX2 = 1``...), which is what its repack rule asks (``ggml_cpu_has_avx2``)."""
    info = system_info() if info is None else info
    return frozenset(m[1] for m in re.finditer(r"\b([A-Z0-9_]+) = 1\b", info))


def simd_label(features: Iterable[str]) -> str:
    """The widest vector instruction set among ``features``, as users know it."""
    have = set(features)
    for key, label in (("AVX512", "AVX-512"), ("AVX2", "AVX2"), ("SVE", "SVE"),
                       ("NEON", "NEON")):
        if key in have:
            return label
    return "SIMD"


def on_cpu(header: GgufHeader, n_gpu_layers: int) -> tuple[int, bool]:
    """Which weights stay on the CPU when ``n_gpu_layers`` are offloaded (llama.cpp's rule: the
    last layers and then the output layer go first): the repeating layers below the returned
    index, and whether the output layer does."""
    n_layer = int(header.arch_value("block_count", 0) or 0)
    offloaded = n_layer + 1 if n_gpu_layers < 0 else min(n_gpu_layers, n_layer + 1)
    first_gpu = max(n_layer + 1 - offloaded, 0)
    return first_gpu, first_gpu > n_layer


def repackable(tensors: Sequence[TensorInfo], features: frozenset[str],
               cpu_layers: int = 1 << 30, output_on_cpu: bool = True) -> list[TensorInfo]:
    """The weights llama.cpp's ``CPU_REPACK`` buffer takes on a CPU with ``features``, among
    those left on the CPU (layers below ``cpu_layers``; the output layer if it stays)."""
    out = []
    for t in tensors:
        need = _REPACK_TYPES.get(t.ggml_type)
        if need is None or need not in features or len(t.shape) < 2 or t.shape[1] % _ROWS:
            continue
        if t.name == "output.weight":
            if output_on_cpu and len(t.shape) == 2:
                out.append(t)
            continue
        m = _LAYER_WEIGHT.fullmatch(t.name)
        if m is None or int(m[1]) >= cpu_layers:
            continue
        kind = m[2]
        if (kind in _MATRICES and len(t.shape) == 2) or (kind in _EXPERTS and len(t.shape) == 3):
            out.append(t)
    return out


def patterns(names: Iterable[str]) -> list[str]:
    """Regular expressions matching exactly ``names`` (llama.cpp tries every pattern on every
    tensor it creates, compiling each: one per kind of weight, not one per tensor)."""
    layers: dict[str, list[str]] = {}
    others = []
    for name in names:
        m = _LAYER_WEIGHT.fullmatch(name)
        if m is None:
            others.append(name)
        else:
            layers.setdefault(m[2], []).append(m[1])
    out = [f"^{re.escape(n)}$" for n in others]
    for kind, ids in layers.items():
        out.append(rf"^blk\.({'|'.join(ids)})\.{re.escape(kind)}\.weight$")
    return out


@dataclass
class BuftOverrides:
    """A NULL-terminated ``llama_model_tensor_buft_override`` array and the strings it points
    at, kept alive together for as long as a load may read them."""

    patterns: tuple[str, ...]
    buft: int
    _encoded: list[bytes] = field(default_factory=list, repr=False)
    _array: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._encoded = [p.encode() for p in self.patterns]
        self._array = (_Override * (len(self._encoded) + 1))()
        for i, p in enumerate(self._encoded):
            self._array[i].pattern = p
            self._array[i].buft = self.buft
        self._array[len(self._encoded)].pattern = None

    @property
    def pointer(self) -> int:
        return ctypes.addressof(self._array)


@dataclass(frozen=True)
class Kernels:
    """The choice for one model: ``kind`` (default | repack | plain), what runs (``label``), why,
    and for ``repack`` the weights pointed at ``CPU_REPACK``."""

    kind: str
    label: str
    why: str
    repacked: tuple[TensorInfo, ...] = field(default=(), repr=False)

    @property
    def use_extra_bufts(self) -> bool:
        return self.kind == "default"

    def digest(self) -> str:
        """Names the repacked load (its weights), for keeping a check's verdict."""
        text = "|".join(f"{t.name}:{t.ggml_type}:{t.shape}" for t in self.repacked)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def overrides(self) -> BuftOverrides | None:
        """The buffer overrides this choice loads with (None: llama.cpp's own lists)."""
        if self.kind != "repack" or not self.repacked:
            return None
        buft = buffer_type(REPACK_NAME)
        if buft is None:
            return None
        return BuftOverrides(tuple(patterns(t.name for t in self.repacked)), buft)


def repack_off() -> bool:
    return os.environ.get(REPACK_ENV, "").strip().lower() in ("off", "0", "no")


def repacked_plan(header: GgufHeader, n_gpu_layers: int = 0) -> list[TensorInfo]:
    """The weights of ``header`` that ``CPU_REPACK`` would take on this build and CPU."""
    cpu_layers, output = on_cpu(header, n_gpu_layers)
    return repackable(header.tensors, cpu_features(), cpu_layers, output)
