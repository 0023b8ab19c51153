"""SQLite's writer queue: one writer at a time across threads and processes."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from chaz.store.db import WriterQueue

_HOLD = """
import sys, time
from pathlib import Path
from chaz.store.db import WriterQueue
q = WriterQueue(Path(sys.argv[1]))
with q:
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    Path(sys.argv[1] + ".done").write_text("done")  # still holding the queue
"""


def test_a_writer_in_another_process_waits_for_the_holder(tmp_path: Path) -> None:
    path = tmp_path / "db.writers"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(path), "0.5"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        queue = WriterQueue(path)
        with queue:
            # We got in only after the other process had finished its write.
            assert Path(str(path) + ".done").exists()
        queue.close()
        assert holder.wait(timeout=10) == 0
    finally:
        holder.kill()


def test_threads_take_turns_and_a_nested_write_does_not_deadlock(tmp_path: Path) -> None:
    queue = WriterQueue(tmp_path / "db.writers")
    inside = 0
    most = 0
    guard = threading.Lock()

    def write() -> None:
        nonlocal inside, most
        for _ in range(20):
            with queue:
                with guard:
                    inside += 1
                    most = max(most, inside)
                with queue:  # the same thread again: reentrant
                    time.sleep(0.0005)
                with guard:
                    inside -= 1

    threads = [threading.Thread(target=write) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert most == 1
    queue.close()
