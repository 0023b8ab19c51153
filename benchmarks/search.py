"""``python -m benchmarks.search``: ``session_search`` latency over a large corpus.

Builds a corpus of Message and other entries across many sessions (English
prose, code identifiers and Chinese, deterministic from a seed) by bulk insert
(PostgreSQL ``COPY``; SQLite ``executemany`` with the FTS triggers live), then
times 50 fixed queries through the store's search (the code
``session_search``, ``client.sessions.search`` and ``chaz search`` share,
without the tool-call wrapping) and prints p50/p99 beside the goal: p50 < 50 ms
and p99 < 200 ms on PostgreSQL (issue 12). SQLite's figures are at its own,
smaller size. ``--as-turn`` times the search a turn makes instead: only the
sessions the calling session may read (its tree), as ``session_search`` does.

    python -m benchmarks.search --entries 1000000 --sessions 10000   # the issue's size
    python -m benchmarks.search                                      # a few minutes
    python -m benchmarks.search --quick                              # a smoke run

PostgreSQL: ``BENCH_PG_ADMIN`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``);
the database ``chaz_search_bench`` is created and dropped (``--keep`` keeps it).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import text

from chaz.domain.read_scope import ReadScope
from chaz.domain.search import parse_query
from chaz.store import Store
from chaz.store.migrate import upgrade

PG_ADMIN = os.environ.get("BENCH_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")
PG_DATABASE = "chaz_search_bench"
GOAL_P50_MS, GOAL_P99_MS = 50.0, 200.0
#: Share of entries that are Messages (the rest: tool calls and results, acks).
MESSAGE_SHARE = 0.6

_WORD_TEXT = (
    "the a of to and in is it that for on with as was this be by are from at or have an "
    "not but we you they can will would should could then when where which while about "
    "deploy release build test failure error retry timeout worker queue session agent "
    "database migration schema index query latency throughput cache memory disk network "
    "request response server client token budget approval delivery schedule compaction "
    "summary review plan design refactor bug fix patch rollback incident alert metric "
    "customer invoice payment report dashboard export import upload download config "
    "kernel thread process lock mutex channel socket buffer stream parser compiler "
    "python rust postgres redis celery kubernetes docker terraform ansible nginx "
    "morning yesterday tomorrow meeting notes decision follow question answer idea"
)
WORDS = _WORD_TEXT.split()
_IDENT_TEXT = (
    "user order cart item price tax auth login token cache store repo job turn lane "
    "lease fence entry event queue retry backoff limit quota budget"
)
IDENT_PARTS = _IDENT_TEXT.split()
CHINESE = [
    "数据库迁移",
    "性能测试",
    "部署失败",
    "用户登录",
    "缓存失效",
    "接口超时",
    "日志分析",
    "代码审查",
    "发布计划",
    "内存泄漏",
    "消息队列",
    "权限检查",
    "配置文件",
    "单元测试",
    "负载均衡",
]
ZH_FILLER = "我们今天讨论了这个问题然后决定明天继续处理并且记录在文档里面"

#: 50 fixed queries: common and rare English, identifiers, Chinese (two to
#: five characters), exact phrases, short queries, and words of session names.
QUERIES = [
    # common English words
    "database",
    "migration",
    "timeout",
    "deploy",
    "latency",
    "rollback",
    "approval",
    "kubernetes",
    "invoice",
    "compiler",
    # two words (both must match)
    "database migration",
    "worker timeout",
    "cache memory",
    "release plan",
    "customer report",
    # exact phrases
    '"retry the request"',
    '"failed to deploy"',
    '"database migration"',
    '"memory leak in"',
    '"the schema index"',
    # identifiers with punctuation
    "order_cache.retry()",
    "auth_token.refresh()",
    "lease_fence",
    "queue_backoff.limit",
    "user_login",
    "ERR-4711",
    "ERR-0042",
    "ticket#9913",
    "v2.14.3",
    "cart_item",
    # rare identifiers (a handful of hits)
    "zq_frobnicate_7",
    "xylophone_parser",
    "ERR-9999",
    "build-7741",
    "hotfix/2026-11",
    # Chinese
    "数据库迁移",
    "性能测试",
    "部署失败",
    "内存泄漏",
    "消息队列",
    "缓存失效",
    "迁移",
    "测试",
    # short queries (no index: the bounded scan)
    "db",
    "qa",
    "k8",
    # session names and descriptions
    "project-falcon",
    "onboarding",
    "quarterly",
    "payments team",
]


def _sentence(rng: random.Random) -> str:
    kind = rng.random()
    words = [rng.choice(WORDS) for _ in range(rng.randint(8, 30))]
    if kind < 0.15:
        words.insert(rng.randrange(len(words)), _ident(rng))
    if kind < 0.05:
        words.insert(rng.randrange(len(words)), f"ERR-{rng.randint(0, 9999):04d}")
    if 0.15 <= kind < 0.25:
        zh = rng.choice(CHINESE)
        at = rng.randrange(len(ZH_FILLER))
        return ZH_FILLER[:at] + zh + ZH_FILLER[at:] + " " + " ".join(words[:5])
    if rng.random() < 0.002:
        words.append(rng.choice(["zq_frobnicate_7", "xylophone_parser", "build-7741"]))
    if rng.random() < 0.01:
        words.append(rng.choice(["retry the request", "failed to deploy", "memory leak in"]))
    return " ".join(words)


def _ident(rng: random.Random) -> str:
    a, b = rng.choice(IDENT_PARTS), rng.choice(IDENT_PARTS)
    style = rng.random()
    if style < 0.4:
        return f"{a}_{b}.{rng.choice(IDENT_PARTS)}()"
    if style < 0.7:
        return f"{a}_{b}"
    if style < 0.85:
        return f"v{rng.randint(1, 3)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}"
    return f"ticket#{rng.randint(1000, 9999)}"


NAMES = ["project-falcon", "onboarding", "quarterly review", "payments team", "incident", "ops"]


def corpus(n_entries: int, n_sessions: int, seed: int = 7) -> Iterator[tuple[str, ...]]:
    """Rows ``(kind, ...)``: sessions first, then their entries, deterministic."""
    rng = random.Random(seed)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(n_sessions):
        name = f"{rng.choice(NAMES)}-{i}" if rng.random() < 0.5 else None
        desc = f"{rng.choice(NAMES)}: {_sentence(rng)[:120]}" if rng.random() < 0.3 else None
        yield ("session", f"s{i:015d}", name or "", desc or "", str(start + timedelta(minutes=i)))
    per = max(1, n_entries // n_sessions)
    made = 0
    for i in range(n_sessions):
        count = per if i < n_sessions - 1 else n_entries - made
        for seq in range(1, count + 1):
            roll = rng.random()
            etype = "message" if roll < MESSAGE_SHARE else ("tool_result" if roll < 0.9 else "ack")
            content = _sentence(rng) if etype != "ack" else "processing"
            when = start + timedelta(minutes=i, seconds=seq)
            yield ("entry", f"e{made:015d}", f"s{i:015d}", str(seq), etype, content, str(when))
            made += 1


def _sessions_and_entries(
    n_entries: int, n_sessions: int
) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    sessions: list[tuple[str, ...]] = []
    entries: list[tuple[str, ...]] = []
    for row in corpus(n_entries, n_sessions):
        (sessions if row[0] == "session" else entries).append(row[1:])
    return sessions, entries


AGENT_SPEC = json.dumps({"id": "bench"})


def load_postgres(url: str, sessions: list[Any], entries: list[Any]) -> dict[str, float]:
    """COPY the corpus in (search indexes dropped first, rebuilt after): seconds taken."""
    times: dict[str, float] = {}
    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "DROP INDEX IF EXISTS ix_entries_message_trgm, ix_sessions_name_trgm, "
            "ix_sessions_description_trgm"
        )
        conn.execute(
            "INSERT INTO agents (id, spec, created_at, updated_at) VALUES "
            "('bench', %s, now(), now())",
            (AGENT_SPEC,),
        )
        t0 = time.perf_counter()
        with conn.cursor() as cur:
            with cur.copy(
                "COPY sessions (id, agent_id, name, description, tree_id, call_depth, last_seq, "
                "last_ordinal, created_at, active_at, room_burst, project, owner, unattended, "
                "permission_mode) FROM STDIN"
            ) as copy:
                for sid, name, desc, when in sessions:
                    copy.write_row(
                        (
                            sid,
                            "bench",
                            name or None,
                            desc or None,
                            sid,
                            0,
                            0,
                            0,
                            when,
                            when,
                            0,
                            "default",
                            "user:local",
                            False,
                            "default",
                        )
                    )
            with cur.copy(
                "COPY entries (id, session_id, seq, type, sender, content, metadata, created_at) "
                "FROM STDIN"
            ) as copy:
                for eid, sid, seq, etype, content, when in entries:
                    sender = "user:bench" if int(seq) % 2 else "agent:bench"
                    copy.write_row((eid, sid, int(seq), etype, sender, content, "{}", when))
        times["load"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        conn.execute("SET maintenance_work_mem = '512MB'")
        conn.execute(
            "CREATE INDEX ix_entries_message_trgm ON entries "
            "USING gin (content gin_trgm_ops) WHERE type = 'message'"
        )
        # As migration 0021 defines them: partial, only non-NULL values.
        conn.execute(
            "CREATE INDEX ix_sessions_name_trgm ON sessions "
            "USING gin (name gin_trgm_ops) WHERE name IS NOT NULL"
        )
        conn.execute(
            "CREATE INDEX ix_sessions_description_trgm ON sessions "
            "USING gin (description gin_trgm_ops) WHERE description IS NOT NULL"
        )
        times["index"] = time.perf_counter() - t0
        conn.execute("VACUUM ANALYZE entries")
        conn.execute("VACUUM ANALYZE sessions")
    return times


def load_sqlite(store: Store, sessions: list[Any], entries: list[Any]) -> dict[str, float]:
    """executemany into the tables; the triggers fill the FTS5 tables as they go."""
    t0 = time.perf_counter()
    with store.engine.begin() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        raw.execute(
            "INSERT INTO agents (id, spec, created_at, updated_at) VALUES "
            "('bench', ?, '2026-01-01 00:00:00.000000', '2026-01-01 00:00:00.000000')",
            (AGENT_SPEC,),
        )
        raw.executemany(
            "INSERT INTO sessions (id, agent_id, name, description, tree_id, call_depth, "
            "last_seq, last_ordinal, created_at, active_at, room_burst, project, owner, "
            "unattended, permission_mode) VALUES (?, 'bench', ?, ?, ?, 0, 0, 0, ?, ?, 0, "
            "'default', 'user:local', 0, 'default')",
            [(s, n or None, d or None, s, _sqlite_ts(w), _sqlite_ts(w)) for s, n, d, w in sessions],
        )
        raw.executemany(
            "INSERT INTO entries (id, session_id, seq, type, sender, content, metadata, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, '{}', ?)",
            [
                (e, s, int(q), t, "user:bench" if int(q) % 2 else "agent:bench", c, _sqlite_ts(w))
                for e, s, q, t, c, w in entries
            ],
        )
    with store.engine.begin() as conn:
        conn.execute(text("ANALYZE"))
    return {"load": time.perf_counter() - t0, "index": 0.0}


def _sqlite_ts(value: str) -> str:
    # SQLAlchemy's SQLite storage format for DateTime.
    return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M:%S.%f")


def _turn_scope(store: Store) -> ReadScope:
    """What a turn of the corpus's most recently active session may read: its tree."""
    with store.engine.connect() as conn:
        sid, tree = conn.execute(
            text("SELECT id, tree_id FROM sessions ORDER BY active_at DESC, id LIMIT 1")
        ).one()
    return ReadScope(sid, tree, frozenset(), "default")


