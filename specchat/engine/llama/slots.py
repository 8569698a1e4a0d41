"""Several requests on one llama.cpp context, decoded together: slots of a shared KV cache.

A :class:`SlotContext` is a :class:`LlamaContext` to every decoder and drafter — they cannot
tell — over a context it shares with the other slots (:func:`share`): slot k's sequences are
``k × per_slot`` … ``(k + 1) × per_slot − 1`` (its committed tokens in the first, a token
tree's other paths in the rest), its window is its own share of the cache's cells, and its
batches hold at most its share of the context's batch. llama.cpp's attention mask keys every
cache cell on the sequences it belongs to, so no slot's tokens are ever seen by another's.

Its decodes go through the slots' :class:`~.rendezvous.Rendezvous`, which runs the slots'
threads like coroutines and puts every waiting slot's rows in one pass (see that module).

A slot between requests keeps its cache for the next turn of its conversation, but not in
the shared cache while another slot works: llama.cpp attends over every cell up to the
highest one in use, whosever it is, so an idle slot's cells would slow every token of the
busy ones (measured in docs/performance.md, "An idle slot out of the passes"). The
server parks an idle slot (:meth:`SlotContext.park`) when another takes a request — its
cells copied to host memory and taken out, as llama-server's idle-slot cache does — and the
slot puts them back (a copy, no pass) the next time it or another slot needs them.

A cancelled slot (its client went away) stops at once where it reads a prompt: its next chunk
is not queued (and the rendezvous stops a pass that holds its chunk).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import llama_cpp
import numpy as np
import numpy.typing as npt

from specchat.engine.llama.context import ABORTABLE_BATCH, LlamaContext
from specchat.engine.llama.hardware import host_memory
from specchat.engine.llama.hidden_output import HiddenStateError
from specchat.engine.llama.rendezvous import Rendezvous, SlotClock, SlotDecode
from specchat.engine.llama.side_branch import SideBranch
from specchat.errors import SpecchatError

# llama.cpp's bound on a context's sequences (LLAMA_MAX_SEQ).
MAX_SEQUENCES = 256


class SlotContext(LlamaContext):
    """One slot of a shared context (see the module's docstring)."""

    def __init__(self, base: LlamaContext, rendezvous: Rendezvous, slot: SlotClock,
                 index: int, n_slots: int) -> None:
        # Not LlamaContext.__init__: the llama.cpp context is the base's.
        self.base = base
        self.rendezvous = rendezvous
        self.slot = slot
        self.index = index
        self.model = base.model
        self.settings = base.settings
        self.ptr = base.ptr
        self.mem = base.mem
        self.load_report = base.load_report
        self.n_ctx = base.n_ctx // n_slots
        self.n_batch = max(1, base.n_batch // n_slots)
        self.n_threads = base.n_threads
        self.n_threads_batch = base.n_threads_batch
        self.n_seq_max = base.n_seq_max // n_slots
        self.seq_base = index * self.n_seq_max
        self._sequence_state()
        self.cancel = threading.Event()
        self._abortable = False
        self.on_decode = None
        self.on_close = []
        self._rows: npt.NDArray[np.float32] | None = None
        self._freed = False
        # Every slot of the same shared context, this one included (set by share()): the
        # caches a request's start may be taken from (reuse_prefix).
        self.siblings: tuple[SlotContext, ...] = (self,)
        self.borrowed = 0  # tokens taken from other slots' caches, in all (for the log, tests)
        # This slot's cells while parked (llama.cpp's sequence state), out of the shared cache;
        # ``tokens`` still says what they hold.
        self.parked: npt.NDArray[np.uint8] | None = None

    def clock(self) -> float:
        return self.slot.now()

    def park(self) -> bool:
        """Move this idle slot's cells out of the shared cache into host memory, so the other
        slots' passes no longer attend over them; whether it did. Not when it holds nothing,
        is parked already, or the copy would take more than half the host memory free now.
        The caller holds the rendezvous' baton (no pass runs meanwhile)."""
        if self.parked is not None or not self.tokens:
            return False
        self.drop_tree()
        size = llama_cpp.llama_state_seq_get_size(self.ptr, self.seq_base)
        free = host_memory().available
        if size == 0 or free is None or 2 * size > free:
            return False
        buf = np.empty(size, np.uint8)
        if llama_cpp.llama_state_seq_get_data(self.ptr, _bytes(buf), size,
                                              self.seq_base) != size:
            return False
        llama_cpp.llama_memory_seq_rm(self.mem, self.seq_base, -1, -1)
        self.parked = buf
        return True

    def _put_back(self, state: npt.NDArray[np.uint8]) -> bool:
        """``state`` (a slot's parked cells) into this slot's sequence; whether it went in."""
        return bool(llama_cpp.llama_state_seq_set_data(self.ptr, _bytes(state), state.size,
                                                       self.seq_base))

    def _unpark(self) -> None:
        """This slot's parked cells back in the shared cache, before anything reads or cuts
        them. There is room: every slot holds at most its share of the cells."""
        state, self.parked = self.parked, None
        if state is not None and not self._put_back(state):
            self.tokens.clear()
            raise SpecchatError("a slot's cache could not be put back in the KV cache")

    def truncate(self, n: int) -> None:
        self._unpark()
        super().truncate(n)

    def decode_tree(self, shape: Sequence[int], nodes: Sequence[int], tokens: Sequence[int],
                    side: SideBranch | None = None) -> npt.NDArray[np.float32]:
        self._unpark()  # before the tree's sequences copy the cached ones
        return super().decode_tree(shape, nodes, tokens, side)

    def _run_batch(self, m: int, start: int) -> None:
        self._unpark()
        if m > ABORTABLE_BATCH and self.cancel.is_set():
            # A prompt read goes no further once cancelled: its next chunk is not queued.
            self.failed_decode(2, start)
        job = SlotDecode(self, self.base, self.slot, m)
        self.batch.n_tokens = m
        self.rendezvous.decode(job)
        self.decode_s += job.share
        self._rows = job.logits
        if job.rc != 0:
            self.failed_decode(job.rc, start)

    def _logits(self, rows: int) -> npt.NDArray[np.float32]:
        if self._rows is None or self._rows.shape[0] < rows:
            raise RuntimeError("a slot's decode returned fewer logits rows than it asked for")
        return self._rows[:rows]

    def reuse_prefix(self, tokens: Sequence[int]) -> int:
        """What this slot holds of ``tokens``' start, or a longer start another slot holds:
        that one's cells then join this slot's sequence as they are (llama.cpp's seq_cp on a
        unified cache tags cells, it copies nothing), so a request that shares a system
        prompt, a file or a conversation with another slot's does not read it again. The
        other slot keeps its cells; each slot's later cuts touch its own sequence only. Safe
        while the other slot is mid-reply: only its committed tokens are taken, and a member
        holds the rendezvous' baton, so no pass runs meanwhile. A parked slot's cells are put
        back first (its own) or copied into this slot's sequence alone (another's, which stays
        parked)."""
        own = self.common_prefix(tokens)
        donor, best = None, own
        for other in self.siblings:
            if other is not self:
                n = other.common_prefix(tokens)
                if n > best:
                    donor, best = other, n
        if donor is None:
            self.truncate(own)
            return own
        self.clear()
        if donor.parked is None:
            llama_cpp.llama_memory_seq_cp(self.mem, donor.seq_base, self.seq_base, 0, best)
        elif self._put_back(donor.parked):
            llama_cpp.llama_memory_seq_rm(self.mem, self.seq_base, best, -1)
        else:  # no room (not expected: see _unpark): the start is read again
            llama_cpp.llama_memory_seq_rm(self.mem, self.seq_base, -1, -1)
            return 0
        self.tokens.extend(int(t) for t in tokens[:best])
        self.borrowed += best
        return best

    def _keep_only(self, sid: int) -> None:
        # llama_memory_seq_keep would empty the other slots' sequences too: this slot's alone.
        for s in range(self.seq_base, self.seq_base + self._tree_seqs + 1):
            if s != sid:
                llama_cpp.llama_memory_seq_rm(self.mem, s, -1, -1)

    def clear(self) -> None:
        self.parked = None
        for s in range(self.seq_base, self.seq_base + self.n_seq_max):
            llama_cpp.llama_memory_seq_rm(self.mem, s, -1, -1)
        self.tokens.clear()
        self._tree_seqs, self._tree_shape = 0, None

    def decode_with_hidden(self, tokens: Sequence[int]
                           ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        raise HiddenStateError("hidden states are not read from a shared context's slots "
                               "(serve with --parallel 1 for a drafter that reads them)")

    def decode_tree_with_hidden(self, shape: Sequence[int], nodes: Sequence[int],
                                tokens: Sequence[int]
                                ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        raise HiddenStateError("hidden states are not read from a shared context's slots "
                               "(serve with --parallel 1 for a drafter that reads them)")

    def close(self) -> None:
        """Free this slot's batch (the context is the base's, freed with it)."""
        if not self._freed:
            self._freed = True
            llama_cpp.llama_batch_free(self.batch)


@dataclass(frozen=True)
class Slots:
    """The slots of a shared target context (and of the draft model's, when one is loaded)."""

    rendezvous: Rendezvous
    contexts: tuple[tuple[SlotContext, SlotContext | None], ...]

    def park(self, k: int) -> None:
        """Slot ``k``, idle, out of the shared caches (see :meth:`SlotContext.park`)."""
        for view in self.contexts[k]:
            if view is not None:
                view.park()

    def close(self) -> None:
        for target, draft in self.contexts:
            target.close()
            if draft is not None:
                draft.close()


def _bytes(buf: npt.NDArray[np.uint8]) -> ctypes._Pointer[ctypes.c_uint8]:
    return buf.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))


def share(target: LlamaContext, draft: LlamaContext | None, n: int) -> Slots:
    """``n`` slots of ``target`` (and of ``draft``): each gets 1/n of the context's cells, of
    its batch and of its sequences, so the context needs ``n_seq_max`` a multiple of ``n``."""
    if n < 1 or target.n_seq_max < n or (draft is not None and draft.n_seq_max < n):
        raise ValueError(f"{n} slots need at least {n} sequences in the context")
    rendezvous = Rendezvous()
    out = []
    for k in range(n):
        clock = SlotClock()
        out.append((SlotContext(target, rendezvous, clock, k, n),
                    SlotContext(draft, rendezvous, clock, k, n) if draft is not None else None))
    targets = tuple(t for t, _ in out)
    drafts = tuple(d for _, d in out if d is not None)
    for group in (targets, drafts):
        for view in group:
            view.siblings = group
    return Slots(rendezvous, tuple(out))
