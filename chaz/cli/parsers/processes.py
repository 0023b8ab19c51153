"""The arguments of ``chaz demo``, ``chaz up``, ``chaz worker`` and ``chaz serve``
(processes that run chaz)."""

from __future__ import annotations

from chaz.cli.parsers import Subcommands, command, ip_address, port

#: What ``chaz demo``'s user:you says unless told otherwise.
DEMO_MESSAGE = "Hello chaz, please count the words in this message."


def register(commands: Subcommands) -> None:
    """Add ``chaz demo``, ``chaz up``, ``chaz worker`` and ``chaz serve`` to ``commands``."""
    _serve(commands)
    p = commands.add(
        "demo",
        command("cmd_demo", "chaz.cli.processes"),
        "run one agent turn on the embedded stack, live",
    )
    p.add_argument("--message", default=DEMO_MESSAGE, help="what user:you says")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the reply")

    p = commands.add(
        "up",
        command("cmd_up", "chaz.cli.processes"),
        "run workers and beat in the foreground until Ctrl-C",
    )
    p.add_argument(
        "--workers", type=int, default=1, metavar="N", help="worker processes (default 1)"
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        metavar="N",
        help="turn threads per worker (default CHAZ_WORKER_CONCURRENCY)",
    )
    p.add_argument(
        "--no-beat",
        action="store_true",
        help="do not run beat (the reconciler, retention, schedules)",
    )
    p.add_argument("--loglevel", default="INFO", help="worker log level (logs go to files)")
    p.add_argument(
        "--http",
        type=port,
        default=None,
        metavar="PORT",
        help="also run `chaz serve` on 127.0.0.1:PORT (docs/http.md)",
    )

    register_worker(commands)


def register_worker(commands: Subcommands) -> None:
    """Add ``chaz worker`` to ``commands`` (alone: chaz.cli.main's fast path for it)."""
    p = commands.add(
        "worker",
        command("cmd_worker", "chaz.cli.worker"),
        "exec a celery worker on chaz's queues (extra args go to celery)",
        allow_abbrev=False,  # an unknown option is celery's, never a prefix of ours
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        metavar="N",
        help="threads (default CHAZ_WORKER_CONCURRENCY)",
    )
    p.add_argument("--beat", action="store_true", help="also run beat in this worker")
    p.add_argument("--loglevel", default="INFO", help="celery log level (default INFO)")
    p.add_argument(
        "--metrics-port",
        type=port,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics on this port (default CHAZ_METRICS_PORT; e.g. 9809)",
    )
    p.add_argument(
        "--metrics-addr",
        type=ip_address,
        default=None,
        metavar="ADDR",
        help="the address the metrics endpoint binds (default CHAZ_METRICS_ADDR, else "
        "0.0.0.0; 127.0.0.1 for this host only)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the celery command instead of running it"
    )


def _serve(commands: Subcommands) -> None:
    p = commands.add(
        "serve",
        command("cmd_serve", "chaz.cli.serve"),
        "serve LangGraph Platform's HTTP API over chaz in the foreground (docs/http.md)",
    )
    p.add_argument(
        "--host",
        type=ip_address,
        default="127.0.0.1",
        metavar="ADDR",
        help="the address to bind (default 127.0.0.1; 0.0.0.0 for every interface)",
    )
    p.add_argument(
        "--port", type=port, default=DEFAULT_HTTP_PORT, metavar="PORT", help="default 2024"
    )
    p.add_argument("--loglevel", default="info", help="uvicorn's log level (default info)")


#: ``chaz serve``'s port: the one LangGraph's own dev server and examples use.
DEFAULT_HTTP_PORT = 2024