def measure(store: Store, repeat: int, as_turn: bool = False) -> dict[str, Any]:
    """Latencies (ms) of every query, ``repeat`` times each after one warm-up pass;
    ``as_turn``: as a turn searches (only its tree's sessions)."""
    parsed = [parse_query(q) for q in QUERIES]
    within = _turn_scope(store) if as_turn else None
    viewer = within.viewer_session_id if within is not None else None

    def run(q: Any) -> int:
        return len(
            store.search.search(
                q,
                project="default",
                agent_id=None,
                limit=10,
                viewer_session_id=viewer,
                within=within,
            )
        )

    found = [run(q) for q in parsed]  # warm-up: caches, and the figures of what was found
    samples: list[float] = []
    per_query: dict[str, float] = {}
    for q in parsed:
        mine = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            run(q)
            mine.append((time.perf_counter() - t0) * 1000)
        samples += mine
        per_query[q.text] = statistics.median(mine)
    samples.sort()
    return {
        "p50": statistics.median(samples),
        "p99": samples[min(len(samples) - 1, int(len(samples) * 0.99))],
        "max": samples[-1],
        "empty": sum(1 for n in found if n == 0),
        "slowest": sorted(per_query.items(), key=lambda kv: -kv[1])[:5],
    }


def _load_and_measure(
    store: Store,
    entries: int,
    sessions: int,
    repeat: int,
    load: Callable[[tuple[list[Any], list[Any]]], dict[str, float]],
    as_turn: bool = False,
) -> dict[str, Any]:
    """Migrate ``store``, generate the corpus, ``load`` it (the stack's bulk
    path, returning its phase times) and time the queries against it."""
    upgrade(store.engine)
    t0 = time.perf_counter()
    rows = _sessions_and_entries(entries, sessions)
    gen = time.perf_counter() - t0
    times = load(rows)
    return {
        "entries": entries,
        "sessions": sessions,
        "generate": gen,
        **times,
        **measure(store, repeat, as_turn),
    }


