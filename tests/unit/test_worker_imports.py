"""What a worker's start does not load: each was a measurable part of every
worker's start (docs/performance.md#worker-start-up), and each test runs a
fresh interpreter, as a worker is, so an import anywhere brings it back."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.schema import CreateIndex

from chaz.store.models import Base, JobRow, SessionRow, WebhookRow


def _loaded_by_worker(prefixes: tuple[str, ...], *, env: dict[str, str] | None = None) -> list[str]:
    code = (
        "import sys\n"
        "import workers.tasks\n"
        f"heavy = {prefixes!r}\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    return list(eval(done.stdout))


def test_a_worker_does_not_load_sqlalchemys_orm() -> None:
    # The store's tables are Core tables: the ORM and its declarative mapping
    # were about a tenth of a second of every start.
    assert _loaded_by_worker(("sqlalchemy.orm",)) == []


def test_a_table_class_is_its_table() -> None:
    # Call sites write JobRow.status and select(JobRow) as they did when the
    # classes were ORM-mapped: the attribute is the table's column.
    assert JobRow.status is JobRow.__table__.c.status
    assert SessionRow.__table__ is Base.metadata.tables["sessions"]
    sql = str(select(JobRow).where(JobRow.id == "j"))
    assert sql.startswith("SELECT jobs.id, jobs.session_id,") and "FROM jobs" in sql


def test_an_embedded_worker_does_not_load_the_postgresql_dialect() -> None:
    # The partial indexes' predicates are filled in per dialect on first use.
    assert _loaded_by_worker(("sqlalchemy.dialects.postgresql",)) == []


def test_a_partial_index_has_its_predicate_on_both_dialects() -> None:
    index = next(i for i in WebhookRow.__table__.indexes if i.name == "ix_webhooks_pending_next")
    for dialect in (postgresql.dialect(), sqlite.dialect()):
        ddl = str(CreateIndex(index).compile(dialect=dialect))
        assert ddl.endswith("ON webhooks (next_at) WHERE state = 'pending'"), ddl
    assert str(index.dialect_kwargs["postgresql_where"]) == "state = 'pending'"
    assert str(index.dialect_kwargs["sqlite_where"]) == "state = 'pending'"


def test_a_worker_imports_no_built_in_tool_until_a_turn_looks_one_up() -> None:
    # chaz.tools registers them by name; the MCP source is the package's own.
    loaded = _loaded_by_worker(("chaz.tools.",))
    assert loaded == ["chaz.tools.mcp", "chaz.tools.mcp.source"]


def test_a_worker_does_not_load_croniter_until_a_cron_is_read() -> None:
    assert _loaded_by_worker(("croniter",)) == []


def test_a_worker_does_not_load_the_stores_a_plain_turn_never_calls() -> None:
    # Schedules, webhooks and todos are imported by the jobs and tools that
    # use them (a schedule fire's, a run with a webhook, the planning tools):
    # their store, domain and use-case modules were about a hundredth of a
    # second of every start (docs/performance.md#worker-start-up).
    unused = (
        "chaz.store.schedules",
        "chaz.domain.schedules",
        "chaz.store.webhooks",
        "chaz.domain.webhooks",
        "chaz.usecases.webhooks",
        "chaz.store.todos",
        "chaz.domain.todos",
    )
    assert _loaded_by_worker(unused) == []


def test_a_worker_does_not_build_postgresqls_one_statement_turn_until_it_runs_one() -> None:
    # chaz.store.oneshot is PostgreSQL's path: imported by the first turn
    # that takes it, never on SQLite.
    assert _loaded_by_worker(("chaz.store.oneshot",)) == []


def test_a_worker_does_not_build_the_session_directorys_queries_until_one_runs() -> None:
    # Lineage, listings and outlines (chaz.store.session_queries): the
    # directory's methods import them; a plain turn calls none.
    assert _loaded_by_worker(("chaz.store.session_queries", "chaz.store.search")) == []


def test_the_one_statement_end_is_built_per_state_on_first_use() -> None:
    from chaz.domain.jobs import JobStatus
    from chaz.store import oneshot

    done = oneshot.end_with_reply(JobStatus.SUCCEEDED)
    assert oneshot.end_with_reply(JobStatus.SUCCEEDED) is done
    assert oneshot.END_WITH_REPLY[JobStatus.SUCCEEDED] is done
    failed = oneshot.end_with_reply(JobStatus.FAILED)
    assert failed is not done and "RETURNING" in str(failed.compile(dialect=postgresql.dialect()))
    with pytest.raises(KeyError):
        oneshot.end_with_reply(JobStatus.RUNNING)


def test_the_worker_entry_imports_celerys_cli_without_pygments() -> None:
    # celery.bin.base builds a pygments lexer and formatter when imported, for
    # `celery inspect`'s colours; `python -m workers worker` takes Celery's
    # own fallback instead, and pygments stays importable afterwards.
    code = (
        "import sys\n"
        "from workers.__main__ import _import_without_highlighting\n"
        "_import_without_highlighting()\n"
        "import celery.bin.base, celery.bin.worker\n"
        "print(celery.bin.base.LEXER is None, 'pygments' in sys.modules)\n"
        "import pygments.lexers\n"
        "print(pygments.lexers.PythonLexer is not None)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "True"]


def _collector_after(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_importing_workers_leaves_the_garbage_collector_alone() -> None:
    # Only `python -m workers worker` pauses it: a test, beat or a producer
    # that imports the package keeps its collector as it was.
    code = "import gc, workers\nprint(gc.isenabled(), gc.get_freeze_count() == 0)\n"
    assert _collector_after(code) == ["True", "True"]


def test_a_worker_start_collects_again_once_resumed() -> None:
    # While Python locates `python -m workers worker`'s __main__, sys.argv
    # is ["-m", "worker", ...]: the package pauses the collector then, and
    # workers.__main__ resumes it at worker_init, with what the start
    # imported frozen out of later collections.
    code = (
        "import sys\n"
        "sys.argv[:] = ['-m', 'worker', '--pool', 'threads']\n"
        "import gc, workers\n"
        "print(gc.isenabled())\n"
        "from workers.__main__ import _resume_collection\n"
        "_resume_collection(sender=None)\n"
        "print(gc.isenabled(), gc.get_freeze_count() > 0)\n"
        "_resume_collection(sender=None)\n"
        "print(gc.isenabled())\n"
    )
    assert _collector_after(code) == ["False", "True", "True", "True"]


def test_the_worker_entry_resumes_the_collector_at_worker_init() -> None:
    code = (
        "from unittest import mock\n"
        "from celery.bin.worker import worker\n"
        "from celery.signals import worker_init\n"
        "from workers.__main__ import _resume_collection, main\n"
        "with mock.patch.object(worker, 'main'):\n"
        "    main(['worker'])\n"
        "print(any(r is _resume_collection for _, r in worker_init.receivers))\n"
    )
    assert _collector_after(code) == ["True"]
