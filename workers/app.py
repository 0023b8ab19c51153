"""The Celery application, configured from :mod:`chaz.celery_settings`."""

from __future__ import annotations

from celery import Celery

from chaz.coord.broker import install_restart_workaround
from chaz.coord.poison import install_poison_guard

# Before the consumer opens its first channel: see chaz.coord.broker and
# chaz.coord.poison.
install_restart_workaround()
install_poison_guard()

app = Celery("chaz", include=["workers.tasks"])
app.config_from_object("chaz.celery_settings")
