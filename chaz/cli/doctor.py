"""``chaz doctor``: one line per check of a deployment, with how to fix what fails."""

from __future__ import annotations

from chaz.cli.context import Context
from chaz.cli.exits import EXIT_FAILURE, EXIT_OK
from chaz.settings import Settings


def cmd_doctor(ctx: Context) -> int:
    """Check settings, database, Redis, queues, workers, reconciler and beat; 0 if all is well."""
    from chaz.usecases import doctor

    def load() -> Settings:
        # Bad settings are the first check's failure, not the command's error.
        return ctx.server_settings

    out = ctx.out
    with out.status("checking..."):
        results = doctor.diagnose(load)
    if out.json_mode:
        out.json([r.as_dict() for r in results])
    else:
        for r in results:
            if r.ok:
                out.line(f"ok       {r.check}: {r.detail}", "green")
            else:
                out.line(f"PROBLEM  {r.check}: {r.detail}", "red")
                out.line(f"         fix: {r.fix}")
    return EXIT_OK if doctor.all_ok(results) else EXIT_FAILURE
