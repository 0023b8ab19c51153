"""Turns per second with Redis and with RabbitMQ as the broker: ``python -m benchmarks.brokers``.

The server stack (the machine's PostgreSQL and Redis) runs benchmark (b) of
:mod:`benchmarks.run` (``sessions`` sessions, one message in flight in
each, for ``turns_seconds``) with the same workers, once with the Celery
broker on Redis (the default) and once on RabbitMQ (``CHAZ_BROKER_URL``, a
vhost of its own made with ``rabbitmqctl``), alternating for ``--rounds``
rounds, so a change in the machine's load lands on both. Coordination is on
Redis either way. Prints turns/s, CPU ms per turn by group, and the load
average before each run (docs/brokers.md#figures).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import redis

from benchmarks.measure import QUICK, ReplyListener, Sizes, Throughput, measure_turns
from benchmarks.stacks import BenchStack, scrub_environment

RABBITMQ = os.environ.get("BENCH_RABBITMQ", "amqp://guest:guest@127.0.0.1:5672")
VHOST = "chaz_bench"


def _vhost(action: str) -> None:
    args = ["rabbitmqctl", f"{action}_vhost", VHOST]
    subprocess.run(args, check=action == "add", capture_output=True, timeout=120)
    if action == "add":
        subprocess.run(
            ["rabbitmqctl", "set_permissions", "-p", VHOST, "guest", ".*", ".*", ".*"],
            check=True,
            capture_output=True,
            timeout=120,
        )


def run_once(broker: str, sizes: Sizes, workers: int, concurrency: int) -> Throughput:
    """One measurement of (b) with ``broker`` (``redis`` or ``rabbitmq``)."""
    url = None
    if broker == "rabbitmq":
        _vhost("delete")
        _vhost("add")
        url = f"{RABBITMQ}/{VHOST}"
    stack = BenchStack("server", broker_url=url)
    try:
        stack.start_chaz_workers(workers, concurrency)
        listener = ReplyListener(redis.Redis.from_url(stack.settings.effective_redis_url()))
        try:
            return measure_turns(stack, listener, sizes)
        finally:
            listener.close()
    finally:
        stack.close()
        if url is not None:
            _vhost("delete")


def main(argv: list[str] | None = None) -> int:
    """Alternate the two brokers and print one line per run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args(argv)
    scrub_environment()
    sizes = Sizes(
        sessions=args.sessions,
        warmup=QUICK.warmup,
        turns_seconds=args.seconds,
    )
    print(
        f"{args.workers} workers x {args.concurrency} threads, {args.sessions} sessions with "
        f"one message in flight each, {args.seconds:g} s per run, {os.cpu_count()} cores"
    )
    print("broker    load1  turns/s  workers ms/turn  redis ms/turn  database ms/turn")
    rates: dict[str, list[float]] = {"redis": [], "rabbitmq": []}
    for _ in range(args.rounds):
        for broker in ("redis", "rabbitmq"):
            load = os.getloadavg()[0]
            t = run_once(broker, sizes, args.workers, args.concurrency)
            rates[broker].append(t.rate)
            print(
                f"{broker:<9} {load:5.1f}  {t.rate:7.1f}  {t.cpu_ms_per('workers'):15.2f}  "
                f"{t.cpu_ms_per('redis'):13.2f}  {t.cpu_ms_per('database'):16.2f}"
                + (f"  ({t.errors} errors)" if t.errors else ""),
                flush=True,
            )
    for broker, values in rates.items():
        print(f"{broker}: mean {sum(values) / len(values):.1f} turns/s over {len(values)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
