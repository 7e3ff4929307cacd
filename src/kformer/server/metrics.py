"""Prometheus metrics of one app (its own registry, so several apps can live in one process)."""

from __future__ import annotations

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


class ServiceMetrics(BatchObserver):
    """Requests by model, route and status; latency; batch sizes; queue depth; the process."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
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
        self.depth = Gauge("kformer_queue_depth", "Requests waiting for the inference thread", registry=self.registry)
        self.ready = Gauge("kformer_ready", "1 when every model is loaded and warmed", registry=self.registry)

    def observe_request(self, model: str, route: str, status: int, started: float) -> None:
        self.requests.labels(model, route, str(status)).inc()
        self.latency.labels(model, route).observe(time.perf_counter() - started)

    def batch(self, model: str, instances: int, requests: int) -> None:
        self.batch_instances.labels(model).observe(instances)
        self.batch_requests.labels(model).observe(requests)

    def queue_depth(self, depth: int) -> None:
        self.depth.set(depth)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
