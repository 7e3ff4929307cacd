"""``kformer serve --workers N``: N worker processes answering on one port, and their supervisor.

One process answers requests on one core at most: a request's HTTP handling (uvicorn, FastAPI,
JSON) runs under one GIL, beside the inference thread. With ``--workers N`` the command's process
becomes a supervisor that serves nothing itself (it never imports TensorFlow). It

- holds the port (:func:`hold_port`: a port in use fails before any worker starts) and starts N
  workers (``python -c`` :data:`ENTRY`), each a whole service -- its own models, inference thread
  and event loop -- listening on that port; the kernel gives each new connection to one of them;
- gives each worker its share of the cores: ``KFORMER_THREADS`` when set, else the usable cores
  divided by N (at least 1), so that N TensorFlow or ONNX Runtime thread pools do not fight;
- runs prometheus-client's multiprocess mode in a temporary folder it removes at exit, so that
  ``/metrics`` on any worker counts them all (:mod:`kformer.server.metrics`);
- carries out reloads (``POST /v1/models/NAME:reload`` to any worker, or SIGHUP to the
  supervisor) in two phases: every worker prepares the new model, and only when all have does
  each swap it in; if one fails, all keep the old one and the answer says why
  (:mod:`kformer.server.cluster`);
- tells the workers when all are ready (until then ``/v2/health/ready`` says 503 on each);
- passes SIGTERM and SIGINT on to every worker, which stops as a lone service does (readiness 503,
  in-flight requests drain for ``shutdown_grace_s``); what still runs 10 s after that is killed;
- starts a new worker in place of one that dies while serving. A worker that fails to load its
  models at start-up ends the service with its error, as a lone service ends.

A worker whose supervisor is gone shuts down by itself (:class:`kformer.server.cluster.WorkerLink`).
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import shutil
import signal
import site
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from kformer.errors import BadInput, KformerError, Overloaded, Unsupported
from kformer.server.cluster import Relayed, WorkerLink, relay, relayed
from kformer.server.config import SEVERAL_WORKERS, ServeConfig
from kformer.threads import ENV as THREADS_ENV
from kformer.threads import usable_cores

log = logging.getLogger("kformer.server")

ENTRY = "from kformer.server.workers import worker_main; worker_main()"
# Linux spreads new connections evenly over the workers' own listening sockets (SO_REUSEPORT, by a
# hash of each connection's addresses); elsewhere the workers share one socket, and whichever is
# first takes the connections waiting (uvloop accepts every one that waits at once)
REUSE_PORT = sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")
KILL_AFTER_S = 10.0  # workers still running this long after shutdown_grace_s are killed
POLL_S = 0.5


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker serves: the first message on its line."""

    index: int
    models: dict[str, str]
    config: ServeConfig


@dataclass
class Worker:
    """A worker process as the supervisor sees it."""

    index: int
    process: subprocess.Popen
    connection: Connection | None  # None once the process has ended
    ready: bool = False
    failure: tuple | None = None  # the error it reported at start-up (cluster.relay's tuple)


def serve_workers(models: dict[str, str], config: ServeConfig) -> None:
    """Serve ``models`` with ``config.workers`` worker processes on ``config.host:config.port``
    until SIGTERM or SIGINT; raises the start-up error of a worker that could not load its models
    (KeyboardInterrupt after SIGINT, as a lone service does)."""
    Supervisor(models, config).run()


