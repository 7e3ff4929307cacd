"""Prometheus metrics of one app (its own registry, so several apps can live in one process).

With ``kformer serve --workers N`` the supervisor sets ``PROMETHEUS_MULTIPROC_DIR`` (a temporary
folder it removes at exit) for every worker: prometheus-client's multiprocess mode, in which each
worker writes its metrics to files there and ``/metrics``, whichever worker answers it, reads
them all. Counters and histograms are summed over the workers (those of a worker that has exited
included, so they never go back), ``kformer_queue_depth`` is summed over the live workers and
``kformer_ready`` is their minimum (1 only when every worker is ready). The process's own metrics
(``process_*``) cannot be summed, so in that mode each worker reports its resident memory and CPU
seconds as ``kformer_worker_resident_memory_bytes`` and ``kformer_worker_cpu_seconds``, one
series per worker process (label ``pid``), brought up to date every few seconds by a thread of
each worker and whenever it answers ``/metrics``.
"""

from __future__ import annotations

import os
import threading
import time

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

from kformer.server.batching import BatchObserver

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus-client reads it when it is imported
WORKER_UPDATE_S = 5.0  # how often a worker brings its memory and CPU series up to date


class ServiceMetrics(BatchObserver):
    """Requests by model, route and status; latency; batch sizes; queue depth; the process."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.multiprocess = bool(os.environ.get(MULTIPROCESS_ENV))
        if not self.multiprocess:
            ProcessCollector(registry=self.registry)  # resident memory, CPU seconds, open files
        self.requests = Counter(
            "kformer_requests", "HTTP requests answered", ["model", "route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "kformer_request_seconds", "Time to answer a request", ["model", "route"],
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.batch_instances = Histogram(
            "kformer_batch_instances", "Instances per model call", ["model"], buckets=BATCH_BUCKETS, registry=self.registry
        )
        self.batch_requests = Histogram(
            "kformer_batch_requests", "Requests per model call", ["model"], buckets=BATCH_BUCKETS, registry=self.registry
        )
        self.depth = Gauge("kformer_queue_depth", "Requests waiting for the inference thread", registry=self.registry,
                           multiprocess_mode="livesum")
        self.in_progress = Gauge("kformer_requests_in_progress", "HTTP requests read and not yet answered",
                                 registry=self.registry, multiprocess_mode="livesum")
        self.ready = Gauge("kformer_ready", "1 when every model is loaded and warmed", registry=self.registry,
                           multiprocess_mode="livemin")
        if self.multiprocess:
            self._process = ProcessCollector(registry=None)
            self.worker_memory = Gauge("kformer_worker_resident_memory_bytes", "Resident memory of each worker process",
                                       registry=self.registry, multiprocess_mode="liveall")
            self.worker_cpu = Gauge("kformer_worker_cpu_seconds", "CPU seconds of each worker process",
                                    registry=self.registry, multiprocess_mode="liveall")
            threading.Thread(target=self._keep_worker_updated, name="kformer-metrics", daemon=True).start()

    def request_started(self) -> None:
        self.in_progress.inc()

    def observe_request(self, model: str, route: str, status: int, started: float) -> None:
        self.in_progress.dec()
        self.requests.labels(model, route, str(status)).inc()
        self.latency.labels(model, route).observe(time.perf_counter() - started)

    def batch(self, model: str, instances: int, requests: int) -> None:
        self.batch_instances.labels(model).observe(instances)
        self.batch_requests.labels(model).observe(requests)

    def queue_depth(self, depth: int) -> None:
        self.depth.set(depth)

    def exposition(self) -> bytes:
        """The text /metrics answers: this process's metrics, or every worker's in multiprocess mode."""
        if not self.multiprocess:
            return generate_latest(self.registry)
        from prometheus_client.multiprocess import MultiProcessCollector

        self._update_worker()
        everyone = CollectorRegistry()
        MultiProcessCollector(everyone)
        return generate_latest(everyone)

    def _keep_worker_updated(self) -> None:
        while True:
            self._update_worker()
            time.sleep(WORKER_UPDATE_S)

    def _update_worker(self) -> None:
        """This worker's resident memory and CPU seconds, into its multiprocess series."""
        for family in self._process.collect():
            for sample in family.samples:
                if sample.name == "process_resident_memory_bytes":
                    self.worker_memory.set(sample.value)
                elif sample.name == "process_cpu_seconds_total":
                    self.worker_cpu.set(sample.value)
