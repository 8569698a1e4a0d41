"""Errors as OpenAI's API returns them: an HTTP status and ``{"error": {message, type, param,
code}}``, so a client's own error handling (the ``openai`` package's exceptions) reads ours."""

from __future__ import annotations

from typing import Any

# OpenAI's error types by status (what its clients key on).
INVALID_REQUEST = "invalid_request_error"
NOT_FOUND = "not_found_error"
SERVER_ERROR = "server_error"
UNAVAILABLE = "service_unavailable"


class ApiError(Exception):
    """A request that cannot be served, said to the client; never a traceback."""

    def __init__(self, status: int, message: str, *, type: str = INVALID_REQUEST,
                 param: str | None = None, code: str | None = None,
                 retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.retry_after = retry_after  # seconds, for a 503 (Retry-After header)

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}


def bad_request(message: str, param: str | None = None, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, param=param, code=code)


def loading() -> ApiError:
    return ApiError(503, "the model is still loading: try again in a few seconds",
                    type=UNAVAILABLE, code="model_loading", retry_after=5)
