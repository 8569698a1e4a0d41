"""MTP ("NextN") layers: detection from the GGUF header, and the ``mtp`` drafter run through
llama.cpp on a generated tiny model that ships one MTP block (``write_tiny_mtp_model``, a
GLM-4.5-style ``glm4moe`` file). The tiny block has random weights, so these tests check the
plumbing and exactness, not acceptance; see ``engine/drafters/mtp.py`` for what stays untested.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import llama_cpp
import numpy as np
import pytest

from specchat.cli.main import main
from specchat.devtools.tiny_models import TinySpec, write_tiny_model, write_tiny_mtp_model
from specchat.engine.decode.decoding import run_to_end
from specchat.engine.decode.drafting import DraftRequest
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.plan import chain
from specchat.engine.decode.registry import DrafterEnv, build
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma
from specchat.engine.drafters.mtp import MtpDrafter
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings, ModelSettings
from specchat.engine.llama.mtp import MtpContext, capture_for, hooks_available
from specchat.errors import SpecchatError
from specchat.formats.gguf_file import read_header
from specchat.models.mtp import detect, detect_path
from specchat.paths import AppPaths

CS = ContextSettings(n_ctx=512, n_batch=64, n_threads=1)
MTP_LOAD = ModelSettings(n_gpu_layers=0, load_mtp=True)
GREEDY = SamplerSettings(temperature=0, max_tokens=40)

pytestmark = pytest.mark.skipif(not hooks_available(), reason="llama.cpp lacks the MTP hooks")


@pytest.fixture(scope="module")
def mtp_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_mtp_model(tmp_path_factory.mktemp("mtp") / "tiny-mtp.gguf")


@pytest.fixture(scope="module")
def llama_with_nextn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A llama file holding nextn tensors (no metadata key): detected, but not runnable."""
    spec = TinySpec(n_layer=3)

    def add(w: dict[str, np.ndarray]) -> None:
        e = spec.n_embd
        w["blk.2.nextn.eh_proj.weight"] = np.zeros((e, 2 * e), np.float32)
        w["blk.2.nextn.enorm.weight"] = np.ones(e, np.float32)

    return write_tiny_model(tmp_path_factory.mktemp("mtp") / "llama-nextn.gguf", spec,
                            weights_hook=add)


# ------------------------------------------------------------------------------ detection


def test_the_metadata_key_and_the_tensors_are_found(mtp_file: Path) -> None:
    heads = detect_path(mtp_file)
    assert heads is not None
    assert (heads.arch, heads.layers, heads.blocks) == ("glm4moe", 1, (2,))
    assert heads.runnable
    assert heads.line() == "has MTP heads (1 layer): can self-draft with --drafter mtp"


def test_a_model_without_mtp_layers_has_none(tiny_target: Path) -> None:
    assert detect_path(tiny_target) is None


def test_tensor_names_alone_are_enough_and_an_unsupported_architecture_says_so(
        llama_with_nextn: Path) -> None:
    heads = detect_path(llama_with_nextn)
    assert heads is not None and heads.layers == 0 and heads.blocks == (2,)
    assert not heads.runnable
    assert "llama.cpp does not run them for llama models" in heads.line()


def test_a_conversion_that_dropped_the_layers_is_told_apart(tmp_path: Path) -> None:
    heads = detect_path(write_tiny_mtp_model(tmp_path / "stripped.gguf", strip=True))
    assert heads is not None and heads.stripped and not heads.runnable
    assert "the file holds none" in heads.line()


