"""Cumulative tokens over time as text bars, for the terminal (``specchat race``)."""

from __future__ import annotations

from specchat.race.timeline import RaceTimeline

_PARTS = " ▏▎▍▌▋▊▉"


def bar(fraction: float, width: int) -> str:
    """A bar ``fraction`` of ``width`` cells long, in eighths of a cell."""
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    full, part = divmod(eighths, 8)
    return ("█" * full + (_PARTS[part] if part else "")).ljust(width)


def cumulative_chart(plain: RaceTimeline, spec: RaceTimeline, rows: int = 8,
                     width: int = 48) -> list[str]:
    """One row per time slice: how many tokens each run had produced by then."""
    end = max(plain.elapsed_s, spec.elapsed_s)
    most = max(len(plain.tokens), len(spec.tokens), 1)
    if end <= 0:
        return ["(no time elapsed)"]
    slice_s = end / rows
    lines = [f"cumulative tokens over time (one row = {_dur(slice_s)})"]
    for i in range(1, rows + 1):
        t = slice_s * i
        for j, (name, run) in enumerate((("plain", plain), ("spec", spec))):
            n = run.tokens_by(t)
            stamp = f"{_dur(t):>8}" if j == 0 else " " * 8
            lines.append(f"{stamp}  {name:<5} {bar(n / most, width)} {n:4d}")
    return lines


def _dur(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"
