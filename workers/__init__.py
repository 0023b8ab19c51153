"""The Celery app of chaz (``celery -A workers worker``) and its tasks.

Thin by design: each task loads its state from the database and calls into
:mod:`chaz`.

Started as ``python -m workers worker`` (what ``chaz worker`` execs), the
process collects no garbage until the worker's modules are imported
(:func:`pause_collection`, ended by ``workers.__main__``).
"""

import gc
import sys

#: Whether this process paused its garbage collector (:func:`pause_collection`).
_paused = False


def pause_collection() -> None:
    """Stop the cyclic garbage collector while ``python -m workers worker`` starts.

    The modules a worker imports allocate over a hundred thousand objects that
    live as long as the process, and the collector's full passes over them
    were about a tenth of its start (docs/performance.md#worker-start-up).
    Python sets ``sys.argv[0]`` to ``-m`` while it locates the module of
    ``python -m``, which imports this package: only then is it paused, and
    :func:`resume_collection` ends the pause.
    """
    global _paused
    if sys.argv[:2] == ["-m", "worker"] and gc.isenabled():
        gc.disable()
        _paused = True


def resume_collection() -> None:
    """End :func:`pause_collection`'s pause: what exists by now (modules, classes,
    the settings, the app) is frozen out of every later collection
    (``gc.freeze``), which then scans only what the worker allocates after."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()


pause_collection()

from workers.app import app  # noqa: E402  (after the pause begins)

__all__ = ["app", "pause_collection", "resume_collection"]
