"""Slow and oversized requests: uvicorn's HTTP protocol with a read deadline and a head limit.

uvicorn closes an idle kept-alive connection (``timeout_keep_alive``) but not a client that
trickles its request in: one header byte a second holds a connection, and its file descriptor,
for ever ("slowloris"). :func:`guarded_protocol` wraps uvicorn's protocol class so that

- a request must arrive whole, head and body, within ``read_timeout_s`` of the connection
  opening (or of the previous answer on a kept-alive connection); otherwise the connection is
  closed, and a request the app had begun reading ends as a client that went away;
- a request head (request line and headers) over :data:`MAX_HEAD_BYTES` gets
  ``431 Request Header Fields Too Large`` and the connection is closed.

:func:`uvicorn_config` is the uvicorn configuration ``kformer serve`` runs with.

The subclass uses uvicorn internals (``cycle``, ``cycle.more_body``, ``on_response_complete``), not
public API, so ``pyproject.toml`` pins uvicorn to the minor version tests/test_server_faults.py
passes with (0.55). An ASGI middleware cannot do this job: uvicorn calls the app only once a
request's head has arrived whole, so neither a trickling head nor its size reaches it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import uvicorn

    from kformer.server.config import ServeConfig

MAX_HEAD_BYTES = 64 * 1024
KEEP_ALIVE_S = 5.0  # idle kept-alive connections are closed after this (uvicorn's default)
_TOO_LARGE_BODY = b'{"error": "the request head is over 65,536 bytes, the limit", "field": null}\n'
TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
             b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(_TOO_LARGE_BODY), _TOO_LARGE_BODY))


def guarded_protocol(read_timeout_s: float, base: type | None = None) -> type:
    """uvicorn's HTTP protocol class (``base``; default: httptools when installed, else h11)
    with the read deadline and head limit described above."""
    if base is None:
        from uvicorn.protocols.http.auto import AutoHTTPProtocol

        base = AutoHTTPProtocol

    class GuardedProtocol(base):
        _deadline = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def _arm(self) -> None:
            """Start the clock for the next request; ``_waiting_for`` is the cycle before it."""
            self._disarm()
            self._waiting_for, self._head_bytes = self.cycle, 0
            self._deadline = self.loop.call_later(read_timeout_s, self._timed_out)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._deadline is None:
                return
            cycle = self.cycle
            if cycle is self._waiting_for:  # the head is still incomplete
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                    self.transport.write(TOO_LARGE)
                    self._close()
            elif not cycle.more_body:  # the whole request is in
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _timed_out(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self._close()

        def _close(self) -> None:
            self._disarm()
            self.transport.close()

    GuardedProtocol.__name__ = GuardedProtocol.__qualname__ = f"Guarded{base.__name__}"
    return GuardedProtocol


def uvicorn_config(app, config: ServeConfig, **overrides: Any) -> uvicorn.Config:
    """The ``uvicorn.Config`` of ``kformer serve`` for ``app``: host, port, graceful shutdown,
    keep-alive, and the guarded protocol with ``config.read_timeout_s``."""
    import uvicorn

    settings: dict[str, Any] = dict(
        host=config.host, port=config.port, access_log=config.access_log, log_level="info",
        timeout_graceful_shutdown=config.shutdown_grace_s, timeout_keep_alive=KEEP_ALIVE_S, lifespan="on",
        http=guarded_protocol(config.read_timeout_s),
    )
    return uvicorn.Config(app, **{**settings, **overrides})
