"""The ids of a stream's events (chaz/server/event_ids.py, docs/http.md#streams):
what is written is read back, and anything else is refused naming the header."""

from __future__ import annotations

import pytest

from chaz.errors import ValidationError
from chaz.server.event_ids import HEADER, SLOTS, EventId, parse, tag

RUN = "9f2c0d1e2f3a4b5c6d7e8f9a0b1c2d3e"


def _parse(raw: str, run_id: str = RUN) -> EventId:
    return parse(raw, run_id, input_seq=4, last_seq=20)


@pytest.mark.parametrize(
    "place",
    [
        EventId(RUN, 4, "0", "s", 0),
        EventId(RUN, 4, "0", "s", 2),
        EventId(RUN, 4, "1733340000123-0", "p", 1),
        EventId(RUN, 9, "1733340000123-17", "p", 0),
        EventId(RUN, 9, "1733340000123-17", "e", 5),
        EventId(RUN, 20, "0", "e", 0),
    ],
)
def test_an_id_reads_back_as_its_place(place: EventId) -> None:
    raw = str(place)
    assert raw.startswith(tag(RUN) + ".")
    assert _parse(raw) == place


def test_the_format_is_the_documented_one() -> None:
    assert str(EventId(RUN, 7, "1733340000123-0", "p", 0)) == f"{tag(RUN)}.7.1733340000123-0.p0"
    assert EventId.start(RUN, 4).at(0) == EventId(RUN, 4, "0", "s", 0)
    assert len(tag(RUN)) == 8
    assert {k: len(v) for k, v in SLOTS.items()} == {"s": 3, "p": 2, "e": 6}


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "x",
        "1733340000123-0",  # a LangGraph server's id
        f"{tag('another-run')}.4.0.s0",  # another run's
        f"{tag(RUN)}.4.0.s3",  # no such slot
        f"{tag(RUN)}.4.0.e9",
        f"{tag(RUN)}.3.0.p0",  # before the run's input
        f"{tag(RUN)}.21.0.e0",  # past the session's end
        f"{tag(RUN)}.5.0.s0",  # a start away from the input
        f"{tag(RUN)}.4.1-1.s0",
        f"{tag(RUN)}.4.0.p0",  # a partial without a position
        f"{tag(RUN)}.4.0.e0",  # the input as an entry step
        f"{tag(RUN)}.4.1-2-3.p0",
        f"{tag(RUN)}.4.-.p0",
        f"{tag(RUN)}.4.0.s0 ",
        f"{tag(RUN)}.4.0.s0\n",
        f"{tag(RUN).upper()}.4.0.s0",
        f"{tag(RUN)}.04x.0.s0",
        f"{tag(RUN)}.9{'9' * 30}.0.e0",
        "a" * 10_000,
        "\u00e9\u00e9\u00e9",
    ],
)
def test_anything_else_is_refused_naming_the_header(raw: str) -> None:
    with pytest.raises(ValidationError) as caught:
        _parse(raw)
    assert caught.value.code == "request.invalid"
    assert caught.value.details["field"] == HEADER
