"""What every route module answers with: JSON straight from ``json.dumps``, and the wait for a
client that goes away."""

from __future__ import annotations

import json

from fastapi import Request
from fastapi.responses import Response


async def disconnected(request: Request) -> None:
    """Returns when the client has gone (after the body was read, the next ASGI message is the
    disconnect; servers send it once the response is complete, or when the connection drops)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def json_response(body: dict, status_code: int = 200, headers: dict | None = None) -> Response:
    """JSON straight from ``json.dumps`` (model outputs are plain JSON already; FastAPI's encoder
    would walk every value again)."""
    return Response(json.dumps(body, ensure_ascii=False, allow_nan=False), status_code=status_code,
                    headers=headers, media_type="application/json")
