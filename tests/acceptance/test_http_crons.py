"""Crons over HTTP onto chaz schedules (docs/http.md#crons), driven by
``langgraph-sdk`` against a real ``chaz serve`` and real workers.

No test waits for a minute boundary: each cron names a slot far off (09:00
on 1 January, ...), and the test fires a slot itself with the very call the
``chaz.fire`` task makes (``chaz.usecases.schedules.fire``), as beat would.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

import chaz
from chaz.domain.schedules import FireOutcome, ScheduleFire
from chaz.usecases.schedules import fire
from tests.acceptance.test_http import Served, ask, project, refused, run
from tests.support.serve import serving
from tests.support.stack import Stack

TICKER = chaz.AgentSpec(id="cron-ticker", script=[{"steps": [{"say": "tock: {input}"}]}])
#: Slots a test never reaches by waiting: it fires them itself.
YEARLY = "0 9 1 1 *"
WAIT = 60


@pytest.fixture(scope="module")
def served(module_stack: Stack) -> Iterator[Served]:
    module_stack.workers(1, concurrency=2)
    module_stack.client.agents.put(TICKER)
    with serving(module_stack) as url:
        yield Served(module_stack, url)


def fired(served: Served, cron: dict[str, Any]) -> ScheduleFire:
    """Fire the cron's next slot now and wait for its turn to end: its ledger row."""
    slot = datetime.fromisoformat(cron["next_run_date"])
    services = served.stack.client.services
    done = fire(services, cron["cron_id"], slot)
    assert done.outcome == FireOutcome.ADMITTED.value, done

    def settled() -> ScheduleFire | None:
        row = services.store.schedules.fire_at(cron["cron_id"], slot)
        return row if row is not None and row.outcome is not FireOutcome.ADMITTED else None

    row = served.stack.wait_for(settled, WAIT, "the fire's turn to end")
    assert row is not None
    assert row.outcome is FireOutcome.SUCCEEDED, row
    return row


def said(state: Any) -> list[tuple[str, str]]:
    return [(m["type"], m["content"]) for m in state["values"]["messages"]]


