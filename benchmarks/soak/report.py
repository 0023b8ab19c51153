"""The soak's table: one row per fault kind, one for unexposed turns, one for all."""

from __future__ import annotations

import statistics

from rich.table import Table

from benchmarks.soak.check import ALL, NO_FAULT, Row, Verdict
from benchmarks.soak.faults import Fault

COLUMNS = (
    "fault kind",
    "faults",
    "turns\nexposed",
    "exactly\nonce",
    "lost",
    "inter-\nrupted",
    "dup\nentries",
    "dup tool\ncalls",
    "dup\nreplies",
    "FIFO\nviolations",
    "resumed",
    "worker\ncrashes",
    "recovery\np50 s",
    "recovery\nmax s",
)


def _seconds(value: float) -> str:
    if value != value:
        return "-"
    if value == float("inf"):
        return "never"
    return f"{value:.1f}"


def _cells(name: str, r: Row) -> list[str]:
    faults = "-" if name == NO_FAULT else str(r.faults)
    return [
        name,
        faults,
        str(r.turns),
        str(r.completed_once),
        str(r.lost),
        str(r.interrupted),
        str(r.dup_entries),
        str(r.dup_tool_calls),
        str(r.dup_replies),
        str(r.fifo),
        str(r.resumed),
        str(r.crashes),
        _seconds(r.recovery_p50),
        _seconds(r.recovery_max),
    ]


def table(verdict: Verdict, title: str) -> Table:
    """The figures, as a rich table."""
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(COLUMNS):
        t.add_column(c, justify="left" if i == 0 else "right", no_wrap=i == 0)
    for name, row in verdict.rows.items():
        if name == NO_FAULT and row.turns == 0:
            continue
        t.add_row(*_cells(name, row), end_section=name in (NO_FAULT, ALL))
    return t


def fault_log(faults: list[Fault], t0: float) -> list[str]:
    """One line per fault: when, what, and its recovery."""
    lines = []
    for f in faults:
        rec = "no turn in flight" if f.recovery is None else f"recovered {_seconds(f.recovery)}s"
        if f.overlapped:
            rec += f" (a {f.overlapped} fault came first)"
        lines.append(f"  {f.start - t0:6.1f}s {f.kind:<13} {f.detail}; {rec}")
    return lines


def overlaps(faults: list[Fault]) -> list[str]:
    """Per kind, the recoveries that a later fault may have shortened or lengthened."""
    lines = []
    for kind in dict.fromkeys(f.kind for f in faults):
        measured = [f for f in faults if f.kind == kind and f.recovery is not None]
        hit = [f for f in measured if f.overlapped]
        if not hit:
            continue
        clean = [f.recovery for f in measured if not f.overlapped and f.recovery is not None]
        alone = (
            f"p50 {_seconds(statistics.median(clean))}s, max {_seconds(max(clean))}s"
            if clean
            else "none left"
        )
        lines.append(
            f"  {kind}: {len(hit)} of {len(measured)} recoveries overlapped a later fault; "
            f"the others: {alone}"
        )
    return lines
