"""The MCP servers of one process, reached through the official ``mcp`` SDK.

The SDK is async (anyio); specchat's engine and session are threads. :class:`McpHub` runs the
SDK on an asyncio loop of its own, in a daemon thread, and offers a blocking facade
(:meth:`McpHub.tools`, :meth:`McpHub.call`) that any thread may call.

Servers start lazily, on the first call that needs one, and stay up until :meth:`McpHub.close`
(the command line and the app call it when they end; an ``atexit`` hook is the backstop). A
server that cannot start, dies, hangs past its ``timeout`` or answers with junk gives a
:class:`ToolServerError` with one line saying so; the hub forgets it, and the next call starts
it again. A stdio server's standard error goes to a temporary file, never to the terminal; its
last line is quoted when the server fails. Headers and environment values are never put in a
message or a log.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, TextIO, TypeVar, cast

from specchat.errors import Cancelled, SpecchatError
from specchat.mcp_config import McpServer

T = TypeVar("T")
STOP_S = 8.0  # for all servers to stop at close (the SDK's own grace is 2 s, then a kill)
STDERR_TAIL = 200  # characters of a failed server's last stderr line quoted


class ToolServerError(SpecchatError):
    """A server could not start, or failed during a call: one line, naming the server."""


@dataclass(frozen=True)
class ToolInfo:
    """One tool a server offers, as it lists it."""

    server: str
    name: str
    description: str
    input_schema: Mapping[str, Any]

    @property
    def summary(self) -> str:
        """The description's first line."""
        first = self.description.strip().splitlines()[0] if self.description.strip() else ""
        return first


@dataclass(frozen=True)
class ToolResult:
    """What a call gave back: its content as text, and whether the tool said it failed (an
    error result goes back to the model, which may correct its call)."""

    text: str
    is_error: bool = False


@dataclass
class _Conn:
    server: McpServer
    stop: asyncio.Event
    errlog: IO[str]
    client: Any = None  # mcp.Client, once started
    tools: tuple[ToolInfo, ...] = ()
    task: asyncio.Task[None] | None = None
    error: BaseException | None = None
    started: float = field(default_factory=time.monotonic)
    http_status: int | None = None  # an HTTP server's last error status (the SDK hides it)


