"""`kformer serve` under load: micro-batching vs a naive endpoint, the raw model's limit, a soak.

    flock /tmp/kformer-bench.lock python -m bench.serve                  # trains the tickets model (~5 min)
    python -m bench.serve --model runs/tickets --seconds 20 --soak-seconds 600

Two services run side by side on 127.0.0.1 with the same tickets classifier: `kformer serve`
(micro-batching on) and `kformer serve --no-batching` (one model call per request; same app,
same tokenising on the inference thread). For 1, 8, 32 and 64 concurrent clients each is driven
for ``--seconds`` (at most ``--max-requests`` requests) by this one asyncio process -- a minimal
keep-alive HTTP/1.1 client, so the load generator costs little; its CPU share is reported. Each
request carries one ticket from the test split. Then the raw model on pre-tokenised batches (the
limit), and a soak at 32 clients with the service's resident memory at start and end.

Run it on a quiet machine: the numbers are throughput on shared CPUs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

from bench.harness import ROOT, record_results, require_shared_data

TARGETS = ("Targets: 0 errors at every level; micro-batching >= 3x the naive requests/s at 32 clients with p99 no "
           "worse; service >= 50 % of the raw model's throughput at 64 clients; soak: 0 errors, memory flat.")


# --- the load generator ------------------------------------------------------------------------------


class Load:
    """Results of one load level: latencies (s) of answered requests and statuses of all."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.statuses: Counter = Counter()
        self.sent = 0


