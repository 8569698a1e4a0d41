"""The HTTP routes: OpenAI's ``/v1/models`` (and ``/v1/models/{id}``), ``/v1/chat/completions``,
``/v1/completions`` and ``/v1/responses`` (also without the ``/v1`` prefix, as llama-server
answers them), llama-server's ``/infill`` (fill-in-the-middle, in its own shape) and
``/health``; web pages' cross-origin requests pass through ``cors.py`` first.

Every failure a client can cause is an OpenAI error object with its status, never a traceback.
A handler reads the body up to a limit (413 beyond it), checks it, queues the generation and
watches its connection: a client that goes away cancels its generation, queued or running.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from specchat.engine.decode.events import TokenEvent
from specchat.serve.api_errors import NOT_FOUND, ApiError, bad_request
from specchat.serve.cors import Cors, CorsPolicy
from specchat.serve.job import Failed, Finished, Job, Started
from specchat.serve.parse import (
    GenerationRequest,
    chat_request,
    completion_request,
    infill_request,
)
from specchat.serve.prompt import generic_tools, reply_start, tool_names
from specchat.serve.replies import InfillWriter, ReplyWriter
from specchat.serve.responses_request import ResponseStore, responses_request
from specchat.serve.responses_writer import ResponsesWriter
from specchat.serve.wire import DONE, dumps, error_event, event
from specchat.serve.worker import ModelHost, Served

DEFAULT_MAX_BODY = 8 * 1024 * 1024  # bytes: a long document fits many times over
Writer = ReplyWriter | InfillWriter | ResponsesWriter


class JSONBody(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumps(content).encode("utf-8")


def error_response(e: ApiError) -> Response:
    return JSONBody(e.body(), status_code=e.status, headers=e.headers())


class EventStream(Response):
    """Server-sent events from an async iterator of ready-made ``data:`` lines. Unlike
    Starlette's StreamingResponse it never reads the connection: the handler's
    :class:`DisconnectWatch` does, and cancels the generation."""

    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[bytes], on_close: Callable[[], None]) -> None:
        # Not Response.__init__: its empty body would be sent as "Content-Length: 0".
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.events = events
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200,
                        "headers": self.raw_headers})
            async for data in self.events:
                await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # servers of ASGI 2.4 say a vanished client so
            pass
        finally:
            self.on_close()


class DisconnectWatch:
    """Waits on the connection after the body was read: its only news can be that the client
    went away, which cancels the job (the engine stops at its next step)."""

    def __init__(self, request: Request, job: Job) -> None:
        self.job = job
        self.task = asyncio.ensure_future(self._watch(request.receive))

    async def _watch(self, receive: Receive) -> None:
        try:
            while (await receive())["type"] != "http.disconnect":
                pass
        except Exception:  # a connection that failed is gone too
            pass
        self.job.cancel.set()

    def stop(self) -> None:
        self.task.cancel()


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    data = bytearray()
    async for part in request.stream():
        data += part
        if len(data) > limit:
            raise _too_large(limit)
    try:
        doc = json.loads(data, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise bad_request(f"the body is not valid JSON: {str(e)[:200]}", code="invalid_json") \
            from None
    if not isinstance(doc, dict):
        raise bad_request("the body must be a JSON object", code="invalid_json")
    return doc


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _too_large(limit: int) -> ApiError:
    return ApiError(413, f"the request body is over the server's limit of {limit:,} bytes",
                    code="request_too_large")


def build_app(host: ModelHost, max_body: int = DEFAULT_MAX_BODY,
              cors: CorsPolicy | None = None) -> Starlette:
    kept = ResponseStore()  # earlier responses, for previous_response_id

    def model_object(name: str) -> dict[str, Any]:
        # The other names it answers to are not listed: they include the files' paths.
        return {"id": name, "object": "model", "created": 0, "owned_by": "specchat",
                "specchat": {"state": host.state, "id": host.model_id}}

    async def models(request: Request) -> Response:
        return JSONBody({"object": "list", "data": [model_object(host.model_id)]})

    async def model(request: Request) -> Response:
        """OpenAI's model retrieval: the served model by its id or any name it answers to."""
        name = request.path_params["name"]
        host.check_model(name)
        return JSONBody(model_object(name))

    async def health(request: Request) -> Response:
        served = host.check_ready()
        body = {"status": "ok", "model": host.model_id, "queued": host.queued, **host.counts,
                "slots": host.parallel}
        if served.passes is not None:  # the slots' decodes: passes run, and those shared
            body["passes"] = served.passes.passes
            body["shared_passes"] = served.passes.shared
        return JSONBody(body)

    async def chat(request: Request) -> Response:
        return await _generate(request, chat_request)

    async def completions(request: Request) -> Response:
        return await _generate(request, completion_request)

    async def infill(request: Request) -> Response:
        return await _generate(request, infill_request)

    async def responses(request: Request) -> Response:
        doc = await read_json(request, max_body)
        asked = responses_request(doc, host.defaults, kept)

        def writer(req: GenerationRequest, served: Served,
                   pieces: dict[int, bytes] | None) -> Writer:
            generic = generic_tools(served.engine, req)
            return ResponsesWriter(asked, host.model_id, served.setup, kept,
                                   tools=tool_names(req), reply_start=reply_start(req, generic),
                                   with_fates=req.fates, generic=generic, pieces=pieces)

        return await _run(request, asked.generation, writer)

    def standard_writer(req: GenerationRequest, served: Served,
                        pieces: dict[int, bytes] | None) -> Writer:
        if req.kind == "infill":
            return InfillWriter(host.model_id, served.setup, req.fates, pieces=pieces)
        generic = generic_tools(served.engine, req)
        return ReplyWriter(req.kind == "chat", host.model_id, served.setup, req.fates,
                           req.include_usage, pieces=pieces, tools=tool_names(req),
                           reply_start=reply_start(req, generic), generic=generic)

    async def _generate(request: Request,
                        parse: Callable[[dict[str, Any], Any], GenerationRequest]) -> Response:
        doc = await read_json(request, max_body)
        return await _run(request, parse(doc, host.defaults), standard_writer)

    async def _run(request: Request, req: GenerationRequest,
                   make_writer: Callable[[GenerationRequest, Served, dict[int, bytes] | None],
                                         Writer]) -> Response:
        host.check_model(req.model)
        job = host.submit(req)
        watch = DisconnectWatch(request, job)
        try:
            first = await _first(job)
        except BaseException:
            watch.stop()
            job.cancel.set()
            raise
        served = host.served
        if served is None:  # closed meanwhile
            watch.stop()
            raise ApiError(503, "the server is shutting down", type="service_unavailable")
        pieces = job.pieces if req.settings.logprobs is not None else None
        writer = make_writer(req, served, pieces)
        if isinstance(first, (Failed, Finished)):
            watch.stop()
            if isinstance(first, Failed):
                raise first.error
            # cancelled before it began: its client is gone (or the server stops)
            raise ApiError(503, "the request was cancelled", type="service_unavailable",
                           code="cancelled")
        if req.stream:
            def closed() -> None:
                watch.stop()
                job.cancel.set()  # a no-op once finished; else the stream was cut
            return EventStream(_stream(job, writer), closed)
        try:
            return JSONBody(await _whole(job, writer))
        finally:
            watch.stop()
            job.cancel.set()

    routes = [Route("/v1/models", models, methods=["GET"]),
              Route("/models", models, methods=["GET"]),
              Route("/v1/models/{name:path}", model, methods=["GET"]),
              Route("/models/{name:path}", model, methods=["GET"]),
              Route("/health", health, methods=["GET"]),
              Route("/v1/chat/completions", chat, methods=["POST"]),
              Route("/chat/completions", chat, methods=["POST"]),
              Route("/v1/completions", completions, methods=["POST"]),
              Route("/completions", completions, methods=["POST"]),
              Route("/v1/responses", responses, methods=["POST"]),
              Route("/responses", responses, methods=["POST"]),
              Route("/infill", infill, methods=["POST"])]
    handlers: dict[Any, Any] = {ApiError: _api_error, HTTPException: _http_error,
                                Exception: _internal_error}
    middleware = [Middleware(Cors, policy=cors or CorsPolicy())]
    return Starlette(routes=routes, exception_handlers=handlers, middleware=middleware)