def test_the_first_part_of_a_split_file_is_not_taken_for_a_stripped_one(mtp_file: Path,
                                                                        tmp_path: Path) -> None:
    part = tmp_path / "big-00001-of-00002.gguf"
    w = gguf.GGUFWriter(str(part), "qwen35")
    w.add_uint32("qwen35.nextn_predict_layers", 1)
    w.add_tensor("token_embd.weight", np.zeros((4, 4), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    heads = detect(read_header(part, token_texts=False))
    assert heads is not None and not heads.whole_file and heads.runnable


def test_models_check_says_whether_a_target_ships_mtp_layers(
        home: AppPaths, mtp_file: Path, tiny_target: Path, tiny_draft: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "check", str(mtp_file)]) == 0
    out = capsys.readouterr().out
    assert "has MTP heads (1 layer): can self-draft with --drafter mtp" in out
    assert main(["models", "check", str(tiny_target)]) == 0
    assert "MTP" not in capsys.readouterr().out  # nothing when absent
    main(["models", "check", str(tiny_target), str(tiny_draft)])
    assert "MTP" not in capsys.readouterr().out
    main(["models", "check", str(mtp_file), str(tiny_draft)])
    assert "can self-draft with --drafter mtp" in capsys.readouterr().out


# ------------------------------------------------------------------------- the drafter


@pytest.fixture
def loaded(mtp_file: Path) -> tuple[LlamaModel, LlamaContext]:
    model = LlamaModel(mtp_file, MTP_LOAD)
    ctx = LlamaContext(model, CS)
    yield model, ctx
    ctx.close()
    model.close()


def output_matrix(path: Path) -> np.ndarray:
    reader = gguf.GGUFReader(path)
    return next(t for t in reader.tensors if t.name == "output.weight").data


def test_the_capture_holds_every_tokens_post_norm_hidden_state(
        loaded: tuple[LlamaModel, LlamaContext], mtp_file: Path) -> None:
    from llama_cpp import llama_cpp_ext as ext

    model, ctx = loaded
    cap = capture_for(ctx)
    tokens = model.tokenize("the cat sat on the mat")
    ctx.decode(tokens[:-3], logits="none")  # a prefill asks for no logits at all
    rows = ctx.decode(tokens[-3:], logits="all").copy()
    assert sorted(cap.rows) == list(range(len(tokens)))
    e = cap.n_embd
    for i in range(3):  # the whole buffer row = the _ith row of the same batch
        ith = np.ctypeslib.as_array(ext.llama_get_embeddings_nextn_ith(ctx.ptr, i), shape=(e,))
        assert np.array_equal(cap.row(len(tokens) - 3 + i, tokens[-3 + i]), ith)
    w = output_matrix(mtp_file)  # post-norm: the output matrix gives the logits back
    last = cap.row(len(tokens) - 1, tokens[-1])
    assert last is not None
    assert np.abs(w @ last - rows[-1]).max() < 1e-3
    assert cap.row(len(tokens) - 1, tokens[-1] + 1) is None  # keyed by token too
    ctx.truncate(4)
    ctx.decode([tokens[4]], logits="last")
    assert max(cap.rows) == 4  # a decode drops what followed its first position


def reference_chain(model: LlamaModel, seq: list[int], n: int) -> list[int]:
    """The greedy MTP chain after ``seq`` computed from scratch: a fresh target context for
    the hidden states, a fresh MTP context fed every (token p, h of p−1)."""
    ctx = LlamaContext(model, CS)
    cap = capture_for(ctx)
    ctx.decode(seq[:-1], logits="none")
    m = MtpContext(ctx)
    try:
        h = np.stack([cap.rows[p][1] for p in range(len(seq) - 1)])
        logits, hid = m.feed(seq[1:], h)
        out = []
        for _ in range(n):
            d = int(np.argmax(logits))
            out.append(d)
            logits, hid = m.feed([d], hid.copy()[None, :])
        return out
    finally:
        m.close()
        ctx.close()


def test_drafts_after_steps_equal_a_from_scratch_computation(
        loaded: tuple[LlamaModel, LlamaContext]) -> None:
    model, ctx = loaded
    drafter = build("mtp", DrafterEnv(ctx))
    assert isinstance(drafter, MtpDrafter)
    seq = model.tokenize("the cat sat on the mat and")
    ctx.decode(seq[:-1], logits="none")
    rng = np.random.default_rng(0)
    for step in range(4):  # the caches grow step by step; every chain must match
        got = drafter.propose(DraftRequest(seq, chain("mtp", 3), GREEDY, rng)).tokens
        assert list(got) == reference_chain(model, seq, 3)[: len(got)], step
        # commit one draft token and a "target" token, as a step with one accepted would
        seq = [*seq, got[0], 7]
        ctx.truncate(len(seq) - 3)
        ctx.decode(seq[len(seq) - 3 : -1], logits="all")


def test_greedy_mtp_output_equals_plain_and_survives_a_reused_prefix(
        loaded: tuple[LlamaModel, LlamaContext]) -> None:
    model, ctx = loaded
    prompt = model.tokenize("hello there, the robot")
    plain = run_to_end(PlainDecoder(ctx), prompt, GREEDY).tokens
    # The target's cache already holds the prompt (from the plain run) with no hidden states
    # captured: the drafter has them computed again rather than stop.
    dec = SpeculativeDecoder(ctx, None, FixedGamma(3), ["mtp"])
    spec = run_to_end(dec, prompt, GREEDY)
    assert spec.tokens == plain
    assert sum(s.gamma for s in spec.steps if s.drafter == "mtp") > 0
    again = run_to_end(dec, [*prompt, *plain[:5]], GREEDY)  # the next turn reuses the cache
    assert again.tokens == run_to_end(PlainDecoder(ctx), [*prompt, *plain[:5]], GREEDY).tokens
    sampled = run_to_end(dec, prompt, GREEDY.with_(temperature=0.9, seed=3))
    assert len(sampled.tokens) == GREEDY.max_tokens


def test_mtp_sampling_commits_the_targets_distribution(
        loaded: tuple[LlamaModel, LlamaContext], monkeypatch: pytest.MonkeyPatch) -> None:
    """The first committed token after a fixed prompt at T = 0.9, over 2,000 replies, against
    the target's own distribution there (χ² at 1e-6): the MTP chain goes through the one
    verifier. A control that keeps every draft unchecked fails the same test."""
    import specchat.engine.decode.target_pass as pass_mod
    from specchat.bench.chi2 import chi_square
    from specchat.engine.decode.sampling import distribution
    from specchat.engine.decode.verify import Verdict

    model, ctx = loaded
    prompt = model.tokenize("the cat")
    s = SamplerSettings(temperature=0.9, max_tokens=3)  # room for a draft of 2
    p = distribution(ctx.decode(prompt, logits="last")[0].copy(), s)
    ctx.truncate(0)
    expected = dict(zip(p.ids.tolist(), p.probs.tolist(), strict=True))

    def counts() -> dict[object, int]:
        dec = SpeculativeDecoder(ctx, None, FixedGamma(2), ["mtp"])
        out: dict[object, int] = {}
        drafted = 0
        for seed in range(2000):
            run = run_to_end(dec, prompt, s.with_(seed=seed))
            out[run.tokens[0]] = out.get(run.tokens[0], 0) + 1
            drafted += run.steps[0].drafter == "mtp"
        assert drafted == 2000  # every first token was a checked (or corrected) draft
        return out

    result = chi_square(counts(), expected)
    assert result.ok, result

    original = pass_mod.verify_tree

    def unchecked(rows, tokens, parents, qs, rng):  # type: ignore[no-untyped-def]
        if not tokens:
            return original(rows, tokens, parents, qs, rng)
        return Verdict(accepted=len(tokens), token=int(tokens[-1]), rejected=None,
                       path=tuple(range(len(tokens))))

    monkeypatch.setattr(pass_mod, "verify_tree", unchecked)
    result = chi_square(counts(), expected)
    assert not result.ok, result


def test_a_model_without_mtp_layers_gets_a_clear_message(
        home: AppPaths, tiny_target: Path, llama_with_nextn: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["ask", "hi", "--model", str(tiny_target), "--drafter", "mtp", "--threads", "1"])
    err = capsys.readouterr().err
    assert rc != 0 and "Traceback" not in err
    assert "has no MTP heads (no nextn layers in the file): --drafter mtp needs a model" in err
    model = LlamaModel(tiny_target)
    ctx = LlamaContext(model, CS)
    with pytest.raises(SpecchatError, match="has no MTP layers that llama.cpp can run"):
        build("mtp", DrafterEnv(ctx))  # the engine's own message, without the header's detail
    ctx.close()
    model.close()


def test_ask_drafts_with_the_mtp_layers(home: AppPaths, mtp_file: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    def ask(*extra: str) -> str:
        rc = main(["ask", "the cat", "--model", str(mtp_file), "--threads", "1",
                   "--max-tokens", "24", "--temperature", "0", *extra])
        out = capsys.readouterr().out
        assert rc == 0, out
        return out

    assert ask("--drafter", "mtp", "--gamma", "2") == ask()


def test_the_runtime_loads_the_mtp_layers_only_when_the_file_has_them(
        mtp_file: Path, tiny_target: Path) -> None:
    from specchat.runtime.opening import _with_mtp

    assert _with_mtp(mtp_file, ModelSettings()).load_mtp
    assert not _with_mtp(tiny_target, ModelSettings()).load_mtp
    assert llama_cpp.llama_model_default_params().load_mtp is False  # llama.cpp's default


def test_the_wizards_draft_step_says_the_target_can_self_draft(
        tmp_path: Path, home: AppPaths, mtp_file: Path, tiny_target: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio
    import time

    from textual.widgets import OptionList, Static

    from specchat.ui.wizard.app import WizardApp
    from specchat.ui.wizard.screen import WizardScreen

    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "tiny-mtp-F32.gguf").write_bytes(mtp_file.read_bytes())
    (folder / "tiny-plain-F32.gguf").write_bytes(tiny_target.read_bytes())
    monkeypatch.setenv("SPECCHAT_MODEL_DIRS", str(folder))
    monkeypatch.setenv("HOME", str(tmp_path / "nohome"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))

    async def title_for(name: str) -> str:
        app = WizardApp(home)
        async with app.run_test(size=(120, 40)) as pilot:
            async def until(cond: object) -> None:
                end = time.monotonic() + 60
                while not cond():  # type: ignore[operator]
                    assert time.monotonic() < end, "timed out"
                    await pilot.pause(0.05)

            screen = app.screen
            assert isinstance(screen, WizardScreen)
            ol = screen.query_one("#target-list", OptionList)
            await until(lambda: any(name in str(o.prompt) for o in ol.options
                                    if o.id and o.id.startswith("local:")))
            ol.focus()
            ol.highlighted = next(i for i, o in enumerate(ol.options)
                                  if o.id and o.id.startswith("local:") and name in str(o.prompt))
            await pilot.press("enter")
            await until(lambda: screen.step == "step-draft")
            return str(screen.query_one("#draft-title", Static).render())

    assert "The target has MTP heads (1 layer): can self-draft with --drafter mtp" in \
        asyncio.run(title_for("tiny-mtp"))
    assert "MTP" not in asyncio.run(title_for("tiny-plain"))
