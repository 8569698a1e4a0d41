"""The pair calibrated in the background while the chat is quiet (:mod:`specchat.session.
auto_calibration`): its progress bar, one line over the stats bar while it runs or is paused,
and F12 to stop it.

The bar runs the calibration in its own thread worker, whose progress comes back to it as
messages. The chat screen tells it when the chat becomes quiet (opened, a reply ended, back in
front) and when it stops being quiet (a reply starts, another screen opens over it): a reply
always goes first.
"""

from __future__ import annotations

from typing import Any

from textual import work

from specchat.engine.llama import llama_thread
from specchat.models.progress import WAIT, Progress
from specchat.runtime.opening import Runtime
from specchat.session.auto_calibration import (
    CANCELLED,
    DONE,
    FAILED,
    PAUSED,
    RUNNING,
    AutoCalibration,
    Outcome,
    finished_text,
    progress_text,
    reseed,
)
from specchat.session.controller import ChatSession
from specchat.ui.messages import CalibrationEnded, CalibrationProgress
from specchat.ui.services import AppServices
from specchat.ui.widgets.transfers import TransferList

STOP_KEY = "F12"
PAUSED_TEXT = "paused while the reply is written"


class BackgroundCalibration(TransferList):
    """``chat`` is the chat screen (Any: importing chat.py here would make a cycle)."""

    DEFAULT_CSS = """
    BackgroundCalibration { display: none; height: auto; padding: 0 1; }
    BackgroundCalibration TransferRow { layout: horizontal; height: 1; margin: 0; }
    BackgroundCalibration ProgressBar { width: auto; margin-right: 2; }
    BackgroundCalibration .transfer-label { width: 1fr; text-wrap: nowrap;
                                            text-overflow: ellipsis; }
    """

    def __init__(self, chat: Any, services: AppServices, runtime: Runtime,
                 session: ChatSession, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.chat = chat
        self.session = session
        self.runtime = runtime  # whose controllers take the calibration in
        self.quiet_s = services.calibrate_quiet_s
        self.job = AutoCalibration.for_runtime(runtime, services.config.auto_calibrate,
                                               services.calibration_options)
        self._seed: Outcome | None = None  # a result to give the chat's controller when idle
        self._shown = 0.0  # the last share shown (a paused run shows where it stopped)
        self._timer: Any = None

    @property
    def shown(self) -> bool:
        """Its bar is on screen (running or paused): F12 is in the footer."""
        return self.is_mounted and bool(self.display)

    # --- when --------------------------------------------------------------------------------

    def quiet(self) -> None:
        """The chat may be quiet now: start (or go on) after ``quiet_s`` if it still is."""
        if self.job is None or not self.job.active:
            return
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if self.quiet_s > 0:
            self._timer = self.chat.set_timer(self.quiet_s, self._start_if_quiet)
        else:
            self.chat.call_later(self._start_if_quiet)

    def _is_quiet(self) -> bool:
        s = self.chat
        return s.is_current and self.session.job is None and getattr(s, "filled", True)

    def _start_if_quiet(self) -> None:
        self._timer = None
        job = self.job
        if job is None or not self._is_quiet() or not job.begin():
            return
        if job.state.measured or self._shown:  # going on: say so at once
            self._show(Progress("", self._shown, 1, unit="%"))
        self._run(job)

    @work(thread=True, exit_on_error=False, group="calibrate")
    def _run(self, job: AutoCalibration) -> None:
        """The pair's calibration, in a thread; it never raises."""
        outcome = llama_thread.run(job.run, lambda p: self.post_message(CalibrationProgress(p)))
        self.post_message(CalibrationEnded(outcome))

    def on_calibration_progress(self, msg: CalibrationProgress) -> None:
        self.progress(msg.progress)

    def on_calibration_ended(self, msg: CalibrationEnded) -> None:
        self.ended(msg.outcome)

    def pause(self) -> None:
        """A reply starts or another screen opens: the calibration stops at its next token
        (the reply's worker waits for that, see :meth:`wait_stopped`)."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if self.job is not None:
            self.job.pause()

    def wait_stopped(self, timeout: float) -> None:
        """(The reply's worker thread) Until no calibration work runs."""
        if self.job is not None:
            self.job.wait_stopped(timeout)

    def reply_ended(self) -> None:
        if self._seed is not None:
            outcome, self._seed = self._seed, None
            self._take(outcome)
        self.quiet()

    def close(self, timeout: float) -> None:
        """The models are about to be freed: stop and wait for the worker."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if self.job is not None:
            self.job.close()
            self.job.wait_stopped(timeout)

    # --- what the worker posts ---------------------------------------------------------------

    def progress(self, p: Progress) -> None:
        if self.job is None or self.job.phase != RUNNING or p.failed:
            return
        if p.unit == WAIT:  # another specchat calibrates these files: say so on the bar
            if not p.finished:
                self._show(Progress("", self._shown, 1, unit="%"), p.task)
            return
        if p.total:
            self._shown = p.done / p.total
        self._show(p)

    def _show(self, p: Progress, detail: str = "") -> None:
        if not self.is_mounted or self.job is None:
            return
        shown = progress_text(self.job.label, p)
        self.show(Progress(shown.task, shown.done, 100, unit="%",
                           detail=detail or f"{STOP_KEY} stops it"))
        if not self.display:
            self.display = True
            self.chat.refresh_bindings()

    def _hide(self) -> None:
        if self.is_mounted and self.display:
            self.display = False
            self.chat.refresh_bindings()

    def ended(self, outcome: Outcome) -> None:
        if self.job is None or outcome.phase != self.job.phase:
            return  # stale: stopped by the user or started again since this run ended
        label = self.job.label
        if outcome.phase == PAUSED:
            self._show(Progress("", self._shown, 1, unit="%"),
                       PAUSED_TEXT if self.session.job is not None else "paused")
            if self._is_quiet():
                self.quiet()  # paused by a screen that has closed again, or by a stale stop
            return
        self._hide()
        if outcome.phase == DONE and outcome.result is not None:
            if self.session.job is None:
                self._take(outcome)
            else:
                self._seed = outcome  # the reply in flight keeps its plan; the next takes it
            self.chat.notify(finished_text(label, outcome.result), title="Calibrated",
                             timeout=20, markup=False)
        elif outcome.phase == FAILED:
            self.chat.notify(f"Could not calibrate {label} here: {outcome.error}. The chat "
                             f"goes on uncalibrated; `specchat models calibrate {label}` "
                             "tries again.", title="Calibration failed", severity="warning",
                             timeout=20, markup=False)
        elif outcome.phase == CANCELLED:
            self.chat.notify(f"Calibration stopped: {label} stays uncalibrated and is not "
                             f"calibrated on its own again; `specchat models calibrate "
                             f"{label}` measures it when you like.", timeout=12, markup=False)

    def _take(self, outcome: Outcome) -> None:
        reseed(self.runtime, outcome.seed)

    # --- the user ----------------------------------------------------------------------------

    def stop_by_user(self) -> None:
        if self.job is None or not self.job.active:
            self.chat.notify("Nothing is being calibrated.", timeout=4, markup=False)
            return
        paused_or_waiting = self.job.phase != RUNNING
        self.job.stop_by_user()
        if paused_or_waiting:  # no worker will say it: say it now
            self.ended(Outcome(CANCELLED))
