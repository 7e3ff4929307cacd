"""Typed settings of the REST service (``kformer serve``'s options), with their limits checked."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from kformer.auto import AUTO, Auto
from kformer.errors import BadInput

MAX_WORKERS = 64  # each worker holds its own copy of every model
SEVERAL_WORKERS = os.name == "posix"  # more than one worker (kformer.server.workers) needs Linux or macOS
AUTO_WORKERS_CAP = 4  # each worker holds its own copy of every model: ~1-1.4 GB resident for a Keras one
AUTO_WORKERS_RULE = f"one per usable CPU core, at most {AUTO_WORKERS_CAP} (1 on one core)"


def auto_workers() -> int:
    """``workers="auto"`` (``kformer serve``'s default): one worker process per usable CPU core
    (:func:`kformer.threads.usable_cores`: the affinity mask where the OS has one, else
    ``os.cpu_count()``, capped by a cgroup CPU quota), at most :data:`AUTO_WORKERS_CAP`; 1 on a
    one-core machine, and 1 where more than one worker is unsupported (not Linux or macOS).

    Why more than one: one process answers on one core at most (its HTTP handling runs under one
    GIL). Measured by bench.serve_workers, 2026-12-04 (BENCHMARKS.md, "Serving with workers"), on
    2 cores at 64 clients: ``--workers 2`` reached 64 % (ONNX) / 88 % (Keras) of the raw model's
    throughput against 41 % / 51 % for one worker, with a lower p99 at every client level (1 to 64).
    Why at most 4: each worker loads its own copy of every model, about 1-1.4 GB resident for a
    Keras model; the cap bounds that memory (only 1 and 2 workers on 2 cores were measured).
    """
    from kformer import threads

    if not SEVERAL_WORKERS:
        return 1
    return max(1, min(threads.usable_cores(), AUTO_WORKERS_CAP))


@dataclass(frozen=True)
class ServeConfig:
    """How the service batches, limits and protects requests. Defaults are ``kformer serve``'s.

    Attributes:
        host, port: where uvicorn listens (127.0.0.1 unless told otherwise).
        max_batch: most instances the inference thread gives the model in one call.
        batch_wait_ms: how long the first request of a batch waits for company while more requests
            are arriving; 0 (the default): never -- a batch is what queued while the previous model
            call ran, so batches grow with the load and a request never waits for a timer.
        max_queue: most requests waiting for the inference thread; more get 503 + Retry-After.
        timeout_s: a request not answered within this gets 504 (and is skipped if still queued).
        max_body_bytes: larger request bodies get 413.
        max_instances: more instances in one request get 422.
        max_chars: a longer instance gets 422.
        api_key_env: name of an environment variable holding the API key; None = no auth.
        cors_origins: origins allowed by CORS; empty = no CORS headers at all.
        batching: False answers each request with its own model call (the naive baseline).
        shutdown_grace_s: on SIGTERM, how long in-flight requests may take to finish.
        read_timeout_s: a client must send its whole request (head and body) within this many
            seconds of connecting or of its previous answer, else the connection is closed
            (slow clients; :mod:`kformer.server.protocol`).
        access_log: uvicorn's per-request log lines.
        runtime: where classifiers' ``:predict`` runs: ``keras``, ``onnx`` (converted at load) or
            ``onnx-int8`` (converted, then 8-bit weights); ``:explain`` still uses the Keras model
            (:mod:`kformer.tasks.classify.runtimes`). Models given already loaded keep the
            runtime they were loaded with.
        freeze_heap: once the models are loaded (and after each reload), collect the garbage and
            freeze the rest out of Python's garbage collector (:func:`kformer.server.registry.settle_heap`).
            ``kformer serve`` turns it on; off in Python, where the process is the caller's.
        workers: processes serving the one port (``kformer serve --workers N``), each with its own
            models, inference thread and share of the cores; more than 1 puts the HTTP handling
            of requests on more than one core (:mod:`kformer.server.workers`). ``"auto"`` (the
            default) becomes :func:`auto_workers` here, when the config is made: one per usable CPU
            core, at most 4. :func:`create_app` serves in the caller's process and ignores it.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    max_batch: int = 32
    batch_wait_ms: float = 0.0
    max_queue: int = 256
    timeout_s: float = 10.0
    max_body_bytes: int = 1_048_576
    max_instances: int = 64
    max_chars: int = 10_000
    api_key_env: str | None = None
    cors_origins: tuple[str, ...] = ()
    batching: bool = True
    shutdown_grace_s: float = 30.0
    read_timeout_s: float = 10.0
    access_log: bool = False
    runtime: str = "keras"
    freeze_heap: bool = False
    workers: int | Auto = AUTO

    def __post_init__(self) -> None:
        if self.workers == AUTO:
            object.__setattr__(self, "workers", auto_workers())
        for spec in fields(self):
            value = getattr(self, spec.name)
            if spec.type in ("int", "int | Auto") and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise BadInput(f"{{field}} must be a whole number of at least 1, not {value!r}", field=spec.name)
            if spec.type == "float" and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0
                                         or (value == 0 and spec.name != "batch_wait_ms")):
                raise BadInput(f"{{field}} must be a positive number, not {value!r}", field=spec.name)
        from kformer.tasks.classify.runtimes import check_runtime

        check_runtime(self.runtime)
        if self.port > 65535:
            raise BadInput(f"{{field}} must be at most 65535, not {self.port}", field="port")
        if self.workers > MAX_WORKERS:
            raise BadInput(f"{{field}} must be at most {MAX_WORKERS}, not {self.workers}", field="workers")

    def api_key(self) -> str | None:
        """The API key from ``api_key_env`` (None without one); a missing or empty variable is an error."""
        if not self.api_key_env:
            return None
        key = os.environ.get(self.api_key_env, "")
        if not key:
            raise BadInput(f"environment variable {self.api_key_env} (named by {{field}}) is empty or unset", field="api_key_env")
        return key