async def _client(host: str, port: int, bodies: list[bytes], offset: int, until: float, limit: int, load: Load) -> None:
    """One keep-alive connection sending requests back to back until ``until`` or ``limit`` sent."""
    reader = writer = None
    i = offset
    while time.perf_counter() < until and load.sent < limit:
        load.sent += 1
        body = bodies[i % len(bodies)]
        i += 1
        request = (f"POST /v1/models/tickets:predict HTTP/1.1\r\nHost: {host}:{port}\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
        started = time.perf_counter()
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(host, port)
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            if b"connection: close" in head.lower():
                writer.close()
                writer = None
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
            load.statuses["connection error"] += 1
            if writer is not None:
                writer.close()
            writer = None
            await asyncio.sleep(0.05)
            continue
        load.statuses[status] += 1
        if status == 200:
            load.latencies.append(time.perf_counter() - started)
    if writer is not None:
        writer.close()


async def drive(port: int, bodies: list[bytes], clients: int, seconds: float, limit: int) -> tuple[Load, float]:
    """``clients`` concurrent connections for ``seconds`` (at most ``limit`` requests); (results, wall s)."""
    load = Load()
    started = time.perf_counter()
    until = started + seconds
    await asyncio.gather(*(_client("127.0.0.1", port, bodies, c * 7919, until, limit, load) for c in range(clients)))
    return load, time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


# --- the services ------------------------------------------------------------------------------------


class Service:
    """A `kformer serve` subprocess on 127.0.0.1."""

    def __init__(self, model: Path, port: int, extra: list[str], log: Path):
        self.port = port
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kformer", "serve", "--model", f"tickets={model}", "--port", str(port), *extra],
            stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=ROOT)

    def wait_ready(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                sys.exit(f"the service on port {self.port} exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v2/health/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        sys.exit(f"the service on port {self.port} was not ready within {timeout:.0f} s")

    def batches(self) -> tuple[float, float]:
        """(instances, model calls) so far, from /metrics."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as response:
            text = response.read().decode()
        total = calls = 0.0
        for line in text.splitlines():
            if line.startswith("kformer_batch_instances_sum"):
                total = float(line.rsplit(" ", 1)[1])
            elif line.startswith("kformer_batch_instances_count"):
                calls = float(line.rsplit(" ", 1)[1])
        return total, calls

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> int | None:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(10)


def measure(service: Service, bodies: list[bytes], clients: int, seconds: float, limit: int) -> dict:
    """One load level against ``service``: requests/s, latency percentiles, errors, batch size, CPU."""
    before_batches, before_cpu = service.batches(), service.cpu_seconds()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    load, wall = asyncio.run(drive(service.port, bodies, clients, seconds, limit))
    used = resource.getrusage(resource.RUSAGE_SELF)
    after_batches, after_cpu = service.batches(), service.cpu_seconds()
    calls = after_batches[1] - before_batches[1]
    errors = {str(status): n for status, n in load.statuses.items() if status != 200}
    return {
        "clients": clients,
        "requests": sum(load.statuses.values()),
        "req_per_s": load.statuses[200] / wall,
        "p50_ms": 1000 * percentile(load.latencies, 50),
        "p95_ms": 1000 * percentile(load.latencies, 95),
        "p99_ms": 1000 * percentile(load.latencies, 99),
        "errors": json.dumps(errors) if errors else "0",
        "mean_batch": (after_batches[0] - before_batches[0]) / calls if calls else float("nan"),
        "load_cpu_%": 100 * (used.ru_utime + used.ru_stime - usage.ru_utime - usage.ru_stime) / wall,
        "service_cpu_%": 100 * (after_cpu - before_cpu) / wall,
    }


# --- the model and its raw throughput ----------------------------------------------------------------


def train_tickets(minutes: float, out: Path) -> Path:
    """The tickets classifier, trained through the Python API with the `tickets` recipe and a time budget."""
    from kformer.config import make_config
    from kformer.tasks import classify

    data = require_shared_data("it-service-tickets")
    config = make_config(classify.ClassifyConfig, "classify", "tickets", {"max_minutes": minutes})
    print(f"+ training the tickets classifier for at most {minutes:g} min into {out}", flush=True)
    classify.train(config, data / "train.csv.gz", out)
    return out


def raw_throughput(model_dir: Path, texts: list[str], batch: int, seconds: float) -> float:
    """Texts/s of the model alone on pre-tokenised batches of ``batch`` (each trimmed to its width bucket)."""
    import numpy as np

    from kformer.data.batching import bucket_width
    from kformer.tasks import load

    classifier = load(model_dir)
    classifier.warmup()
    ids = classifier.features(texts)
    lengths = (ids != 0).sum(axis=1)
    batches = []
    for start in range(0, len(ids) - batch + 1, batch):
        width = bucket_width(int(max(1, lengths[start:start + batch].max())), ids.shape[1])
        batches.append(np.ascontiguousarray(ids[start:start + batch, :width]))
    for chunk in batches[:3]:
        classifier.model.predict_on_batch(chunk)  # any first-call cost outside the timing
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for chunk in batches:
            classifier.model.predict_on_batch(chunk)
            done += len(chunk)
            if time.perf_counter() - started >= seconds:
                break
    return done / (time.perf_counter() - started)


# --- main --------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a trained tickets model folder (default: train one)")
    parser.add_argument("--train-minutes", type=float, default=5.0, help="training budget without --model")
    parser.add_argument("--clients", default="1,8,32,64", help="concurrency levels (default 1,8,32,64)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds per level and mode (default 20)")
    parser.add_argument("--max-requests", type=int, default=100_000, help="most requests per level and mode")
    parser.add_argument("--soak-seconds", type=float, default=600.0, help="soak length at --soak-clients (default 600)")
    parser.add_argument("--soak-clients", type=int, default=32)
    parser.add_argument("--port", type=int, default=8731, help="first of the two ports used on 127.0.0.1")
    parser.add_argument("--no-record", action="store_true", help="print the table; do not append to BENCHMARKS.md")
    args = parser.parse_args()

    from kformer.data.readers import read_labelled

    work = Path(tempfile.mkdtemp(prefix="kformer-bench-serve-"))
    model = args.model or train_tickets(args.train_minutes, work / "tickets")
    data = require_shared_data("it-service-tickets")
    texts = [t for t in read_labelled(data / "test.csv.gz").texts if t.strip()][:5000]
    bodies = [json.dumps({"instances": [t[:10_000]]}).encode() for t in texts]
    levels = [int(n) for n in args.clients.split(",")]

    print("+ raw model throughput on pre-tokenised batches of 32", flush=True)
    raw = raw_throughput(model, texts, 32, seconds=max(5.0, args.seconds))

    batched = Service(model, args.port, [], work / "batched.log")
    naive = Service(model, args.port + 1, ["--no-batching"], work / "naive.log")
    rows, soak = [], {}
    try:
        batched.wait_ready()
        naive.wait_ready()
        for clients in levels:
            for name, service in (("micro-batching", batched), ("naive (--no-batching)", naive)):
                row = {"system": name, **measure(service, bodies, clients, args.seconds, args.max_requests)}
                print(row, flush=True)
                rows.append(row)
        naive.stop()
        print(f"+ soak: {args.soak_clients} clients for {args.soak_seconds:g} s", flush=True)
        rss_start = batched.rss_mib()
        soak_row = measure(batched, bodies, args.soak_clients, args.soak_seconds, 10**9)
        soak = {"rss_start_mib": rss_start, "rss_end_mib": batched.rss_mib(), **soak_row}
        print(soak, flush=True)
    finally:
        exits = {"batched": batched.stop(), "naive": naive.stop() if naive.process.poll() is None else naive.process.poll()}

    rows.append({"system": "raw model, pre-tokenised batches of 32", "req_per_s": raw})
    rows.append({"system": f"soak ({args.soak_seconds:g} s)", **{k: v for k, v in soak.items() if "rss" not in k}})
    by = {(row["system"], row.get("clients")): row for row in rows}

    def rps(system: str, clients: int) -> float | None:
        row = by.get((system, clients))
        return row["req_per_s"] if row else None

    lines = [TARGETS]
    if rps("micro-batching", 32) and rps("naive (--no-batching)", 32):
        on, off = by[("micro-batching", 32)], by[("naive (--no-batching)", 32)]
        lines.append(f"Measured at 32 clients: micro-batching {on['req_per_s'] / off['req_per_s']:.2f}x the naive "
                     f"requests/s; p99 {on['p99_ms']:.0f} ms vs {off['p99_ms']:.0f} ms.")
    if rps("micro-batching", 64):
        lines.append(f"At 64 clients the service reaches {100 * rps('micro-batching', 64) / raw:.0f} % of the raw "
                     f"model's {raw:,.0f} texts/s.")
    if soak:
        lines.append(f"Soak: {soak['requests']} requests, errors {soak['errors']}, service RSS "
                     f"{soak['rss_start_mib']:.0f} MiB at start, {soak['rss_end_mib']:.0f} MiB at end.")
    lines.append(f"Services exited with {exits} after SIGTERM. Model: {model}. One request = one ticket; "
                 "load_cpu_% = this load process's CPU (100 = one core); service_cpu_% = the service's.")
    notes = "\n\n".join(lines)
    if args.no_record:
        from bench.harness import results_table

        print(results_table(rows) + "\n\n" + notes)
    else:
        record_results("Serving: kformer serve, micro-batching vs naive", rows, notes)


if __name__ == "__main__":
    main()
