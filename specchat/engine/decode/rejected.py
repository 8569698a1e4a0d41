"""The drafted tokens a step did not keep, as events the screen shows when asked (Ctrl+R)."""

from __future__ import annotations

from collections.abc import Callable

from specchat.engine.decode.drafting import Proposal
from specchat.engine.decode.events import Event, RejectedEvent
from specchat.engine.decode.plan import depths
from specchat.engine.decode.verify import Verdict, children_of


def rejected_events(proposal: Proposal, verdict: Verdict, position: int,
                    piece: Callable[[int], bytes]) -> tuple[list[Event], list[Event]]:
    """Every drafted token off the accepted path. The main run: the first child rejected
    where the path stopped and its best-ranked descendants (never judged). Then the
    losing branches of a tree, each numbered, depth first."""
    if not proposal.tokens:  # a plain step
        return [], []
    kids = children_of(proposal.parents)
    depth = depths(proposal.parents)
    judged = {r.index: r for r in verdict.rejections}

    def event(i: int, branch: int) -> RejectedEvent:
        d = proposal.tokens[i]
        r = judged.get(i)
        p, q = (r.p, r.q) if r is not None else (0.0, proposal.q[i].prob(d))
        text = piece(d).decode("utf-8", errors="replace")
        return RejectedEvent(d, text, position + depth[i] - 1, p, q, branch)

    main: list[int] = []
    node = verdict.rejected.index if verdict.rejected is not None else None
    while node is not None:
        main.append(node)
        node = kids.get(node, [None])[0]
    seen = set(verdict.path) | set(main)
    branches: list[Event] = []
    number = 0
    for i in range(len(proposal.tokens)):
        if i in seen:
            continue
        number += 1
        node = i
        while node is not None:  # a branch follows first children; the others start new ones
            seen.add(node)
            branches.append(event(node, number))
            node = kids.get(node, [None])[0]
    return [event(i, 0) for i in main], branches
