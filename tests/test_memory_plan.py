"""The memory check: estimates against what llama.cpp allocates, "auto" GPU layers fitted to free
memory (draft first), and refusals with a suggestion instead of a crash inside llama.cpp.

GPU cases use injected readings (a fake 8 GB card) and GGUF headers shaped like real 8B/1B
models, so they run anywhere; the estimates are checked against real loads of real files.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from gguf.constants import GGMLQuantizationType as Q

from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.hardware import Device, HostMemory
from specchat.engine.llama.load_report import LoadReport
from specchat.engine.llama.memory_plan import Footprint, LoadRequest, MemoryReadings, check, plan_load
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings, ModelSettings
from specchat.errors import NotEnoughMemoryError
from specchat.formats.gguf_checks import validate
from specchat.formats.gguf_file import GgufHeader, TensorInfo
from specchat.loading import RuntimeOptions, Selection
from specchat.models.catalog import load_catalog
from specchat.models.resolver import ModelResolver, model_from_ref
from specchat.paths import AppPaths
from specchat.runtime.opening import Runtime

GB = 10**9
MIB = 1024 * 1024


def llama_header(name: str, n_layer: int, n_embd: int, n_ff: int, n_head: int, n_head_kv: int,
                 n_vocab: int = 128256, qtype: Q = Q.Q4_K) -> GgufHeader:
    """A header shaped like a Llama-3 GGUF (no file behind it: the plan needs only sizes)."""
    kv = n_embd // n_head * n_head_kv
    tensors = [TensorInfo("token_embd.weight", (n_embd, n_vocab), qtype, 0),
               TensorInfo("output_norm.weight", (n_embd,), Q.F32, 0),
               TensorInfo("output.weight", (n_embd, n_vocab), Q.Q6_K, 0)]
    for i in range(n_layer):
        for t, shape in (("attn_q", (n_embd, n_embd)), ("attn_k", (n_embd, kv)),
                         ("attn_v", (n_embd, kv)), ("attn_output", (n_embd, n_embd)),
                         ("ffn_gate", (n_embd, n_ff)), ("ffn_up", (n_embd, n_ff)),
                         ("ffn_down", (n_ff, n_embd))):
            tensors.append(TensorInfo(f"blk.{i}.{t}.weight", shape, qtype, 0))
        tensors += [TensorInfo(f"blk.{i}.attn_norm.weight", (n_embd,), Q.F32, 0),
                    TensorInfo(f"blk.{i}.ffn_norm.weight", (n_embd,), Q.F32, 0)]
    meta = {"general.architecture": "llama", "llama.block_count": n_layer,
            "llama.embedding_length": n_embd, "llama.feed_forward_length": n_ff,
            "llama.attention.head_count": n_head, "llama.attention.head_count_kv": n_head_kv,
            "llama.context_length": 131072, "general.name": name}
    return GgufHeader(Path(f"/models/{name}.gguf"), 3, meta, tensors)


TARGET_8B = llama_header("llama-8b", 32, 4096, 14336, 32, 8)
DRAFT_1B = llama_header("llama-1b", 16, 2048, 8192, 32, 8)


def request(role: str, header: GgufHeader, n_ctx: int = 8192, layers: int = -1,
            fit: bool = True, kv: str = "f16", main_gpu: int | None = None) -> LoadRequest:
    return LoadRequest(role, header.metadata["general.name"], header,
                       ModelSettings(n_gpu_layers=layers, fit_layers=fit, main_gpu=main_gpu),
                       ContextSettings(n_ctx=n_ctx, type_k=kv, type_v=kv))


def gpu(free: float, name: str = "CUDA0", backend: str = "CUDA", kind: str = "gpu") -> Device:
    return Device(name, "Fake GPU", kind, backend, int(free * GB), int(16 * GB))


def readings(*gpus: Device, host: float = 64) -> MemoryReadings:
    return MemoryReadings(bool(gpus), gpus, HostMemory(int(host * GB), int(128 * GB), "test"))


def test_footprint_of_a_llama_shaped_header() -> None:
    fp = Footprint.of(TARGET_8B)
    assert fp.n_layer == 32 and fp.n_vocab == 128256 and fp.tied_output == 0
    assert 4.5 * GB < fp.weights < 5.2 * GB  # a Q4_K_M 8B file is ~4.9 GB
    # 8192 tokens × 32 layers × (8 KV heads × 128) × K and V × 2 bytes = 1 GiB
    assert sum(fp.kv_bytes(8192, "f16")) == 8192 * 32 * 1024 * 2 * 2
    assert sum(fp.kv_bytes(8192, "q8_0")) == 8192 * 32 * 1024 * 2 * 34 // 32


def allocated(report: LoadReport, kind: str) -> int:
    """Bytes of one kind of buffer, over every device (a GPU build splits them)."""
    return sum(b.bytes for b in report.buffers if b.kind == kind)


def test_estimates_match_what_llama_cpp_allocates(tiny_target: Path) -> None:
    fp = Footprint.of(validate(tiny_target))
    model = LlamaModel(tiny_target)
    assert abs(allocated(model.load_report, "model") - fp.weights) <= 0.01 * MIB
    for flash in ("auto", "off"):
        ctx = LlamaContext(model, ContextSettings(n_ctx=2048, flash_attn=flash))
        assert abs(allocated(ctx.load_report, "KV") - sum(fp.kv_bytes(2048, "f16"))) <= 0.01 * MIB
        # An upper bound (plus the host-side allowance when layers are offloaded).
        assert allocated(ctx.load_report, "compute") <= fp.compute_bytes(2048, 512, flash) + 20 * MIB


@pytest.mark.slow
def test_estimates_on_a_real_model(demo_files: tuple[Path, Path]) -> None:
    target, _ = demo_files
    fp = Footprint.of(validate(target))
    model = LlamaModel(target, ModelSettings(n_gpu_layers=0))
    assert abs(allocated(model.load_report, "model") - fp.weights) < 0.01 * fp.weights
    ctx = LlamaContext(model, ContextSettings(n_ctx=4096, flash_attn="off"))
    assert abs(allocated(ctx.load_report, "KV") - sum(fp.kv_bytes(4096, "f16"))) <= 0.01 * MIB
    compute = allocated(ctx.load_report, "compute")
    assert compute <= fp.compute_bytes(4096, 512, "off") < 2 * compute


def test_auto_offloads_the_draft_fully_and_fits_the_target() -> None:
    r = readings(gpu(7.0))  # an 8 GB laptop card with the desktop on it
    plan = plan_load([request("target", TARGET_8B), request("draft", DRAFT_1B)], r)
    target, draft = plan.plan("target"), plan.plan("draft")
    assert draft.gpu_layers == draft.layers == 17  # 16 blocks + the output layer
    assert 0 < target.gpu_layers < target.layers
    assert plan.shortfall() is None
    assert plan.notices() == [f"llama-8b: {target.gpu_layers} of 33 layers fit in free GPU memory; "
                              "the rest run on the CPU (slower)"]
    check(plan)
    # One more target layer would not have fitted.
    more = plan_load([request("target", TARGET_8B, layers=target.gpu_layers + 1, fit=False),
                      request("draft", DRAFT_1B)], r)
    assert more.shortfall() is not None


def test_auto_takes_every_layer_when_they_fit() -> None:
    plan = plan_load([request("target", TARGET_8B), request("draft", DRAFT_1B)],
                     readings(gpu(40)))
    assert [p.gpu_layers for p in plan.plans] == [33, 17] and plan.notices() == []
    assert plan.gpu_need > 6 * GB and plan.host_need < 2 * GB  # embeddings stay on the host


def test_explicit_layers_that_do_not_fit_are_refused_with_the_count_that_fits() -> None:
    r = readings(gpu(7.0))
    reqs = [request("target", TARGET_8B, layers=-1, fit=False), request("draft", DRAFT_1B)]
    with pytest.raises(NotEnoughMemoryError) as e:
        check(plan_load(reqs, r))
    msg = str(e.value)
    assert msg.startswith("not enough GPU memory on CUDA0 (Fake GPU) for llama-8b + llama-1b")
    assert "\n" not in msg and "--no-memory-check" in msg
    k = int(msg.split("--gpu-layers ")[1].split()[0])
    fits = plan_load([replace(reqs[0], model=replace(reqs[0].model, n_gpu_layers=k)), reqs[1]], r)
    over = plan_load([replace(reqs[0], model=replace(reqs[0].model, n_gpu_layers=k + 1)),
                      reqs[1]], r)
    assert fits.shortfall() is None and over.shortfall() is not None


def test_host_memory_shortage_suggests_a_smaller_context() -> None:
    r = readings(host=3)  # a CPU-only build on a small machine
    with pytest.raises(NotEnoughMemoryError, match=r"not enough RAM .* — try --ctx-size \d+"):
        check(plan_load([request("target", DRAFT_1B, n_ctx=131072)], r))
    with pytest.raises(NotEnoughMemoryError, match="choose a smaller model or quantization"):
        check(plan_load([request("target", TARGET_8B, n_ctx=512)], r))


def test_unified_memory_counts_gpu_and_host_together() -> None:
    metal = gpu(12, name="MTL0", backend="Metal")
    reqs = [request("target", TARGET_8B, n_ctx=32768), request("draft", DRAFT_1B, n_ctx=32768)]
    assert plan_load(reqs, readings(metal, host=64)).shortfall() is None
    short = plan_load(reqs, readings(metal, host=9)).shortfall()
    assert short is not None and short.startswith("not enough RAM")


def test_main_gpu_is_checked_on_its_own() -> None:
    r = readings(gpu(14, "CUDA0"), gpu(2, "CUDA1"))
    reqs = [request("target", TARGET_8B, layers=-1, fit=False, main_gpu=1)]
    with pytest.raises(NotEnoughMemoryError, match=r"on CUDA1 \(Fake GPU\)"):
        check(plan_load(reqs, r))
    auto = plan_load([request("target", TARGET_8B, main_gpu=1)], r)
    assert 0 < auto.plans[0].gpu_layers < 33 and auto.shortfall() is None
    # Two models pinned to the same card share it: the draft first, the target gets the rest.
    both = plan_load([request("target", TARGET_8B, main_gpu=1),
                      request("draft", DRAFT_1B, n_ctx=2048, main_gpu=1)], r)
    assert both.plan("draft").gpu_layers == 17 and both.shortfall() is None
    assert both.plan("target").gpu_layers < auto.plans[0].gpu_layers


def test_unknown_readings_offload_everything_and_refuse_nothing() -> None:
    r = MemoryReadings(True, (), HostMemory(None, None, "not read"))
    plan = plan_load([request("target", TARGET_8B, n_ctx=131072)], r)
    assert plan.plans[0].gpu_layers == 33 and plan.shortfall() is None


def tiny_selection(path: Path) -> Selection:
    return Selection(model_from_ref(load_catalog(), str(path)))


def test_runtime_refuses_before_loading(tmp_path: Path, tiny_target: Path) -> None:
    paths = AppPaths(tmp_path, tmp_path, tmp_path)
    resolver = ModelResolver(load_catalog(), paths)
    starved = MemoryReadings(False, (), HostMemory(100 * MIB, 4 * GB, "test"))
    with pytest.raises(NotEnoughMemoryError, match="not enough RAM"):
        Runtime.open(tiny_selection(tiny_target), resolver, RuntimeOptions(), readings=starved)
    rt = Runtime.open(tiny_selection(tiny_target), resolver, RuntimeOptions(memory_check=False),
                      readings=starved)
    rt.close()


def test_an_absurd_context_is_refused_on_this_machine(tmp_path: Path, tiny_target: Path) -> None:
    resolver = ModelResolver(load_catalog(), AppPaths(tmp_path, tmp_path, tmp_path))
    options = RuntimeOptions(context=ContextSettings(n_ctx=2_000_000_000))  # a terabyte of KV
    with pytest.raises(NotEnoughMemoryError, match=r"not enough .* — try --ctx-size \d+"):
        Runtime.open(tiny_selection(tiny_target), resolver, options)


def test_cli_prints_one_line_and_exits_1(tmp_path: Path, tiny_target: Path) -> None:
    env = {**os.environ, "SPECCHAT_HOME": str(tmp_path / "home")}
    r = subprocess.run([sys.executable, "-m", "specchat", "ask", "hi", "--model", str(tiny_target),
                        "--ctx-size", "2000000000"], capture_output=True, text=True, env=env,
                       timeout=120, check=False)
    assert r.returncode == 1
    assert r.stderr.startswith("specchat: error: not enough ")
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
