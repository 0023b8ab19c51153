"""Benchmarks of chaz against bare Celery: ``python -m benchmarks.run`` (see README.md)."""
