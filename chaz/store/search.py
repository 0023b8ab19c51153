"""Listing and lexical search of a project's sessions (docs/sessions.md).

Reached as ``store.search``. Both read only the sessions of one project that
are not archived and, for a turn, only those its
:class:`~chaz.domain.read_scope.ReadScope` allows (its tree and the few
sessions below it: docs/contracts.md#visibility), with the agent filter
applied in the same statement: what a caller may not see never takes a
rank, a slot of the limit, or a place in a page.

The indexes (migration 0008) differ by database and live outside the models:

* PostgreSQL: trigram GIN indexes (``pg_trgm``) find the Messages containing
  each term (``ILIKE``); at most :data:`~chaz.domain.search.PG_CANDIDATES`
  of them are ranked by full-text ``ts_rank`` (then by recency).
* SQLite: FTS5 tables with the trigram tokenizer, ranked by ``bm25()``.

A query of only short terms (under three characters) uses no index: it scans
the latest :data:`~chaz.domain.search.SHORT_SCAN_ROWS` Messages of the
visible sessions (most recently active sessions first) and ranks by recency.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Connection,
    DateTime,
    Float,
    Integer,
    String,
    and_,
    bindparam,
    func,
    or_,
    select,
    text,
    update,
)

from chaz.domain.read_scope import ReadScope
from chaz.domain.search import (
    MATCHES_PER_SESSION,
    PG_CANDIDATES,
    SHORT_SCAN_ROWS,
    SNIPPET_LEAD,
    Cursor,
    MessageMatch,
    MetadataMatch,
    Query,
    SearchResult,
    SessionCard,
    SessionPage,
    snippet,
)
from chaz.domain.sessions import missing_session
from chaz.ids import as_utc
from chaz.store import session_queries as sq
from chaz.store.statements import JOBS, SESSIONS

if TYPE_CHECKING:
    from chaz.store.db import Database

#: Schema objects of search that the models do not describe (the schema
#: comparison ignores exactly these): SQLite's FTS5 tables (and the shadow
#: tables FTS5 makes for them) and PostgreSQL's trigram indexes.
FTS_TABLES = ("entries_fts", "sessions_fts")
FTS_SHADOWS = ("_data", "_idx", "_docsize", "_config", "_content")
SEARCH_TABLES = frozenset([*FTS_TABLES, *(t + s for t in FTS_TABLES for s in FTS_SHADOWS)])
SEARCH_INDEXES = frozenset(
    ["ix_entries_message_trgm", "ix_sessions_name_trgm", "ix_sessions_description_trgm"]
)

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
#: Characters read around a hit for its snippet (the snippet shows fewer).
_WINDOW = 400


def _ascii_lower(term: str) -> str:
    # SQLite's lower() folds ASCII only; the term must be folded the same way.
    return term.translate(_ASCII_LOWER)


def _like(term: str) -> str:
    # A term is a literal substring: its wildcards and the escape are escaped.
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _fts_match(terms: Sequence[str]) -> str:
    # Each term is one FTS5 string (a doubled quote is a quote): no FTS syntax
    # in a query (NEAR, *, ^, column filters) is ever interpreted.
    return " AND ".join('"' + t.replace('"', '""') + '"' for t in terms)


@dataclass(frozen=True)
class _Hit:
    session_id: str
    entry_id: str
    timestamp: datetime
    best: float
    latest: datetime
    #: Its rank among its session's matches (1 = best).
    rank: int


class SearchStore:
    """``store.search``: one page of a project's sessions, and ranked search."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # -- writes -----------------------------------------------------------------

    def describe(self, session_id: str, description: str | None) -> None:
        """Set (or, with None, clear) a session's description; missing: ``session.not_found``."""
        with self._db.engine.begin() as conn:
            done = conn.execute(
                update(SESSIONS).where(SESSIONS.c.id == session_id).values(description=description)
            )
        if done.rowcount == 0:
            raise missing_session(session_id)

    # -- session_list -----------------------------------------------------------

    def page(
        self,
        *,
        project: str,
        agent_id: str | None,
        limit: int,
        cursor: Cursor | None,
        viewer_session_id: str | None,
        within: ReadScope | None = None,
    ) -> SessionPage:
        """Sessions of ``project`` that are not archived, most recently active first
        (``active_at``, else ``created_at``), ties broken by id (descending);
        ``within``: only those that scope allows."""
        active = func.coalesce(SESSIONS.c.active_at, SESSIONS.c.created_at)
        stmt = (
            select(SESSIONS.c.id, active.label("active"))
            .where(SESSIONS.c.project == project, SESSIONS.c.archived_at.is_(None))
            .order_by(active.desc(), SESSIONS.c.id.desc())
            .limit(limit + 1)
        )
        if within is not None:
            stmt = stmt.where(sq.readable(within))
        if agent_id is not None:
            stmt = stmt.where(SESSIONS.c.agent_id == agent_id)
        if cursor is not None:
            stmt = stmt.where(
                or_(
                    active < cursor.active,
                    and_(active == cursor.active, SESSIONS.c.id < cursor.session_id),
                )
            )
        with self._db.engine.connect() as conn:
            rows = conn.execute(stmt).all()
            more = len(rows) > limit
            rows = rows[:limit]
            cards = _cards(conn, [r[0] for r in rows], viewer_session_id)
        next_cursor = None
        if more and rows:
            next_cursor = Cursor(as_utc(rows[-1][1]), rows[-1][0]).encode()
        return SessionPage([cards[r[0]] for r in rows], next_cursor)

    # -- session_search ---------------------------------------------------------

    def search(
        self,
        query: Query,
        *,
        project: str,
        agent_id: str | None,
        limit: int,
        viewer_session_id: str | None,
        within: ReadScope | None = None,
    ) -> list[SearchResult]:
        """At most ``limit`` distinct sessions: those with matching Messages first
        (best rank first), then those whose name or description alone matched;
        ``within``: only sessions that scope allows."""
        with self._db.engine.connect() as conn:
            pg = conn.dialect.name == "postgresql"
            if pg:
                # A generic plan of a prepared search cannot see how selective
                # a term is (a seq scan for a rare one): plan every search anew.
                conn.exec_driver_sql("SET LOCAL plan_cache_mode = force_custom_plan")
            scope = _Scope(project, agent_id, within)
            hits = _message_hits(conn, query, scope, limit, pg)
            found: dict[str, list[_Hit]] = {}
            for hit in sorted(
                hits, key=lambda h: (h.best, -h.latest.timestamp(), h.session_id, h.rank)
            ):
                found.setdefault(hit.session_id, []).append(hit)
            order = list(found)[:limit]
            if len(order) < limit:
                extra = _metadata_hits(conn, query, scope, limit + len(order), pg)
                order += [sid for sid in extra if sid not in found][: limit - len(order)]
            cards = _cards(conn, order, viewer_session_id)
            shown = [h for sid in order for h in found.get(sid, [])]
            windows = _windows(conn, query, [h.entry_id for h in shown], pg)
        results = []
        for sid in order:
            card = cards[sid]
            matches = [
                MessageMatch(
                    h.entry_id,
                    snippet(windows[h.entry_id][0], query.terms, cut_before=windows[h.entry_id][1]),
                    h.timestamp,
                )
                for h in found.get(sid, [])
                if h.entry_id in windows
            ]
            results.append(SearchResult(card, matches, _metadata_matches(card, query)))
        return results


