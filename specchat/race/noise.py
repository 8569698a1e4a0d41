"""Was the machine quiet while a race ran? Each side's spread over its runs, and one note.

A race times two decoders one after the other; on a busy or shared machine each run may get a
different share of the CPU, and a single race can swing from a loss to a win with the same
settings. The race therefore runs each side several times, alternating, and reports the median
and the spread — and this module says when the machine was busy (engine.llama.machine_load) or the
runs disagree, so the user knows to rerun.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from specchat.engine.llama.machine_load import MachineLoad

WIDE_SPREAD = 0.10  # (max - min) / median of a side's speeds


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float
    n: int

    @staticmethod
    def of(values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("a spread needs at least one value")
        return Spread(statistics.median(values), min(values), max(values), len(values))

    @property
    def relative(self) -> float:
        return (self.high - self.low) / self.median if self.median > 0 else 0.0

    @property
    def wide(self) -> bool:
        return self.n > 1 and self.relative > WIDE_SPREAD

    def text(self, fmt: str = "{:.1f}") -> str:
        if self.n == 1:
            return fmt.format(self.median)
        return f"{fmt.format(self.median)} ({fmt.format(self.low)}–{fmt.format(self.high)})"


def noise_note(load: MachineLoad | None, spreads: Sequence[Spread],
               calibration: MachineLoad | None = None) -> str | None:
    """One line when the figures should not be trusted as they are; None when all was quiet.
    ``calibration``: the load while the pair's stored calibration (the planner's starting
    costs) was timed."""
    reasons = []
    if load is not None and load.busy:
        reasons.append(f"the machine was busy ({load.describe()})")
    wide = [s for s in spreads if s.wide]
    if wide:
        worst = max(s.relative for s in wide)
        reasons.append(f"runs of the same side differ by up to {worst:.0%}")
    notes = ["; ".join(reasons) + ": rerun when the machine is idle to trust the ratio"] \
        if reasons else []
    if calibration is not None and calibration.busy:
        notes.append(f"the pair was calibrated on a busy machine ({calibration.describe()}), "
                     "so the planner starts from costs that are too high: run `specchat models "
                     "calibrate` again when the machine is idle")
    return "; ".join(notes) or None
