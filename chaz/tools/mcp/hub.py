"""A worker process's MCP connections (docs/tools.md#lifecycle).

The ``mcp`` SDK is asyncio; turns run on the threads of Celery's pool. So a
process has one :class:`McpHub`: one event loop on a daemon thread of its own,
holding one connection per configured server, started on first use, reused
by every turn of the process, started again after it ended (a stdio server
that crashed), and stopped with the worker. A turn's thread hands each
request to the loop and waits on it together with its cancel token: a
cancel or a hand-back cancels the request (the SDK tells the server with
``notifications/cancelled``) and frees the turn at once.

A stdio server runs under a small launcher (:mod:`chaz.tools.mcp.launch`)
that asks the kernel to SIGKILL it when the worker dies, however it dies.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT, CallToolResult, Implementation

from chaz.domain.mcp import checked_input_schema, tools_by_name
from chaz.errors import (
    ChazError,
    McpCallTimeout,
    McpError,
    McpInitTimeout,
    McpServerCrashed,
    McpToolError,
    McpUnavailable,
)
from chaz.runtime.cancel import CancelToken
from chaz.settings import McpServer
from chaz.tools.mcp.launch import guarded
from chaz.tools.mcp.results import result_text

log = logging.getLogger(__name__)

T = TypeVar("T")

#: After a server failed to start, calls fail fast with that error for this
#: long rather than each waiting out its own start.
RETRY_AFTER_SECONDS = 5.0
#: How long stopping waits for a server's connection to close (the SDK closes
#: a stdio server's stdin, then SIGTERMs, then SIGKILLs its process group).
STOP_SECONDS = 8.0
#: How much longer than its own bounds a turn waits for the hub's loop.
MARGIN_SECONDS = 10.0
#: What the SDK's streamable HTTP client puts in place of a JSON-RPC answer
#: when the server answered a request with an HTTP error status.
HTTP_STAND_INS = frozenset({"Session terminated", "Server returned an error response"})
#: The most pages of ``tools/list`` read from one server.
MAX_LIST_PAGES = 20


@dataclass(frozen=True)
class Listed:
    """One tool of a server as it listed it: its description and checked input
    schema, or the error that keeps it from being offered."""

    description: str
    schema: dict[str, Any] | None
    error: ChazError | None = None


class _Live:
    """One open connection to a server, held by a task of its own (the SDK's
    transports are async context managers, entered and left by one task)."""

    def __init__(self, name: str, config: McpServer) -> None:
        self.name = name
        self.config = config
        self.client: Client | None = None
        self.tools: dict[str, Listed] = {}
        self.closed = False
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Connect, ``initialize`` and list the tools, within ``init_timeout_seconds``."""
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._hold(ready), name=f"mcp:{self.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.config.init_timeout_seconds)
        except TimeoutError:
            await self.stop()
            raise McpInitTimeout(
                f"MCP server {self.name!r} did not answer initialize and tools/list within "
                f"{self.config.init_timeout_seconds:g}s",
                server=self.name,
            ) from None
        except BaseException:
            await self.stop()
            raise

    async def _hold(self, ready: asyncio.Future[None]) -> None:
        try:
            async with Client(
                _watched(self._transport(), self._ended),
                mode="legacy",
                cache=None,
                client_info=Implementation(name="chaz", version="0"),
            ) as client:
                self.tools = await _list(self.name, client)
                self.client = client
                ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(_unavailable(self.name, exc))
            if not isinstance(exc, Exception):
                raise
            log.warning("MCP server %s: connection ended: %r", self.name, exc)
        finally:
            self.closed = True

    def _ended(self) -> None:
        # The server's output ended: its process died, or its HTTP stream closed.
        self.closed = True

    def _transport(self) -> Any:
        config = self.config
        if config.command is not None:
            command, args = guarded(config.command, config.args, os.getpid())
            params = StdioServerParameters(
                command=command, args=args, env=dict(config.env), cwd=config.cwd
            )
            return stdio_client(params, errlog=_errlog())
        assert config.url is not None
        return _http(config)

    async def stop(self) -> None:
        """Close the connection (and stop a stdio server), bounded by :data:`STOP_SECONDS`."""
        self.closed = True
        self._stop.set()
        task = self._task
        if task is None or task.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), STOP_SECONDS)
        except TimeoutError:
            task.cancel()
        except BaseException:
            log.debug("MCP server %s stopped with an error", self.name, exc_info=True)