@dataclass(frozen=True)
class _Scope:
    """Which sessions a search reads: one project's, not archived, maybe one
    agent's, maybe only those a viewer's scope allows."""

    project: str
    agent: str | None
    within: ReadScope | None

    def sql(self) -> str:
        """The condition on ``sessions s``, with named parameters (:meth:`params`)."""
        where = "s.project = :project AND s.archived_at IS NULL"
        if self.agent is not None:
            where += " AND s.agent_id = :agent"
        if self.within is not None:
            below = ", ".join(f":below{i}" for i in range(len(self.within.below)))
            tree = "s.tree_id = :tree"
            where += f" AND ({tree} OR s.id IN ({below}))" if below else f" AND {tree}"
        return where

    def params(self) -> dict[str, Any]:
        """The values of :meth:`sql`'s parameters."""
        params: dict[str, Any] = {"project": self.project}
        if self.agent is not None:
            params["agent"] = self.agent
        if self.within is not None:
            params["tree"] = self.within.tree_id
            params |= _term_params("below", sorted(self.within.below))
        return params


def _term_params(prefix: str, terms: Sequence[str]) -> dict[str, str]:
    return {f"{prefix}{i}": t for i, t in enumerate(terms)}


def _message_hits(
    conn: Connection, query: Query, scope: _Scope, limit: int, pg: bool
) -> list[_Hit]:
    """The best :data:`MATCHES_PER_SESSION` Messages of the ``limit`` best sessions.

    Scores are "lower is better" on both databases (bm25 already is; the
    PostgreSQL score is negated).
    """
    params = scope.params() | {"limit": limit, "per": MATCHES_PER_SESSION}
    where = scope.sql()
    if query.is_short:
        hits = _short_hits(query, where, params, pg)
    elif pg:
        hits = _pg_hits(query, where, params)
    else:
        hits = _fts_hits(query, where, params)
    sql = (
        f"WITH hits AS MATERIALIZED ({hits}), "
        "top AS (SELECT sid, min(score) AS best, max(ts) AS latest FROM hits "
        "GROUP BY sid ORDER BY best, latest DESC, sid LIMIT :limit), "
        "ranked AS (SELECT h.sid, h.eid, h.ts, row_number() OVER "
        "(PARTITION BY h.sid ORDER BY h.score, h.ts DESC, h.eid) AS rn "
        "FROM hits h JOIN top t ON t.sid = h.sid) "
        "SELECT r.sid, r.eid, r.ts, t.best, t.latest, r.rn FROM ranked r "
        "JOIN top t ON t.sid = r.sid WHERE r.rn <= :per"
    )
    # SQLite hands timestamps back as text; typed columns come back as datetimes.
    stmt = text(sql).columns(
        sid=String(),
        eid=String(),
        ts=DateTime(timezone=True),
        best=Float(),
        latest=DateTime(timezone=True),
        rn=Integer(),
    )
    return [
        _Hit(r.sid, r.eid, as_utc(r.ts), float(r.best), as_utc(r.latest), int(r.rn))
        for r in conn.execute(stmt, params)
    ]


