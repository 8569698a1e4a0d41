"""The slots' meeting point: requests on one shared llama.cpp context, decoded together.

A slot's decodes (``engine/llama/slots.py``) go through the :class:`Rendezvous` the slots
share, which runs the slots' threads like coroutines. A member (a thread serving one request,
:meth:`Rendezvous.member`) holds a baton from the start of its job to its end, letting go only
while it waits for a decode, so no two threads touch llama.cpp at once. A decode waits until
every member waits on one; then those batches run, one ``llama_decode`` per context with every
waiting slot's rows in it, and each member gets its own logits rows back (a copy: llama.cpp's
buffer belongs to the next pass). When members wait on different contexts, the lighter model's
pass runs first and the heaviest model's batches wait: the slots drafting then reach their
verification, so the target's verification rows of every slot, and plain rows and prompt reads
too, share one pass.

Every pass runs on the process's one llama thread (:mod:`.llama_thread`), not on the member
that fired it: passes fired from each request's thread in turn slowed a lone client's tokens by
its fourth request, and one calling thread restored them (docs/performance.md).

The clock a slot's decoder times its steps with (``SlotContext.clock``, a :class:`SlotClock`)
leaves out what it waited for others and counts its share of each pass it rode in (the pass's
time × its rows / all rows): a planner pricing its steps sees the cost its own rows add to a
shared pass, which is lower per row than a pass of its own.

A cancelled slot stops at once where it reads a prompt: a pass that holds its prompt chunk is
stopped (llama.cpp's abort callback) and the other slots' rows run again without it; a
generation step, short, runs to its end and the cancel is seen at the slot's next step.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import llama_cpp
import numpy as np
import numpy.typing as npt

from specchat.engine.llama import llama_thread
from specchat.engine.llama.context import ABORTABLE_BATCH, LlamaContext


class SlotClock:
    """A slot's clock: wall time less what it waited for the other slots."""

    def __init__(self) -> None:
        self.credit = 0.0  # seconds waited that were other slots' work

    def now(self) -> float:
        return time.perf_counter() - self.credit


@dataclass(eq=False)
class SlotDecode:
    """One slot's batch, waiting to ride in the next pass."""

    view: LlamaContext  # the slot's view: its batch rows, its cancel, its cache
    base: LlamaContext  # the shared context the pass runs on
    clock: SlotClock  # the slot's clock, credited with what it waited for others
    rows: int
    done: bool = False
    rc: int = 0
    logits: npt.NDArray[np.float32] | None = None
    share: float = 0.0  # seconds of the pass that were this batch's
    together: int = 1  # slots whose rows shared the pass


class _PassStop(threading.Event):
    """When a shared pass stops (llama.cpp's abort callback asks it): every slot in it was
    cancelled, or one whose batch is a prompt read (more than ``ABORTABLE_BATCH`` rows) was —
    the others' rows then run again without it. A cancelled slot's generation step, short,
    is not worth the others' repeat: its cancel is seen at its next step."""

    def __init__(self, group: Sequence[SlotDecode]) -> None:
        super().__init__()
        self._all = tuple(j.view.cancel for j in group)
        self._reads = tuple(j.view.cancel for j in group if j.rows > ABORTABLE_BATCH)

    def is_set(self) -> bool:
        return any(e.is_set() for e in self._reads) or all(e.is_set() for e in self._all)


@dataclass
class PassLog:
    """What the shared passes did (for the server's log and tests)."""

    passes: int = 0  # llama_decode calls
    shared: int = 0  # of those, the ones that carried rows of more than one slot
    most: int = 0  # the most slots in one pass
    stopped: int = 0  # shared passes stopped for a cancelled prompt read, run again without it


