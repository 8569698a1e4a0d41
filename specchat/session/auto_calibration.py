"""The loaded pair calibrated in the background, between replies: a first run (or any pair
opened uncalibrated) ends calibrated for this machine without the user asking.

Textual-free. The chat screen starts :meth:`AutoCalibration.run` in a thread worker at a quiet
moment, pauses it when a reply starts (the reply's worker waits in :meth:`wait_stopped` until
the calibration's llama.cpp work has stopped, so the two never run at once) and starts it again
once the chat is idle; a paused calibration goes on at the prompt it stopped at. It measures the
runtime's own models on small contexts of its own (512 tokens, 64-token batches: tens of MB,
freed after), never a second copy of the weights. The result is stored as ``specchat models
calibrate`` stores it (the measurements; a catalog pair's γ in the user catalog), and the
chat's learning γ controller takes it in (:func:`reseed`). A cancel by the user or a failure is
remembered for the pair's files, so it is not started on its own again.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field, replace

from specchat.engine.policy.auto_gamma import AutoGammaSeed
from specchat.errors import Cancelled, SpecchatError
from specchat.models.calibration import (
    CalibrationOptions,
    CalibrationResult,
    CalibrationState,
    busy_warning,
    calibrate_loaded,
    recommendation,
)
from specchat.models.calibration_store import (
    calibrating,
    load_calibration,
    no_auto_reason,
    save_calibration,
    set_no_auto,
    stored_at,
)
from specchat.models.catalog import PairEntry
from specchat.models.progress import Progress, ProgressFn
from specchat.runtime.opening import Runtime

# The wizard's sizes (6 prompts × 48 tokens, γ up to 6); small contexts, since the prompts are
# short and every row's logits cost a vocabulary of floats per batch token.
OPTIONS = CalibrationOptions(max_tokens=48, gamma_max=6, n_ctx=512, n_batch=64)

WAITING, RUNNING, PAUSED = "waiting", "running", "paused"  # may still run
DONE, FAILED, CANCELLED, CLOSED, NOT_NEEDED = "done", "failed", "cancelled", "closed", "not needed"


@dataclass(frozen=True)
class Outcome:
    """How a run ended: ``phase`` (done, paused, failed, cancelled, closed, not needed), and
    for done the result and the seed a controller takes from it, for failed what went wrong."""

    phase: str
    result: CalibrationResult | None = None
    seed: AutoGammaSeed | None = None
    error: str = ""
    pair_gamma_saved: bool = False


@dataclass
class AutoCalibration:
    runtime: Runtime
    options: CalibrationOptions = OPTIONS
    phase: str = WAITING
    state: CalibrationState = field(default_factory=CalibrationState)
    cancel: threading.Event = field(default_factory=threading.Event)
    # Set while no calibration work runs: what a reply's worker waits for.
    stopped: threading.Event = field(default_factory=threading.Event)
    _stop_why: str = ""  # why cancel was set: "pause", "user" or "close"
    _checked: bool = False  # the store was asked whether the pair needs it

    def __post_init__(self) -> None:
        self.stopped.set()
        if not self.options.n_threads:  # time what chatting uses
            self.options = replace(self.options, n_threads=self.runtime.target_ctx.n_threads)

    @classmethod
    def for_runtime(cls, runtime: Runtime, enabled: bool,
                    options: CalibrationOptions | None = None) -> AutoCalibration | None:
        """A calibration to run for ``runtime``, or None: turned off, one model (no pair to
        calibrate), or nowhere to store it. Whether the pair needs one is asked in the worker
        (:meth:`run`): it reads the files."""
        if not enabled or runtime.draft is None or runtime.paths is None:
            return None
        return cls(runtime, options or OPTIONS)

    @property
    def label(self) -> str:
        return self.runtime.selection.label

    @property
    def active(self) -> bool:
        """Not over yet: waiting, running or paused."""
        return self.phase in (WAITING, RUNNING, PAUSED)

    # --- the UI thread ------------------------------------------------------------------------

    def begin(self) -> bool:
        """Mark a run as started (before its worker starts: a reply started right after must
        wait for it); False when there is nothing to run, or the last run's thread has not
        ended yet (its outcome, when it comes, is the moment to try again)."""
        if self.phase not in (WAITING, PAUSED) or not self.stopped.is_set():
            return False
        self.cancel = threading.Event()
        self._stop_why = ""
        self.stopped.clear()
        self.phase = RUNNING
        return True

    def pause(self) -> None:
        """A reply (or another screen) needs the machine: stop at the next token; :meth:`begin`
        goes on from the last prompt measured."""
        if self.phase == RUNNING:
            self._stop("pause")

    def stop_by_user(self) -> bool:
        """The user cancelled it: stop, store nothing, and do not start on its own again for
        these files. False when there was nothing to cancel."""
        if not self.active:
            return False
        if self.phase == RUNNING:
            self._stop("user")
        else:
            self.phase = CANCELLED
        self._remember("cancelled by you")
        return True

    def close(self) -> None:
        """The app quits or frees the models: stop (the caller waits with :meth:`wait_stopped`
        before freeing them)."""
        if self.phase == RUNNING:
            self._stop("close")
        elif self.active:
            self.phase = CLOSED

    def _stop(self, why: str) -> None:
        self._stop_why = why
        self.cancel.set()

    def wait_stopped(self, timeout: float) -> bool:
        """(Any thread) Wait until no calibration work runs; False if it still does."""
        return self.stopped.wait(timeout)

    # --- the worker thread --------------------------------------------------------------------

    def run(self, report: ProgressFn) -> Outcome:
        """Calibrate (or go on calibrating) the runtime's pair; never raises. Called after
        :meth:`begin` returned True."""
        try:
            return self._run(report)
        except Cancelled:
            why = self._stop_why
            self.phase = {"pause": PAUSED, "close": CLOSED}.get(why, CANCELLED)
            return Outcome(self.phase)
        except Exception as e:
            self.phase = FAILED
            text = str(e) if isinstance(e, SpecchatError) else \
                f"{type(e).__name__}: {e} (a bug in specchat)"
            self._remember(f"failed: {text}")
            return Outcome(FAILED, error=text)
        finally:
            self.stopped.set()

    def _run(self, report: ProgressFn) -> Outcome:
        rt = self.runtime
        assert rt.draft is not None and rt.paths is not None
        if not self._checked:
            self._checked = True
            if load_calibration(rt.paths, rt.target.path, rt.draft.path) is not None \
                    or no_auto_reason(rt.paths, rt.target.path, rt.draft.path) is not None:
                self.phase = NOT_NEEDED
                return Outcome(NOT_NEEDED)
        before = stored_at(rt.paths, rt.target.path, rt.draft.path)
        # another specchat calibrating the same files: wait (a reply stops the wait as it
        # stops a run), then take its result rather than time a machine it kept busy
        with calibrating(rt.paths, rt.target.path, rt.draft.path, report,
                         self.cancel.is_set) as waited:
            theirs = load_calibration(rt.paths, rt.target.path, rt.draft.path) if waited and \
                stored_at(rt.paths, rt.target.path, rt.draft.path) != before else None
            if theirs is not None:
                self.phase = DONE
                return Outcome(DONE, theirs, rt.auto_seed())
            result = calibrate_loaded(rt.target, rt.draft, self.options, report, self.cancel,
                                      self.state)
            if self.cancel.is_set() and self._stop_why in ("user", "close"):
                raise Cancelled("calibration cancelled")  # ended as it was cancelled: not stored
            save_calibration(rt.paths, result)
        saved = self._save_pair_gamma(result)
        self.phase = DONE
        return Outcome(DONE, result, rt.auto_seed(), pair_gamma_saved=saved)

    def _save_pair_gamma(self, result: CalibrationResult) -> bool:
        """A catalog pair keeps its calibrated γ, as `specchat models calibrate PAIR` does."""
        from specchat.models.user_catalog import update_user_catalog

        pair, paths = self.runtime.selection.pair, self.runtime.paths
        if pair is None or paths is None:
            return False
        try:
            update_user_catalog(paths.user_catalog, pairs=[
                PairEntry(pair.id, pair.target, pair.draft, result.gamma, pair.notes)])
        except (OSError, SpecchatError):
            return False  # the measurements are stored; the planner does not read the γ
        return True

    def _remember(self, why: str) -> None:
        rt = self.runtime
        if rt.paths is not None and rt.draft is not None:
            with contextlib.suppress(OSError):  # else it is offered again next time: no harm
                set_no_auto(rt.paths, rt.target.path, rt.draft.path, why)


def progress_text(label: str, p: Progress) -> Progress:
    """A calibration progress record as the chat shows it: "calibrating demo for this
    machine…", in percent."""
    pct = 100.0 * p.done / p.total if p.total else 0.0
    return Progress(f"calibrating {label} for this machine…", round(pct), 100, unit="%",
                    finished=p.finished, failed=p.failed)


def reseed(runtime: Runtime, seed: AutoGammaSeed | None) -> bool:
    """Give the running chat's learning γ controller the calibration: every one ``runtime``
    handed out (``Runtime.reseed``; a fixed γ or plain decoding has none, nothing to learn from
    it). True if there was a calibration to give."""
    if seed is None:
        return False
    runtime.reseed(seed)
    return True


def finished_text(label: str, r: CalibrationResult) -> str:
    """What a calibration found, for a notice: the recommendation and its verdict (and when
    other programs were busy meanwhile, that its costs are likely too high)."""
    text = (f"{label} is calibrated for this machine. Recommended: {recommendation(r)}: "
            f"{r.verdict}. Replies from now on are planned on these measurements.")
    if r.busy:
        text += (f" It was {busy_warning(r)} (`specchat models calibrate {label}`).")
    return text