def test_crons_on_a_thread_and_standalone_fire_search_update_and_delete(served: Served) -> None:
    async def scenario() -> None:
        sdk = served.sdk(served.key(project()))
        assert (await sdk.http.get("/info"))["flags"]["crons"] is True
        tid = (await sdk.threads.create(graph_id=TICKER.id))["thread_id"]
        pinned: Any = await sdk.crons.create_for_thread(
            tid, TICKER.id, schedule=YEARLY, input=ask("wake")
        )
        assert (pinned["thread_id"], pinned["assistant_id"], pinned["schedule"]) == (
            tid,
            TICKER.id,
            YEARLY,
        )
        assert pinned["enabled"] is True and pinned["timezone"] == "UTC"
        assert pinned["payload"]["input"] == ask("wake")
        assert datetime.fromisoformat(pinned["next_run_date"]).month == 1

        # A fire on the thread: one turn, its input the cron's, no entry for
        # the input (chaz's fire path), the reply in the thread.
        row = fired(served, pinned)
        assert row.session_id == tid
        assert said(await sdk.threads.get_state(tid)) == [("ai", "tock: wake")]

        end = datetime.now(UTC) + timedelta(days=400)
        solo: Any = await sdk.crons.create(
            TICKER.id,
            schedule="30 6 * * 1",
            input=ask("solo"),
            timezone="Europe/Paris",
            end_time=end,
        )
        assert (solo["thread_id"], solo["on_run_completed"], solo["timezone"]) == (
            None,
            "keep",
            "Europe/Paris",
        )
        assert datetime.fromisoformat(solo["end_time"]) == end
        # A standalone fire makes a thread of its own, as LangGraph's does.
        row = fired(served, solo)
        assert row.session_id not in (None, tid)
        assert said(await sdk.threads.get_state(row.session_id or "")) == [("ai", "tock: solo")]
        threads = await sdk.threads.search(metadata={"graph_id": TICKER.id})
        assert {t["thread_id"] for t in threads} == {tid, row.session_id}

        every = await sdk.crons.search()
        assert [c["cron_id"] for c in every] == [pinned["cron_id"], solo["cron_id"]]
        assert [c["cron_id"] for c in await sdk.crons.search(thread_id=tid)] == [pinned["cron_id"]]
        newest = await sdk.crons.search(
            assistant_id=TICKER.id, sort_by="created_at", sort_order="desc"
        )
        assert [c["cron_id"] for c in newest] == [solo["cron_id"], pinned["cron_id"]]
        assert await sdk.crons.search(select=["cron_id"], limit=1, offset=1) == [
            {"cron_id": solo["cron_id"]}
        ]
        assert await sdk.crons.count(assistant_id=TICKER.id) == 2

        changed = await sdk.crons.update(solo["cron_id"], schedule="0 7 * * *", enabled=False)
        assert (changed["schedule"], changed["enabled"], changed["next_run_date"]) == (
            "0 7 * * *",
            False,
            None,
        )
        assert [c["cron_id"] for c in await sdk.crons.search(enabled=False)] == [solo["cron_id"]]
        cleared = await sdk.crons.update(solo["cron_id"], end_time=None, enabled=True)
        assert cleared["end_time"] is None and cleared["next_run_date"] is not None

        await sdk.crons.delete(pinned["cron_id"])
        assert [c["cron_id"] for c in await sdk.crons.search()] == [solo["cron_id"]]
        gone = await refused(sdk.crons.delete(pinned["cron_id"]))
        assert (gone.status_code, gone.json()["code"]) == (404, "schedule.not_found")
        # The fires' threads stay: chaz keeps what a schedule did.
        assert said(await sdk.threads.get_state(tid)) == [("ai", "tock: wake")]

    run(scenario())


