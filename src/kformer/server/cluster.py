"""One worker's line to its supervisor (``kformer serve --workers N``), and errors sent along it.

Each worker is a whole service -- its own models, inference thread and event loop -- that shares
the listening socket with its siblings. What must stay the same in all of them goes through the
supervisor (:mod:`kformer.server.workers`) over a socket pair, as pickled tuples:

===========================  ==========================================================================
worker -> supervisor         ``("ready",)``; ``("failed", error)`` at start-up; ``("reload", request, name)``;
                             ``("prepared", ticket, outcome)``; ``("swapped", ticket, outcome)``
supervisor -> worker         ``("started",)`` once every worker is ready; ``("prepare", ticket, name)``;
                             ``("swap", ticket, name)``; ``("keep", ticket, name, why)``;
                             ``("answer", request, outcome)``
===========================  ==========================================================================

An outcome is ``("ok", ...)`` or ``("error", error)``, an error being :func:`relay`'s plain tuple.

A reload has two phases: every worker loads and warms the folder again (``prepare``) while it
keeps answering; only when all have does each swap the new model in (``swap``). If any failed,
every worker keeps the old model (``keep``) and the reload's answer says why. A worker whose
supervisor is gone (its end of the pair closes: killed, crashed) shuts down as at SIGTERM, so
no worker outlives it.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from kformer.errors import KformerError

log = logging.getLogger("kformer.server")

RELOAD_TIMEOUT_S = 600.0  # a reload whose supervisor never answers ends as 504 after this


class Relayed(KformerError):
    """An error raised in another process of the service, with its message, field and statuses."""

    def __init__(self, message: str, *, field: str | None = None, exit_code: int = 1, http_status: int = 500):
        super().__init__(message, field=field)
        self.exit_code, self.http_status = exit_code, http_status


def relay(exc: BaseException) -> tuple[str, str | None, int, int]:
    """``exc`` as a tuple that any process can unpickle: (message, field, exit status, HTTP status).
    A kformer error keeps its message and statuses; anything else is an internal error (500)."""
    if isinstance(exc, KformerError):
        return exc.template, exc.field, exc.exit_code, exc.http_status
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    return f"internal error: {type(exc).__name__}: {first}", None, 1, 500


def relayed(info: tuple[str, str | None, int, int]) -> Relayed:
    """The error :func:`relay` sent, to raise here."""
    message, field, exit_code, http_status = info
    return Relayed(message, field=field, exit_code=exit_code, http_status=http_status)


class WorkerLink:
    """A worker's end of the line to its supervisor: answers the supervisor's requests on a
    thread of its own and asks it for reloads (:class:`kformer.server.service.Service` holds it).
    ``on_gone`` is called when the supervisor is gone and the service is not already stopping
    (default: SIGTERM to this process, which then stops as at the supervisor's SIGTERM)."""

    def __init__(self, index: int, connection: Any, on_gone: Callable[[], None] | None = None):
        self.index = index  # this worker's number, 0 to N-1 (the X-Kformer-Worker header)
        self._on_gone = on_gone or (lambda: os.kill(os.getpid(), signal.SIGTERM))
        self.started = threading.Event()  # every worker has loaded its models once
        self._connection = connection  # a multiprocessing.connection.Connection
        self._send_lock = threading.Lock()
        self._requests = itertools.count()
        self._pending: dict[int, Future] = {}
        self._prepared: dict[int, Any] = {}  # ticket -> the Served a "prepare" loaded
        self._service: Any = None

    def attach(self, service: Any) -> None:
        """Start answering the supervisor for ``service``, and tell it once the models are loaded."""
        self._service = service
        threading.Thread(target=self._listen, name="kformer-link", daemon=True).start()
        threading.Thread(target=self._report_ready, name="kformer-link-ready", daemon=True).start()

    def send(self, message: tuple) -> None:
        """Send ``message`` to the supervisor (nothing happens when it is gone: :meth:`_listen` sees to that)."""
        try:
            with self._send_lock:
                self._connection.send(message)
        except OSError:
            pass

    def reload(self, name: str) -> tuple[str, str | None]:
        """Reload ``name`` in every worker (blocks: the event loop calls it on a thread);
        ``(version, previous version)``, or the error of the first worker that failed."""
        request, future = next(self._requests), Future()
        self._pending[request] = future
        self.send(("reload", request, name))
        try:
            outcome = future.result(timeout=RELOAD_TIMEOUT_S)
        except TimeoutError:
            raise Relayed(f"the reload did not finish within {RELOAD_TIMEOUT_S:g} s", http_status=504) from None
        finally:
            self._pending.pop(request, None)
        if outcome[0] != "ok":
            raise relayed(outcome[1])
        return outcome[1], outcome[2]

    # --- the link's threads -----------------------------------------------------------------------

    def _report_ready(self) -> None:
        self._service.loaded.wait()
        if self._service.failed is None:  # a failure is reported as the process ends (kformer.server.workers)
            self.send(("ready",))

    def _listen(self) -> None:
        """Handle the supervisor's messages until it closes the line, then shut this worker down."""
        while True:
            try:
                message = self._connection.recv()
            except (EOFError, OSError):
                break
            kind, *rest = message
            if kind == "prepare":
                threading.Thread(target=self._prepare, args=rest, name="kformer-reload", daemon=True).start()
            elif kind == "swap":
                self._swap(*rest)
            elif kind == "keep":
                ticket, name, why = rest
                self._prepared.pop(ticket, None)
                self._service.registry.keep(name, why)
            elif kind == "answer":
                future = self._pending.get(rest[0])
                if future is not None and not future.done():
                    future.set_result(rest[1])
            elif kind == "started":
                self.started.set()
        gone = ("error", relay(Relayed("the service is shutting down", http_status=503)))
        for future in list(self._pending.values()):
            if not future.done():
                future.set_result(gone)
        if not self._service.shutting_down:
            log.error("worker %d: the supervisor is gone; shutting down", self.index)
            self._on_gone()

    def _prepare(self, ticket: int, name: str) -> None:
        try:
            served = self._service.registry.prepare(name)
        except Exception as exc:  # logged and remembered by the registry
            self.send(("prepared", ticket, ("error", relay(exc))))
            return
        self._prepared[ticket] = served
        self.send(("prepared", ticket, ("ok", served.version)))

    def _swap(self, ticket: int, name: str) -> None:
        served = self._prepared.pop(ticket, None)
        if served is None:
            self.send(("swapped", ticket, ("error", relay(Relayed(f"worker {self.index} holds no new {name}")))))
            return
        old = self._service.registry.swap(name, served)
        self.send(("swapped", ticket, ("ok", old.version if old else None)))
