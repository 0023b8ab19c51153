"""Queries, cursors and snippets of session search (chaz/domain/search.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from chaz.domain.search import MAX_QUERY_CHARS, Cursor, parse_query, snippet
from chaz.errors import ChazError


def test_terms_are_words_and_quoted_phrases() -> None:
    assert parse_query('deploy  "retry the   request" foo_bar.baz()').terms == (
        "deploy",
        "retry the request",
        "foo_bar.baz()",
    )
    assert parse_query('"open phrase to the end').terms == ("open phrase to the end",)
    assert parse_query("Same same SAME").terms == ("Same",)
    assert parse_query('"').terms == ('"',)
    q = parse_query("db migration 迁移")
    assert q.indexed == ("migration",) and q.short == ("db", "迁移") and not q.is_short
    assert parse_query("迁移").is_short


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("", "request.invalid"),
        ("   \n", "request.invalid"),
        ("a\x00b", "request.invalid"),
        ("bad \ud800", "request.invalid"),
        (None, "request.invalid"),
        (42, "request.invalid"),
        (" ".join(f"t{i}" for i in range(17)), "request.invalid"),
        ("x" * (MAX_QUERY_CHARS + 1), "request.too_large"),
    ],
)
def test_bad_queries_are_refused_naming_the_field(query: object, code: str) -> None:
    with pytest.raises(ChazError) as caught:
        parse_query(query)
    assert caught.value.code == code and caught.value.details["field"] == "query"


def test_a_cursor_round_trips_and_garbage_is_refused() -> None:
    c = Cursor(datetime(2026, 12, 1, 7, 0, 0, 123456, tzinfo=UTC), "abc123")
    assert Cursor.decode(c.encode()) == c
    for bad in ("", "%%%", "bm90IGpzb24", "WyIyMDI2LTAxLTAxIiwgMV0", "x" * 500):
        with pytest.raises(ChazError) as caught:
            Cursor.decode(bad)
        assert caught.value.code == "request.invalid" and caught.value.details["field"] == "cursor"


def test_snippets_mark_every_hit_and_cut_around_the_first() -> None:
    assert snippet("Call foo_bar.baz() then FOO_BAR.BAZ() again", ("foo_bar.baz()",)) == (
        "Call «foo_bar.baz()» then «FOO_BAR.BAZ()» again"
    )
    long = "x " * 200 + "needle in the hay " + "y " * 200
    cut = snippet(long, ("needle",))
    assert cut.startswith("…") and cut.endswith("…") and "«needle»" in cut
    assert len(cut) <= 160 + 2 + 4
    # A longer term is marked whole, not the shorter one inside it.
    assert snippet("database db", ("db", "database")) == "«database» «db»"