def _short_hits(query: Query, where: str, params: dict[str, Any], pg: bool) -> str:
    """The hits of a query of one- or two-character terms (adds its ``params``)."""
    if pg:
        checks = " AND ".join(
            f"strpos(lower(w.content), lower(:t{i})) > 0" for i in range(len(query.terms))
        )
        params |= _term_params("t", query.terms)
    else:
        checks = " AND ".join(
            f"instr(lower(w.content), :t{i}) > 0" for i in range(len(query.terms))
        )
        params |= _term_params("t", [_ascii_lower(t) for t in query.terms])
    params["scan"] = SHORT_SCAN_ROWS
    # No index can find a one- or two-character string: scan the latest
    # Messages of the visible sessions (most recently active sessions
    # first, through the project's activity index), a bounded window.
    return (
        "SELECT w.sid, w.eid, w.ts, 0.0 AS score FROM ("
        "SELECT e.session_id AS sid, e.id AS eid, e.created_at AS ts, e.content AS content "
        "FROM sessions s JOIN entries e ON e.session_id = s.id "
        f"WHERE e.type = 'message' AND {where} "
        f"ORDER BY s.active_at DESC LIMIT :scan) w WHERE {checks}"
    )


def _pg_hits(query: Query, where: str, params: dict[str, Any]) -> str:
    """The hits of a query on PostgreSQL (adds its ``params``)."""
    likes = " AND ".join(f"e.content ILIKE :p{i} ESCAPE '\\'" for i in range(len(query.terms)))
    params |= _term_params("p", [_like(t) for t in query.terms])
    params |= {"q": " ".join(query.terms), "cap": PG_CANDIDATES}
    # The trigram index finds; full-text rank orders. The tsquery is built
    # once (a CTE), not per row; a row's first 4,000 characters are ranked.
    return (
        "WITH cand AS MATERIALIZED ("
        "SELECT e.session_id AS sid, e.id AS eid, e.created_at AS ts, "
        "left(e.content, 4000) AS body "
        "FROM entries e JOIN sessions s ON s.id = e.session_id "
        f"WHERE e.type = 'message' AND {likes} AND {where} LIMIT :cap), "
        "tsq AS MATERIALIZED (SELECT plainto_tsquery('simple', :q) AS q) "
        "SELECT sid, eid, ts, -ts_rank(to_tsvector('simple', body), tsq.q) AS score "
        "FROM cand, tsq"
    )


def _fts_hits(query: Query, where: str, params: dict[str, Any]) -> str:
    """The hits of a query on SQLite's full-text index (adds its ``params``)."""
    checks = "".join(f" AND instr(lower(e.content), :t{i}) > 0" for i in range(len(query.short)))
    params |= _term_params("t", [_ascii_lower(t) for t in query.short])
    params["match"] = _fts_match(query.indexed)
    return (
        "SELECT e.session_id AS sid, e.id AS eid, e.created_at AS ts, "
        "bm25(entries_fts) AS score "
        "FROM entries_fts JOIN entries e ON e.rowid = entries_fts.rowid "
        "JOIN sessions s ON s.id = e.session_id "
        f"WHERE entries_fts MATCH :match AND {where}{checks}"
    )


