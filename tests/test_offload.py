"""Load settings (GPU layers, threads, flash attention, KV type, context) reach llama.cpp.

Each test reads back what llama.cpp itself made of the setting: its getters where it has them
(n_ctx, threads), otherwise what it logged while loading (layers offloaded, flash attention as
resolved, the KV buffer's size for the cache type).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import llama_cpp
import pytest

from specchat.cli.common import Env
from specchat.cli.main import build_parser
from specchat.config import load_config
from specchat.devtools.tiny_models import TinySpec, write_tiny_model
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.llama_lib import supports_gpu_offload
from specchat.engine.llama.memory_plan import Footprint
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings, ModelSettings
from specchat.engine.llama.offload import OffloadSettings, parse_gpu_layers
from specchat.errors import ConfigError, ModelFileError, SpecchatError
from specchat.formats.gguf_checks import validate
from specchat.loading import select
from specchat.paths import AppPaths
from specchat.runtime.opening import Runtime

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Head size 32, so block-quantized (32-wide) KV cache types apply."""
    return write_tiny_model(tmp_path_factory.mktemp("wide") / "wide.gguf",
                            TinySpec(n_embd=64, n_head=2, n_head_kv=2, n_layer=3, seed=4))


@pytest.fixture(scope="module")
def model(wide: Path) -> LlamaModel:
    return LlamaModel(wide)


def kv_buffer(ctx: LlamaContext) -> int:
    return sum(b.bytes for b in ctx.load_report.buffers if b.kind == "KV")


def test_context_size_and_threads_reach_llama_cpp(model: LlamaModel) -> None:
    ctx = LlamaContext(model, ContextSettings(n_ctx=300, n_threads=1, n_threads_batch=2))
    assert llama_cpp.llama_n_ctx(ctx.ptr) == ctx.n_ctx == 512  # padded to llama.cpp's 256 cells
    assert llama_cpp.llama_n_threads(ctx.ptr) == ctx.n_threads == 1
    assert llama_cpp.llama_n_threads_batch(ctx.ptr) == ctx.n_threads_batch == 2


@pytest.mark.parametrize(("kv_type", "flash"), [("f16", "off"), ("f16", "on"), ("q8_0", "auto"),
                                                ("q4_0", "on"), ("f32", "auto")])
def test_kv_type_and_flash_attention_reach_llama_cpp(model: LlamaModel, wide: Path, kv_type: str,
                                                     flash: str) -> None:
    ctx = LlamaContext(model, ContextSettings(n_ctx=1024, flash_attn=flash, type_k=kv_type,
                                              type_v=kv_type))
    # "auto" resolves per device; a quantized V cache makes llama.cpp turn it on.
    if flash == "off":
        assert ctx.load_report.flash_attn is False
    elif flash == "on" or kv_type.startswith("q"):
        assert ctx.load_report.flash_attn is True
    expected = sum(Footprint.of(validate(wide)).kv_bytes(ctx.n_ctx, kv_type))
    assert abs(kv_buffer(ctx) - expected) <= 0.006 * MIB  # llama.cpp logs MiB to 2 decimals
    assert expected == 1024 * 3 * (64 + 64) * {"f32": 4, "f16": 2, "q8_0": 34 / 32,
                                                "q4_0": 18 / 32}[kv_type]


def test_quantized_v_cache_without_flash_attention_is_refused(model: LlamaModel) -> None:
    with pytest.raises(ValueError, match="kv_type needs flash attention"):
        OffloadSettings(kv_type="q8_0", flash_attn="off").validate()
    # llama.cpp's own refusal comes through as its error line, not a warning or info line.
    with pytest.raises(ModelFileError, match="quantized V cache requires flash_attn"):
        LlamaContext(model, ContextSettings(flash_attn="off", type_k="q8_0", type_v="q8_0"))


def test_unknown_cache_type_is_a_clear_error(model: LlamaModel) -> None:
    with pytest.raises(SpecchatError, match="unknown K cache type 'q9'"):
        LlamaContext(model, ContextSettings(type_k="q9"))


@pytest.mark.parametrize("n_gpu_layers", [0, 1, -1])
def test_gpu_layers_reach_llama_cpp(wide: Path, n_gpu_layers: int) -> None:
    m = LlamaModel(wide, ModelSettings(n_gpu_layers=n_gpu_layers))
    rep = m.load_report
    assert m.n_layer == 3
    if supports_gpu_offload():
        want = m.n_layer + 1 if n_gpu_layers < 0 else n_gpu_layers
        assert (rep.offloaded_layers, rep.offloadable_layers) == (want, m.n_layer + 1)
        assert (rep.gpu_bytes > 0) == (want > 0)
    else:  # a CPU-only build keeps every weight on the host (one with the RPC backend, which
        # can offload to servers, says "0 layers offloaded"; one without says nothing)
        assert rep.offloaded_layers in (None, 0)
        assert rep.gpu_bytes == 0 and rep.host_bytes > 0
        assert all(b.on_host for b in rep.buffers)