async def _first(job: Job) -> Started | Finished | Failed:
    """Wait for the job to start (the prompt fits), fail or be cancelled in the queue."""
    while True:
        items = await job.next()
        for i, item in enumerate(items):
            if isinstance(item, (Started, Finished, Failed)):
                job.unread(items[i + 1:])  # the first tokens may have come with it
                return item


async def _stream(job: Job, writer: Writer) -> AsyncIterator[bytes]:
    def sse(doc: dict[str, Any]) -> bytes:
        return event(doc, doc["type"] if writer.named_events else None)

    for chunk in writer.first_chunks():
        yield sse(chunk)
    while True:
        items = await job.next()
        tokens = [i for i in items if isinstance(i, TokenEvent)]
        if tokens:
            for chunk in writer.chunks(tokens):
                yield sse(chunk)
        for item in items:
            if isinstance(item, Failed):
                yield error_event(item.error, writer.named_events)
                if writer.ends_with_done:
                    yield DONE
                return
            if isinstance(item, Finished):
                for chunk in writer.final_chunks(item):
                    yield sse(chunk)
                if writer.ends_with_done:
                    yield DONE
                return


async def _whole(job: Job, writer: Writer) -> dict[str, Any]:
    tokens: list[TokenEvent] = []
    while True:
        for item in await job.next():
            if isinstance(item, TokenEvent):
                tokens.append(item)
            elif isinstance(item, Failed):
                raise item.error
            elif isinstance(item, Finished):
                return writer.response(tokens, item)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404 and 405, as error objects."""
    assert isinstance(exc, HTTPException)
    what = {404: f"no route {request.url.path[:200]!r}: this server answers /v1/models, "
                 "/v1/chat/completions, /v1/completions, /v1/responses and /infill",
            405: f"{request.method} is not allowed on {request.url.path[:200]!r}"}
    message = what.get(exc.status_code, str(exc.detail))
    kind = NOT_FOUND if exc.status_code == 404 else "invalid_request_error"
    return error_response(ApiError(exc.status_code, message, type=kind))


async def _internal_error(request: Request, exc: Exception) -> Response:
    """A bug: the client gets a line; Starlette raises it on, so the log has its traceback."""
    return error_response(ApiError(500, f"internal error: {type(exc).__name__}",
                                   type="server_error", code="internal_error"))
