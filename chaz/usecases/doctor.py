"""``chaz doctor``: checks a deployment end to end and says how to fix what is wrong.

Each check answers one question, in the order an operator would fix things:
settings, database (and its schema revision), Redis, the broker queues, live
workers, the reconciler and beat. A check that depends on an earlier one that
failed is reported as not checked, with the earlier fix. Nothing here starts,
creates or migrates anything: the doctor only looks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from chaz.brokers import configure
from chaz.coord import keys
from chaz.coord.broker import QUEUES, queue_depths
from chaz.errors import ChazError
from chaz.settings import Settings, broker_is_coordination, broker_url_for, is_amqp, mask_url

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

#: Seconds a probe (Redis, a worker's reply) may take before it counts as no answer.
PROBE_SECONDS = 2.0

START_BEAT = "start one beat: `chaz worker --beat` (in one worker only) or `celery -A workers beat`"
BRIDGE_DOWN = (
    "start the bridge (`chaz bridge matrix --config FILE`) with `metrics_port` set,"
    " and name its metrics URL in CHAZ_BRIDGES"
)
BRIDGE_STALE = (
    "read the bridge's log: its platform (the homeserver) or chaz serve does not answer,"
    " or its credentials were refused"
)
START_WORKER = "start a worker: `chaz worker` (or `chaz up` for the embedded default)"


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome: what was checked, whether it is well, and how to fix it."""

    check: str
    ok: bool
    detail: str
    #: What to do about a failed check ("" when ok).
    fix: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The JSON form: ``{check, ok, detail, fix}``."""
        return asdict(self)


def all_ok(results: list[CheckResult]) -> bool:
    """Whether every check passed."""
    return all(r.ok for r in results)


def diagnose(load_settings: Callable[[], Settings]) -> list[CheckResult]:
    """Run every check in order; ``load_settings`` raises ChazError on bad settings."""
    try:
        settings = load_settings()
    except ChazError as exc:
        failed = CheckResult("settings", False, exc.message, "correct the CHAZ_* setting named")
        return [failed, *_skipped(["database", "redis", *_REDIS_CHECKS], failed)]
    results = [
        CheckResult(
            "settings",
            True,
            f"database {mask_url(settings.effective_database_url())}, "
            f"redis {mask_url(settings.effective_redis_url())}, "
            f"broker {mask_url(broker_url_for(settings))}",
        ),
        check_database(settings),
    ]
    client = _redis_client(settings)
    # A bridge is checked through its own metrics, whatever Redis says.
    bridges = [check_bridge(url) for url in settings.bridges]
    try:
        redis_result = check_redis(settings, client)
        results.append(redis_result)
        if not redis_result.ok:
            return results + _skipped(_REDIS_CHECKS, redis_result) + bridges
        same = broker_is_coordination(settings)
        results.append(check_queues(client if same else None, broker_url_for(settings)))
        results.append(check_workers(settings))
        results.append(check_reconcile(settings, client))
        results.append(check_beat(client))
    finally:
        client.close()
    return results + bridges


_REDIS_CHECKS = ["queues", "workers", "reconcile", "beat"]


def _skipped(names: list[str], cause: CheckResult) -> list[CheckResult]:
    return [
        CheckResult(name, False, f"not checked: the {cause.check} check failed", cause.fix)
        for name in names
    ]


def check_database(settings: Settings) -> CheckResult:
    """The database answers and its schema is at the newest bundled revision."""
    import sqlalchemy.exc
    from sqlalchemy.engine import make_url

    from chaz.store.db import make_engine
    from chaz.store.migrate import current_revision, head_revision

    url = settings.effective_database_url()
    masked = mask_url(url)
    migrate = "run `chaz migrate`"
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        # Checked before the engine exists: making one creates the file.
        path = parsed.database or ""
        local = bool(path) and path != ":memory:" and not path.startswith("file:")
        if local and not Path(path).exists():
            return CheckResult("database", False, f"no database file at {path}", migrate)
    engine = make_engine(url)
    try:
        try:
            current = current_revision(engine)
        except sqlalchemy.exc.SQLAlchemyError as exc:
            return _unanswered(masked, parsed, exc)
        head = head_revision()
        if current == head:
            return CheckResult("database", True, f"{masked} at revision {current} (head)")
        if current is None:
            return CheckResult("database", False, f"{masked} has no chaz schema", migrate)
        return CheckResult(
            "database",
            False,
            f"{masked} is at revision {current}, not the head {head}",
            migrate,
        )
    finally:
        engine.dispose()


#: PostgreSQL's SQLSTATEs for a missing database and a full server.
_NO_SUCH_DATABASE = "3D000"
_TOO_MANY_CONNECTIONS = "53300"


def _refusal(exc: Exception) -> str | None:
    """The SQLSTATE of a server that answered a connection with a refusal, if any.

    psycopg gives no SQLSTATE for an error raised while connecting, so the
    server's (English) message is read as well.
    """
    state = getattr(getattr(exc, "orig", None), "sqlstate", None)
    if state:
        return str(state)
    text = str(exc).lower()
    if "database" in text and "does not exist" in text:
        return _NO_SUCH_DATABASE
    if any(w in text for w in ("too many clients", "too many connections", "slots are reserved")):
        return _TOO_MANY_CONNECTIONS
    return None


def _unanswered(masked: str, url: URL, exc: Exception) -> CheckResult:
    """The failed database check, with the fix its cause calls for."""
    # PostgreSQL answered, but refused: the server is up, so "start the
    # database" would send the operator the wrong way.
    state = _refusal(exc)
    if state == _NO_SUCH_DATABASE:
        name = url.database or ""
        where = f"-h {url.host or '127.0.0.1'} -p {url.port or 5432}"
        who = f" -U {url.username}" if url.username else ""
        return CheckResult(
            "database",
            False,
            f"{masked}: the server has no database {name!r}",
            f"create it (`createdb {where}{who} {name}`), then run `chaz migrate`",
        )
    if state == _TOO_MANY_CONNECTIONS:
        return CheckResult(
            "database",
            False,
            f"{masked} refuses connections: it is full ({_first_line(exc)})",
            "close idle clients, lower CHAZ_DB_POOL_SIZE, put PgBouncer in front "
            "(docs/capacity.md), or raise the server's max_connections",
        )
    return CheckResult(
        "database",
        False,
        f"{masked} does not answer: {_first_line(exc)}",
        "start the database, or correct CHAZ_DATABASE_URL",
    )


def _redis_client(settings: Settings) -> redis.Redis:
    # A probe: no retries and short timeouts, so a dead server answers at once.
    return redis.Redis.from_url(
        settings.effective_redis_url(),
        decode_responses=True,
        socket_timeout=PROBE_SECONDS,
        socket_connect_timeout=PROBE_SECONDS,
        retry=Retry(NoBackoff(), 0),
    )


def check_redis(settings: Settings, client: redis.Redis) -> CheckResult:
    """Redis answers a ping."""
    url = mask_url(settings.effective_redis_url())
    if settings.embedded_redis and not settings.redis_socket.exists():
        return CheckResult(
            "redis",
            False,
            f"the embedded Redis is not running (no socket at {settings.redis_socket})",
            "start chaz (`chaz up`, or `chaz worker`), which starts the embedded Redis",
        )
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        fix = (
            "start chaz (`chaz up`, or `chaz worker`), which starts the embedded Redis"
            if settings.embedded_redis
            else "start Redis, or correct CHAZ_REDIS_URL"
        )
        return CheckResult("redis", False, f"{url} does not answer: {_first_line(exc)}", fix)
    return CheckResult("redis", True, f"{url} answers")


def check_queues(client: redis.Redis | None, broker_url: str) -> CheckResult:
    """The broker queues' depths (a report: any depth is well by itself), from
    Redis or RabbitMQ, whichever ``broker_url`` names."""
    try:
        depths = queue_depths(client, broker_url)
    except Exception as exc:  # redis-py's and kombu's errors have no common root
        fix = "check RabbitMQ (CHAZ_BROKER_URL)" if is_amqp(broker_url) else "check Redis"
        return CheckResult("queues", False, f"cannot read the queues: {_first_line(exc)}", fix)
    return CheckResult("queues", True, ", ".join(f"{q} {n}" for q, n in depths.items()))


def live_workers(settings: Settings, timeout: float = PROBE_SECONDS) -> dict[str, list[str]]:
    """Each worker that answers Celery's control API, with the queues it consumes."""
    from celery import Celery

    app = Celery("chaz-doctor", set_as_current=False)
    configure(app.conf, broker_url_for(settings))
    app.conf.accept_content = ["json"]
    app.conf.broker_connection_retry_on_startup = False
    try:
        replies = app.control.inspect(timeout=timeout).active_queues() or {}
    finally:
        app.close()
    return {
        name: sorted(q["name"] for q in (queues or []) if isinstance(q, dict) and "name" in q)
        for name, queues in replies.items()
    }


