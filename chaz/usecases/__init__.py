"""The use cases: what chaz does, each over the store, coordination and runtime.

One module (or package) a use case: admitting a write, running a turn,
cancelling and stopping, delivering between sessions, schedules and beat,
approvals, compaction, naming, the reconciler and the lease watch, retention,
projects, the event log, the doctor and the metrics exporter. Callers above
(the client, the CLI, the workers) import the module they need by its path.
"""
