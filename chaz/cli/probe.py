"""``chaz probe worker``: a check cheap enough to run every few seconds.

It reads a file in ``CHAZ_HOME`` and, unless ``--live``, one Redis key: no
broadcast over the broker (``celery inspect ping`` asks every worker and
waits for their replies), no database. What each mode means, and why
liveness leaves Redis out, is in :mod:`chaz.plumbing.heartbeat`.
"""

from __future__ import annotations

import sys

from chaz.cli.context import Context
from chaz.cli.exits import EXIT_FAILURE, EXIT_OK


def cmd_probe_worker(ctx: Context) -> int:
    """Exit 0 if every worker of this home (or ``--node``) is ready (or, ``--live``, live)."""
    import redis

    from chaz.plumbing import heartbeat

    args, out = ctx.args, ctx.out
    mode = "live" if args.live else "ready"
    settings = ctx.settings
    beats = heartbeat.local_beats(settings.home, args.node)
    problems: list[str] = []
    if not beats:
        which = f"worker {args.node}" if args.node else "worker"
        problems.append(f"no {which} runs here with CHAZ_HOME={settings.home.resolve()}")
    elif args.live:
        problems = [p for b in beats if (p := heartbeat.live_problem(b, args.max_age))]
    else:
        # Short timeouts and no retries: a probe must answer within its own deadline.
        client = redis.Redis.from_url(
            settings.effective_redis_url(),
            socket_timeout=2,
            socket_connect_timeout=2,
            retry_on_timeout=False,
            decode_responses=True,
        )
        try:
            problems = [p for b in beats if (p := heartbeat.ready_problem(b, client))]
        finally:
            client.close()
    if out.json_mode:
        out.json(
            {
                "ok": not problems,
                "check": mode,
                "workers": [{"node": b.node, "pid": b.pid, "state": b.state} for b in beats],
                "problems": problems,
            }
        )
    if problems:
        if not out.json_mode:
            # The kubelet keeps a failed probe's output: say what is wrong there.
            for problem in problems:
                print(f"not {mode}: {problem}", file=sys.stderr, flush=True)
        return EXIT_FAILURE
    if not out.json_mode:
        out.line(f"{mode}: " + ", ".join(b.node for b in beats))
    return EXIT_OK
