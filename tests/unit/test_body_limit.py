"""The server's cap on a request body (chaz/server/limits.py), on a bare ASGI app."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx

from chaz.server.limits import BodyLimit, body_limit

LIMIT = 1000


def _app(read: list[int]) -> BodyLimit:
    """An app that reads its whole body and answers how long it was."""

    async def echo(scope: Any, receive: Any, send: Any) -> None:
        size = 0
        while True:
            message = await receive()
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        read.append(size)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(size).encode()})

    return BodyLimit(echo, LIMIT)


def _post(app: BodyLimit, content: bytes | AsyncIterator[bytes]) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.post("/x", content=content)

    return asyncio.run(go())


def test_a_body_at_the_limit_passes_and_one_past_it_is_refused_unread() -> None:
    read: list[int] = []
    app = _app(read)
    assert _post(app, b"x" * LIMIT).text == str(LIMIT)
    answer = _post(app, b"x" * (LIMIT + 1))
    assert answer.status_code == 413
    body = answer.json()
    assert (body["code"], body["details"]["field"], body["details"]["limit"]) == (
        "request.too_large",
        "body",
        LIMIT,
    )
    assert read == [LIMIT], "a declared oversize body never reaches the app"


def test_a_chunked_body_is_cut_off_at_the_first_byte_past_the_limit() -> None:
    read: list[int] = []
    app = _app(read)

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(50):
            yield b"y" * 100

    answer = _post(app, chunks())
    assert (answer.status_code, answer.json()["code"]) == (413, "request.too_large")
    assert read == [], "the app never finished reading the body"


def test_the_cap_leaves_room_for_the_largest_content_json_escaped() -> None:
    assert body_limit(1 << 20) >= 6 * (1 << 20)
