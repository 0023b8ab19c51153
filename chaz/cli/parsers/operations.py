"""The arguments of what operates a deployment: ``chaz exporter``, ``chaz probe``,
``chaz migrate``, ``chaz doctor`` and ``chaz config``."""

from __future__ import annotations

from chaz.cli.parsers import Subcommands, command, port


def register(commands: Subcommands) -> None:
    """Add the operators' commands to ``commands``."""
    p = commands.add(
        "exporter",
        command("cmd_exporter", "chaz.cli.exporter"),
        "serve fleet-wide Prometheus metrics (queues, jobs, deliveries, refusals)",
    )
    p.add_argument(
        "--port", type=port, default=9808, metavar="PORT", help="listen port (default 9808)"
    )
    p.add_argument(
        "--addr", default="0.0.0.0", metavar="ADDR", help="listen address (default 0.0.0.0)"
    )

    probe_sub = commands.group(
        "probe", "cheap health checks for a platform's probes (exit 0 = healthy)"
    )
    p = probe_sub.add(
        "worker",
        command("cmd_probe_worker", "chaz.cli.probe"),
        "is this machine's worker ready for turns (or, with --live, still working)?",
    )
    p.add_argument(
        "--live",
        action="store_true",
        help="check only that the worker's event loop still beats (no Redis); a worker "
        "in warm shutdown is live",
    )
    p.add_argument(
        "--node", metavar="NAME@HOST", help="this worker only (default: every worker of CHAZ_HOME)"
    )
    p.add_argument(
        "--max-age",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="with --live: the oldest beat that counts as live (default 60)",
    )

    commands.add(
        "migrate",
        command("cmd_migrate", "chaz.cli.processes"),
        "bring the database schema up to date",
    )
    doctor = command("cmd_doctor", "chaz.cli.doctor")
    commands.add(
        "doctor", doctor, "check settings, database, Redis, workers and beat; say what to fix"
    )
    config = command("cmd_config", "chaz.cli.info")
    commands.add("config", config, "print the effective settings (secrets masked)")