def cli_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["ask", "hi", *argv])


def test_command_line_flags_reach_llama_cpp(tmp_path: Path, wide: Path) -> None:
    env = Env(AppPaths(tmp_path / "c", tmp_path / "d", tmp_path / "k"))
    args = cli_args("--model", str(wide), "--threads", "1", "--kv-type", "q8_0", "--flash-attn",
                    "on", "--ctx-size", "256", "--gpu-layers", "0")
    options = env.runtime_options(args)
    rt = Runtime.open(select(env.catalog, model=str(wide)), env.resolver, options)
    try:
        ctx = rt.target_ctx
        assert llama_cpp.llama_n_ctx(ctx.ptr) == 256
        assert llama_cpp.llama_n_threads(ctx.ptr) == 1
        assert ctx.load_report.flash_attn is True
        assert abs(kv_buffer(ctx) - 256 * 3 * 128 * 34 / 32) <= 0.006 * MIB
        assert rt.target.settings.n_gpu_layers == 0
        assert rt.placement.models[0].gpu_layers == 0
        assert rt.placement.label.startswith("CPU")
        assert rt.plan is not None and rt.plan.plans[0].gpu_layers == 0
    finally:
        rt.close()


def test_config_file_then_flags(tmp_path: Path) -> None:
    paths = AppPaths(tmp_path / "c", tmp_path / "d", tmp_path / "k")
    paths.config_dir.mkdir(parents=True)
    paths.config_file.write_text(
        "n_threads: 1\nmemory_check: false\n"
        "target_offload: {gpu_layers: 20, main_gpu: 1, kv_type: q8_0}\n"
        "draft_offload: {gpu_layers: all, flash_attn: off}\n")
    env = Env(paths)
    o = env.runtime_options(cli_args())
    assert (o.target.n_gpu_layers, o.target.main_gpu, o.target.fit_layers) == (20, 1, False)
    assert (o.context.type_k, o.context.type_v, o.context.n_threads) == ("q8_0", "q8_0", 1)
    assert (o.draft.n_gpu_layers, o.draft.fit_layers, o.draft_ctx.flash_attn) == (-1, False, "off")
    assert o.draft_ctx.type_k == "f16" and o.memory_check is False
    o = env.runtime_options(cli_args("--gpu-layers", "auto", "--draft-gpu-layers", "2",
                                     "--kv-type", "f16", "--main-gpu", "auto"))
    assert (o.target.n_gpu_layers, o.target.fit_layers, o.target.main_gpu) == (-1, True, None)
    assert o.draft.n_gpu_layers == 2 and o.context.type_k == "f16"
    with pytest.raises(SpecchatError, match="draft model: kv_type needs flash attention"):
        env.runtime_options(cli_args("--kv-type", "q4_0"))  # the draft's config says flash off


def test_defaults_follow_the_build() -> None:
    o = Env(AppPaths(Path("/nonexistent/c"), Path("/x/d"), Path("/x/k"))).runtime_options(
        cli_args())
    assert o.target.n_gpu_layers == o.draft.n_gpu_layers == -1  # auto: all that fit
    assert o.target.fit_layers and o.draft.fit_layers and o.memory_check
    assert o.context.flash_attn == "auto" and o.context.type_k == "f16"


def test_gpu_layers_values() -> None:
    assert parse_gpu_layers("auto") == "auto" and parse_gpu_layers("ALL") == "all"
    assert parse_gpu_layers("-1") == "all" and parse_gpu_layers("12") == 12
    for bad in ("lots", "-2", "1.5"):
        with pytest.raises(ValueError, match="not 'auto', 'all' or a number"):
            parse_gpu_layers(bad)
    with pytest.raises(SystemExit):
        cli_args("--gpu-layers", "lots")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("target_offload: {gpu_layers: lots}\n",
         "setting 'target_offload.gpu_layers' must be 'auto', 'all' or a whole number"),
        ("draft_offload: {kv_type: q9}\n", "setting 'draft_offload.kv_type' must be one of"),
        ("draft_offload: {flash_attn: maybe}\n", "setting 'draft_offload.flash_attn' must be"),
        ("target_offload: {main_gpu: -1}\n", "setting 'target_offload.main_gpu' must be"),
        ("target_offload: {gpus: 2}\n", "unknown setting 'target_offload.gpus'"),
        ("target_offload: 3\n", "'target_offload' must be a mapping"),
        ("memory_check: sometimes\n", "setting 'memory_check' must be true or false"),
    ],
)
def test_broken_offload_config_names_the_setting(tmp_path: Path, text: str, match: str) -> None:
    f = tmp_path / "config.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_config(f)


def test_yaml_on_off_is_accepted_for_flash_attention(tmp_path: Path) -> None:
    f = tmp_path / "config.yaml"
    f.write_text("target_offload: {flash_attn: on}\ndraft_offload: {flash_attn: off}\n")
    cfg = load_config(f)
    assert cfg.target_offload.flash_attn == "on" and cfg.draft_offload.flash_attn == "off"