def check_workers(settings: Settings) -> CheckResult:
    """Some worker answers, and every chaz queue has a consumer."""
    try:
        workers = live_workers(settings)
    except Exception as exc:  # kombu's connection errors have no common root
        return CheckResult(
            "workers", False, f"cannot ask the workers: {_first_line(exc)}", "check the broker"
        )
    if not workers:
        return CheckResult("workers", False, "no worker answers", START_WORKER)
    detail = "; ".join(f"{name} ({', '.join(qs) or 'no queues'})" for name, qs in workers.items())
    consumed = {q for qs in workers.values() for q in qs}
    missing = [q for q in QUEUES if q not in consumed]
    if missing:
        return CheckResult(
            "workers",
            False,
            f"no worker consumes {', '.join(missing)}: {detail}",
            "start a worker on every chaz queue: `chaz worker` consumes all of them",
        )
    return CheckResult("workers", True, f"{len(workers)} live: {detail}")


def check_reconcile(settings: Settings, client: redis.Redis) -> CheckResult:
    """A reconciler pass completed within the last few reconcile periods."""
    from chaz.usecases.reconcile import RECORD_MIN_SECONDS, RECORD_PERIODS

    last = _text(client.get(keys.reconciled()))
    window = max(RECORD_PERIODS * settings.reconcile_seconds, RECORD_MIN_SECONDS)
    if last is None:
        return CheckResult(
            "reconcile",
            False,
            f"no reconciler pass completed in the last {window:g}s",
            f"{START_BEAT}, and a worker consuming chaz.control",
        )
    return CheckResult("reconcile", True, f"last pass completed at {last}")


