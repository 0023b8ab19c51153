"""``chaz bridge matrix``: a bridge in the foreground (docs/bridges.md)."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

from chaz.cli.context import Context
from chaz.cli.output import EXIT_OK


def cmd_bridge_matrix(ctx: Context) -> int:
    """Relay until SIGTERM or SIGINT, then finish the send in progress and exit 0."""
    from chaz.bridges import matrix_relay

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    relay = matrix_relay(ctx.args.config)

    def stop(signum: int, frame: FrameType | None) -> None:
        relay.stop()

    # The relay's waits are bounded by the config's poll_seconds, so a stop
    # asked here is seen within that long; nothing is cut off mid-send.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
    relay.run()
    ctx.out.note("chaz bridge matrix: stopped")
    return EXIT_OK
