"""Replay a γ policy over a recorded conversation: exact, noiseless and fast.

Under greedy decoding a speculative run is fully determined by the *agreement trace* — at each
position of the reply, does the draft's argmax (given the committed prefix) equal the target's?
With d tokens drafted from position p, the target keeps the run of agreements from p, capped
at d, and adds its own token. So a policy can be replayed over a trace recorded once (by teacher
forcing, :mod:`specchat.engine.policy.agreement`), with each step charged the measured costs
(:mod:`specchat.engine.policy.costs`): no model runs, no timing noise, every policy on the same text.

Exact for the step sequence (tokens per step, steps per reply) of any policy whose decisions
depend only on what it is told. One approximation: after the first disagreement in a step the
live draft continues from its own wrong token, whose confidence the trace does not hold; the
replay shows the teacher-forced one there. It can change how many (doomed) tokens an early-stop
policy drafts after a miss, hence the step's cost — never which tokens are kept.

Also: the best fixed γ in hindsight, the per-segment oracle (the best fixed γ of each turn), and
the clairvoyant per-step optimum (dynamic programming over positions), as yardsticks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.plan import MODEL, NONE
from specchat.engine.decode.step_policy import FixedGamma, GammaPolicy
from specchat.engine.policy.learning import LearningPolicy


@dataclass(frozen=True)
class TurnTrace:
    """One reply of a conversation, as the pair saw it (positions = reply tokens, including a
    final end-of-generation token when the reply ended on one)."""

    request: str  # the new part of the prompt, as the decoder passes it to ``begin``
    agree: tuple[bool, ...]
    draft_top: tuple[float, ...]  # the draft's top-1 probability at each position
    draft_eog: tuple[bool, ...]  # the draft's choice there is an end-of-generation token
    pieces: tuple[str, ...]  # the text each reply token adds
    max_tokens: int
    category: str = ""
    prompt_tokens: int = 0

    @property
    def positions(self) -> int:
        return len(self.agree)

    @property
    def alpha(self) -> float:
        return sum(self.agree) / len(self.agree) if self.agree else 0.0

    def to_dict(self) -> dict[str, object]:
        return {"request": self.request, "agree": "".join("1" if a else "0" for a in self.agree),
                "draft_top": [round(t, 5) for t in self.draft_top],
                "draft_eog": [i for i, e in enumerate(self.draft_eog) if e],
                "pieces": list(self.pieces), "max_tokens": self.max_tokens,
                "category": self.category, "prompt_tokens": self.prompt_tokens}

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> TurnTrace:
        agree = tuple(c == "1" for c in str(d["agree"]))
        eog = set(d["draft_eog"])  # type: ignore[call-overload]
        return cls(str(d["request"]), agree, tuple(d["draft_top"]),  # type: ignore[arg-type]
                   tuple(i in eog for i in range(len(agree))),
                   tuple(d["pieces"]), int(d["max_tokens"]),  # type: ignore[arg-type, call-overload]
                   str(d.get("category", "")), int(d.get("prompt_tokens", 0)))  # type: ignore[call-overload]


@dataclass(frozen=True)
class ReplayCosts:
    """Seconds per step part: one draft token, a target pass over n tokens (``verify_s[n − 1]``;
    extrapolated linearly past the end), the loop's own overhead per step, one confidence
    (softmax) read of the draft's logits."""

    draft_s: float
    verify_s: tuple[float, ...]
    overhead_s: float = 0.0
    confidence_s: float = 0.0

    def t_verify(self, n: int) -> float:
        v = self.verify_s
        if n <= len(v):
            return v[n - 1]
        slope = (v[-1] - v[0]) / (len(v) - 1) if len(v) > 1 else 0.0
        return v[-1] + slope * (n - len(v))


