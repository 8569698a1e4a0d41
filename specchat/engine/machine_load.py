"""How busy the machine is: load average and CPU time stolen by the hypervisor.

Timings taken on a busy or shared machine are not to be trusted as they are (a race, a
calibration): what competed with them is measured around them and told to the user.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
BUSY_LOAD = 0.5  # load average per core, before the timing, above which other work competes
BUSY_STEAL = 0.05  # share of CPU time the hypervisor gave to other guests


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
    """What competed with a timing (a race, a calibration): measured around it."""

    cores: int
    load_before: float | None  # 1-minute load average when the timing started
    steal: float | None  # share of CPU time stolen during the timing (0..1)

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
    """``w = LoadWatch(); …timing…; w.done()`` → the :class:`MachineLoad` over that span."""

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
