"""Run plain and speculative decoding over benchmark prompts and record what each run did.

Runs are interleaved per prompt (plain, then each γ, each other round in the reverse order,
then any reference tool through the ``after_prompt`` hook) so that a machine getting busier or
quieter affects every mode alike; both KV caches are cleared before each run so no run profits
from another's prompt (a learning γ policy does keep what earlier runs taught it, saved per
pair as between two `specchat ask`s). Each record is one run's ``GenerationStats`` plus what was
run; a greedy speculative record also says whether its reply is identical to plain decoding's
(or parted at a near-tie within this build's measured batch rounding, or a bug).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from specchat.bench.prompts import BenchPrompt
from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.decoding import Decoder, run_to_end
from specchat.engine.decode.events import GenerationStats
from specchat.engine.decode.messages import Message
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.llama import batch_rounding
from specchat.errors import SpecchatError
from specchat.models.progress import ProgressFn, Steps, no_progress
from specchat.runtime.opening import Runtime


@dataclass(frozen=True)
class BenchConfig:
    gammas: tuple[int | str, ...] = ("plan",)  # γ settings: plan, auto, pair or draft lengths
    temperatures: tuple[float, ...] = (0.0, 0.7)
    max_tokens: int = 128
    seed: int = 1
    ngram: bool = False
    drafters: tuple[str, ...] | None = None  # --drafter (None: the draft model, or --ngram's)
    system: str | None = "You are a helpful assistant."
    runs: int = 1  # timed rounds of every mode per prompt, interleaved; the median run is kept
    # Plain decoding a second time in every round ("plain again"): its speed-up against plain
    # is what this machine's noise alone makes of a mode that is plain decoding.
    control: bool = False


@dataclass(frozen=True)
class Mode:
    name: str  # plain | draft | draft+ngram | ngram
    gamma: int | str | None  # a γ setting (plan, auto, pair, a draft length), None: plain

    @property
    def label(self) -> str:
        return self.name if self.gamma is None else f"{self.name} γ={self.gamma}"


CONTROL = "plain again"


def modes(runtime: Runtime, cfg: BenchConfig) -> list[Mode]:
    out = [Mode("plain", None)] + ([Mode(CONTROL, None)] if cfg.control else [])
    spec = "draft" if runtime.draft_ctx is not None else None
    if cfg.drafters:
        spec = ",".join(cfg.drafters)
    elif cfg.ngram:
        spec = "draft+ngram" if spec else "ngram"
    if spec is not None:
        out += [Mode(spec, g) for g in cfg.gammas]
    return out


def render_prompt(runtime: Runtime, prompt: BenchPrompt, cfg: BenchConfig) -> tuple[str, list[int]]:
    """The chat-formatted prompt as text (for llama.cpp's tools) and as tokens."""
    engine = ChatEngine(runtime.decoder(plain=True))
    messages = ([Message("system", cfg.system)] if cfg.system else []) + [
        Message("user", prompt.text)]
    text = engine.template.render(messages, add_generation_prompt=True)
    return text, engine.tokenize_chat(messages)


def calibrated_rounding(runtime: Runtime) -> float | None:
    """The batch-rounding bound the pair's calibration measured, if there is one."""
    if runtime.paths is None or runtime.draft is None:
        return None
    from specchat.models.calibration_store import load_calibration

    try:
        found = load_calibration(runtime.paths, runtime.target.path, runtime.draft.path)
    except (OSError, ValueError, SpecchatError):
        return None
    return found.batch_rounding if found is not None else None


def _decoder(runtime: Runtime, mode: Mode) -> Decoder:
    if mode.gamma is None:
        return runtime.decoder(plain=True)
    if mode.name not in ("draft", "draft+ngram"):
        # --drafter names ("ngram" too: on a pair `--drafter ngram` is the lookup alone, and
        # --ngram without a draft model is the same drafter)
        return runtime.decoder(gamma=mode.gamma, drafters=tuple(mode.name.split(",")))
    # "draft": what runs by default (DEFAULT_PAIR_DRAFTERS); "draft+ngram": --ngram on a pair.
    return runtime.decoder(gamma=mode.gamma, ngram=True if mode.name == "draft+ngram" else None)


def run_once(runtime: Runtime, mode: Mode, tokens: Sequence[int],
             settings: SamplerSettings) -> GenerationStats:
    return run_tokens(runtime, mode, tokens, settings)[0]


def run_tokens(runtime: Runtime, mode: Mode, tokens: Sequence[int],
               settings: SamplerSettings) -> tuple[GenerationStats, list[int]]:
    runtime.clear_caches()
    done = run_to_end(_decoder(runtime, mode), tokens, settings)
    if mode.gamma in ("plan", "auto"):
        # Each run is a new controller, as each `specchat ask` is a new process; like those it
        # starts from what the pair's controllers learnt before (saved per pair), this run's
        # earlier prompts included — so only a first-ever prompt pays the warm-up.
        runtime.save_controllers()
    return done.stats, done.tokens


class _Identity:
    """Greedy replies against the plain one: identical, a near-tie within this build's batch
    rounding (measured once, at the first parting, unless the calibration knows it), or a bug."""

    def __init__(self, runtime: Runtime, bound: float | None) -> None:
        self.runtime = runtime
        self.bound = bound

    def verdict(self, prompt: Sequence[int], plain: list[int], other: list[int]) -> str:
        if plain == other:
            return "identical ✓"
        try:
            parting = batch_rounding.examine(self.runtime.target_ctx, prompt, plain, other,
                                             self.bound)
        finally:
            self.runtime.clear_caches()
        if parting is None:
            return "outputs differ in length — a bug"
        self.bound = parting.bound
        return parting.verdict()


AfterPrompt = Callable[[float, BenchPrompt, str], None]


def _median_run(runs: list[tuple[float, dict[str, Any]]]) -> dict[str, Any]:
    """The run of median speed among a mode's rounds on one prompt, with the spread of all."""
    ordered = sorted(runs, key=lambda r: r[0])
    rec = dict(ordered[(len(ordered) - 1) // 2][1])
    if len(ordered) > 1:
        rec["runs"] = len(ordered)
        rec["tok_s_range"] = [ordered[0][0], ordered[-1][0]]
        verdicts = {r[1].get("identity") for r in ordered} - {None}
        if len(verdicts) > 1:  # the worst verdict of any round stands
            rec["identity"] = next((v for v in verdicts if not str(v).startswith("identical")),
                                   rec.get("identity"))
    return rec


def _paired(runs: list[tuple[float, dict[str, Any]]],
            plain: list[tuple[float, dict[str, Any]]]) -> list[float]:
    """Each round's speed over plain decoding's in the same round: the two ran back to back, so
    a machine busier for a minute weighs on both, where a ratio of medians taken apart keeps it."""
    return [a / b for (a, _), (b, _) in zip(runs, plain, strict=True) if a > 0 and b > 0]


def run_bench(runtime: Runtime, prompts: Sequence[BenchPrompt], cfg: BenchConfig,
              progress: Callable[[str], None] = lambda _m: None,
              after_prompt: AfterPrompt | None = None,
              report: ProgressFn = no_progress) -> list[dict[str, Any]]:
    """Run every mode on every prompt at every temperature; ``after_prompt(T, prompt, text)``
    runs right after a prompt's own runs (a reference tool on the same rendered text).
    ``progress`` gets a line per run, ``report`` the count of runs (a bar and its ETA)."""
    ms = modes(runtime, cfg)
    rendered = [render_prompt(runtime, p, cfg) for p in prompts]
    # Warm-up: page the weights in and let the CPU settle before anything is timed.
    run_once(runtime, ms[-1], rendered[0][1], SamplerSettings(temperature=0, max_tokens=16))
    records: list[dict[str, Any]] = []
    total = len(cfg.temperatures) * len(prompts) * len(ms) * max(1, cfg.runs)
    identity = _Identity(runtime, calibrated_rounding(runtime))
    n_done = 0  # runs so far, for the progress line
    with Steps("bench", total, report, "runs") as bar:
        for temp in cfg.temperatures:
            settings = SamplerSettings(temperature=temp, seed=cfg.seed, max_tokens=cfg.max_tokens)
            for prompt, (text, tokens) in zip(prompts, rendered, strict=True):
                plain_ids: list[int] | None = None
                done: dict[int, list[tuple[float, dict[str, Any]]]] = {i: [] for i in range(len(ms))}
                for round_ in range(max(1, cfg.runs)):
                    # Every other round the other way round: a machine that drifts weighs on every
                    # mode alike (greedy identity needs plain first, which round 0 gives).
                    order = list(enumerate(ms))
                    for i, mode in (order if round_ % 2 == 0 else order[::-1]):
                        stats, ids = run_tokens(runtime, mode, tokens, settings)
                        rec = {"question_id": prompt.question_id, "category": prompt.category,
                               "mode": mode.name, "gamma": mode.gamma, "temperature": temp,
                               **stats.as_dict()}
                        same = ""
                        if settings.greedy and mode.gamma is None:
                            plain_ids = ids
                        elif settings.greedy and plain_ids is not None:
                            rec["identity"] = identity.verdict(tokens, plain_ids, ids)
                            same = f" · {rec['identity']}"
                        tps = stats.decode_tps  # once the reply has started (as the report)
                        done[i].append((tps, rec))
                        alpha = f" α {stats.alpha:.2f} τ {stats.tau:.2f}" if stats.alpha is not None \
                            and stats.tau is not None else ""
                        n_done += 1
                        bar.add()
                        runs = f" (run {round_ + 1}/{cfg.runs})" if cfg.runs > 1 else ""
                        progress(f"[{n_done}/{total}] T={temp:g} {prompt.category} "
                                 f"#{prompt.question_id} {mode.label}{runs}: "
                                 f"{stats.generated_tokens} tokens, {tps:.1f} tok/s{alpha}{same}")
                for i in range(len(ms)):
                    rec = _median_run(done[i])
                    if i > 0:  # ms[0] is plain decoding
                        rec["paired"] = _paired(done[i], done[0])
                    records.append(rec)
                if after_prompt is not None:
                    after_prompt(temp, prompt, text)
    return records
