"""What a speculative step costs on this machine right now, learned from the steps themselves.

A step that drafts γ tokens costs γ·t_d (the draft model, one token at a time), plus
T_v(γ + 1) (one target pass over the last token and the drafts, plus the verification rule),
plus o (the rest of the loop: committing tokens, events). Each is a decayed estimate — recent
steps weigh more, so the model follows the machine when other work starts or stops.

T_v(n) is a *table* for n = 1..TABLE_SIZE (:class:`~specchat.engine.policy.verify_table.
VerifyTable`: a CPU's curve has kinks a line smooths into wrong choices); a size never seen
borrows, last of all, the line a + b·n below. The line — a decayed least-squares fit — also
gives the marginal cost b of one more token (auto-γ's stop rule).

When the draft length barely varies the slope b is not identified by the data, so the fit is
anchored to the *shape* of a prior curve (the pair's calibration, or the controller's warm-up):
a penalty on b − r₀·a, with r₀ = b₀/a₀, keeps the prior's slope-to-intercept ratio without
tying the level, which the data sets. Outliers (a step slowed by a burst of load) are clipped
to a few times the prediction before they enter the sums.
"""

from __future__ import annotations

from collections.abc import Sequence

from specchat.engine.policy.costs import CostCurve
from specchat.engine.policy.decay import decay_for
from specchat.engine.policy.first_decodes import FirstDecodes
from specchat.engine.policy.verify_table import TABLE_SIZE, VerifyTable

CLIP = 3.0  # an observation above CLIP × the prediction counts as CLIP × the prediction
N_REF = 5.0  # batch size at which the shape penalty is expressed in seconds


