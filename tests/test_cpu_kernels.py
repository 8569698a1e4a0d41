"""The CPU kernels a model loads for: llama.cpp's own choice, its weight repacking without the
AMX kernels where those crash (buffer overrides to CPU_REPACK), or the plain kernels.

The AMX crash cannot be run on a machine whose AMX works or that has none, so the check's
verdict is stood in for as in test_amx; the repacked load itself, its child check included, is
real: a tiny model quantized to Q4_0, whose matrices llama.cpp's repacked AVX2 kernels take.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from specchat.engine.llama import amx, cpu_kernels
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings, ModelSettings
from specchat.engine.llama.quantize import quantize_file
from specchat.formats.gguf_file import TensorInfo, read_header
from specchat.paths import AppPaths

Q4_0, Q4_K, Q6_K, Q2_K, F32 = 2, 12, 14, 10, 0
X86 = cpu_kernels.cpu_features()
needs_x86_repack = pytest.mark.skipif(
    "AVX2" not in X86 or cpu_kernels.buffer_type(cpu_kernels.REPACK_NAME) is None,
    reason="the repack rule restated is x86's (AVX2) and needs the CPU_REPACK buffer type")


@pytest.fixture(scope="module")
def tiny_q4(tmp_path_factory: pytest.TempPathFactory, tiny_target: Path) -> Path:
    out = tmp_path_factory.mktemp("q4") / "q4_0.gguf"
    assert quantize_file(tiny_target, out, 2) == 0  # LLAMA_FTYPE_MOSTLY_Q4_0
    return out


@pytest.fixture
def no_verdicts(home: AppPaths, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    saved = os.environ.get(amx.ENV)
    monkeypatch.setattr(amx, "_verdict", None)
    monkeypatch.setattr(amx, "_note", None)
    monkeypatch.setattr(amx, "_repack", {})
    monkeypatch.delenv(amx.ENV, raising=False)
    monkeypatch.delenv(cpu_kernels.REPACK_ENV, raising=False)
    yield
    if saved is None:
        os.environ.pop(amx.ENV, None)
    else:
        os.environ[amx.ENV] = saved


def _load(path: Path) -> tuple[LlamaModel, np.ndarray]:
    model = LlamaModel(path, ModelSettings(n_gpu_layers=0))
    ctx = LlamaContext(model, ContextSettings(n_ctx=128, n_threads=2))
    logits = ctx.decode(list(range(3, 40)), logits="all").copy()
    ctx.close()
    return model, logits


def _buffers(model: LlamaModel) -> dict[str, int]:
    return {b.device: b.bytes for b in model.load_report.buffers if b.kind == "model"}


def _amx_crashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The build offers AMX and its child dies of it; the repacked load's child is real."""
    calls: list[str] = []
    real_probe = amx.probe

    def probe(path: Path | str, command: list[str] | None = None, *, repack: bool = False,
              n_gpu_layers: int = 0) -> bool | None:
        calls.append("repack" if repack else "amx")
        return real_probe(path, repack=True, n_gpu_layers=n_gpu_layers) if repack else False

    monkeypatch.setattr(amx, "build_has_amx", lambda: True)
    monkeypatch.setattr(amx, "probe", probe)
    return calls


