"""Run a race: warm up, then plain and speculative in turn — never together — several times.

Both runs share the CPU/GPU, so running them at once would slow each by the other; run in
turn, each gets the whole machine, and the replay puts them side by side afterwards. Each side
runs ``runs`` times, alternating (plain, spec, plain, spec…), so a burst of other work hits both
alike; the result keeps every run and reports medians and spreads, with the machine's load.
Before each timed run both KV caches are cleared, so neither profits from the other's prompt.
A greedy divergence is examined at once: how close the target's two choices were there,
against this build's measured batch rounding (:mod:`specchat.engine.llama.batch_rounding`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.decoding import Decoder
from specchat.engine.decode.messages import Message
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.llama import batch_rounding
from specchat.engine.llama.machine_load import LoadWatch
from specchat.engine.policy.gamma import GammaSetting
from specchat.errors import SpecchatError
from specchat.models.calibration import CalibrationResult
from specchat.models.calibration_store import load_calibration
from specchat.models.progress import ProgressFn, Steps, no_progress
from specchat.race.result import Divergence, RaceResult
from specchat.race.timeline import RaceTimeline, record
from specchat.race.why import Costs, costs_from_calibration, costs_from_race
from specchat.runtime.opening import Runtime

WARMUP_TOKENS = 8
DEFAULT_RUNS = 3


@dataclass(frozen=True)
class RaceSetup:
    prompt: str
    settings: SamplerSettings
    system: str | None = None
    category: str | None = None
    runs: int = DEFAULT_RUNS  # timed runs per side, alternating


def race_decoder(runtime: Runtime, gamma: GammaSetting | int | str | None = None,
                 ngram: bool | None = None, drafters: Sequence[str] | None = None) -> Decoder:
    """The one place where the race (CLI) picks its speculative side's γ mode and drafter.

    ``gamma``/``ngram``/``drafters`` are what the user set; None leaves it to the default: the
    planner (a controller of the race's own) over the default drafters (``ngram`` False: the
    draft model alone).
    """
    return runtime.decoder(gamma=gamma, ngram=ngram, drafters=drafters)


class RaceCancelled(SpecchatError):
    pass


def run_race(runtime: Runtime, setup: RaceSetup, spec: Decoder, plain: Decoder | None = None,
             progress: Callable[[str], None] = lambda _m: None,
             cancel: threading.Event | None = None,
             report: ProgressFn = no_progress) -> RaceResult:
    """Race ``plain`` (default: the runtime's plain decoder) against ``spec`` on one prompt;
    ``progress`` says each run as it starts, ``report`` counts the runs (a bar and its ETA)."""
    if spec.name == "plain":
        raise SpecchatError("a race needs a draft model (a pair) or n-gram drafting: "
                            "pick a pair with --pair")
    plain = plain or runtime.decoder(plain=True)
    cancel = cancel or threading.Event()
    messages = ([Message("system", setup.system)] if setup.system else []) + [
        Message("user", setup.prompt)]
    tokens = ChatEngine(plain).fit(messages, setup.settings.max_tokens).tokens
    warm = replace(setup.settings, max_tokens=min(WARMUP_TOKENS, setup.settings.max_tokens))
    n = max(1, setup.runs)
    plains: list[RaceTimeline] = []
    specs: list[RaceTimeline] = []
    watch = LoadWatch()
    # Warm-up (untimed): pages the weights in and lets the CPU clock up, for both decoders.
    steps: list[tuple[str, str, Decoder, SamplerSettings]] = [
        ("warm-up", "warm-up", plain, warm), ("warm-up", "warm-up", spec, warm)]
    # Alternating in pairs, the second pair the other way round (plain, spec, spec, plain, …):
    # a machine that slows or speeds up over the race weighs on both sides alike.
    for i in range(n):
        k = 2 * i
        pair: list[tuple[str, str, Decoder, SamplerSettings]] = [
            ("plain", f"recording plain run {i + 1}/{n} ({k + 1}/{2 * n})…", plain,
             setup.settings),
            ("speculative", f"recording speculative run {i + 1}/{n} ({k + 2}/{2 * n})…",
             spec, setup.settings)]
        steps += pair if i % 2 == 0 else pair[::-1]
    # The bar counts runs, a warm-up as the share of a run its tokens are (the ETA stays true).
    weight = [min(1.0, st[3].max_tokens / max(1, setup.settings.max_tokens)) for st in steps]
    with Steps("race", sum(weight), report, "runs") as bar:
        for (label, message, decoder, settings), w in zip(steps, weight, strict=True):
            if cancel.is_set():
                raise RaceCancelled("race cancelled")
            progress(message)
            runtime.clear_caches()
            timeline = record(label, decoder, tokens, settings, cancel)
            if timeline.stats.stop_reason == "cancelled":
                raise RaceCancelled("race cancelled")
            if label == "plain":
                plains.append(timeline)
            elif label == "speculative":
                specs.append(replace(timeline, predicted_tok_s=_predicted(runtime, decoder)))
            bar.add(w)
    load = watch.done()
    runtime.clear_caches()
    calibration = _calibration(runtime)
    shown_plain, shown_spec = _median(plains), _median(specs)
    result = RaceResult(setup.prompt, runtime.selection.label, setup.settings, shown_plain,
                        shown_spec, setup.category, tuple(plains), tuple(specs), load,
                        costs=_costs(calibration, plains, specs), device=_device(runtime),
                        calibration_load=calibration.machine_load if calibration else None,
                        calibrated=(calibration is not None) if runtime.draft is not None
                        and runtime.paths is not None else None)
    if result.greedy and not result.identical and result.difference is not None:
        progress("examining where the outputs part…")
        divergence = examine(runtime, tokens, shown_plain, shown_spec,
                             calibration.batch_rounding if calibration else None)
        result = replace(result, divergence=divergence)
    return result


def _predicted(runtime: Runtime, decoder: Decoder) -> float | None:
    """The forecast of ``decoder``'s controller for the reply it just planned (None without a
    controller that makes one: only the planner does)."""
    controller = runtime.controller(decoder)
    return controller.forecast() if controller is not None else None


def _median(runs: list[RaceTimeline]) -> RaceTimeline:
    """The run of median speed (the one replayed): typical, not the luckiest."""
    return sorted(runs, key=lambda t: t.tok_s)[(len(runs) - 1) // 2]


def _calibration(runtime: Runtime) -> CalibrationResult | None:
    if runtime.paths is None or runtime.draft is None:
        return None
    try:
        return load_calibration(runtime.paths, runtime.target.path, runtime.draft.path)
    except (OSError, ValueError, SpecchatError):
        return None  # a missing or unreadable record: the race measures what it needs


def _costs(calibration: CalibrationResult | None, plains: list[RaceTimeline],
           specs: list[RaceTimeline]) -> Costs | None:
    """The race's own step costs (measured under the same load as its speeds), the draft's
    cost from the calibration when the race drafted no model tokens; the calibration alone
    when the race has no steps to time."""
    cal = None
    if calibration is not None:
        cal = costs_from_calibration(calibration.draft_s, calibration.verify_s)
    t1 = sorted(p.decode_s / max(1, len(p.tokens) - 1) for p in plains)[len(plains) // 2]
    own = costs_from_race(t1, [s for run in specs for s in run.steps])
    if own is None:
        return cal
    if own.draft is None and cal is not None and cal.draft is not None:
        # the calibration's draft/target ratio, applied to this race's own target step
        return Costs(own.t1, own.verify, cal.draft / cal.t1 * own.t1,
                     "this race; draft cost: calibration")
    return own


def _device(runtime: Runtime) -> str:
    return "CPU" if runtime.target.settings.n_gpu_layers == 0 or not _offloads() else "GPU"


def _offloads() -> bool:
    from specchat.engine.llama.llama_lib import supports_gpu_offload

    return bool(supports_gpu_offload())


def examine(runtime: Runtime, prompt: list[int], plain: RaceTimeline, spec: RaceTimeline,
            bound: float | None) -> Divergence | None:
    """How close the target's choice was where greedy outputs part, against this build's
    rounding (from the calibration, else measured now on this prompt's reply)."""
    try:
        return batch_rounding.examine(runtime.target_ctx, prompt, plain.token_ids,
                                      spec.token_ids, bound)
    finally:
        runtime.clear_caches()
