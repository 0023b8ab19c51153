"""The command line of a chaz worker (``python -m workers worker ...``).

Its own module, with nothing but :mod:`sys` behind it, so that ``chaz
worker`` builds the line it execs without loading what the embedded stack
(:mod:`chaz.stack`, which re-exports both names) needs to run workers
itself: every import before the exec delays the worker's first turn
(docs/performance.md#worker-start-up).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

#: Every queue chaz's tasks are routed to (see chaz.celery_settings.task_routes).
QUEUES = "chaz.turns,chaz.control,chaz.schedules"


def worker_command(
    concurrency: int,
    *,
    name: str,
    queues: str = QUEUES,
    loglevel: str = "WARNING",
    beat_schedule: Path | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The ``celery worker`` command line of a chaz worker (``extra`` goes last, so wins).

    ``python -m workers worker`` is Celery's own ``worker`` command on chaz's
    app without the ``celery`` command's plugins (:mod:`workers.__main__`):
    the same options, a start about 0.3 s shorter."""
    cmd = [
        sys.executable, "-m", "workers", "worker",
        "--pool", "threads",
        "--concurrency", str(concurrency),
        "--hostname", f"{name}@%h",
        "--queues", queues,
        "--loglevel", loglevel,
        # Gossip and mingle are broker chatter chaz does not use (no revokes, no
        # worker-to-worker sync); Flower reads task events, which stay on.
        "--without-gossip",
        "--without-mingle",
        "--task-events",
    ]  # fmt: skip
    if beat_schedule is not None:
        cmd += ["--beat", "--schedule", str(beat_schedule)]
    return [*cmd, *extra]