def test_hostile_cron_requests_get_stable_codes_and_change_nothing(served: Served) -> None:
    async def scenario() -> None:
        mine_project = project()
        key = served.key(mine_project)
        sdk = served.sdk(key)
        tid = (await sdk.threads.create(graph_id=TICKER.id))["thread_id"]
        wake = ask("wake")

        def on_thread(**kw: Any) -> Awaitable[Any]:
            return sdk.crons.create_for_thread(tid, TICKER.id, **{"input": wake, **kw})

        def solo(**kw: Any) -> Awaitable[Any]:
            return sdk.crons.create(TICKER.id, **{"input": wake, **kw})

        invalid: list[tuple[Awaitable[Any], str]] = [
            (on_thread(schedule="every minute"), "schedule"),
            (solo(schedule="0 0 31 2 *"), "schedule"),  # parses, never fires
            (solo(schedule="* * * * * *"), "schedule"),
            (solo(schedule=YEARLY, timezone="Mars/Olympus"), "timezone"),
            (sdk.crons.create(TICKER.id, schedule=YEARLY), "input"),
            (
                solo(schedule=YEARLY, input={"messages": [{"role": "user", "content": 5}]}),
                "input.messages.0.content",
            ),
            (
                sdk.crons.create_for_thread(tid, "someone-else", schedule=YEARLY, input=wake),
                "assistant_id",
            ),
        ]
        unsupported: list[tuple[Awaitable[Any], str]] = [
            (on_thread(schedule=YEARLY, webhook="https://hooks.example.com/x"), "webhook"),
            (solo(schedule=YEARLY, metadata={"team": "a"}), "metadata"),
            (solo(schedule=YEARLY, config={"recursion_limit": 3}), "config"),
            (solo(schedule=YEARLY, interrupt_before="*"), "interrupt_before"),
            (on_thread(schedule=YEARLY, multitask_strategy="interrupt"), "multitask_strategy"),
            (solo(schedule=YEARLY, on_run_completed="delete"), "on_run_completed"),
            (solo(schedule=YEARLY, stream_mode="values"), "stream_mode"),
        ]
        for call, field in invalid:
            answer = await refused(call)
            body = answer.json()
            assert (answer.status_code, body["code"], body["details"]["field"]) == (
                422,
                "request.invalid",
                field,
            ), body
        for call, field in unsupported:
            answer = await refused(call)
            body = answer.json()
            assert (answer.status_code, body["code"], body["details"]["field"]) == (
                422,
                "request.unsupported",
                field,
            ), body
        assert await sdk.crons.count() == 0
        missing = await refused(sdk.crons.create("no-such-agent", schedule=YEARLY, input=wake))
        assert (missing.status_code, missing.json()["code"]) == (404, "agent.not_found")

        # Another project's cron and thread: exactly a missing one's answers.
        mine: Any = await on_thread(schedule=YEARLY)
        other = served.sdk(served.key(project()))
        nobody = uuid.uuid4().hex[:16]
        pairs = [
            (other.crons.delete(mine["cron_id"]), sdk.crons.delete(nobody)),
            (other.crons.update(mine["cron_id"], enabled=False), sdk.crons.update(nobody)),
        ]
        for denied, absent in pairs:
            a, b = await refused(denied), await refused(absent)
            assert (a.status_code, a.json()["code"]) == (b.status_code, b.json()["code"])
            assert (a.status_code, a.json()["code"]) == (404, "schedule.not_found")
        theirs = await refused(
            other.crons.create_for_thread(tid, TICKER.id, schedule=YEARLY, input=wake)
        )
        absent_thread = await refused(
            other.crons.create_for_thread(nobody, TICKER.id, schedule=YEARLY, input=wake)
        )
        assert (theirs.status_code, theirs.json()["code"]) == (404, "session.not_found")
        assert absent_thread.json()["code"] == "session.not_found"
        assert await other.crons.search() == [] and await other.crons.count() == 0
        # An interval schedule of the project is not a cron.
        interval = served.stack.client.services.store.schedules.add(
            TICKER.id,
            {"kind": "interval", "interval_seconds": 3600, "prompt": "x"},
            project=mine_project,
        )
        assert interval.id not in {c["cron_id"] for c in await sdk.crons.search()}

        # Bad ids and bad values: stable codes, never a 500.
        with httpx.Client(base_url=served.url, headers={"x-api-key": key}) as http:
            for path in ("/runs/crons/" + "x" * 300, "/runs/crons/%00", "/runs/crons/a%20b"):
                for method in ("DELETE", "PATCH"):
                    answer = http.request(method, path, json={})
                    assert answer.status_code in (404, 422), (method, path, answer.text)
                    assert answer.json()["code"] in ("request.invalid", "schedule.not_found")
            for body in (
                {"limit": 0},
                {"limit": "ten"},
                {"sort_by": "prompt"},
                {"sort_order": "up"},
                {"select": ["prompt"]},
                {"enabled": "yes"},
                {"thread_id": 7},
            ):
                answer = http.post("/runs/crons/search", json=body)
                assert (answer.status_code, answer.json()["code"]) == (422, "request.invalid"), body
            answer = http.patch(f"/runs/crons/{mine['cron_id']}", json={"schedule": "nope"})
            body = answer.json()
            assert (answer.status_code, body["details"]["field"]) == (422, "schedule")
            answer = http.post(f"/threads/{tid}/runs/crons", json=[1, 2])
            assert (answer.status_code, answer.json()["code"]) == (422, "request.invalid")
        assert [c["schedule"] for c in await sdk.crons.search()] == [YEARLY]

        # A key without schedule.manage may search but not create.
        _, reader_key = served.stack.client.keys.create("user:reader", "readers", "history.read")
        reader = served.sdk(reader_key)
        answer = await refused(reader.crons.create(TICKER.id, schedule=YEARLY, input=wake))
        assert (answer.status_code, answer.json()["code"]) == (403, "auth.forbidden")
        assert await reader.crons.search() == []

    run(scenario())
