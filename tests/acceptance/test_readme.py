"""The README's quick start, run as a newcomer runs it: twice, on one home."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.fleet


def quick_start() -> str:
    """The first Python block of the README's Quick start."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Quick start") :]
    found = re.search(r"```python\n(.*?)\n```", section, re.S)
    assert found, "no python block in the README's Quick start"
    return found.group(1)


def test_the_quick_start_runs_twice_on_the_same_home(tmp_path: Path) -> None:
    script = tmp_path / "quick_start.py"
    script.write_text(quick_start())
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAZ_")} | {
        "CHAZ_HOME": str(tmp_path / "home"),
        "PYTHONPATH": str(ROOT),
    }
    for run in (1, 2):
        out = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert out.returncode == 0, f"run {run}:\n{out.stdout}\n{out.stderr}"
        lines = out.stdout.splitlines()
        assert lines[0] == "3 words", (run, out.stdout)
        assert lines[1:6] == [
            "1 message user:alice three little words",
            "2 ack agent:words processing",
            '3 tool_call agent:words {"name": "word_count", '
            '"arguments": "{\\"text\\": \\"three little words\\"}"}',
            "4 tool_result agent:words 3",
            "5 message agent:words 3 words",
        ], (run, out.stdout)
        assert lines[-1] == "succeeded 3", (run, out.stdout)
