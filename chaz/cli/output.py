"""Rendering for the CLI: a rich terminal, plain text in a pipe, or JSON.

rich is imported only when the output is a terminal: in a pipe (scripts,
``$(chaz sessions new A)``) its import would be most of a command's start-up.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from chaz.cli.exits import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
)
from chaz.errors import ChazError, write_failure

if TYPE_CHECKING:
    from rich.console import Console
    from rich.status import Status

    from chaz.coord.partials import Partial
    from chaz.domain.entries import Entry, EntryType
    from chaz.domain.events import Event

# Re-exported: the commands import their exit codes from here.
__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "Output",
    "entry_label",
    "entry_summary",
]

# Keyed by EntryType's string values: this module loads without the domain models.
_STYLES: dict[str, str] = {
    "message": "bold",
    "directive": "magenta",
    "tool_call": "yellow",
    "tool_result": "blue",
    "ack": "dim",
    "error": "bold red",
    "summary": "cyan",
    "approval_request": "bold magenta",
    "approval_decision": "magenta",
}


def entry_label(entry_type: EntryType) -> str:
    """The contract's name of an entry type (docs/contracts.md#entries): ``tool_call`` ->
    ``ToolCall``."""
    return "".join(part.capitalize() for part in entry_type.value.split("_"))


def entry_summary(entry: Entry) -> str:
    """One readable line (or a few) for an entry's content."""
    if entry.type == "tool_call":
        try:
            call = json.loads(entry.content)
            return f"{call['name']}({call['arguments']})"
        except (ValueError, TypeError, KeyError):
            return entry.content
    if entry.type == "tool_result":
        tool = entry.metadata.get("tool")
        text = f"{tool} -> {entry.content}" if tool else entry.content
        return f"{text}  (error)" if entry.metadata.get("is_error") else text
    return entry.content