def _postgres(
    entries: int, sessions: int, repeat: int, keep: bool, as_turn: bool
) -> dict[str, Any]:
    with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{PG_DATABASE}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{PG_DATABASE}"')
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    url = f"{base}/{PG_DATABASE}"
    store = Store(url)
    try:
        return _load_and_measure(
            store, entries, sessions, repeat, lambda rows: load_postgres(url, *rows), as_turn
        )
    finally:
        store.close()
        if not keep:
            with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{PG_DATABASE}" WITH (FORCE)')


def _sqlite(entries: int, sessions: int, repeat: int, as_turn: bool) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="chaz-search-bench-"))
    store = Store(f"sqlite:///{home / 'chaz.db'}")
    try:
        return _load_and_measure(
            store, entries, sessions, repeat, lambda rows: load_sqlite(store, *rows), as_turn
        )
    finally:
        store.close()
        shutil.rmtree(home, ignore_errors=True)


def _row(label: str, r: dict[str, Any], goal: bool) -> str:
    ok = ""
    if goal:
        ok = "yes" if r["p50"] < GOAL_P50_MS and r["p99"] < GOAL_P99_MS else "NO"
    return (
        f"| {label} | {r['entries']:,} | {r['sessions']:,} | {r['load']:.0f} s + "
        f"{r['index']:.0f} s | {r['p50']:.1f} | {r['p99']:.1f} | {r['max']:.1f} | "
        f"{r['empty']} | {ok} |"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print a Markdown table (exit 1 if a stack failed)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.search", description=__doc__)
    p.add_argument("--entries", type=int, default=200_000, help="PostgreSQL corpus entries")
    p.add_argument("--sessions", type=int, default=2_000, help="PostgreSQL corpus sessions")
    p.add_argument("--sqlite-entries", type=int, default=100_000, help="SQLite corpus entries")
    p.add_argument("--sqlite-sessions", type=int, default=None, help="default: 1 per 100 entries")
    p.add_argument("--stack", choices=["both", "server", "embedded"], default="both")
    p.add_argument("--repeat", type=int, default=5, help="timed runs of each query")
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    p.add_argument("--keep", action="store_true", help=f"keep the {PG_DATABASE} database")
    p.add_argument(
        "--as-turn", action="store_true", help="search as a turn: only its tree's sessions"
    )
    a = p.parse_args(argv)
    if a.quick:
        a.entries, a.sessions, a.sqlite_entries, a.repeat = 5_000, 100, 5_000, 2
    sqlite_sessions = a.sqlite_sessions or max(1, a.sqlite_entries // 100)
    runs: list[tuple[str, Callable[[], dict[str, Any]], bool]] = []
    if a.stack in ("both", "server"):
        runs.append(
            (
                "PostgreSQL",
                lambda: _postgres(a.entries, a.sessions, a.repeat, a.keep, a.as_turn),
                True,
            )
        )
    if a.stack in ("both", "embedded"):
        runs.append(
            (
                "SQLite",
                lambda: _sqlite(a.sqlite_entries, sqlite_sessions, a.repeat, a.as_turn),
                False,
            )
        )
    who = "as a turn (its tree)" if a.as_turn else "project-wide"
    print(f"session_search {who}: {len(QUERIES)} fixed queries x {a.repeat} runs, limit 10")
    print(f"goal on PostgreSQL: p50 < {GOAL_P50_MS:g} ms, p99 < {GOAL_P99_MS:g} ms\n")
    lines = [
        "| database | entries | sessions | load + index build | p50 ms | p99 ms | max ms "
        "| queries with no hit | goal met |",
        "|---|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    failed = False
    slow: list[str] = []
    for label, run, goal in runs:
        try:
            r = run()
        except Exception as exc:  # a stack that cannot run is reported, the other still runs
            print(f"{label}: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            failed = True
            continue
        lines.append(_row(label, r, goal))
        slow.append(
            f"{label} slowest (median ms): "
            + ", ".join(f"{q!r} {ms:.1f}" for q, ms in r["slowest"])
        )
    out = io.StringIO()
    print("\n".join(lines), file=out)
    print(out.getvalue())
    print("\n".join(slow))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
