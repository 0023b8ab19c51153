"""The Celery application, configured from :mod:`chaz.celery_settings`."""

from __future__ import annotations

from celery import Celery

from chaz.coord.broker import install_restart_workaround

# Before the consumer opens its first channel: see chaz.coord.broker.
install_restart_workaround()

app = Celery("chaz", include=["workers.tasks"])
app.config_from_object("chaz.celery_settings")
