"""What installing chaz puts on a user's import path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_an_installed_chaz_adds_no_global_celeryconfig_module(tmp_path: Path) -> None:
    # Outside the checkout: only what the installation provides is importable
    # (a PYTHONPATH naming the checkout, as a contributor's shell may set,
    # would put its own celeryconfig.py there).
    probe = "import importlib.util as u; print(u.find_spec('celeryconfig') is None)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "True", out.stdout + out.stderr


def test_the_checkouts_celeryconfig_is_the_packages_settings() -> None:
    import celeryconfig
    import chaz.celery_settings as settings

    assert celeryconfig.task_routes is settings.task_routes
    assert celeryconfig.task_acks_late is True