class _Server:
    """A configured server: its current connection, started again when it ended."""

    def __init__(self, name: str, config: McpServer) -> None:
        self.name = name
        self.config = config
        self.live: _Live | None = None
        self._lock = asyncio.Lock()
        self._failure: tuple[float, ChazError] | None = None

    async def ready(self) -> _Live:
        """The open connection, started (again) if there is none."""
        async with self._lock:
            live = self.live
            if live is not None and not live.closed:
                return live
            if live is not None:
                self.live = None
                await live.stop()
            if self._failure is not None and time.monotonic() < self._failure[0]:
                raise self._failure[1]
            live = _Live(self.name, self.config)
            try:
                await live.start()
            except ChazError as exc:
                self._failure = (time.monotonic() + RETRY_AFTER_SECONDS, exc)
                raise
            self._failure = None
            self.live = live
            log.info("MCP server %s: connected (%d tools)", self.name, len(live.tools))
            return live

    async def call(self, tool: str, arguments: dict[str, Any]) -> CallToolResult:
        """Call ``tool``; a crash, a timeout or a protocol error is a :class:`McpError`."""
        live = await self.ready()
        assert live.client is not None
        try:
            return await live.client.call_tool(
                tool, arguments, read_timeout_seconds=self.config.timeout_seconds
            )
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise McpCallTimeout(
                    f"{self.name}.{tool} took longer than {self.config.timeout_seconds:g}s",
                    server=self.name,
                ) from None
            if exc.code == CONNECTION_CLOSED or live.closed:
                raise self._crashed(live, tool) from None
            if self.config.url is not None and exc.message in HTTP_STAND_INS:
                # The HTTP answer was a status, not JSON-RPC: the session is
                # stale (the server restarted) or the server is failing. A
                # new connection, at the next call, opens a new session.
                live.closed = True
                raise McpUnavailable(
                    f"MCP server {self.name!r} refused the request ({exc.message}); the next "
                    "call opens a new session",
                    server=self.name,
                ) from None
            raise McpToolError(
                f"{self.name}.{tool}: {exc.message[:2000]}", server=self.name, rpc_code=exc.code
            ) from None
        except (asyncio.CancelledError, McpError):
            raise
        except Exception as exc:
            if live.closed:
                raise self._crashed(live, tool) from None
            raise McpToolError(
                f"{self.name}.{tool}: {type(exc).__name__}: {str(exc)[:2000]}", server=self.name
            ) from None

    def _crashed(self, live: _Live, tool: str) -> McpServerCrashed:
        live.closed = True
        return McpServerCrashed(
            f"MCP server {self.name!r} went away during {self.name}.{tool}; the call's effect "
            "is unknown (the next call starts the server again)",
            server=self.name,
        )

    async def stop(self) -> None:
        """Close its connection, if open."""
        live, self.live = self.live, None
        if live is not None:
            await live.stop()