class VirtualClock:
    """Replay time: what a policy reading the clock would have seen live."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@dataclass
class TurnReplay:
    tokens: int = 0
    seconds: float = 0.0
    steps: int = 0
    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    planned: list[int] = field(default_factory=list)  # a learner's ``planned`` γ, else the γ asked
    labels: list[str] = field(default_factory=list)

    @property
    def tok_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def replay_turn(policy: GammaPolicy, turn: TurnTrace, costs: ReplayCosts,
                clock: VirtualClock | None = None) -> TurnReplay:
    """Run ``policy`` over one reply as the speculative decoder would (greedy)."""
    clock = clock or VirtualClock()
    out = TurnReplay()
    n = turn.positions
    policy.begin(turn.request)
    pos = 0
    while pos < n:
        gamma = max(0, min(policy.next_gamma(), turn.max_tokens - pos - 1))
        label = policy.label
        drafted = 0
        calls = [0]
        if gamma > 0:
            while True:
                i = pos + drafted
                drafted += 1
                if (i < n and turn.draft_eog[i]) or not policy.keep_drafting(
                        drafted, _top(turn, i, calls)) or drafted >= gamma:
                    break
        accepted = 0
        while accepted < drafted and pos + accepted < n and turn.agree[pos + accepted]:
            accepted += 1
        committed = min(accepted + 1, n - pos)
        draft_s = drafted * costs.draft_s + calls[0] * costs.confidence_s
        verify_s = costs.t_verify(drafted + 1)
        step = StepEvent(drafted, accepted, draft_s, verify_s, MODEL if drafted else NONE,
                         pos, committed, (), label)
        clock.t += draft_s + verify_s + costs.overhead_s
        policy.committed("".join(turn.pieces[pos:pos + committed]))
        policy.observe(step)
        out.steps += 1
        out.tokens += committed
        out.seconds += draft_s + verify_s + costs.overhead_s
        out.drafted.append(drafted)
        out.accepted.append(accepted)
        out.planned.append(policy.planned if isinstance(policy, LearningPolicy) else gamma)
        out.labels.append(label)
        pos += committed
    return out


def _top(turn: TurnTrace, i: int, calls: list[int]) -> Callable[[], float]:
    def top() -> float:
        calls[0] += 1
        return turn.draft_top[min(i, len(turn.draft_top) - 1)] if turn.draft_top else 0.5
    return top


PolicyFactory = Callable[[VirtualClock], GammaPolicy]


def replay_conversation(make: PolicyFactory, turns: Sequence[TurnTrace],
                        costs: ReplayCosts) -> list[TurnReplay]:
    """One policy (made fresh, on a virtual clock) over the turns of one conversation."""
    clock = VirtualClock()
    policy = make(clock)
    return [replay_turn(policy, t, costs, clock) for t in turns]


def fixed(gamma: int) -> PolicyFactory:
    return lambda _clock: FixedGamma(gamma)


def segment_oracle(turns: Sequence[TurnTrace], costs: ReplayCosts, gammas: Sequence[int]
                   ) -> list[tuple[int, TurnReplay]]:
    """Per turn, the fixed γ (among ``gammas``) that is fastest on it, and its replay."""
    out = []
    for t in turns:
        runs = [(g, replay_turn(FixedGamma(g), t, costs)) for g in gammas]
        out.append(min(runs, key=lambda gr: (gr[1].seconds, gr[0])))
    return out


def clairvoyant_seconds(turn: TurnTrace, costs: ReplayCosts, gamma_max: int) -> float:
    """The least time any per-step choice of γ (no early stop) could take on this reply."""
    n = turn.positions
    best = [0.0] * (n + 1)
    # run[i]: agreements in a row from position i
    run = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        run[i] = run[i + 1] + 1 if turn.agree[i] else 0
    for pos in range(n - 1, -1, -1):
        cap = min(gamma_max, turn.max_tokens - pos - 1)
        options = []
        for g in range(cap + 1):
            drafted = g
            for j in range(g):  # the draft stops after its own end-of-generation token
                if pos + j < n and turn.draft_eog[pos + j]:
                    drafted = j + 1
                    break
            kept = min(run[pos], drafted)
            step = (drafted * costs.draft_s + costs.t_verify(drafted + 1) + costs.overhead_s)
            options.append(step + best[min(pos + kept + 1, n)])
        best[pos] = min(options)
    return best[0]
