"""Celery settings for ``celery -A workers ...`` run from a checkout of chaz.

The settings themselves, each explained, are in :mod:`chaz.celery_settings`;
this file only re-exports them under the name Celery's tutorials use.
"""

from chaz.celery_settings import *  # noqa: F403
