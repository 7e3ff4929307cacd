"""The service behind the routes: models, the inference thread, readiness and shutdown.

The event loop only checks requests and waits on futures; loading, warming, tokenising and
inference run on other threads. Models load in the background after start-up, so
``/v2/health/live`` answers at once and ``/v2/health/ready`` says 503 until all are warm.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

from kformer.errors import KformerError, Overloaded
from kformer.server.batching import EXPLAIN, PREDICT, InferenceWorker, Job
from kformer.server.cluster import WorkerLink
from kformer.server.config import ServeConfig
from kformer.server.http_errors import ClientGone, GatewayTimeout, InternalError
from kformer.server.metrics import ServiceMetrics
from kformer.server.registry import Loader, ModelRegistry, Served
from kformer.tasks import load as load_folder

log = logging.getLogger("kformer.server")


class Service:
    """Everything one app serves. ``start()`` in the lifespan's start-up, ``stop()`` at its end."""

    def __init__(self, models: Mapping[str, Any], config: ServeConfig, loader: Loader | None = None,
                 link: WorkerLink | None = None):
        self.config = config
        self.link = link  # this process's line to its supervisor when it is one of N workers
        self.registry = ModelRegistry(models, loader or functools.partial(load_folder, runtime=config.runtime),
                                      settle=config.freeze_heap)
        self.metrics = ServiceMetrics()
        self.worker = InferenceWorker(
            self._run,
            max_batch=config.max_batch,
            batch_wait_ms=config.batch_wait_ms,
            max_queue=config.max_queue,
            batching=config.batching,
            observer=self.metrics,
            arriving=lambda: self.arriving,
        )
        self.arriving = 0  # requests in a handler that have not reached the queue yet
        self.failed: KformerError | None = None  # a start-up load that failed
        self.shutting_down = False
        self.loaded = threading.Event()  # set when start-up loading ended (well or not)

    # --- life cycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the inference thread and load every model in the background."""
        self.worker.start()
        if self.link is not None:
            self.link.attach(self)
        threading.Thread(target=self._load_all, name="kformer-loader", daemon=True).start()

    def _load_all(self) -> None:
        try:
            self.registry.load_all()
            self.metrics.ready.set(1)
            log.info("ready: %s", ", ".join(self.registry.names()))
        except KformerError as exc:
            self.failed = exc
            log.error("a model failed to load: %s", exc)
        except Exception as exc:
            self.failed = InternalError(f"loading failed: {type(exc).__name__}: {exc}")
            log.exception("a model failed to load")
        finally:
            self.loaded.set()

    @property
    def ready(self) -> bool:
        """Every model loaded and warmed -- in every worker, when this is one of N -- and no shutdown begun."""
        return (not self.shutting_down and self.failed is None and self.registry.ready()
                and (self.link is None or self.link.started.is_set()))

    def begin_shutdown(self) -> None:
        """From now on readiness says 503 (SIGTERM calls this before requests drain)."""
        if not self.shutting_down:
            log.info("shutting down: finishing in-flight requests")
        self.shutting_down = True
        self.metrics.ready.set(0)

    def stop(self) -> None:
        """Answer what is queued (bounded by ``shutdown_grace_s``), then end the inference thread."""
        self.begin_shutdown()
        if not self.worker.stop(timeout=self.config.shutdown_grace_s):
            log.warning("the inference thread did not finish within %.0f s", self.config.shutdown_grace_s)

    # --- requests (event loop) --------------------------------------------------------------------

    def served(self, name: str) -> Served:
        """The model serving ``name`` now: 404 for an unknown name, 503 while it loads."""
        served = self.registry.get(name)
        if served is None:
            raise Overloaded(f"model '{name}' is still loading; retry shortly", field=None)
        return served

    @contextmanager
    def arrival(self) -> Iterator[None]:
        """Around reading and checking a request until it is queued: the inference thread holds
        a batch open for company only while some request is inside this block."""
        self.arriving += 1
        try:
            yield
        finally:
            self.arriving -= 1

    def submit_predict(self, name: str, instances: list[str], parameters: dict[str, Any]) -> Future:
        """Queue a prediction; :meth:`answer` waits for it."""
        parameters = self.served(name).model.check_parameters(parameters)
        return self._submit(name, PREDICT, instances, parameters)

    def submit_explain(self, name: str, text: str) -> Future:
        """Queue attention maps for one input; :meth:`answer` waits for them."""
        self.served(name)
        return self._submit(name, EXPLAIN, [text], {})

    def _submit(self, name: str, kind: str, instances: list[str], parameters: dict) -> Future:
        job = Job(name, kind, instances, parameters, deadline=time.monotonic() + self.config.timeout_s)
        return self.worker.submit(job)

    async def answer(self, job: Future, gone: Awaitable | None = None) -> tuple[list, str]:
        """The results of a queued job and the model version that made them.

        Past ``timeout_s`` the answer is 504; if ``gone`` (an awaitable that ends when the client
        disconnects) ends first, 499. Either way the job is cancelled, so the inference thread
        skips it if it has not started.
        """
        timeout = self.config.timeout_s
        future = asyncio.wrap_future(job)
        watcher = asyncio.ensure_future(gone) if gone is not None else None
        try:
            done, _ = await asyncio.wait({future} | ({watcher} if watcher else set()), timeout=timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
            if future not in done:
                # cancel the worker's future itself, now: cancelling only the asyncio wrapper passes
                # it on in a later loop turn, by which time the inference thread may have taken the job
                job.cancel()
                future.cancel()
                if watcher is not None and watcher in done:
                    raise ClientGone("the client closed the connection before the answer was ready", field=None)
                raise GatewayTimeout(f"the model did not answer within {timeout:g} s (timeout_s); retry later", field=None)
            return future.result()
        except KformerError:
            raise
        except Exception as exc:
            log.error("inference failed: %s: %s", type(exc).__name__, exc)
            raise InternalError(f"the model failed ({type(exc).__name__}); the server log has the details") from None
        finally:
            if watcher is not None:
                watcher.cancel()

    async def reload(self, name: str) -> tuple[str, str | None]:
        """Reload ``name`` from its folder on a loader thread -- in every worker, when this is one
        of N -- while requests keep flowing; ``(new version, previous version)``."""
        self.registry.slot(name)
        if self.link is not None:
            return await asyncio.to_thread(self.link.reload, name)
        new, old = await asyncio.to_thread(self.registry.reload, name)
        return new.version, old.version if old else None

    def reload_all_in_background(self) -> None:
        """SIGHUP: reload every folder-backed model on a thread of its own."""
        threading.Thread(target=self.registry.reload_all, name="kformer-reload", daemon=True).start()

    # --- the inference thread ---------------------------------------------------------------------

    def _run(self, kind: str, name: str, instances: list[str], parameters: dict) -> tuple[list, str]:
        served = self.registry.get(name)
        if served is None:  # cannot happen: requests are only queued for loaded models
            raise Overloaded(f"model '{name}' is not loaded", field=None)
        if kind == PREDICT:
            return served.model.predict(instances, **parameters), served.version
        return [served.model.attention_maps(instances[0]).to_json()], served.version
