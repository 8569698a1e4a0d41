"""Was the machine quiet while a race ran? Load average and CPU time stolen by the hypervisor.

A race times two decoders one after the other; on a busy or shared machine each run may get a
different share of the CPU, and a single race can swing from a loss to a win with the same
settings. The race therefore runs each side several times, alternating, and reports the median
and the spread — and this module says when the machine was busy, so the user knows to rerun.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
BUSY_LOAD = 0.5  # load average per core, before the race, above which other work competes
BUSY_STEAL = 0.05  # share of CPU time the hypervisor gave to other guests
WIDE_SPREAD = 0.10  # (max - min) / median of a side's speeds


@dataclass(frozen=True)
class CpuTimes:
    steal: int  # clock ticks, summed over CPUs
    total: int


def cpu_times(path: Path = PROC_STAT) -> CpuTimes | None:
    """The aggregate ``cpu`` line of /proc/stat (None where there is none: macOS, Windows)."""
    try:
        with path.open(encoding="ascii") as f:
            first = f.readline().split()
    except OSError:
        return None
    if not first or first[0] != "cpu":
        return None
    try:
        values = [int(v) for v in first[1:]]
    except ValueError:
        return None
    # user nice system idle iowait irq softirq steal guest guest_nice: guest time is already
    # counted in user/nice, so it is left out of the total.
    steal = values[7] if len(values) > 7 else 0
    return CpuTimes(steal, sum(values[:8]))


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


@dataclass(frozen=True)
class MachineLoad:
    """What competed with the race: measured around it."""

    cores: int
    load_before: float | None  # 1-minute load average when the race started
    steal: float | None  # share of CPU time stolen during the race (0..1)

    @property
    def busy(self) -> bool:
        return bool((self.load_before is not None and self.load_before > BUSY_LOAD * self.cores)
                    or (self.steal is not None and self.steal > BUSY_STEAL))

    def describe(self) -> str:
        parts = []
        if self.load_before is not None:
            parts.append(f"load {self.load_before:.1f} on {self.cores} cores")
        if self.steal is not None:
            parts.append(f"{self.steal:.0%} of CPU time stolen")
        return ", ".join(parts) or "no load figures on this system"


class LoadWatch:
    """``w = LoadWatch(); …race…; w.done()`` → the :class:`MachineLoad` over that span."""

    def __init__(self, stat: Path = PROC_STAT) -> None:
        self.stat = stat
        self.load = load_average()
        self.start = cpu_times(stat)

    def done(self) -> MachineLoad:
        end = cpu_times(self.stat)
        steal = None
        if self.start is not None and end is not None and end.total > self.start.total:
            steal = (end.steal - self.start.steal) / (end.total - self.start.total)
        return MachineLoad(os.cpu_count() or 1, self.load, steal)


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


def noise_note(load: MachineLoad | None, spreads: Sequence[Spread]) -> str | None:
    """One line when the figures should not be trusted as they are; None when all was quiet."""
    reasons = []
    if load is not None and load.busy:
        reasons.append(f"the machine was busy ({load.describe()})")
    wide = [s for s in spreads if s.wide]
    if wide:
        worst = max(s.relative for s in wide)
        reasons.append(f"runs of the same side differ by up to {worst:.0%}")
    if not reasons:
        return None
    return "; ".join(reasons) + ": rerun when the machine is idle to trust the ratio"
