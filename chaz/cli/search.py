"""``chaz search``: find sessions by their messages, name or description
(docs/sessions.md#session_search, docs/cli.md#search)."""

from __future__ import annotations

from chaz.cli.context import Context
from chaz.cli.output import EXIT_OK
from chaz.domain.search import SearchResult


def _evidence(result: SearchResult) -> str:
    # The best message hit, else the metadata field that matched.
    if result.matches:
        return result.matches[0].snippet
    return "; ".join(f"{m.field}: {m.snippet}" for m in result.metadata_matches)


def cmd_search(ctx: Context) -> int:
    """Distinct sessions matching QUERY, best first."""
    a = ctx.args
    found = ctx.client.sessions.search(a.query, agent_id=a.agent, limit=a.limit)
    if ctx.out.json_mode:
        ctx.out.json([r.to_dict() for r in found])
        return EXIT_OK
    rows = [
        [r.session.session_id, r.session.name, r.session.agent_id, len(r.matches), _evidence(r)]
        for r in found
    ]
    ctx.out.table("sessions", ["ID", "NAME", "AGENT", "HITS", "EVIDENCE"], rows)
    return EXIT_OK
