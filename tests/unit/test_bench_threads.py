"""The benchmarks' thread harness: a phase's senders stop when told, and one
that does not is reported with its stack instead of hanging the run."""

from __future__ import annotations

import threading

import pytest

from benchmarks import measure


def test_a_sender_that_never_returns_fails_the_phase_with_its_stack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(measure, "JOIN_SECONDS", 0.5)
    release = threading.Event()

    def submit(key: str) -> None:
        if key == "stuck":
            release.wait()  # a send that never returns

    loop = measure.ClosedLoop(["stuck", "fine"], submit, senders=2)
    try:
        with pytest.raises(measure.StuckThreads) as err:
            loop.run(warmup=0.0, duration=0.1)
    finally:
        release.set()
    text = str(err.value)
    assert "1 of 2 sender threads still ran 0.5 s" in text, text
    stuck = text.split("The sender threads still running:")[1]
    assert "bench-send-" in stuck and "in submit" in stuck and "release.wait()" in stuck, text
    assert "MainThread" in text.split("The sender threads still running:")[0], text


def test_a_listener_that_does_not_stop_is_reported_not_raised(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In a ``finally``, a close that raised would skip stopping the workers."""
    release = threading.Event()
    t = threading.Thread(target=release.wait, name="bench-replies", daemon=True)
    t.start()
    try:
        measure.join_all([t], "the reply listener", 0.2, strict=False)
    finally:
        release.set()
    err = capsys.readouterr().err
    assert "1 of 1 the reply listener still ran 0.2 s" in err and "bench-replies" in err, err


def test_the_senders_stop_on_time_when_the_gil_is_contended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four senders each wait on the ready queue with a short timeout while
    busy threads hold the GIL: every one must notice the stop. With a
    queue.SimpleQueue (CPython < 3.13) a getter woken after its deadline, its
    item taken by another, waits again with a negative timeout (forever, until
    the next put): how capacity's (r) phase hung in CI."""
    monkeypatch.setattr(measure, "JOIN_SECONDS", 5.0)
    busy = threading.Event()

    def spin() -> None:
        while not busy.is_set():
            pass

    spinners = [threading.Thread(target=spin, daemon=True) for _ in range(6)]
    for t in spinners:
        t.start()
    try:
        loop: measure.ClosedLoop

        def submit(key: str) -> None:
            loop.complete(key)  # answered at once: the keys circulate

        loop = measure.ClosedLoop([f"k{i}" for i in range(3)], submit, senders=4)
        # A sender that misses the stop fails the run (StuckThreads), within
        # JOIN_SECONDS: that bound, not the clock here, is the check.
        result = loop.run(warmup=0.0, duration=1.5, drain_timeout=1.0)
    finally:
        busy.set()
    assert result.count > 0
