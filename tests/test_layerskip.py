"""Layer-skip self-drafts: the cut GGUF, its search, the command and the drafter.

- A cut keeping every block computes exactly the target's logits (bit for bit); a cut with
  fewer loads with that many blocks and remembers which.
- Bad input: a subset with no block, blocks that do not exist or are named twice, an
  architecture whose blocks depend on their index — each a one-line refusal, nothing written.
- ``specchat models self-draft TARGET --layers …`` records a ``derived`` model with its blocks
  and says what it costs on disk; ``--drafter layerskip`` then drafts with it, greedy output
  equal to plain greedy output; without a cut it says how to make one.
- The search scores candidates by α and measured costs and returns the best.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import gguf
import numpy as np
import pytest
import yaml

from specchat.cli.main import main
from specchat.devtools.tiny_models import TinySpec, write_tiny_model
from specchat.engine.decode.decoding import run_to_end
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma
from specchat.engine.drafters.layerskip import LayerSkipDrafter
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.models.catalog import DerivedSource, load_catalog
from specchat.models.layer_cut import CutError, kept_layers, open_source, parse_layers, write_cut
from specchat.models.layer_search import SearchOptions, format_layers, search, span_kept
from specchat.paths import AppPaths

# Small writes to the residual stream: the first blocks alone often agree with all of them.
DEEP = TinySpec(seed=1, n_layer=6, residual_scale=0.4)
CS = ContextSettings(n_ctx=256, n_threads=1)


@pytest.fixture(scope="module")
def deep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("ls") / "deep.gguf", DEEP, name="deep")


def logits(path: Path, tokens: list[int]) -> tuple[np.ndarray, int]:
    m = LlamaModel(path)
    c = LlamaContext(m, CS)
    try:
        return np.array(c.decode(tokens, logits="all")), m.n_layer
    finally:
        c.close()
        m.close()


def test_a_cut_keeping_every_block_reproduces_the_target_exactly(deep: Path,
                                                                 tmp_path: Path) -> None:
    dest = tmp_path / "all.gguf"
    write_cut(open_source(deep), dest, range(6))
    toks = [5, 6, 7, 8, 9, 10, 11]
    a, _ = logits(deep, toks)
    b, n = logits(dest, toks)
    assert n == 6 and np.array_equal(a, b)


def test_a_cut_loads_with_its_blocks_renumbered(deep: Path, tmp_path: Path) -> None:
    dest = tmp_path / "cut.gguf"
    size = write_cut(open_source(deep), dest, [0, 2, 5])
    assert size == dest.stat().st_size and not list(tmp_path.glob("*.part"))
    a, _ = logits(deep, [5, 6, 7])
    b, n = logits(dest, [5, 6, 7])
    assert n == 3 and kept_layers(dest) == (0, 2, 5)
    assert not np.array_equal(a, b)  # fewer blocks: another function
    r = gguf.GGUFReader(dest, "r")
    names = {t.name for t in r.tensors}
    assert "blk.2.ffn_down.weight" in names and "blk.3.attn_q.weight" not in names
    assert r.fields["tokenizer.ggml.tokens"].contents() == \
        gguf.GGUFReader(deep, "r").fields["tokenizer.ggml.tokens"].contents()


@pytest.mark.parametrize(("text", "message"), [
    ("", "needs at least one block"),
    (" , ", "needs at least one block"),
    ("6", "block 6 does not exist (the model has blocks 0-5)"),
    ("1,0-2", "block 1 is named twice"),
    ("4-2", "the range '4-2' is empty"),
    ("x", "'x' is not a block number or range"),
])
def test_bad_layer_lists_are_refused(text: str, message: str) -> None:
    with pytest.raises(CutError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_layers(text, 6)


def test_layer_lists_read_ranges() -> None:
    assert parse_layers("0-2,4,5-", 7) == (0, 1, 2, 4, 5, 6)
    assert format_layers((0, 1, 2, 4, 5, 6)) == "0-2,4-6"
    assert span_kept(6, 2, 3) == (0, 1, 5)


def test_zero_blocks_write_nothing(deep: Path, tmp_path: Path) -> None:
    with pytest.raises(CutError, match="at least one block"):
        write_cut(open_source(deep), tmp_path / "none.gguf", [])
    assert list(tmp_path.iterdir()) == []


def test_an_architecture_that_cannot_be_cut_says_which(tmp_path: Path) -> None:
    p = tmp_path / "g.gguf"
    w = gguf.GGUFWriter(str(p), "gemma3")
    w.add_block_count(2)
    w.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(CutError, match="cannot make a layer-skip draft of a gemma3 model: its "
                       "blocks alternate sliding-window and global attention"):
        open_source(p)


def test_the_command_records_a_derived_draft_and_the_drafter_uses_it(
        home: AppPaths, deep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["models", "self-draft", str(deep), "--layers", "0-2,5"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "on disk), blocks 0-2,5 of 0-5" in out and "--drafter layerskip" in out
    doc = yaml.safe_load(home.user_catalog.read_text())
    (entry,) = [m for m in doc["models"] if m["source"]["kind"] == "derived"]
    assert entry["source"]["layers"] == [0, 1, 2, 5]
    cat = load_catalog(home.user_catalog)
    src = cat.model(entry["id"]).source
    assert isinstance(src, DerivedSource) and src.layers == (0, 1, 2, 5)
    assert kept_layers(home.models_dir / src.filename) == (0, 1, 2, 5)

    def ask(*extra: str) -> list[int]:
        rc = main(["ask", "the cat sat", "--model", str(deep), "--temperature", "0",
                   "--max-tokens", "40", "--json", "--threads", "1", *extra])
        lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        assert rc == 0
        steps = [x for x in lines if x["type"] == "step"]
        if extra:
            assert steps and all(s["drafter"] in ("layerskip", "none") for s in steps)
        return [x["id"] for x in lines if x["type"] == "token"]

    assert ask("--drafter", "layerskip") == ask()


def test_layerskip_without_a_cut_says_how_to_make_one(
        home: AppPaths, tiny_target: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["ask", "hi", "--model", str(tiny_target), "--drafter", "layerskip"])
    err = capsys.readouterr().err
    assert rc != 0
    assert "has no layer-skip draft yet: make one with `specchat models self-draft" in err
    assert "Traceback" not in err


def test_the_drafter_greedy_equals_plain_and_sampling_runs(deep: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    write_cut(open_source(deep), cut, [0, 1, 2])
    tm = LlamaModel(deep)
    tc = LlamaContext(tm, CS)
    cm = LlamaModel(cut)
    prompt = tm.tokenize("the cat sat on the mat")
    s = SamplerSettings(temperature=0, max_tokens=60)
    plain = run_to_end(PlainDecoder(tc), prompt, s, threading.Event()).tokens
    drafter = LayerSkipDrafter(tc, lambda: LlamaContext(cm, CS))
    assert drafter.lag(prompt) == len(prompt)  # nothing read yet: its first step reads it all
    dec = SpeculativeDecoder(tc, None, FixedGamma(3), [drafter])
    spec = run_to_end(dec, prompt, s, threading.Event())
    assert spec.tokens == plain
    assert drafter.lag(prompt + spec.tokens) <= 3  # it kept up (the last steps' own tokens aside)
    assert sum(st.accepted for st in spec.steps) > 0
    sampled = run_to_end(dec, prompt, s.with_(temperature=0.9, seed=3), threading.Event())
    assert sampled.tokens


def test_the_search_scores_candidates_and_keeps_the_best(deep: Path, tmp_path: Path) -> None:
    said: list[str] = []
    r = search(open_source(deep), tmp_path, SearchOptions(n_prompts=1, max_tokens=12,
                                                          max_candidates=4, n_threads=1),
               said.append)
    assert 1 <= len(r.tried) <= 4
    assert r.best in r.tried and all(0 <= c.alpha <= 1 for c in r.tried)
    assert all(c.kept[0] == 0 and c.kept[-1] == 5 for c in r.tried)  # first and last stay
    assert r.block_s >= 0 and r.head_s >= 0
    assert said[0].startswith("costs here: target")
    assert not list(tmp_path.glob("layerskip-candidate*"))


def test_race_and_bench_run_the_layerskip_drafter(home: AppPaths, deep: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "self-draft", str(deep), "--layers", "0-2,5"]) == 0
    capsys.readouterr()
    rc = main(["race", "the cat sat", "--model", str(deep), "--drafter", "layerskip",
               "--threads", "1", "--max-tokens", "16", "--gamma", "2", "--no-replay"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "outputs identical ✓" in out
    prompts = tmp_path / "q.jsonl"
    prompts.write_text(json.dumps({"question_id": 1, "category": "alpha",
                                   "turns": ["the cat sat"]}) + "\n", encoding="utf-8")
    rc = main(["bench", "--model", str(deep), "--drafter", "layerskip", "--prompts",
               str(prompts), "--per-category", "1", "--max-tokens", "12", "--gamma", "2",
               "--temperature", "0", "--threads", "1", "--out", str(tmp_path / "b")])
    assert rc == 0, capsys.readouterr()
    doc = json.loads((tmp_path / "b" / "results.json").read_text())
    assert "layerskip" in json.dumps(doc)


def test_an_adhoc_target_gets_its_draft_in_the_models_folder(home: AppPaths, deep: Path) -> None:
    from specchat.models.resolver import ModelResolver, model_from_ref
    from specchat.models.self_draft import make_layerskip_draft

    cat = load_catalog()
    target = model_from_ref(cat, str(deep))  # its id is the file's path
    made = make_layerskip_draft(ModelResolver(cat, home), target, "0,5")
    assert made.path.parent == home.models_dir and made.path.name == "deep-layerskip.gguf"
    assert made.kept == (0, 5) and made.size == made.path.stat().st_size


def test_the_app_settings_choose_layerskip_through_the_runtime(home: AppPaths, deep: Path,
                                                               capsys: pytest.CaptureFixture[str]
                                                               ) -> None:
    from specchat.loading import select
    from specchat.models.resolver import ModelResolver
    from specchat.runtime.opening import Runtime
    from specchat.ui.chat_settings import DRAFTER_CHOICES, ChatSettings
    from specchat.ui.services import runtime_decoder

    assert "layerskip" in DRAFTER_CHOICES
    cat = load_catalog()
    rt = Runtime.open(select(cat, model=str(deep)), ModelResolver(cat, home))
    try:
        # No cut yet: the app's one drafter setting falls back to plain decoding.
        assert isinstance(runtime_decoder(rt, ChatSettings(drafter="layerskip")), PlainDecoder)
    finally:
        rt.close()
    assert main(["models", "self-draft", str(deep), "--layers", "0-3"]) == 0
    capsys.readouterr()
    cat = load_catalog(home.user_catalog)
    rt = Runtime.open(select(cat, model=str(deep)), ModelResolver(cat, home))
    try:
        dec = runtime_decoder(rt, ChatSettings(drafter="layerskip"))
        assert isinstance(dec, SpeculativeDecoder)
        # The chosen drafter, behind the prediction drafter that drafts from attached files.
        assert [d.name for d in dec.drafters] == ["prediction", "layerskip"]
    finally:
        rt.close()