def _metadata_hits(
    conn: Connection, query: Query, scope: _Scope, limit: int, pg: bool
) -> list[str]:
    """Sessions whose name and description together contain every term, best first."""
    params = scope.params() | {"limit": limit}
    where = scope.sql()
    both = "coalesce(s.name, '') || char(10) || coalesce(s.description, '')"
    if pg:
        both = both.replace("char(10)", "chr(10)")
        if query.is_short:
            checks = " AND ".join(
                f"strpos(lower({both}), lower(:t{i})) > 0" for i in range(len(query.terms))
            )
            params |= _term_params("t", query.terms)
            score = "0.0"
        else:
            # Each term through the name's or the description's trigram index.
            checks = " AND ".join(
                f"(s.name ILIKE :p{i} ESCAPE '\\' OR s.description ILIKE :p{i} ESCAPE '\\')"
                for i in range(len(query.terms))
            )
            params |= _term_params("p", [_like(t) for t in query.terms])
            params["q"] = " ".join(query.terms)
            score = f"-word_similarity(:q, {both})"
        sql = (
            f"SELECT s.id AS sid, {score} AS score FROM sessions s "
            f"WHERE {where} AND {checks} ORDER BY score, s.id LIMIT :limit"
        )
    elif query.is_short:
        checks = " AND ".join(f"instr(lower({both}), :t{i}) > 0" for i in range(len(query.terms)))
        params |= _term_params("t", [_ascii_lower(t) for t in query.terms])
        sql = (
            f"SELECT s.id AS sid FROM sessions s WHERE {where} AND {checks} "
            "ORDER BY coalesce(s.active_at, s.created_at) DESC, s.id LIMIT :limit"
        )
    else:
        checks = "".join(f" AND instr(lower({both}), :t{i}) > 0" for i in range(len(query.short)))
        params |= _term_params("t", [_ascii_lower(t) for t in query.short])
        params["match"] = _fts_match(query.indexed)
        sql = (
            "SELECT s.id AS sid FROM sessions_fts JOIN sessions s "
            "ON s.rowid = sessions_fts.rowid "
            f"WHERE sessions_fts MATCH :match AND {where}{checks} "
            "ORDER BY bm25(sessions_fts), s.id LIMIT :limit"
        )
    return [r[0] for r in conn.execute(text(sql), params)]


def _windows(
    conn: Connection, query: Query, entry_ids: Sequence[str], pg: bool
) -> dict[str, tuple[str, bool]]:
    """Per entry: the text around its first hit, and whether text before it was cut."""
    if not entry_ids:
        return {}
    first = (query.indexed or query.terms)[0]
    if pg:
        pos = "strpos(lower(content), lower(:t))"
        term = first
    else:
        pos = "instr(lower(content), :t)"
        term = _ascii_lower(first)
    start = f"greatest(1, {pos} - {SNIPPET_LEAD})" if pg else f"max(1, {pos} - {SNIPPET_LEAD})"
    sql = text(
        f"SELECT id, substr(content, {start}, {_WINDOW}) AS window, {start} > 1 AS cut "
        "FROM entries WHERE id IN :ids"
    ).bindparams(bindparam("ids", expanding=True))
    rows = conn.execute(sql, {"t": term, "ids": list(entry_ids)})
    return {r[0]: (r[1], bool(r[2])) for r in rows}


def _cards(
    conn: Connection, session_ids: Sequence[str], viewer_session_id: str | None
) -> dict[str, SessionCard]:
    """The listed form of each session (turn count: the jobs it admitted)."""
    if not session_ids:
        return {}
    ids = list(session_ids)
    rows = conn.execute(
        select(
            SESSIONS.c.id,
            SESSIONS.c.name,
            SESSIONS.c.description,
            SESSIONS.c.agent_id,
            func.coalesce(SESSIONS.c.active_at, SESSIONS.c.created_at),
        ).where(SESSIONS.c.id.in_(ids))
    ).all()
    turns: dict[str, int] = dict(
        conn.execute(
            select(JOBS.c.session_id, func.count())
            .where(JOBS.c.session_id.in_(ids))
            .group_by(JOBS.c.session_id)
        ).all()
    )
    return {
        r[0]: SessionCard(
            session_id=r[0],
            name=r[1],
            description=r[2],
            agent_id=r[3],
            turn_count=int(turns.get(r[0], 0)),
            last_activity=as_utc(r[4]),
            own=r[0] == viewer_session_id,
        )
        for r in rows
    }


def _metadata_matches(card: SessionCard, query: Query) -> list[MetadataMatch]:
    """The fields holding a term, when name and description together hold every term."""
    fields = [("name", card.name or ""), ("description", card.description or "")]
    both = "\n".join(v for _, v in fields).casefold()
    if not all(t.casefold() in both for t in query.terms):
        return []
    return [
        MetadataMatch(name, snippet(value, query.terms))
        for name, value in fields
        if any(t.casefold() in value.casefold() for t in query.terms)
    ]
