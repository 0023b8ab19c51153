"""``python -m benchmarks.soak``: a fault soak of chaz on PostgreSQL + Redis.

Producers post numbered messages into many sessions while a fault schedule
SIGKILLs workers mid-turn, terminates PostgreSQL backends, flushes and
restarts a Redis server of the soak's own, and redelivers Celery messages.
At the end the database is checked: every admitted turn completed exactly
once, nothing duplicated, every session's turns in admission order. See
docs/reliability.md.

Modules: :mod:`.stack` (the servers and the supervised workers),
:mod:`.load` (the producers), :mod:`.faults` (the fault kinds and the
schedule), :mod:`.check` (the verification), :mod:`.report` (the table),
:mod:`.main` (the command).
"""
