"""API-key check: ``Authorization: Bearer <key>``, compared in constant time."""

from __future__ import annotations

import hmac

from fastapi import Request

from kformer.server.http_errors import Unauthorized


def bearer_check(key: str | None):
    """A FastAPI dependency that lets a request through only with the right key (or no key set)."""
    expected = key.encode() if key else None

    async def require_key(request: Request) -> None:
        if expected is None:
            return
        scheme, _, presented = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(presented.strip().encode(), expected):
            raise Unauthorized("missing or wrong API key; send the header Authorization: Bearer <key>", field="authorization")

    return require_key