@needs_x86_repack
def test_where_amx_crashes_the_weights_are_repacked_as_without_amx(
        no_verdicts: None, tiny_q4: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # This build has no AMX here: llama.cpp's own choice is what a build without AMX does.
    assert not amx.build_has_amx()
    own, own_logits = _load(tiny_q4)
    assert own.kernels is not None and own.kernels.kind == "default"
    assert _buffers(own).get(cpu_kernels.REPACK_NAME, 0) > 0
    calls = _amx_crashes(monkeypatch)
    model, logits = _load(tiny_q4)
    assert model.kernels is not None and model.kernels.kind == "repack", model.kernels
    assert calls == ["amx", "repack"]  # the AMX check, then the repacked load's, in children
    # The overrides put exactly the weights llama.cpp itself repacks there, and nothing of AMX.
    assert _buffers(model) == _buffers(own)
    assert "AMX" not in _buffers(model)
    assert np.array_equal(logits, own_logits)
    assert "repacking kept" in (amx.note() or "")
    # Kept per build and set of weights: the next process asks no child.
    monkeypatch.setattr(amx, "_verdict", None)
    monkeypatch.setattr(amx, "_repack", {})
    monkeypatch.delenv(amx.ENV)
    again, _ = _load(tiny_q4)
    assert again.kernels is not None and again.kernels.kind == "repack"
    assert calls == ["amx", "repack"]


@needs_x86_repack
def test_a_repacked_load_that_crashes_too_means_the_plain_kernels(
        no_verdicts: None, tiny_q4: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(amx, "build_has_amx", lambda: True)
    monkeypatch.setattr(amx, "probe", lambda *_a, **_k: False)
    model, _ = _load(tiny_q4)
    assert model.kernels is not None and model.kernels.kind == "plain"
    assert cpu_kernels.REPACK_NAME not in _buffers(model)
    assert "plain" in (amx.note() or "") and "CMAKE_ARGS" in (amx.note() or "")


def test_the_real_repack_child(tiny_q4: Path, tiny_target: Path) -> None:
    if "AVX2" in X86 and cpu_kernels.buffer_type(cpu_kernels.REPACK_NAME) is not None:
        assert amx.probe(tiny_q4, repack=True) is True
    # F32 weights have no repacked kernels: the child says nothing about them.
    assert amx.probe(tiny_target, repack=True) is None


def test_the_user_turns_repacking_off(no_verdicts: None, tiny_q4: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cpu_kernels.REPACK_ENV, "off")
    monkeypatch.setattr(amx, "probe", lambda *_a, **_k: pytest.fail("checked"))
    model, _ = _load(tiny_q4)
    assert model.kernels is not None and model.kernels.kind == "plain"
    assert set(_buffers(model)) <= {"CPU", "CPU_Mapped"}


def _t(name: str, shape: tuple[int, ...], ggml_type: int = Q4_K) -> TensorInfo:
    return TensorInfo(name, shape, ggml_type, 0)


def test_which_weights_the_repacked_kernels_take() -> None:
    tensors = [
        _t("token_embd.weight", (1536, 151936)),  # read by rows (GET_ROWS), never repacked
        _t("output.weight", (1536, 151936)),
        _t("blk.0.attn_q.weight", (1536, 1536)),
        _t("blk.0.attn_k.weight", (1536, 256), Q6_K),  # no x86 repacked kernel for Q6_K
        _t("blk.0.attn_v.weight", (1536, 252)),  # rows not a multiple of 8
        _t("blk.0.attn_norm.weight", (1536,), F32),
        _t("blk.0.ffn_down.weight", (8960, 1536), Q2_K),  # Q2_K: AVX-512 only
        _t("blk.1.ffn_up_exps.weight", (1536, 512, 8)),  # experts: 3-D
        _t("blk.1.ffn_up.weight", (1536, 512, 8)),  # a 3-D plain matrix is no expert
        _t("blk.1.ssm_x.weight", (1536, 512)),  # not known as a matrix: left alone
        _t("blk.1.attn_output.weight", (1536, 1536), Q4_0),
    ]
    names = [t.name for t in cpu_kernels.repackable(tensors, frozenset({"AVX2"}))]
    assert names == ["output.weight", "blk.0.attn_q.weight", "blk.1.ffn_up_exps.weight",
                     "blk.1.attn_output.weight"]
    wide = [t.name for t in cpu_kernels.repackable(tensors, frozenset({"AVX2", "AVX512"}))]
    assert "blk.0.ffn_down.weight" in wide
    assert cpu_kernels.repackable(tensors, frozenset({"NEON"})) == []
    # Offloaded layers are the GPU's: block 1 and the output stay out of the overrides.
    cpu_only = cpu_kernels.repackable(tensors, frozenset({"AVX2"}), cpu_layers=1,
                                      output_on_cpu=False)
    assert [t.name for t in cpu_only] == ["blk.0.attn_q.weight"]


def test_the_patterns_match_exactly_the_weights_named() -> None:
    import re

    names = ["output.weight", "blk.0.attn_q.weight", "blk.12.attn_q.weight",
             "blk.3.ffn_down.weight"]
    pats = cpu_kernels.patterns(names)
    assert len(pats) == 3  # one per kind of weight, not one per tensor
    everything = [*names, "blk.1.attn_q.weight", "blk.120.attn_q.weight",
                  "blk.3.ffn_up.weight", "output_norm.weight", "token_embd.weight"]
    hit = [n for n in everything if any(re.search(p, n) for p in pats)]
    assert hit == names


def test_overrides_are_a_null_terminated_array_kept_alive() -> None:
    o = cpu_kernels.BuftOverrides(("^a$", "^b$"), 1234)
    arr = o._array
    assert [arr[i].pattern for i in range(2)] == [b"^a$", b"^b$"]
    assert arr[0].buft == 1234 and arr[2].pattern is None
    assert o.pointer != 0


def test_the_layers_a_load_leaves_on_the_cpu(tiny_target: Path) -> None:
    header = read_header(tiny_target, token_texts=False)  # 2 blocks + the output layer
    assert cpu_kernels.on_cpu(header, 0) == (3, True)
    assert cpu_kernels.on_cpu(header, 1) == (2, False)
    assert cpu_kernels.on_cpu(header, 2) == (1, False)
    assert cpu_kernels.on_cpu(header, -1) == (0, False)


@pytest.mark.qwen
@needs_x86_repack
def test_on_the_qwen_pair_the_overrides_repack_what_llama_cpp_repacks(
        no_verdicts: None, qwen_paths: AppPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    # Q4_K_M files: Q4_K matrices repacked; Q6_K, Q5_0, Q8_0 ones (most of the 0.5B, whose
    # 896-wide rows do not fit Q4_K blocks) and the embedding, read by rows, stay plain.
    assert not amx.build_has_amx()
    for path in sorted(qwen_paths.models_dir.glob("qwen2.5-coder-*-q4_k_m.gguf")):
        monkeypatch.setattr(amx, "build_has_amx", lambda: False)
        own = LlamaModel(path, ModelSettings(n_gpu_layers=0))
        _amx_crashes(monkeypatch)
        model = LlamaModel(path, ModelSettings(n_gpu_layers=0))
        assert model.kernels is not None and model.kernels.kind == "repack", model.kernels
        assert _buffers(model)[cpu_kernels.REPACK_NAME] > 0
        assert _buffers(model) == _buffers(own), path.name
        own.close()
        model.close()
        monkeypatch.setattr(amx, "_verdict", None)
        monkeypatch.delenv(amx.ENV, raising=False)
