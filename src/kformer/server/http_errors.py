"""HTTP errors: every failure is ``{"error": "...", "field": ...}`` with its status, never a traceback.

:class:`~kformer.errors.KformerError` subclasses carry their HTTP status (the error table in
:mod:`kformer.errors`); the service adds the few that only HTTP has (413, 401, 504).
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from kformer.errors import BadInput, KformerError

log = logging.getLogger("kformer.server")

RETRY_AFTER_S = 1  # what a 503 tells the client to wait


class BodyTooLarge(BadInput):
    """A request body over ``max_body_bytes`` (HTTP 413)."""

    http_status = 413


class Unauthorized(KformerError):
    """No or a wrong API key (HTTP 401)."""

    http_status = 401


class GatewayTimeout(KformerError):
    """The model did not answer within ``timeout_s`` (HTTP 504)."""

    exit_code = 75
    http_status = 504


class ClientGone(KformerError):
    """The client disconnected before its answer was ready (499, nginx's "client closed request";
    nobody reads it, but the metrics count it)."""

    exit_code = 75
    http_status = 499


class InternalError(KformerError):
    """A bug on the server's side (HTTP 500); the details go to the log, not the client."""

    exit_code = 1
    http_status = 500


def error_response(status: int, message: str, field: str | None = None, headers: dict | None = None) -> JSONResponse:
    headers = dict(headers or {})
    if status == 503:
        headers.setdefault("Retry-After", str(RETRY_AFTER_S))
    if status == 401:
        headers.setdefault("WWW-Authenticate", "Bearer")
    return JSONResponse({"error": message, "field": field}, status_code=status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    """Answer kformer errors, HTTP errors, validation errors and bugs in the one JSON shape."""

    @app.exception_handler(KformerError)
    async def _kformer_error(request: Request, exc: KformerError) -> JSONResponse:
        return error_response(exc.http_status, str(exc), exc.field)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "request refused"
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}; see /docs"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}; see /docs"
        return error_response(exc.status_code, message, None, dict(exc.headers or {}))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = (exc.errors() or [{}])[0]
        field = ".".join(str(part) for part in first.get("loc", ()) if part not in ("body", "path", "query")) or None
        return error_response(422, f"{field or 'request'}: {first.get('msg', 'invalid')}", field)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error answering %s %s", request.method, request.url.path)
        return error_response(500, f"internal error ({type(exc).__name__}); the server log has the details")