def check_beat(client: redis.Redis) -> CheckResult:
    """A beat ticked within its heartbeat's lifetime."""
    from chaz.usecases.beat import HEARTBEAT_SECONDS

    last = _text(client.get(keys.beat_heartbeat()))
    if last is None:
        return CheckResult(
            "beat", False, f"no beat ticked in the last {HEARTBEAT_SECONDS:g}s", START_BEAT
        )
    return CheckResult("beat", True, f"last tick at {last}")


def check_bridge(url: str, now: float | None = None) -> CheckResult:
    """A bridge (``CHAZ_BRIDGES``) answers at its metrics URL and finished a
    poll of its platform within a few of its polls (docs/bridges.md#health)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    name = f"bridge {url}"
    try:
        answer = httpx.get(url, timeout=PROBE_SECONDS)
        answer.raise_for_status()
        values = {
            sample.name: sample.value
            for family in text_string_to_metric_families(answer.text)
            for sample in family.samples
        }
    except (httpx.HTTPError, ValueError) as exc:
        return CheckResult(name, False, f"no metrics: {_first_line(exc)}", BRIDGE_DOWN)
    last = values.get("chaz_bridge_last_sync_timestamp_seconds")
    poll = values.get("chaz_bridge_poll_seconds", 5.0)
    if last is None:
        return CheckResult(name, False, "not a bridge's metrics (no last sync)", BRIDGE_DOWN)
    if not last:
        return CheckResult(name, False, "has not synced with its platform yet", BRIDGE_STALE)
    age = (time.time() if now is None else now) - last
    if age > bridge_stale_after(poll):
        return CheckResult(name, False, f"has not synced for {age:.0f}s", BRIDGE_STALE)
    return CheckResult(name, True, f"synced {max(age, 0):.0f}s ago")


def bridge_stale_after(poll_seconds: float) -> float:
    """How long without a sync makes a bridge stale: a few of its long polls, and
    room for a slow batch (each poll ends within ``poll_seconds`` when idle)."""
    return 3 * poll_seconds + 30


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def _text(value: Any) -> str | None:
    # The probe client decodes replies; bytes only if a caller's does not.
    if value is None or isinstance(value, str):
        return value
    return bytes(value).decode("utf-8", "replace")
