"""Process-level plumbing: sending Celery tasks, fault injection, private files,
the watchdog, the worker heartbeat and the worker's command line. No chaz
rules live here."""
