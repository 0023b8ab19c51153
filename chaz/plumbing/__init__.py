"""Process-level plumbing: sending Celery tasks, fault injection, private files,
the watchdog and the worker heartbeat. No chaz rules live here."""
