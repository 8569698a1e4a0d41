"""What the draft model has yet to read, and what reading it costs (:mod:`specchat.engine.policy.
planner`).

After plain or lookup steps, or a new prompt, the draft model's cache lacks the tokens committed
since it last drafted; its next step first reads them in one batched decode (a catch-up). The
planner counts that read against the tokens the reply is still expected to write, so a reply
about to end never pays one. Its price per token is measured on the draft's own catch-ups, else
bounded by the target's read of the prompt, else guessed from the target's verify table at that
batch.
"""

from __future__ import annotations

from collections.abc import Sequence

from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.step_policy import ReplyStart

# A catch-up this long or longer is timed as a read cost per token (shorter ones are mostly a
# draft step's fixed cost).
READ_LEARN = 8


class DraftReads:
    """The tokens the draft model lacks and its measured cost of reading them."""

    def __init__(self) -> None:
        self.pending = True  # the draft model has not drafted since the last commit
        self.behind = 0  # tokens committed since the draft model last drafted
        self._cost = [0.0, 0.0]  # decayed Σ seconds, Σ tokens of its timed catch-ups
        self.target_read: float | None = None  # seconds a token of the target's prompt read
        self.size_ratio: float | None = None  # the draft model's weights over the target's

    def per_token(self) -> float | None:
        """Seconds the draft model takes to read one token it missed, in a batch: measured on
        its catch-ups, else what the target took to read a token of the prompt."""
        secs, toks = self._cost
        if toks >= READ_LEARN:
            return secs / toks
        if self.target_read is not None and self.size_ratio is not None:  # (a draft loaded)
            # Not scaled by the models' sizes: a small model reads a batch far less efficiently
            # than its weights say (2 cores, Qwen 0.5B against 1.5B: 0.66 of the target's time
            # a token, its weights 0.44), and priced by its weights a cold reply's warm-up read
            # 104 tokens for 7 plain steps' time. The target's own read bounds it from above.
            return self.target_read
        return None

    def catch_up(self, tokens: int, table: Sequence[float], t_draft: float) -> float:
        """Seconds to read ``tokens`` missed, in one batched decode, beyond the one token every
        draft step reads anyway: the measured cost per token, else the target's (:meth:`per_token`),
        else a draft step (``t_draft``) scaled by the target's verify ``table`` at that batch
        (same machine, same kind of curve)."""
        if tokens <= 1:
            return 0.0
        per_token = self.per_token()
        if per_token is not None:
            return per_token * (tokens - 1)
        n = len(table)
        if table[0] <= 0:  # nothing timed yet
            return 0.0
        shape = (table[tokens - 1] if tokens <= n else table[-1] * tokens / n) / table[0]
        return t_draft * max(shape - 1.0, 0.0)

    def learn(self, step: StepEvent, lam: float, model_drafted: bool) -> None:
        """A step's read timed (``lam``: the decay per step), if the draft model drafted it and
        read enough."""
        if model_drafted and step.read_tokens >= READ_LEARN:
            self._cost = [lam * self._cost[0] + step.read_s, lam * self._cost[1] + step.read_tokens]

    def after(self, step: StepEvent, model_drafted: bool) -> None:
        """What the draft model lacks after ``step`` (``model_drafted``: it drafted the step)."""
        self.pending = not model_drafted or step.gamma == 0
        self.behind = self.behind + step.committed if self.pending else 0

    def start_reply(self, info: ReplyStart) -> None:
        if info.target_read_s is not None:
            self.target_read = info.target_read_s
        if info.draft_size_ratio is not None:
            self.size_ratio = info.draft_size_ratio

    def lag(self, tokens: int) -> None:
        """The draft model's cache lacks ``tokens`` of the prompt."""
        self.behind = max(tokens - 1, 0)  # a draft step reads the last token anyway
        self.pending = True

    def begin(self) -> None:
        """A new prompt: behind until the decoder says by how much (:meth:`lag`)."""
        self.pending = True
        self.behind = 0

    def state(self) -> list[float]:
        return list(self._cost)

    @staticmethod
    def read_state(raw: object) -> list[float]:
        """A saved read cost, checked (ValueError: another shape)."""
        read = [float(v) for v in raw]  # type: ignore[attr-defined]
        if len(read) != 2 or min(read) < 0:
            raise ValueError("read cost of another shape")
        return read

    def load(self, cost: list[float]) -> None:
        self._cost = cost