class Rendezvous:
    """The slots' meeting point (see the module's docstring)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()  # its lock is the baton (re-entrant)
        self._members = 0
        self._gate = threading.Lock()
        self._joining = 0  # threads on their way in: a pass waits for their first batch
        self._pending: list[SlotDecode] = []
        self.log = PassLog()

    @contextlib.contextmanager
    def member(self) -> Iterator[None]:
        """Take part for the block's length (one request): hold the baton while running."""
        with self._gate:
            self._joining += 1
        try:
            self._cv.acquire()
        finally:
            with self._gate:
                self._joining -= 1
        try:
            self._members += 1
            try:
                yield
            finally:
                self._members -= 1
                self._fire_if_ready()  # the others may all be waiting for this one
        finally:
            self._cv.release()

    def decode(self, job: SlotDecode) -> None:
        """Run ``job``'s batch in the next pass; back when it has run. A request on its way in
        (its thread waits for the baton) is let in first, so its prompt rides in that pass."""
        with self._cv:
            t0 = time.perf_counter()
            self._pending.append(job)
            while not job.done:
                if not self._joining:
                    self._fire_if_ready()
                    if job.done:
                        break
                self._cv.wait(0.05 if self._joining else None)
            job.clock.credit += max(0.0, time.perf_counter() - t0 - job.share)

    def _fire_if_ready(self) -> None:
        if not self._pending or len(self._pending) < self._members:
            return
        groups: dict[int, list[SlotDecode]] = {}
        for j in self._pending:
            groups.setdefault(id(j.base), []).append(j)
        if len(groups) > 1:
            # Slots waiting on the heaviest model (the target) wait on, while the others' passes
            # on lighter ones (a draft model's steps) run: those slots then come to their own
            # verification, and all of them share the one expensive pass.
            held = max(groups.values(), key=lambda g: g[0].base.model.size_bytes)
            self._pending = held
            del groups[id(held[0].base)]
        else:
            self._pending = []
        jobs = [j for g in groups.values() for j in g]
        try:
            for group in groups.values():
                llama_thread.run(self._run, group)
        finally:
            for j in jobs:
                if not j.done:  # a Python error on the way: theirs too, as a failed decode
                    j.rc, j.done = -1, True
            self._cv.notify_all()

    def _run(self, group: list[SlotDecode]) -> None:
        base = group[0].base
        b = base.batch
        at = 0
        outs: list[int] = []
        for j in group:
            v, m = j.view, j.rows
            base._tok[at : at + m] = v._tok[:m]
            base._pos[at : at + m] = v._pos[:m]
            base._out[at : at + m] = v._out[:m]
            base._n_seq[at : at + m] = v._n_seq[:m]
            src, dst = v.batch.seq_id, b.seq_id
            for i in range(m):
                for k in range(int(v._n_seq[i])):
                    dst[at + i][k] = src[i][k]
            outs.append(int(np.count_nonzero(v._out[:m])))
            at += m
        b.n_tokens = at
        base.cancel = _PassStop(group)
        t0 = time.perf_counter()
        rc = base.llama_decode(b, at)
        dt = time.perf_counter() - t0
        log = self.log
        log.passes += 1
        if len(group) > 1:
            log.shared += 1
        log.most = max(log.most, len(group))
        kept = [j for j in group if not j.view.cancel.is_set()]
        if rc == 2 and 0 < len(kept) < len(group):  # stopped for a cancelled prompt read
            log.stopped += 1
            self._forget(group)
            for j in group:
                if j not in kept:
                    j.rc, j.done = rc, True
            self._run(kept)
            return
        n_out = sum(outs)
        rows = base._logits(n_out) if rc == 0 and n_out > 0 else None
        o = 0
        for j, k in zip(group, outs, strict=True):
            j.rc, j.share, j.together = rc, dt * j.rows / at, len(group)
            if rows is not None and k:
                j.logits = np.array(rows[o : o + k])
            o += k
            j.done = True

    @staticmethod
    def _forget(group: list[SlotDecode]) -> None:
        """What a stopped pass left in the cache, taken out: each sequence the pass wrote is
        cut back to where the pass began in it. (llama.cpp takes out the cells of the
        micro-batch it stopped in, not those of micro-batches before it; a pass is one
        micro-batch today, n_ubatch being n_batch, but need not stay so.)"""
        mem = group[0].view.mem
        first: dict[int, int] = {}
        for j in group:
            v = j.view
            seq_id = v.batch.seq_id
            for i in range(j.rows):
                pos = int(v._pos[i])
                for k in range(int(v._n_seq[i])):
                    s = int(seq_id[i][k])
                    first[s] = min(first.get(s, pos), pos)
        for s, pos in first.items():
            llama_cpp.llama_memory_seq_rm(mem, s, pos, -1)
