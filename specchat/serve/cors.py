"""Cross-origin requests: which web pages may call the server from a browser.

A browser sends a page's ``Origin`` with every request it makes to another origin, and asks
first (a preflight ``OPTIONS``) before a POST with a JSON body or an ``Authorization`` header,
which is every request the OpenAI SDKs make. By default pages served from this machine —
``http(s)://localhost``, ``127.0.0.1`` or ``[::1]`` on any port — may call it, as Ollama
allows; ``--cors-origin`` adds others (``*``: any page on the web, which can then use the
models of whoever opens it). A page of any other origin gets no ``Access-Control-Allow-Origin``
header, and its request is refused with a 403 before anything runs, so a page cannot make the
server generate even where the browser would hide the answer from it. Requests without an
``Origin`` (curl, the SDKs outside a browser) are not cross-origin and pass untouched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from specchat.serve.api_errors import ApiError
from specchat.serve.wire import dumps

ANY = "*"
LOCAL = re.compile(r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d{1,5})?")
_ORIGIN = re.compile(r"(https?|[a-z][a-z0-9+.-]*-extension)://[^/?#\s]+|null")
METHODS = "GET, POST, OPTIONS"
# What a preflight may ask to send when it names nothing: the headers the OpenAI SDKs send.
SDK_HEADERS = ("authorization, content-type, accept, openai-organization, openai-project, "
               "openai-beta, x-stainless-lang, x-stainless-package-version, x-stainless-os, "
               "x-stainless-arch, x-stainless-runtime, x-stainless-runtime-version, "
               "x-stainless-retry-count, x-stainless-timeout, x-stainless-helper-method")
MAX_AGE = "600"  # seconds a browser may keep a preflight's answer


def check_origin(text: str) -> str:
    """A ``--cors-origin`` value as browsers send it (scheme://host[:port], lower case, no
    path), ``*`` or ``null``; ValueError with the reason otherwise."""
    origin = text.strip().rstrip("/").lower()
    if origin == ANY or _ORIGIN.fullmatch(origin):
        return origin
    raise ValueError(f"{text[:80]!r} is not an origin: write it as a browser sends it, "
                     "scheme://host[:port] (http://example.com:3000), or * for any")


@dataclass(frozen=True)
class CorsPolicy:
    """The origins allowed besides this machine's own pages."""

    origins: frozenset[str] = frozenset()

    @classmethod
    def of(cls, origins: Iterable[str]) -> CorsPolicy:
        return cls(frozenset(check_origin(o) for o in origins))

    @property
    def any(self) -> bool:
        return ANY in self.origins

    def allows(self, origin: str) -> bool:
        o = origin.lower()
        return self.any or o in self.origins or LOCAL.fullmatch(o) is not None


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope.get("headers", ()):
        if k == name:
            return str(v.decode("latin-1"))
    return None


class Cors:
    """ASGI middleware applying a :class:`CorsPolicy` in front of the app."""

    def __init__(self, app: ASGIApp, policy: CorsPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origin = _header(scope, b"origin") if scope["type"] == "http" else None
        if origin is None:
            await self.app(scope, receive, send)
            return
        allowed = self.policy.allows(origin)
        preflight = (scope["method"] == "OPTIONS"
                     and _header(scope, b"access-control-request-method") is not None)
        if not allowed:
            await _refuse(origin, send)
            return
        allow = [(b"access-control-allow-origin", origin.encode("latin-1")),
                 (b"vary", b"Origin")]
        if preflight:
            asked = _header(scope, b"access-control-request-headers")
            headers = [
                *allow, (b"access-control-allow-methods", METHODS.encode()),
                (b"access-control-allow-headers", (asked or SDK_HEADERS).encode("latin-1")),
                (b"access-control-max-age", MAX_AGE.encode()),
                (b"content-length", b"0")]
            await send({"type": "http.response.start", "status": 204, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        expose = [(b"access-control-expose-headers", b"Retry-After")]

        async def send_allowed(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *allow,
                                                  *expose]}
            await send(message)

        await self.app(scope, receive, send_allowed)


async def _refuse(origin: str, send: Send) -> None:
    """A 403 error object, without an allow header: the browser shows the page a network
    error, and nothing was run."""
    error = ApiError(403, f"requests from the web page origin {origin[:100]!r} are not allowed: "
                     "start the server with --cors-origin ORIGIN to allow it",
                     type="permission_error", code="origin_not_allowed")
    body = dumps(error.body()).encode("utf-8")
    await send({"type": "http.response.start", "status": 403,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"vary", b"Origin")]})
    await send({"type": "http.response.body", "body": body})
