"""The planner's saved state (:mod:`specchat.engine.policy.planner`): what it keeps for the next
process, how that is read back, and how an older layout is brought up to today's.

Version 2, today's, is the learning base's state (:meth:`LearningPolicy.state
<specchat.engine.policy.learning.LearningPolicy.state>`: costs, the draft model's α per topic,
confidences) and:

- ``arms``: each arm's state under its drafter's name, as its record writes it
  (:meth:`~specchat.engine.policy.planner_arms.ArmRecord.state`; an arm that learnt nothing has
  none): a banded lookup's estimates per band and its cost, the draft tree's rank counts, a
  lookup's or a chain drafter's α and seconds per drafted token, a self-planning drafter's
  decayed tokens and seconds per step;
- ``read_cost``: what the draft model's reads of missed tokens cost (``DraftReads``);
- ``reply_lengths``: the last replies' lengths (``ReplyLengths``).

Reading is all or nothing: every part is parsed and checked (ValueError, TypeError, KeyError)
before anything is taken, so a damaged state leaves the planner as it was. A version-1 state is
migrated first (:func:`migrate`); nothing in it is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specchat.engine.policy.draft_reads import DraftReads
from specchat.engine.policy.planner_records import Records
from specchat.engine.policy.reply_length import ReplyLengths

STATE_VERSION = 2  # each arm's state apart, by name


def saved(records: Records, reads: DraftReads, lengths: ReplyLengths) -> dict[str, object]:
    """The planner's own parts of its state (the learning base writes the rest)."""
    arms = {n: got for n, r in records.items() if (got := r.state()) is not None}
    return {"arms": arms, "read_cost": reads.state(), **lengths.state()}


@dataclass(frozen=True)
class Loaded:
    """A saved state read and checked, nothing taken yet."""

    base: dict[str, object]  # the whole state in today's layout, for the learning base
    arms: dict[str, object]  # what each record's ``read`` returned, by drafter
    read_cost: list[float]
    lengths: list[int]

    def into(self, records: Records, reads: DraftReads, lengths: ReplyLengths) -> None:
        """Take it (once the learning base took its part)."""
        for name, mine in self.arms.items():
            records[name].take(mine)
        reads.load(self.read_cost)
        lengths.lengths = self.lengths


def read(records: Records, d: Mapping[str, object]) -> Loaded:
    """Saved state ``d`` of any version, migrated, parsed and checked; each arm's part read by
    the record of its drafter (made for its declared kind)."""
    today = migrate(d, records)
    arms: dict[str, object] = dict(today["arms"])  # type: ignore[call-overload]
    got = {str(n): records.of(str(n)).read(x) for n, x in arms.items()}
    # (older states have neither: nothing measured)
    read_cost = DraftReads.read_state(today.get("read_cost", [0.0, 0.0]))
    return Loaded(today, got, read_cost, ReplyLengths.read_state(today))


def migrate(d: Mapping[str, object], records: Records) -> dict[str, object]:
    """A planner state in today's layout. Version 1, saved before the arms kept their states
    apart, held the banded lookup's estimates at the top level, under its name (``name``,
    ``name_cold``, ``name_long``, ``name_cost``), and the tree's rank counts as ``ranks``; the
    other arms' were not saved. Each record says where its state was
    (:meth:`~specchat.engine.policy.planner_arms.ArmRecord.old_state`)."""
    if d.get("version") != 1:
        return dict(d)
    arms = {n: old for n, r in records.items() if (old := r.old_state(d)) is not None}
    return {**d, "version": 2, "arms": arms}
