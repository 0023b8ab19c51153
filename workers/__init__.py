"""The Celery app of chaz (``celery -A workers worker``) and its tasks.

Thin by design: each task loads its state from the database and calls into
:mod:`chaz`.
"""

from workers.app import app

__all__ = ["app"]
