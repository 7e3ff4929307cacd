"""Micro-batching: one inference thread owns the models; requests reach it through a queue.

A request becomes a :class:`Job` with a :class:`concurrent.futures.Future`. The thread takes the
oldest job and the jobs for the same model and parameters queued behind it (up to ``max_batch``
instances in all), runs one ``predict`` call -- tokenising included, so none of it runs on the
event loop -- and answers every job's future with its share. A job whose caller gave up (its
future cancelled, or its deadline passed) is skipped, not computed.

The batching adapts to the load by itself: with ``batch_wait_ms`` 0 (the default) the thread
never waits for company, so a lone request runs at once, as with no batching, and under load a
batch is whatever queued while the previous call ran. The model cuts a batch into calls of least
measured cost (a classifier: :mod:`kformer.tasks.classify.batch_plan`), so a batch never costs
more than its requests one by one. ``batch_wait_ms`` > 0 also holds a batch open that long while
requests are arriving (for models whose calls cost much more than a request's HTTP handling).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from kformer.errors import KformerError, Overloaded

log = logging.getLogger("kformer.server")

PREDICT, EXPLAIN = "predict", "explain"


@dataclass
class Job:
    """One request's work: ``instances`` for ``model`` (``kind`` predict or explain)."""

    model: str
    kind: str
    instances: list[str]
    parameters: dict[str, Any]
    deadline: float  # time.monotonic() after which nobody waits for the answer
    future: Future = field(default_factory=Future)

    @property
    def key(self) -> tuple[str, str, str]:
        """Jobs with the same key may share one model call."""
        return self.model, self.kind, json.dumps(self.parameters, sort_keys=True, default=str)


class BatchObserver:
    """What the worker reports (the metrics module implements it); the default ignores it all."""

    def batch(self, model: str, instances: int, requests: int) -> None: ...

    def queue_depth(self, depth: int) -> None: ...


class InferenceWorker:
    """The inference thread and its queue.

    Args:
        run: ``run(job_kind, model_name, instances, parameters) -> (results, tag)`` computes one
            batch on this thread: one result per instance, and a tag (the model version) that
            every job of the batch gets with its share.
        max_batch, batch_wait_ms: how big a batch may get and how long its first job waits.
        max_queue: jobs waiting beyond this are refused with Overloaded (503).
        batching: False runs every job on its own, as it comes (the naive baseline).
        arriving: how many requests are inside the service but not yet queued (their bodies
            being read and checked); a batch waits for company only while some are, so a lone
            request is never held back by ``batch_wait_ms``.
    """

    def __init__(
        self,
        run: Callable[[str, str, list[str], dict[str, Any]], tuple[list, Any]],
        *,
        max_batch: int = 32,
        batch_wait_ms: float = 0.0,
        max_queue: int = 256,
        batching: bool = True,
        observer: BatchObserver | None = None,
        arriving: Callable[[], int] | None = None,
    ):
        from kformer import faults

        self._run = faults.slowed(run)  # unchanged unless KFORMER_FAULT=predict-sleep:<s> (the fault tests)
        self.max_batch = max_batch
        self.batch_wait = batch_wait_ms / 1000
        self.max_queue = max_queue
        self.batching = batching
        self.observer = observer or BatchObserver()
        self._arriving = arriving or (lambda: 1)
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._pending: deque[Job] = deque()  # taken from the queue but not in this batch
        self._depth = 0
        self._depth_lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the caller's side (event loop) -----------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="kformer-inference", daemon=True)
        self._thread.start()

    @property
    def depth(self) -> int:
        """Jobs waiting for the inference thread."""
        return self._depth

    def submit(self, job: Job) -> Future:
        """Queue ``job``; raise Overloaded when ``max_queue`` jobs already wait."""
        if self._stopping.is_set():
            raise Overloaded("the service is shutting down; retry on another instance", field=None)
        with self._depth_lock:
            if self._depth >= self.max_queue:
                raise Overloaded(f"the queue is full ({self.max_queue} requests waiting); retry shortly", field=None)
            self._depth += 1
            depth = self._depth
        self.observer.queue_depth(depth)
        self._queue.put(job)
        return job.future

    def stop(self, timeout: float = 30.0) -> bool:
        """Answer what is queued (within ``timeout``), then end the thread; True if it ended."""
        self._stopping.set()
        self._queue.put(None)
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # --- the inference thread ---------------------------------------------------------------------

    def _taken(self, count: int = 1) -> None:
        with self._depth_lock:
            self._depth -= count
            depth = self._depth
        self.observer.queue_depth(depth)

    def _next(self, timeout: float | None) -> Job | None:
        """The oldest job not yet taken (None after ``timeout`` or at the stop marker)."""
        if self._pending:
            return self._pending.popleft()
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def _loop(self) -> None:
        while True:
            job = self._next(timeout=0.5)
            if job is None:
                if self._stopping.is_set() and not self._pending and self._queue.empty():
                    return
                continue
            batch = self._gather(job)
            self._taken(len(batch))
            self._answer(batch)

    def _gather(self, first: Job) -> list[Job]:
        """``first`` and the jobs that can share its model call, waiting up to ``batch_wait``."""
        batch, size = [first], len(first.instances)
        if not self.batching or first.kind != PREDICT:
            return batch
        key = first.key
        kept: deque[Job] = deque()
        while self._pending and size < self.max_batch:  # jobs already taken out come first
            job = self._pending.popleft()
            if job.key == key and size + len(job.instances) <= self.max_batch:
                batch.append(job)
                size += len(job.instances)
            else:
                kept.append(job)
        kept.extend(self._pending)
        self._pending = kept
        until = time.monotonic() + self.batch_wait
        while size < self.max_batch:
            remaining = until - time.monotonic() if self._arriving() > 0 else 0
            try:
                job = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if job is None:  # the stop marker: put it back for the loop
                self._queue.put(None)
                break
            if job.key == key and size + len(job.instances) <= self.max_batch:
                batch.append(job)
                size += len(job.instances)
            else:
                self._pending.append(job)
                if job.key == key:
                    break  # the next batch of this model starts with it
        return batch

    def _answer(self, batch: list[Job]) -> None:
        """Run the live jobs of ``batch`` in one model call and answer their futures."""
        now = time.monotonic()
        live = []
        for job in batch:
            if not job.future.set_running_or_notify_cancel():
                continue  # the caller gave up (cancelled its wait)
            if job.deadline < now:
                job.future.set_exception(TimeoutError("the request waited past its deadline"))
                continue
            live.append(job)
        if not live:
            return
        first = live[0]
        instances = [text for job in live for text in job.instances]
        try:
            results, tag = self._run(first.kind, first.model, instances, first.parameters)
        except KformerError as exc:
            if len(live) == 1:
                first.future.set_exception(exc)
                return
            # one request's bad instance must not fail the others: answer each on its own
            for job in live:
                self._answer_alone(job)
            return
        except BaseException as exc:  # a bug: every caller gets a 500, the thread lives on
            log.exception("inference failed for model %s", first.model)
            for job in live:
                job.future.set_exception(exc)
            return
        self.observer.batch(first.model, len(instances), len(live))
        start = 0
        for job in live:
            job.future.set_result((results[start : start + len(job.instances)], tag))
            start += len(job.instances)

    def _answer_alone(self, job: Job) -> None:
        try:
            answer = self._run(job.kind, job.model, job.instances, job.parameters)
        except BaseException as exc:
            job.future.set_exception(exc)
            return
        self.observer.batch(job.model, len(job.instances), 1)
        job.future.set_result(answer)
