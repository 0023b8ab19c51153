"""The fault soak, short: one minute of load and faults, then no loss, duplicate or reorder.

``python -m benchmarks.soak --minutes 1`` on the machine's PostgreSQL and a
Redis server the soak starts itself (see docs/reliability.md). The figures
(recovery times) are read in the docs, never asserted here; the exit status
says whether every admitted turn completed exactly once, in order, and no
worker died by itself. Select it with ``pytest -m soak``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.servers import postgres_admin

ROOT = Path(__file__).resolve().parents[2]
PG_ADMIN = os.environ.get("CHAZ_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")

#: The fault kinds the CI soak injects: all of them. CHAZ_SOAK_FAULTS
#: narrows the list (comma-separated) to look at one kind alone.
FAULTS = os.environ.get("CHAZ_SOAK_FAULTS", "kill,pg,redis-flush,redis-restart,redeliver")


@pytest.mark.soak
def test_a_minute_of_faults_loses_duplicates_and_reorders_nothing(tmp_path: Path) -> None:
    postgres_admin(PG_ADMIN).close()  # a full server fails here, it is never skipped
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAZ_")}
    env["SOAK_PG_ADMIN"] = PG_ADMIN
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.soak", "--minutes", "1", "--faults", FAULTS],
        cwd=ROOT,
        env={**env, "TMPDIR": str(tmp_path), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=280,
    )
    shown = out.stdout[-6000:] + out.stderr[-3000:]
    assert out.returncode == 0, shown
    assert "PASSED" in out.stdout, shown
    table = out.stdout.split("faults:\n", 1)[0]
    for kind in FAULTS.split(","):
        assert kind in table, f"no {kind} row\n{shown}"
