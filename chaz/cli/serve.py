"""``chaz serve``: the HTTP server (docs/http.md) in the foreground."""

from __future__ import annotations

import importlib.util
import ipaddress

from chaz.cli.context import Context
from chaz.cli.output import EXIT_OK
from chaz.settings import Settings


def anonymous_allowed(settings: Settings, host: str) -> bool:
    """Whether a request without a key may act as the operator: only on the
    embedded default (SQLite and chaz's own Redis, one machine's data) and
    only on a loopback listener (docs/http.md#auth)."""
    embedded = settings.database_url is None and settings.embedded_redis
    return embedded and ipaddress.ip_address(host).is_loopback


def server_stack() -> tuple[str, str]:
    """uvicorn's HTTP parser and event loop for ``chaz serve``: ``httptools``
    and ``uvloop`` (C; dependencies of chaz) where installed, else the
    pure-Python ``h11`` and asyncio's own loop (uvloop has no Windows build).
    Measured: the server's CPU per run 2-22 % lower with both
    (docs/performance.md#http-chaz-serve-against-langgraph-dev)."""
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    return http, loop


def cmd_serve(ctx: Context) -> int:
    """Serve the API until Ctrl-C (uvicorn handles the signal)."""
    import uvicorn

    from chaz.cli.processes import _migrate
    from chaz.coord.redis import ensure_embedded
    from chaz.server import create_app
    from chaz.services import Services

    args, out = ctx.args, ctx.out
    settings = ctx.server_settings
    settings.home.resolve().mkdir(parents=True, exist_ok=True)
    if settings.embedded_redis:
        ensure_embedded(settings)
    _migrate(settings, report=False)
    anonymous = anonymous_allowed(settings, args.host)
    app = create_app(Services(settings), anonymous=anonymous)
    keys = "no key needed (embedded, loopback)" if anonymous else "x-api-key required"
    http, loop = server_stack()
    out.note(f"chaz serve: http://{args.host}:{args.port} ({keys}; {http}, {loop})")
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.loglevel, http=http, loop=loop)
    return EXIT_OK
