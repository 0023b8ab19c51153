"""Helpers for tests that race threads against each other on purpose."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def race(n: int, fn: Callable[[int], T]) -> list[T | BaseException]:
    """Run ``fn(i)`` in ``n`` threads released at once; results (or exceptions) by index."""
    barrier = threading.Barrier(n)
    out: list[T | BaseException] = [RuntimeError("not run")] * n

    def run(i: int) -> None:
        barrier.wait()
        try:
            out[i] = fn(i)
        except BaseException as exc:
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out