def fit_line(ns: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Ordinary least squares y ≈ a + b·n (b = 0 for a single n)."""
    k = len(ns)
    mn, my = sum(ns) / k, sum(ys) / k
    var = sum((n - mn) ** 2 for n in ns)
    b = sum((n - mn) * (y - my) for n, y in zip(ns, ys, strict=True)) / var if var > 0 else 0.0
    return my - b * mn, b


class OnlineCostModel:
    """``skip_first``: ignore the first observation of each batch size (and the first draft
    step) in this process — llama.cpp sizes its compute buffers on a batch shape's first
    decode, which then costs up to twice a normal one (docs/performance.md) — except that a
    size's second counts as the lesser of the two. Until its second, the held first time
    bounds the size's price from below (:class:`~specchat.engine.policy.first_decodes.
    FirstDecodes`)."""

    def __init__(self, half_life: float = 48.0, shape_weight: float = 2.0,
                 skip_first: bool = False) -> None:
        self.lam = decay_for(half_life)
        self.shape_weight = shape_weight
        self.ratio: float | None = None  # r₀ = b₀ / a₀ of the prior curve
        # Decayed sums for T_v: Σw, Σw·n, Σw·n², Σw·y, Σw·n·y
        self._s = [0.0] * 5
        self._n_verify = 0
        self._draft = [0.0, 0.0]  # Σw·seconds, Σw·tokens
        self._over = [0.0, 0.0]  # Σw·seconds, Σw
        self._fit: tuple[float, float] | None = None
        self.table = VerifyTable(TABLE_SIZE, half_life)
        self._vt: tuple[tuple[object, ...], tuple[float, ...]] | None = None
        self.skip_first = skip_first
        self._seen: set[int] = set()  # batch sizes (0: the draft) observed in this process
        self.first = FirstDecodes(half_life)  # sizes' skipped first times, until their second

    # ----------------------------------------------------------------------------- priors

    def seed(self, curve: CostCurve, weight: float = 4.0) -> None:
        """Start from a measured curve (calibration): its points as ``weight`` observations in
        all, and its shape as the anchor for the slope. Seeded after steps were observed (a
        calibration that ended mid-session), it joins them: what they measured stays."""
        ns = [float(n) for n in range(1, len(curve.verify_s) + 1)]
        a0, b0 = fit_line(ns, curve.verify_s)
        self.set_shape(a0, b0)
        for n, y in zip(ns, curve.verify_s, strict=True):
            self._add_verify(n, y, weight / len(ns))
        self._draft = [self._draft[0] + curve.draft_s * weight, self._draft[1] + weight]
        self._fit = None
        self.table.seed(curve.verify_s, weight=1.0)

    def set_shape(self, a0: float, b0: float) -> None:
        if a0 > 0 and b0 >= 0:
            self.ratio = b0 / a0

    # ----------------------------------------------------------------------- observations

    def _first(self, key: int) -> bool:
        first = key not in self._seen
        self._seen.add(key)
        return first and self.skip_first

    def draft_seen(self) -> None:
        """A draft step happened whose time is not a draft token's (the caller knows why): it
        still counts as the process's first draft step for ``skip_first``."""
        self._seen.add(0)

    def add_draft(self, tokens: int, seconds: float) -> None:
        if tokens <= 0 or seconds <= 0 or self._first(0):
            return
        if self._draft[1] >= 3:
            seconds = min(seconds, CLIP * self.t_draft * tokens)
        lam = self.lam
        self._draft = [lam * self._draft[0] + seconds, lam * self._draft[1] + tokens]

    def add_verify(self, n: int, seconds: float) -> None:
        if n <= 0 or seconds <= 0:
            return
        if self._first(n):
            self.first.hold(n, seconds)
            return
        # A size's first counted time is the lesser of its first two: the first pays the
        # shape's buffers, either may meet a burst of other work, and until more steps come
        # one time prices every check the line through it reaches (a burst on one check can
        # turn a copy plain).
        seconds = self.first.count(n, seconds)
        if self._n_verify >= 3:
            seconds = min(seconds, CLIP * self._clip_reference(n))
        lam = self.lam
        self._s = [lam * v for v in self._s]
        self._add_verify(float(n), seconds, 1.0)
        self._n_verify += 1
        self.table.add(n, seconds)

    def _clip_reference(self, n: int) -> float:
        """T_v(n) for the burst clip: this table's estimate as last worked out (a planner works
        it out at each scoring; a 3× guard needs nothing fresher, and working it out after
        every step slows a small model's plain step), else :meth:`t_verify`."""
        vt = self._vt
        if vt is not None and vt[0][0] == id(self.table) and 1 <= n <= TABLE_SIZE \
                and vt[1][n - 1] > 0:
            return vt[1][n - 1]
        return self.t_verify(n)

    def _add_verify(self, n: float, y: float, w: float) -> None:
        s = self._s
        s[0] += w
        s[1] += w * n
        s[2] += w * n * n
        s[3] += w * y
        s[4] += w * n * y
        self._fit = None

    def add_overhead(self, seconds: float) -> None:
        """Step time spent outside the draft and the verification (clipped like the rest)."""
        if seconds < 0:
            return
        if self._over[1] >= 3:
            seconds = min(seconds, CLIP * self.overhead + 1e-4)
        lam = self.lam
        self._over = [lam * self._over[0] + seconds, lam * self._over[1] + 1.0]

    # -------------------------------------------------------------------------- estimates

    @property
    def ready(self) -> bool:
        return self._s[0] > 0 and self._draft[1] > 0

    @property
    def observations(self) -> int:
        """Verify (and plain) steps timed in this process."""
        return self._n_verify

    @property
    def verify_known(self) -> bool:
        """Whether a verify (or plain) step was timed (or calibrated)."""
        return self._s[0] > 0

    @property
    def draft_known(self) -> bool:
        """Whether a draft token's cost was measured (or calibrated): until then t_draft is 0."""
        return self._draft[1] > 0

    @property
    def t_draft(self) -> float:
        return self._draft[0] / self._draft[1] if self._draft[1] > 0 else 0.0

    @property
    def overhead(self) -> float:
        return self._over[0] / self._over[1] if self._over[1] > 0 else 0.0

    def line(self) -> tuple[float, float]:
        """(a, b) of T_v(n) ≈ a + b·n."""
        if self._fit is None:
            self._fit = self._solve()
        return self._fit

    def _solve(self) -> tuple[float, float]:
        s0, s1, s2, sy, sny = self._s
        if s0 <= 0:
            return 0.0, 0.0
        # Normal equations of Σw(y − a − b·n)² + κ·N_REF²·(b − r₀·a)².
        r = self.ratio if self.ratio is not None else 0.3  # CPU-like guess, barely weighted
        k = (self.shape_weight if self.ratio is not None else 1e-3) * N_REF * N_REF
        m00, m01, m11 = s0 + k * r * r, s1 - k * r, s2 + k
        det = m00 * m11 - m01 * m01
        if det <= 1e-18 * max(1.0, m00 * m11):
            return sy / s0, 0.0
        a = (sy * m11 - sny * m01) / det
        b = (sny * m00 - sy * m01) / det
        if b < 0:  # a bigger batch never costs less: a flat line through the mean
            return sy / s0, 0.0
        if a < 0:  # keep T_v(1) positive: a line through the origin
            return 0.0, sny / s2 if s2 > 0 else 0.0
        return a, b

    def t_verify(self, n: int) -> float:
        """T_v(n) from the table where n is within it, else the line."""
        if 1 <= n <= TABLE_SIZE and self.table.observed:
            return self.verify_table()[n - 1]
        a, b = self.line()
        return a + b * n

    def verify_table(self) -> tuple[float, ...]:
        """T_v(1..TABLE_SIZE) as the table estimates it now, each size timed only once so far
        at least its held first time over f (:meth:`FirstDecodes.floor`) — the planner asks
        several times a step: computed again only after a change."""
        a, b = self.line()
        bounds = self.first.bounds()
        key = (id(self.table), self.table.version, id(self.table.shape), a, b, bounds)
        if self._vt is not None and self._vt[0] == key:
            return self._vt[1]
        line = [a + b * n for n in range(1, TABLE_SIZE + 1)] if a + b > 0 else None
        est = self.first.floor(self.table.estimates(line), bounds)
        self._vt = (key, est)
        return est

    def step_cost(self, gamma: int) -> float:
        """Seconds of a step that drafts ``gamma`` tokens (0: a plain step)."""
        return gamma * self.t_draft + self.t_verify(gamma + 1) + self.overhead

    def state(self) -> dict[str, object]:
        """What the model has learnt, as JSON-able values (see :meth:`load_state`). Not the held
        first times nor f: they are this process's first decodes (see FirstDecodes)."""
        return {"sums": list(self._s), "n_verify": self._n_verify, "draft": list(self._draft),
                "overhead": list(self._over), "ratio": self.ratio, "table": self.table.state()}

    def load_state(self, d: dict[str, object]) -> None:
        """Restore :meth:`state`; raises ValueError/TypeError/KeyError on a malformed record."""
        sums = [float(v) for v in d["sums"]]  # type: ignore[attr-defined]
        draft = [float(v) for v in d["draft"]]  # type: ignore[attr-defined]
        over = [float(v) for v in d["overhead"]]  # type: ignore[attr-defined]
        if len(sums) != 5 or len(draft) != 2 or len(over) != 2:
            raise ValueError("cost model state of another shape")
        ratio = d.get("ratio")
        table = VerifyTable(self.table.size, 1.0)
        table.lam = self.table.lam
        table.load_state(d["table"])  # type: ignore[arg-type]
        self._s, self._draft, self._over, self.table = sums, draft, over, table
        self._n_verify = int(d["n_verify"])  # type: ignore[call-overload]
        self.ratio = float(ratio) if isinstance(ratio, (int, float)) else None
        self._fit = None

    def describe(self) -> str:
        a, b = self.line()
        return (f"t_d {self.t_draft * 1000:.2f} ms, T_v(n) {a * 1000:.2f} + {b * 1000:.2f}·n ms, "
                f"overhead {self.overhead * 1000:.2f} ms")
