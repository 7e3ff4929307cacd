"""Running an app under uvicorn as ``kformer serve`` does: in this process, or as one worker of many.

:func:`run_app` is the one place that wires the service's life to uvicorn's: readiness turns 503
as soon as SIGTERM (or SIGINT) arrives, in-flight requests drain for ``shutdown_grace_s``, and a
model that fails to load at start-up ends the process with that error. ``kformer serve`` calls it
with the port to bind; each worker of ``kformer serve --workers N`` calls it with the socket its
supervisor bound (:mod:`kformer.server.workers`).
"""

from __future__ import annotations

import signal
import socket
from typing import TYPE_CHECKING

from kformer.server.protocol import uvicorn_config

if TYPE_CHECKING:
    from fastapi import FastAPI


def run_app(app: FastAPI, sockets: list[socket.socket] | None = None) -> None:
    """Serve ``app`` (from :func:`kformer.server.create_app`) until SIGTERM or SIGINT, on its
    config's host and port or on ``sockets`` already listening. Raises the error of a start-up
    load that failed; returns after a graceful shutdown."""
    import uvicorn

    service = app.state.service

    class Server(uvicorn.Server):
        """uvicorn, plus: readiness turns 503 at SIGTERM; a failed start-up load ends the process."""

        def handle_exit(self, sig, frame) -> None:
            service.begin_shutdown()
            super().handle_exit(sig, frame)

        async def on_tick(self, counter: int) -> bool:
            return service.failed is not None or await super().on_tick(counter)

    server = Server(uvicorn_config(app, service.config))
    # uvicorn restores the handler it found and then re-raises SIGTERM: a no-op one makes the exit 0
    signal.signal(signal.SIGTERM, lambda sig, frame: None)
    server.run(sockets=sockets)
    if service.failed is not None:
        raise service.failed