class McpHub:
    """The MCP servers of one process, on an event loop thread of its own."""

    def __init__(self, servers: Mapping[str, McpServer]) -> None:
        self.servers = dict(servers)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._held: dict[str, _Server] = {}

    def tools(self, server: str, cancel: CancelToken | None = None) -> dict[str, Listed]:
        """``server``'s tools (starting it on first use)."""
        bound = self.servers[server].init_timeout_seconds + STOP_SECONDS + MARGIN_SECONDS
        return self._run(lambda: self._tools(server), cancel, bound)

    def call(
        self, server: str, tool: str, arguments: dict[str, Any], cancel: CancelToken | None = None
    ) -> tuple[str, bool]:
        """Call ``server``'s ``tool``: its result as text, and whether it is an error result.

        :class:`~chaz.errors.McpError` when there is no result; the token's error
        (cancel, hand-back, budget) when it was set first."""
        config = self.servers[server]
        bound = config.init_timeout_seconds + config.timeout_seconds + STOP_SECONDS
        result = self._run(
            lambda: self._held_for(server).call(tool, arguments), cancel, bound + MARGIN_SECONDS
        )
        return result_text(server, tool, result, config.max_result_bytes), bool(result.is_error)

    async def _tools(self, server: str) -> dict[str, Listed]:
        return (await self._held_for(server).ready()).tools

    def _held_for(self, server: str) -> _Server:
        with self._lock:
            held = self._held.get(server)
            if held is None:
                held = self._held[server] = _Server(server, self.servers[server])
            return held

    def _run(
        self,
        make: Callable[[], Coroutine[Any, Any, T]],
        cancel: CancelToken | None,
        bound: float,
    ) -> T:
        future = asyncio.run_coroutine_threadsafe(make(), self._started())
        forget = cancel.on_cancel(lambda: _drop(future)) if cancel is not None else _nothing
        try:
            return future.result(bound)
        except concurrent.futures.TimeoutError:
            # Every wait on the loop has its own bound, well inside this one: a
            # turn is never held by a loop that stopped answering.
            future.cancel()
            log.error("MCP: no answer from the hub's loop within %.0fs", bound)
            raise McpCallTimeout(f"the MCP request had no answer within {bound:.0f}s") from None
        except concurrent.futures.CancelledError:
            if cancel is not None and cancel.is_set():
                raise cancel.stopped("the job was cancelled") from None
            raise McpUnavailable("the MCP request was stopped") from None
        finally:
            forget()

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="chaz-mcp", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def close(self) -> None:
        """Stop every server and the loop (the worker is stopping)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return

        async def stop_all() -> None:
            await asyncio.gather(*(s.stop() for s in self._held.values()))

        held = len(self._held)
        try:
            asyncio.run_coroutine_threadsafe(stop_all(), loop).result(STOP_SECONDS + 2)
            log.info("MCP: stopped %d server(s)", held)
        except Exception:
            log.warning("MCP servers did not all stop cleanly", exc_info=True)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        self._held.clear()


def _nothing() -> None:
    return None


def _drop(future: concurrent.futures.Future[Any]) -> None:
    future.cancel()


async def _list(server: str, client: Client) -> dict[str, Listed]:
    """Every page of the server's ``tools/list``, each tool checked on its own."""
    listed: list[tuple[str, Listed]] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        for tool in page.tools:
            try:
                schema = checked_input_schema(server, tool.name, tool.input_schema)
                item = Listed(tool.description or tool.title or tool.name, schema)
            except ChazError as exc:
                log.warning("MCP server %s: tool %s is not offered: %s", server, tool.name, exc)
                item = Listed("", None, exc)
            listed.append((tool.name, item))
        cursor = page.next_cursor
        if cursor is None:
            break
    try:
        return tools_by_name(server, listed)
    except ChazError as clash:
        # The twice-listed name is refused; the server's other tools still serve.
        name = clash.details["tool"]
        table = {n: t for n, t in listed if n != name}
        table[name] = Listed("", None, clash)
        return table


def _unavailable(server: str, exc: BaseException) -> ChazError:
    if isinstance(exc, ChazError):
        return exc
    causes = exc.exceptions if isinstance(exc, BaseExceptionGroup) else [exc]
    why = "; ".join(f"{type(c).__name__}: {str(c)[:300]}" for c in causes)
    return McpUnavailable(f"MCP server {server!r} could not be started: {why}", server=server)


def _errlog() -> Any:
    # A stdio server's stderr goes to the worker's own (its log); Celery swaps
    # sys.stderr for a logging proxy with no file descriptor to hand on.
    stream = sys.__stderr__
    try:
        if stream is not None:
            stream.fileno()
            return stream
    except (OSError, ValueError):
        pass
    return open(os.devnull, "w")  # the child holds it


@asynccontextmanager
async def _http(config: McpServer) -> AsyncIterator[Any]:
    assert config.url is not None
    timeout = httpx2.Timeout(30.0, read=config.timeout_seconds + 30.0)
    async with (
        create_mcp_http_client(headers=dict(config.headers) or None, timeout=timeout) as http,
        streamable_http_client(config.url, http_client=http) as streams,
    ):
        yield streams


@asynccontextmanager
async def _watched(inner: Any, ended: Callable[[], None]) -> AsyncIterator[Any]:
    """``inner``'s streams, calling ``ended`` as soon as the server's side ends,
    so that the next call starts the server again instead of failing."""
    async with inner as (read, write):
        send, receive = anyio.create_memory_object_stream[Any](0)

        async def relay() -> None:
            try:
                async with send:
                    async for item in read:
                        await send.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass
            finally:
                ended()

        async with anyio.create_task_group() as group:
            group.start_soon(relay)
            try:
                yield receive, write
            finally:
                group.cancel_scope.cancel()
