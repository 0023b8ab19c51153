"""The soak's table: one row per fault kind, one for unexposed turns, one for all."""

from __future__ import annotations

from rich.table import Table

from benchmarks.soak.check import ALL, NO_FAULT, Row, Verdict
from benchmarks.soak.faults import Fault

COLUMNS = (
    "fault kind",
    "faults",
    "turns",
    "exactly once",
    "lost",
    "interrupted",
    "dup entries",
    "dup tool calls",
    "dup replies",
    "FIFO violations",
    "resumed",
    "worker crashes",
    "recovery p50 s",
    "recovery max s",
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
        t.add_column(c, justify="left" if i == 0 else "right")
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
        lines.append(f"  {f.start - t0:6.1f}s {f.kind:<13} {f.detail}; {rec}")
    return lines
