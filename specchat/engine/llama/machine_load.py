"""How busy the machine is: CPU time other programs used, and CPU time stolen by the hypervisor.

Timings taken on a busy or shared machine are not to be trusted as they are (a race, a
calibration): what competed with them is measured around them and told to the user.

What competed is the CPU time the whole machine spent, less this process's own, over the
timing. The load average is not a measure of that: it counts this process's own recent work
(the model it just loaded, the race it ran a minute ago), so it read "busy" on an idle machine
after any earlier run. It is kept only to describe the machine and to judge old records.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
BUSY_OTHERS = 0.10  # share of the machine's CPU time that other programs used during the timing
BUSY_LOAD = 0.5  # load average per core: the rule for old records, which have no share above
BUSY_STEAL = 0.05  # share of CPU time the hypervisor gave to other guests


@dataclass(frozen=True)
class CpuTimes:
    steal: int  # clock ticks, summed over CPUs
    total: int
    busy: int = 0  # ticks not idle, not waiting for I/O and not stolen


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
    values += [0] * (8 - len(values))
    busy = values[0] + values[1] + values[2] + values[5] + values[6]
    return CpuTimes(values[7], sum(values[:8]), busy)


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def _ticks_per_second() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError, AttributeError):
        return 100


@dataclass(frozen=True)
class MachineLoad:
    """What competed with a timing (a race, a calibration): measured around it."""

    cores: int
    load_before: float | None  # 1-minute load average when the timing started (ours included)
    steal: float | None  # share of CPU time stolen during the timing (0..1)
    others: float | None = None  # share of the machine's CPU time other programs used (0..1)

    @property
    def busy(self) -> bool:
        if self.steal is not None and self.steal > BUSY_STEAL:
            return True
        if self.others is not None:
            return self.others > BUSY_OTHERS
        return self.load_before is not None and self.load_before > BUSY_LOAD * self.cores

    def describe(self) -> str:
        parts = []
        if self.others is not None:
            parts.append(f"other programs used {self.others:.0%} of {self.cores} cores")
        elif self.load_before is not None:
            parts.append(f"load {self.load_before:.1f} on {self.cores} cores")
        if self.steal is not None:
            parts.append(f"{self.steal:.0%} of CPU time stolen")
        return ", ".join(parts) or "no load figures on this system"


class LoadWatch:
    """``w = LoadWatch(); …timing…; w.done()`` → the :class:`MachineLoad` over that span.

    ``own``: this process's CPU seconds so far (all its threads), subtracted from the machine's.
    """

    def __init__(self, stat: Path = PROC_STAT,
                 own: Callable[[], float] = time.process_time) -> None:
        self.stat = stat
        self.own = own
        self.load = load_average()
        self.start = cpu_times(stat)
        self.own_start = own()

    def done(self) -> MachineLoad:
        end = cpu_times(self.stat)
        own_s = self.own() - self.own_start
        steal = others = None
        if self.start is not None and end is not None and end.total > self.start.total:
            span = end.total - self.start.total
            steal = (end.steal - self.start.steal) / span
            theirs = end.busy - self.start.busy - own_s * _ticks_per_second()
            others = min(1.0, max(0.0, theirs / span))
        return MachineLoad(os.cpu_count() or 1, self.load, steal, others)


def load_fields(load: MachineLoad) -> dict[str, object]:
    """What a benchmark's results.json keeps of the load over its run."""
    return {"other_programs_cpu": load.others, "steal": load.steal, "cores": load.cores,
            "busy": load.busy}


def load_text(doc: dict[str, object]) -> str:
    """``; other programs used 3% of 2 cores`` for a results document (older ones: "")."""
    others = doc.get("other_programs_cpu")
    if not isinstance(others, float):
        return ""
    busy = " (busy: rerun when the machine is idle)" if doc.get("busy") else ""
    return f"; other programs used {others:.0%} of {doc.get('cores')} cores{busy}"