def _leaf(e: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups."""
    while isinstance(getattr(e, "exceptions", None), tuple) and e.exceptions:  # type: ignore[attr-defined]
        e = e.exceptions[0]  # type: ignore[attr-defined]
    return e


def _stderr_tail(errlog: IO[str]) -> str:
    try:
        errlog.flush()
        errlog.seek(0)
        lines = [x.strip() for x in errlog.read()[-20000:].splitlines() if x.strip()]
    except (OSError, ValueError):
        return ""
    if not lines:
        return ""
    last = lines[-1]
    return last if len(last) <= STDERR_TAIL else last[:STDERR_TAIL - 3] + "..."


class McpHub:
    """The configured servers, started on demand; thread-safe, blocking calls."""

    def __init__(self, servers: Mapping[str, McpServer]) -> None:
        self.servers = dict(servers)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._conns: dict[str, _Conn] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._guard = threading.Lock()
        self._closed = False

    # ------------------------------------------------------------------ the blocking facade

    def tools(self, name: str, cancel: threading.Event | None = None) -> tuple[ToolInfo, ...]:
        """The server's tools, starting it if it is not running."""
        server = self._server(name)
        return self._wait(self._connect(server), cancel).tools

    def call(self, name: str, tool: str, arguments: Mapping[str, Any],
             cancel: threading.Event | None = None) -> ToolResult:
        """Call ``tool`` on server ``name``; :class:`Cancelled` when ``cancel`` is set (the
        request is cancelled), :class:`ToolServerError` when the server fails."""
        server = self._server(name)
        return self._wait(self._call(server, tool, dict(arguments)), cancel)

    def running(self) -> list[str]:
        """The servers running now."""
        return [n for n, c in self._conns.items() if c.task is not None and not c.task.done()]

    def stop(self, name: str) -> None:
        """Stop one server (it starts again on the next call)."""
        if self._loop is not None and name in self._conns:
            self._wait(self._drop(name), None)

    def close(self) -> None:
        """Stop every server and the loop; the hub cannot be used after."""
        with self._guard:
            if self._closed:
                return
            self._closed = True
            loop = self._loop
        if loop is None:
            return
        try:
            fut = asyncio.run_coroutine_threadsafe(self._drop_all(), loop)
            fut.result(timeout=STOP_S)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def __enter__(self) -> McpHub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------ helpers

    def _server(self, name: str) -> McpServer:
        server = self.servers.get(name)
        if server is None:
            known = ", ".join(self.servers) or "none are configured: add one under 'mcp_servers:' " \
                                                 "in config.yaml, or run specchat mcp import FILE"
            raise ToolServerError(f"no MCP server named {name!r} (servers: {known})")
        return server

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._guard:
            if self._closed:
                raise ToolServerError("the MCP servers were stopped: the app is closing")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=loop.run_forever, name="specchat-mcp",
                                                daemon=True)
                self._thread.start()
                self._loop = loop
                atexit.register(self.close)
            return self._loop

    def _wait(self, coro: Coroutine[Any, Any, T], cancel: threading.Event | None) -> T:
        loop = self._ensure_loop()
        fut = asyncio.run_coroutine_threadsafe(coro, loop)
        while True:
            try:
                return fut.result(timeout=0.05)
            except concurrent.futures.TimeoutError:
                if cancel is not None and cancel.is_set():
                    fut.cancel()
                    raise Cancelled("the tool call was cancelled") from None

    # --------------------------------------------------------------------- on the loop

    def _lock(self, name: str) -> asyncio.Lock:
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        return lock

    async def _connect(self, server: McpServer) -> _Conn:
        async with self._lock(server.name):
            conn = self._conns.get(server.name)
            if conn is not None and conn.task is not None and not conn.task.done():
                return conn
            if conn is not None:
                await self._drop(server.name)
            return await self._start(server)

    async def _start(self, server: McpServer) -> _Conn:
        if server.command is not None:
            self._check_command(server)
        # Closed when the server is dropped (_drop), not at the end of this function.
        errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        conn = _Conn(server, asyncio.Event(), errlog)
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        conn.task = asyncio.create_task(self._hold(conn, ready))
        self._conns[server.name] = conn
        try:
            await asyncio.wait_for(asyncio.shield(ready), server.timeout_s)
        except asyncio.TimeoutError:
            why = self._why(conn)
            await self._drop(server.name)
            raise ToolServerError(f"MCP server '{server.name}' did not answer within "
                                  f"{server.timeout_s:g} s of starting: stopped{why}") from None
        except asyncio.CancelledError:
            await self._drop(server.name)
            raise
        except BaseException as e:
            why = self._why(conn)
            await self._drop(server.name)
            raise ToolServerError(f"MCP server '{server.name}' failed to start: "
                                  f"{self._reason(e)}{why}") from None
        return conn

    def _check_command(self, server: McpServer) -> None:
        assert server.command is not None
        command = os.path.expanduser(server.command)
        env_path = server.env.get("PATH") if server.env else None
        if shutil.which(command, path=env_path) is None:
            where = "is not a file it can run" if os.sep in command else "is not found on PATH"
            raise ToolServerError(f"MCP server '{server.name}': command {command!r} {where} "
                                  "(is it installed? the config names it under 'mcp_servers')")
        if server.cwd is not None and not os.path.isdir(os.path.expanduser(server.cwd)):
            raise ToolServerError(f"MCP server '{server.name}': cwd {server.cwd!r} is not a "
                                  "folder")

    def _client(self, conn: _Conn) -> Any:
        from mcp import Client, StdioServerParameters
        from mcp.types import Implementation

        from specchat import __version__

        server = conn.server
        info = Implementation(name="specchat", version=__version__)
        if server.command is not None:
            params = StdioServerParameters(
                command=os.path.expanduser(server.command),
                args=[os.path.expanduser(a) if a.startswith("~") else a for a in server.args],
                env=dict(server.env) or None,
                cwd=os.path.expanduser(server.cwd) if server.cwd else None)
            from mcp.client.stdio import stdio_client

            transport: Any = stdio_client(params, errlog=cast(TextIO, conn.errlog))
        else:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            assert server.url is not None
            async def seen(response: Any) -> None:
                if response.status_code >= 400:
                    conn.http_status = response.status_code

            http = httpx2.AsyncClient(headers=dict(server.headers),
                                      timeout=httpx2.Timeout(server.timeout_s,
                                                             read=max(300.0, server.timeout_s)),
                                      event_hooks={"response": [seen]})
            transport = _OwnedHttp(streamable_http_client(server.url, http_client=http), http)
        return Client(transport, client_info=info, read_timeout_seconds=server.timeout_s)

    async def _hold(self, conn: _Conn, ready: asyncio.Future[None]) -> None:
        """Own the client's context for the server's life (the SDK's contexts are entered
        and left in one task)."""
        try:
            async with self._client(conn) as client:
                tools: list[ToolInfo] = []
                cursor = None
                for _ in range(100):  # pages: a server whose cursor never ends cannot hang us
                    page = await client.list_tools(cursor=cursor)
                    tools += [ToolInfo(conn.server.name, t.name, t.description or "",
                                       dict(t.input_schema or {"type": "object"}))
                              for t in page.tools]
                    cursor = page.next_cursor
                    if cursor is None:
                        break
                conn.client, conn.tools = client, tuple(tools)
                if not ready.done():
                    ready.set_result(None)
                await conn.stop.wait()
        except BaseException as e:
            conn.error = e
            if not ready.done():
                ready.set_exception(e)
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
        finally:
            conn.client = None

    async def _call(self, server: McpServer, tool: str, arguments: dict[str, Any]
                    ) -> ToolResult:
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        conn = await self._connect(server)
        name = server.name
        try:
            result = await asyncio.wait_for(conn.client.call_tool(tool, arguments),
                                            server.timeout_s)
        except asyncio.TimeoutError:
            await self._drop(name)
            raise ToolServerError(f"MCP server '{name}': {tool} took more than "
                                  f"{server.timeout_s:g} s: stopped (it starts again on the next "
                                  "call)") from None
        except asyncio.CancelledError:
            raise
        except MCPError as e:
            if e.code not in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
                return ToolResult(f"error: {e.message}", is_error=True)  # the protocol's answer
            why = self._why(conn)
            await self._drop(name)
            what = "took too long" if e.code == REQUEST_TIMEOUT else "stopped during the call"
            raise ToolServerError(f"MCP server '{name}' {what} ({tool}){why}; it starts again "
                                  "on the next call") from None
        except Exception as e:  # junk on the wire (the SDK's validation), a dead pipe
            why = self._why(conn)
            await self._drop(name)
            raise ToolServerError(f"MCP server '{name}' failed during {tool}: "
                                  f"{self._reason(e)}{why}; it starts again on the next "
                                  "call") from None
        from specchat.tools.results import result_text

        return ToolResult(result_text(result), bool(getattr(result, "is_error", False)))

    async def _drop(self, name: str) -> None:
        conn = self._conns.pop(name, None)
        if conn is None:
            return
        conn.stop.set()
        task = conn.task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), STOP_S)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                task.cancel()
            except BaseException:  # the task's own failure: already recorded in conn.error
                pass
        with contextlib.suppress(OSError):
            conn.errlog.close()

    async def _drop_all(self) -> None:
        await asyncio.gather(*(self._drop(n) for n in list(self._conns)),
                             return_exceptions=True)

    @staticmethod
    def _reason(e: BaseException) -> str:
        e = _leaf(e)
        message = getattr(e, "message", None) or str(e) or type(e).__name__
        if isinstance(e, FileNotFoundError):
            message = f"{e.filename or 'the command'} not found"
        elif isinstance(e, OSError) and e.strerror:
            message = e.strerror
        line = " ".join(str(message).split())
        return line if len(line) <= 200 else line[:197] + "..."

    @staticmethod
    def _why(conn: _Conn) -> str:
        if conn.http_status is not None:
            status = conn.http_status
            hint = (": check its 'headers' in config.yaml" if status in (401, 403)
                    else ": check its 'url'" if status in (404, 405) else "")
            return f" (HTTP {status}{hint})"
        tail = _stderr_tail(conn.errlog)
        return f" (its last words: {tail})" if tail else ""


class _OwnedHttp:
    """The Streamable HTTP transport with the HTTP client it was given closed at its end."""

    def __init__(self, inner: Any, http: Any) -> None:
        self._inner = inner
        self._http = http

    async def __aenter__(self) -> Any:
        await self._http.__aenter__()
        return await self._inner.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self._inner.__aexit__(*exc)
        finally:
            await self._http.__aexit__(None, None, None)


def describe_tools(tools: Sequence[ToolInfo]) -> list[str]:
    """One line per tool: its name and the first line of its description."""
    return [f"{t.name}: {t.summary}" if t.summary else t.name for t in tools]
