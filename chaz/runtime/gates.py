"""Gates: named events that a scripted ``wait`` step blocks on until someone opens them.

A gate is the file ``$CHAZ_HOME/gates/NAME``; opening the gate creates it. Tests
and demos use gates to hold a turn at a known point (its Ack is written, a tool
call is in flight) and let it go when they choose, instead of guessing with a
sleep how long a step takes on a loaded machine. Files rather than Redis keys,
so that a test can hold a turn across a Redis restart or a dropped database
connection. Every process that shares the ``CHAZ_HOME`` sees the same gates.
"""

from __future__ import annotations

import time
from pathlib import Path

from chaz.domain.script import GATE_NAME
from chaz.errors import ValidationError
from chaz.plumbing.files import create_private, private_dir
from chaz.runtime.cancel import CancelToken

_POLL_SECONDS = 0.02


def gate_path(home: Path, name: str) -> Path:
    """Where the gate ``name`` of this ``CHAZ_HOME`` lives."""
    if not GATE_NAME.fullmatch(name):
        raise ValidationError(f"gate name {name!r} must be 1-128 letters, digits, _ . -", gate=name)
    return home.resolve() / "gates" / name


def open_gate(home: Path, name: str) -> None:
    """Open the gate: every ``wait`` on it, now or later, passes."""
    path = gate_path(home, name)
    private_dir(path.parent)
    create_private(path)


def close_gate(home: Path, name: str) -> None:
    """Close the gate again (later waits block until it is reopened)."""
    gate_path(home, name).unlink(missing_ok=True)


def wait_gate(home: Path, name: str, timeout: float, cancel: CancelToken | None = None) -> bool:
    """Block until the gate is open; False if ``timeout`` seconds passed first.

    Raises :class:`~chaz.errors.Cancelled` as soon as ``cancel`` is set.
    """
    path = gate_path(home, name)
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() >= deadline:
            return False
        if cancel is None:
            time.sleep(_POLL_SECONDS)
        elif cancel.wait(_POLL_SECONDS):
            cancel.raise_if_set()
    return True