def _local(ts: datetime | None, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    # Stored times are UTC; people read their own clock.
    return ts.astimezone().strftime(fmt) if ts is not None else "-"


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return _local(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) or "-"
    if isinstance(value, dict):
        return json.dumps(value, default=str) if value else "-"
    return str(value)


def _is_terminal() -> bool:
    """Whether stdout is a terminal, as rich decides it (FORCE_COLOR, TTY_COMPATIBLE)."""
    if not (os.environ.keys() & {"FORCE_COLOR", "TTY_COMPATIBLE"}) and not _isatty():
        return False  # rich would say so too; no need to load it
    from rich.console import Console

    return Console().is_terminal


def _isatty() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


class Output:
    """Where and how results are written: rich on a TTY, plain in a pipe, or JSON."""

    def __init__(self, *, json_mode: bool) -> None:
        self.json_mode = json_mode
        self.fancy = not json_mode and _is_terminal()
        # The spinner of the status() under way (on a TTY), where a streamed
        # answer's preview is shown, and the message it goes back to.
        self._status: Status | None = None
        self._status_message = ""
        # In a pipe: a partial line has been written and wants its newline.
        self._growing = False

    @cached_property
    def console(self) -> Console:
        """rich's console on stdout (used only when :attr:`fancy`)."""
        from rich.console import Console

        return Console(highlight=False)

    @cached_property
    def err_console(self) -> Console:
        """rich's console on stderr (used only when :attr:`fancy`)."""
        from rich.console import Console

        return Console(stderr=True, highlight=False)

    # Plain text is written with print(): rich would wrap it at 80 columns.
    def _plain(self, text: str = "") -> None:
        print(text, flush=True)

    def json(self, obj: Any, *, stream: bool = False) -> None:
        """One JSON document (pretty), or one compact line of a stream."""
        if stream:
            print(json.dumps(obj, default=str, ensure_ascii=False), flush=True)
        else:
            print(json.dumps(obj, default=str, ensure_ascii=False, indent=2), flush=True)

    def line(self, text: str, style: str = "") -> None:
        """A line of text (styled on a TTY)."""
        if self.fancy:
            from rich.text import Text

            self.console.print(Text(text, style=style))
        else:
            self._plain(text)

    def note(self, text: str) -> None:
        """Progress or hints for people: stderr, so stdout stays parseable."""
        if self.json_mode:
            return
        if self.fancy:
            from rich.text import Text

            self.err_console.print(Text(text, style="dim"))
        else:
            print(text, file=sys.stderr, flush=True)

    def error(self, exc: ChazError) -> None:
        """Report a ChazError on stderr."""
        self.failure(exc.code, exc.message, exc.to_dict())

    def failure(self, code: str, message: str, payload: dict[str, Any]) -> None:
        """Report a failure with a stable code: ``error [code]: message`` on stderr."""
        console = self.err_console if self.fancy else None
        write_failure(code, message, payload, json_mode=self.json_mode, console=console)

    def error_entry(self, entry: Entry) -> None:
        """Report an Error entry (a failed turn) like any other failure."""
        code = str(entry.metadata.get("code") or "turn.error")
        message = entry.content
        # Error entries read "code: message"; the code is already in the prefix.
        if message.startswith(f"{code}: "):
            message = message[len(code) + 2 :]
        payload = {
            "code": code,
            "message": message,
            "retryable": bool(entry.metadata.get("retryable", False)),
            "details": {"session_id": entry.session_id, "seq": entry.seq, "job_id": entry.job_id},
        }
        self.failure(code, message, payload)

    @contextmanager
    def status(self, message: str, *, announce: bool = False) -> Iterator[None]:
        """A spinner on a TTY while a long wait lasts; ``announce`` also tells a pipe."""
        if self.fancy:
            from rich.text import Text

            with self.console.status(Text(message)) as status:
                self._status, self._status_message = status, message
                try:
                    yield
                finally:
                    self._status = None
            return
        if announce:
            self.note(message)
        yield

    def partial(self, partial: Partial, text: str) -> None:
        """A streamed answer growing (``text``: all of its step so far, ``partial``
        the latest piece): a JSON line with ``--json``; on a TTY the status line,
        rewritten in place; in a pipe the piece appended to one growing line."""
        if self.json_mode:
            self.json(partial.model_dump(mode="json"), stream=True)
            return
        if self.fancy:
            if self._status is not None:
                from rich.text import Text

                head = f"{partial.job_id} writing: "
                # One line: the spinner and its gap take 2 columns, keep 2 spare.
                width = max(10, self.console.width - len(head) - 4)
                preview = " ".join(text.split())[-width:]
                self._status.update(Text(head + preview))
            return
        if not self._growing:
            sys.stdout.write(f"{'':8} {'':4} {'Partial':<10} {partial.job_id:<14} ")
            self._growing = True
        sys.stdout.write(partial.text)
        sys.stdout.flush()

    def end_partial(self) -> None:
        """The streamed answer shown so far is over (its entry or another step follows)."""
        if self._growing:
            self._plain()
            self._growing = False
        if self._status is not None:
            from rich.text import Text

            self._status.update(Text(self._status_message))

    def entry(self, entry: Entry) -> None:
        """One timeline line for an entry (a JSON line with ``--json``)."""
        self.end_partial()
        if self.json_mode:
            self.json(entry.model_dump(mode="json"), stream=True)
            return
        summary = entry_summary(entry)
        when = _local(entry.created_at, "%H:%M:%S")
        label = entry_label(entry.type)
        if not self.fancy:
            head = f"{when} #{entry.seq:<3} {label:<10} {entry.sender:<14} "
            lines = summary.splitlines() or [""]
            self._plain(head + lines[0])
            for more in lines[1:]:
                self._plain(" " * len(head) + more)
            return
        from rich.text import Text

        style = _STYLES.get(entry.type, "")
        if entry.type == "tool_result" and entry.metadata.get("is_error"):
            style = "red"
        if entry.type == "message" and entry.sender.startswith("agent:"):
            style = "bold green"
        sender_style = "cyan" if entry.sender.startswith("user:") else "magenta"
        self.console.print(
            Text.assemble(
                (f"{when} ", "dim"),
                (f"#{entry.seq:<3} ", "dim"),
                (f"{label:<10} ", style),
                (f"{entry.sender:<14} ", sender_style),
                (summary, style if entry.type != "message" else ""),
            )
        )

    def event(self, event: Event, *, jsonl: bool = False) -> None:
        """One line for an event of a session's log: ``TIME #ID KIND DATA``, or a
        JSON line (``jsonl``, or ``--json``)."""
        if jsonl or self.json_mode:
            self.json(event.model_dump(mode="json"), stream=True)
            return
        when = _local(event.created_at, "%H:%M:%S")
        data = _cell(event.data)
        if self.fancy:
            from rich.text import Text

            self.console.print(
                Text.assemble(
                    (f"{when} ", "dim"),
                    (f"#{event.id:<6} ", "dim"),
                    (f"{event.kind:<18} ", "bold"),
                    data,
                )
            )
            return
        self._plain(f"{when} #{event.id:<6} {event.kind:<18} {data}")

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Rows under a header: a rich table on a TTY, aligned columns in a pipe."""
        cells = [[_cell(v) for v in row] for row in rows]
        if self.fancy:
            from rich import box
            from rich.table import Table
            from rich.text import Text

            table = Table(title=title or None, box=box.SIMPLE_HEAD, title_justify="left")
            for col in columns:
                table.add_column(col, overflow="fold")
            for row in cells:
                table.add_row(*(Text(c) for c in row))
            self.console.print(table)
            return
        # A newline inside a cell would break the columns for line-based tools.
        cells = [[c.replace("\n", " ") for c in row] for row in cells]
        widths = [max([len(col)] + [len(row[i]) for row in cells]) for i, col in enumerate(columns)]
        self._plain("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
        for row in cells:
            self._plain("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())

    def fields(self, title: str, pairs: Sequence[tuple[str, Any]]) -> None:
        """Key/value pairs."""
        if self.fancy:
            from rich.table import Table
            from rich.text import Text

            grid = Table.grid(padding=(0, 2))
            grid.add_column(style="bold")
            grid.add_column(overflow="fold")
            for key, value in pairs:
                grid.add_row(key, Text(_cell(value)))
            if title:
                self.console.print(Text(title, style="bold underline"))
            self.console.print(grid)
            return
        width = max((len(k) for k, _ in pairs), default=0)
        for key, value in pairs:
            self._plain(f"{key.ljust(width)}  {_cell(value)}")
