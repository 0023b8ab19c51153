"""Issue 22 item 5: ``chaz serve``'s streams as ``langgraph-sdk`` reads them:
every event has an id, and a client that drops rejoins after the last one
it got and receives exactly what it missed (docs/http.md#streams).

The fleet and the server are test_http.py's ``served`` fixture; the
streamed turn waits at a gate the test opens, so nothing races the clock.
"""

from __future__ import annotations

from typing import Any

import httpx
from langgraph_sdk.schema import StreamMode, StreamPart

import chaz
from tests.acceptance.test_http import ANSWER, SAYER, Served, ask, project, refused, run
from tests.acceptance.test_http import served as served

#: Waits at ``go-`` until the stream is open, streams one partial of its
#: answer, waits at ``rest-``, streams the rest: a client can drop with
#: partials behind it and partials ahead.
HELD = chaz.AgentSpec(
    id="http-held-streamer",
    script=[
        {
            "steps": [
                {"wait": "go-{session_id}"},
                {"stream": ANSWER, "chunk": 5, "hold": "rest-{session_id}"},
            ]
        }
    ],
)
MODES: list[StreamMode] = ["values", "updates", "messages-tuple", "events", "custom"]


def _seen(parts: list[StreamPart]) -> list[tuple[str, str | None, Any]]:
    return [(p.event, p.id, p.data) for p in parts]