def bind(host: str, port: int, *, reuse_port: bool = False, listen: bool = True) -> socket.socket:
    """A TCP socket bound to ``host:port``, listening when ``listen``; a port in use is BadInput."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        if listen:
            sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise BadInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}", field="port") from None
    return sock


def hold_port(host: str, port: int) -> socket.socket:
    """The supervisor's socket on ``host:port``. With :data:`REUSE_PORT`: bound but not listening
    (so it takes no connection), which only sockets with SO_REUSEPORT -- the workers' own -- can
    share; the port is first bound without it, so that one in use by anything (another
    ``kformer serve --workers`` too) is refused. Otherwise: the listening socket the workers share."""
    if not REUSE_PORT:
        return bind(host, port)
    bind(host, port, listen=False).close()
    return bind(host, port, reuse_port=True, listen=False)


def worker_environment(workers: int, metrics_dir: str) -> dict[str, str]:
    """The workers' environment: this one, with each worker's thread count, the metrics folder,
    and this kformer first on the path."""
    env = dict(os.environ)
    env[THREADS_ENV] = env.get(THREADS_ENV) or str(max(1, usable_cores() // workers))
    for name in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):  # kformer.setup() sizes them again from it
        env.pop(name, None)
    env["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    package_root = str(Path(__file__).resolve().parents[2])  # the folder that holds this kformer
    if package_root not in {str(Path(folder).resolve()) for folder in site.getsitepackages()}:  # a source tree
        env["PYTHONPATH"] = os.pathsep.join([package_root, *filter(None, [env.get("PYTHONPATH")])])
    return env


class Supervisor:
    """Starts, watches, reloads and stops the workers (see the module's description)."""

    def __init__(self, models: dict[str, str], config: ServeConfig):
        self.models, self.config = dict(models), config
        self.workers: list[Worker] = []
        self.started = False  # every worker was ready once
        self.stopping = False
        self.interrupted = False
        self.failure: KformerError | None = None
        self.kill_at = float("inf")
        self.reloads: queue.SimpleQueue = queue.SimpleQueue()  # (worker index or None, request, name or None)
        self.replies: queue.SimpleQueue = queue.SimpleQueue()  # (worker index, kind, ticket, outcome)
        self.tickets = itertools.count(1)

    def run(self) -> None:
        if not SEVERAL_WORKERS:
            raise Unsupported("more than one worker needs Linux or macOS; use {field} 1", field="workers")
        self.listener = hold_port(self.config.host, self.config.port)
        self.metrics_dir = tempfile.mkdtemp(prefix="kformer-metrics-")
        self.env = worker_environment(self.config.workers, self.metrics_dir)
        handlers = {sig: signal.signal(sig, self._signalled) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        try:
            for index in range(self.config.workers):
                if not self.stopping:  # SIGTERM may come while they start
                    self.workers.append(self._start(index))
            threading.Thread(target=self._coordinate, name="kformer-reloads", daemon=True).start()
            self._watch()
        finally:
            for worker in self.workers:
                if worker.process.poll() is None:
                    worker.process.kill()
                    worker.process.wait()
            self.listener.close()
            shutil.rmtree(self.metrics_dir, ignore_errors=True)
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
        if self.failure is not None:
            raise self.failure
        if self.interrupted:
            raise KeyboardInterrupt

    # --- the workers' lives ---------------------------------------------------------------------------

    def _start(self, index: int) -> Worker:
        ours, theirs = socket.socketpair()
        fds = (theirs.fileno(),) if REUSE_PORT else (theirs.fileno(), self.listener.fileno())
        try:
            stderr = sys.stderr.fileno()  # kformer's Python stderr (its fd 2 may be /dev/null)
        except (AttributeError, OSError, ValueError):
            stderr = None
        # a session of its own: a signal to the terminal's process group (Ctrl-C) or to this one's
        # reaches the workers once, passed on by this process, not also directly
        process = subprocess.Popen([sys.executable, "-c", ENTRY, *map(str, fds)], pass_fds=fds, env=self.env,
                                   stderr=stderr, start_new_session=True)
        theirs.close()
        connection = Connection(ours.detach())
        connection.send(WorkerSpec(index, self.models, self.config))
        log.info("worker %d: process %d", index, process.pid)
        return Worker(index, process, connection)

    def _watch(self) -> None:
        """Read the workers' messages until every worker has ended; stop them all when one fails."""
        stop_logged = False
        while True:
            if self.stopping and not stop_logged:
                stop_logged = True
                log.info("shutting down %d workers", len(self.workers))
            live = {worker.connection: worker for worker in self.workers if worker.connection is not None}
            if not live:
                if not self.stopping and self.failure is None:
                    self.failure = Relayed("every worker has exited; the log above says why")
                return
            for connection in wait(list(live), timeout=POLL_S):
                worker = live[connection]
                try:
                    message = connection.recv()
                except (EOFError, OSError):
                    self._ended(worker)
                    continue
                self._receive(worker, message)
            if time.monotonic() > self.kill_at:
                for worker in self.workers:
                    if worker.process.poll() is None:
                        log.error("worker %d did not stop in time: killed", worker.index)
                        worker.process.kill()

    def _receive(self, worker: Worker, message: tuple) -> None:
        kind = message[0]
        if kind == "ready":
            worker.ready = True
            if self.started:  # a worker started in place of one that died
                self._send(worker, ("started",))
            elif all(other.ready for other in self.workers):
                self.started = True
                log.info("ready: %d workers on http://%s:%d/", len(self.workers), self.config.host, self.config.port)
                for other in self.workers:
                    self._send(other, ("started",))
        elif kind == "failed":
            worker.failure = message[1]
        elif kind == "reload":
            self.reloads.put((worker.index, message[1], message[2]))
        else:  # "prepared", "swapped": the reload under way waits for them
            self.replies.put((worker.index, *message))

    def _ended(self, worker: Worker) -> None:
        """``worker``'s process has ended: replace it if it died while serving, else say why it ended."""
        worker.connection.close()
        worker.connection = None
        code = worker.process.wait()
        from prometheus_client.multiprocess import mark_process_dead

        mark_process_dead(worker.process.pid, self.metrics_dir)  # its live gauges no longer count
        if self.stopping:
            if code != 0:
                log.warning("worker %d exited with status %d", worker.index, code)
            return
        if worker.ready:
            log.error("worker %d (process %d) exited with status %d; starting a new one", worker.index,
                      worker.process.pid, code)
            self.workers[worker.index] = self._start(worker.index)
            return
        error = relayed(worker.failure) if worker.failure else Relayed(
            f"worker {worker.index} exited with status {code} before its models were loaded; the log above says why")
        if self.started:
            log.error("worker %d could not start again (%s); serving with the others", worker.index, error)
            return
        self.failure = error
        self._stop()

    def _signalled(self, sig: int, frame: Any) -> None:
        """SIGHUP reloads every model; SIGTERM and SIGINT are passed on to the workers (a second
        SIGINT, as to a lone service, stops them without waiting). Nothing is logged here: a
        signal handler that writes to the log may interrupt a write to it."""
        if sig == signal.SIGHUP:
            self.reloads.put((None, None, None))  # SimpleQueue.put may be called from a signal handler
            return
        if sig == signal.SIGINT:
            self.interrupted = True
        self._stop(sig)

    def _stop(self, sig: int = signal.SIGTERM) -> None:
        """Pass ``sig`` on to every worker; stop accepting connections on the port."""
        if not self.stopping:
            self.stopping = True
            self.kill_at = time.monotonic() + self.config.shutdown_grace_s + KILL_AFTER_S
            self.listener.close()  # the workers' sockets close as they stop: then new connections are refused
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.process.send_signal(sig)

    def _send(self, worker: Worker, message: tuple) -> bool:
        connection = worker.connection
        if connection is None:
            return False
        try:
            connection.send(message)
        except OSError:
            return False
        return True

    # --- reloads (on a thread of their own, one at a time) -----------------------------------------------

    def _coordinate(self) -> None:
        while True:
            requester, request, name = self.reloads.get()
            try:
                outcome = [self._reload(one) for one in ([name] if name else self.models)][-1]
            except Exception as exc:  # a bug: the reload's caller gets a 500, later reloads still run
                log.exception("reloading %s failed", name or "every model")
                outcome = "error", relay(exc)
            if requester is not None:
                self._send(self.workers[requester], ("answer", request, outcome))

    def _reload(self, name: str) -> tuple:
        """Reload ``name`` in every worker, or in none; the outcome a worker's reload answers with."""
        workers = list(self.workers)
        if self.stopping or not self.started or not all(worker.ready and worker.connection for worker in workers):
            why = "shutting down" if self.stopping else "not every worker is ready yet; retry shortly"
            return "error", relay(Overloaded(f"cannot reload model '{name}': the service is {why}"))
        ticket = next(self.tickets)
        prepared = self._ask(workers, ("prepare", ticket, name), ticket)
        failed = [(index, outcome[1]) for index, outcome in prepared.items() if outcome[0] != "ok"]
        if failed:
            index, error = failed[0]
            why = str(relayed(error))
            for worker in workers:
                self._send(worker, ("keep", ticket, name, why))
            log.error("reloading model %s failed in worker %d, so every worker keeps the old one: %s", name, index, why)
            return "error", error
        swapped = self._ask(workers, ("swap", ticket, name), ticket)
        version = next(outcome[1] for outcome in prepared.values())
        previous = next((outcome[1] for outcome in swapped.values() if outcome[0] == "ok"), None)
        log.info("model %s: version %s swapped in by %d workers (was %s)", name, version, len(workers), previous)
        return "ok", version, previous

    def _ask(self, workers: list[Worker], message: tuple, ticket: int) -> dict[int, tuple]:
        """Send ``message`` to ``workers``; their outcomes by index (an error for one that ended)."""
        gone = ("error", relay(Relayed("a worker exited during the reload", http_status=503)))
        outcomes = {worker.index: gone for worker in workers if not self._send(worker, message)}
        while len(outcomes) < len(workers):
            try:
                index, _, answered, outcome = self.replies.get(timeout=POLL_S)
            except queue.Empty:
                outcomes.update({worker.index: gone for worker in workers if worker.connection is None})
                continue
            if answered == ticket:
                outcomes[index] = outcome
        return outcomes


def worker_main() -> None:
    """A worker process, ``python -c ENTRY CONTROL_FD [LISTEN_FD]`` (started by :class:`Supervisor`):
    it listens on a socket of its own (:data:`REUSE_PORT`) or on the supervisor's, LISTEN_FD."""
    from kformer.environment import setup, silence_native_stderr

    silence_native_stderr()
    connection = Connection(int(sys.argv[1]))
    spec: WorkerSpec = connection.recv()
    logging.basicConfig(level=logging.INFO, format=f"%(levelname)s:     [worker {spec.index}] %(message)s",
                        stream=sys.stderr)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the supervisor takes SIGHUP: a reload of every worker
    link, code = WorkerLink(spec.index, connection), 0
    try:
        setup()
        from kformer.server.app import create_app
        from kformer.server.runner import run_app

        config = spec.config
        listening = (bind(config.host, config.port, reuse_port=True) if REUSE_PORT
                     else socket.socket(fileno=int(sys.argv[2])))
        run_app(create_app(spec.models, config, link=link), sockets=[listening])
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group; the supervisor stops us too
        pass
    except Exception as exc:
        if not isinstance(exc, KformerError):
            log.exception("worker %d failed", spec.index)
        link.send(("failed", relay(exc)))
        code = exc.exit_code if isinstance(exc, KformerError) else 1
    sys.exit(code)
