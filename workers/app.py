"""The Celery application, configured from :mod:`celeryconfig`."""

from __future__ import annotations

from celery import Celery

app = Celery("chaz", include=["workers.tasks"])
app.config_from_object("celeryconfig")
