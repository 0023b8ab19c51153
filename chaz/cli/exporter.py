"""``chaz exporter``: serve the fleet-wide metrics until SIGINT or SIGTERM."""

from __future__ import annotations

import signal
import threading

from chaz.cli.context import Context, Interrupts
from chaz.cli.exits import EXIT_OK
from chaz.errors import ConfigError


def cmd_exporter(ctx: Context) -> int:
    """Serve queue depths, jobs, deliveries and refusals on ``--port`` (docs/operations.md)."""
    from chaz.services import Services
    from chaz.usecases import exporter

    args, out = ctx.args, ctx.out
    services = Services(ctx.server_settings)
    try:
        try:
            server = exporter.serve(services, args.port, args.addr)
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {args.addr}:{args.port}: {exc.strerror or exc}",
                port=args.port,
            ) from exc
        out.note(f"chaz exporter on http://{args.addr}:{args.port}/metrics")
        if out.json_mode:
            out.json({"status": "serving", "port": args.port, "addr": args.addr}, stream=True)
        try:
            with Interrupts(signal.SIGINT, signal.SIGTERM):
                # The server runs on its own thread; this one only waits for a signal.
                threading.Event().wait()
        except KeyboardInterrupt:
            # SIGTERM is how a deployment stops it: a clean stop is success.
            pass
        server.shutdown()
        server.server_close()
        return EXIT_OK
    finally:
        services.close()