def test_a_dropped_stream_rejoined_with_its_last_id_misses_nothing(served: Served) -> None:
    served.stack.client.agents.put(HELD)

    async def scenario() -> None:
        sdk = served.sdk(served.key(project()))
        tid = (await sdk.threads.create(graph_id=HELD.id))["thread_id"]
        parts = sdk.runs.stream(tid, HELD.id, input=ask("tell me"), stream_mode=MODES)
        got = [await anext(parts)]
        assert got[0].event == "metadata"
        run_id = got[0].data["run_id"]
        served.stack.open_gate(f"go-{tid}")
        async for part in parts:
            got.append(part)
            if part.event == "messages":
                break
        await parts.aclose()  # type: ignore[attr-defined]  # the client drops mid-answer, between two events of a step
        assert all(p.id for p in got), "every event carries an id"

        # The turn goes on without the client: rejoin, then let the rest stream.
        rejoined = sdk.runs.join_stream(tid, run_id, last_event_id=got[-1].id, stream_mode=MODES)
        served.stack.open_gate(f"rest-{tid}")
        rest = [p async for p in rejoined]
        # One uninterrupted stream of the run: a rejoin without an id replays it all.
        whole = [p async for p in sdk.runs.join_stream(tid, run_id, stream_mode=MODES)]
        assert _seen(got + rest) == _seen(whole)

        events = [p.event for p in whole]
        assert events[:3] == ["metadata", "values", "events"]
        assert events[-5:] == ["updates", "events", "values", "events", "end"]
        assert "custom" not in events  # chaz has no custom writer
        chunks = [p.data[0]["content"] for p in whole if p.event == "messages"]
        assert len(chunks) >= 3 and "".join(chunks) == ANSWER
        lc = [p.data["event"] for p in whole if p.event == "events"]
        streamed = ["on_chat_model_stream"] * len(chunks)
        assert lc == ["on_chain_start", *streamed, "on_chain_stream", "on_chain_end"]
        updates = [p.data for p in whole if p.event == "updates"]
        assert [(list(u), u[HELD.id]["messages"][0]["content"]) for u in updates] == [
            ([HELD.id], ANSWER)
        ]
        assert whole[-1].data == {"run_id": run_id, "status": "success"}

        # Ids are distinct, and a rejoin after any of them sends exactly the rest.
        ids = [p.id for p in whole]
        assert len(set(ids)) == len(ids)
        for n in (0, 1, 2, len(whole) // 2, len(whole) - 3, len(whole) - 2):
            after = sdk.runs.join_stream(tid, run_id, last_event_id=ids[n], stream_mode=MODES)
            assert _seen([p async for p in after]) == _seen(whole[n + 1 :]), n
        assert [p async for p in sdk.runs.join_stream(tid, run_id, last_event_id=ids[-1])] == []
        # Without stream_mode a rejoin streams values.
        plain = [p.event async for p in sdk.runs.join_stream(tid, run_id)]
        assert plain == ["metadata", "values", "values", "end"]

    run(scenario())


def test_the_stream_says_where_to_rejoin_with_its_modes(served: Served) -> None:
    served.stack.client.agents.put(HELD)

    async def scenario() -> None:
        key = served.key(project())
        sdk = served.sdk(key)
        tid = (await sdk.threads.create(graph_id=HELD.id))["thread_id"]
        async with httpx.AsyncClient(
            base_url=served.url, headers={"x-api-key": key}, timeout=60
        ) as http:
            body = {"assistant_id": HELD.id, "input": ask("go"), "stream_mode": MODES}
            async with http.stream("POST", f"/threads/{tid}/runs/stream", json=body) as answer:
                assert answer.status_code == 200
                location = answer.headers["location"]
                run_id = answer.headers["content-location"].rsplit("/", 1)[-1]
            assert location.startswith(f"/threads/{tid}/runs/{run_id}/stream?")
            served.stack.open_gate(f"go-{tid}")
            served.stack.open_gate(f"rest-{tid}")
            # The SDK reconnects there; the query keeps the stream's modes.
            replay = (await http.get(location)).text
        assert "event: messages" in replay and "event: updates" in replay
        assert replay.rstrip().endswith('"status":"success"}')

    run(scenario())


def test_a_bad_or_foreign_last_event_id_is_refused_naming_the_header(served: Served) -> None:
    async def scenario() -> None:
        owner = served.sdk(served.key(project()))
        other = served.sdk(served.key(project()))
        tid = (await owner.threads.create(graph_id=SAYER.id))["thread_id"]
        first = [p async for p in owner.runs.stream(tid, SAYER.id, input=ask("one"))]
        second = [p async for p in owner.runs.stream(tid, SAYER.id, input=ask("two"))]
        rid, rid2 = first[0].data["run_id"], second[0].data["run_id"]
        foreign = first[1].id  # an id of the first run, sent to the second's stream
        own = second[1].id
        assert foreign and own
        bad = [
            foreign,
            "x",
            "1733340000123-0",  # a LangGraph server's id
            "not.an.id.s0",
            own.replace(".s1", ".s9"),
            own.split(".")[0] + ".99999999.0.e5",
            own.split(".")[0] + ".1.0.p0",
            own + "0",
            "a" * 500,
        ]
        for raw in bad:
            answer = await refused(_collect(owner.runs.join_stream(tid, rid2, last_event_id=raw)))
            body = answer.json()
            assert (answer.status_code, body["code"], body["details"]["field"]) == (
                422,
                "request.invalid",
                "Last-Event-ID",
            ), raw
        # A run of another project: exactly what a missing one gets.
        missing = "0" * 32
        mine = (await other.threads.create(graph_id=SAYER.id))["thread_id"]
        for denied, absent, code in (
            (other.runs.join_stream(tid, rid), other.runs.join_stream(missing, rid), "session"),
            (other.runs.join_stream(mine, rid), other.runs.join_stream(mine, missing), "job"),
        ):
            a, b = await refused(_collect(denied)), await refused(_collect(absent))
            assert (a.status_code, a.json()["code"]) == (b.status_code, b.json()["code"])
            assert (a.status_code, a.json()["code"]) == (404, f"{code}.not_found")
        # A new run's stream has nothing to resume.
        answer = await refused(
            _collect(
                owner.runs.stream(tid, SAYER.id, input=ask("x"), headers={"Last-Event-ID": foreign})
            )
        )
        assert answer.json()["details"]["field"] == "Last-Event-ID"
        # cancel_on_disconnect is not something chaz does: refused, naming it.
        answer = await refused(
            _collect(owner.runs.join_stream(tid, rid, cancel_on_disconnect=True))
        )
        assert answer.json()["details"]["field"] == "cancel_on_disconnect"

    run(scenario())


async def _collect(parts: Any) -> list[StreamPart]:
    return [p async for p in parts]
