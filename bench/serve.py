"""`kformer serve` under load on both runtimes: the default (adaptive micro-batching) vs a naive
endpoint, closed and open loop, against the raw model on the same runtime, and where the time goes.

    flock /tmp/kformer-bench.lock python -m bench.serve                  # trains the tickets model (~5 min)
    python -m bench.serve --model runs/tickets --seconds 20 --soak-seconds 600
    python -m bench.serve --model runs/tickets --seconds 3 --open-seconds 3 --soak-seconds 0 --no-record  # smoke

For each runtime (``--runtimes keras,onnx``) two services run side by side on 127.0.0.1 with the
same tickets classifier: `kformer serve --runtime R --workers 1` (its other defaults: micro-batching on) and the same
with ``--no-batching`` (one model call per request; same app, same tokenising on the inference
thread). Load (:mod:`bench.serve_load`, one asyncio process; its CPU share is reported):

* closed loop: 1, 8, 32 and 64 clients, each sending its next request when its answer is in, for
  ``--seconds`` each; one request carries one ticket of the test split;
* open loop: requests started at a fixed rate -- 50 % and 90 % of the naive mode's capacity (its
  best closed-loop requests/s) -- for ``--open-seconds``, latency counted from each scheduled start.

First the time a service takes to load the model on an ONNX runtime: converting its network, then
reading the conversion back from the folder's ``runtimes/`` (a restart or reload). Then the raw
model on the same runtime (its network on pre-tokenised batches of 32, as ``Classifier`` runs it), the service's requests/s at 64 clients as a share of it, and where a
request's time goes: its CPU cost in the service (service CPU seconds / requests at 64 clients)
against the costs of its parts measured alone in this process on the same texts and batch sizes --
JSON (parsing the body, writing the answer), validation, tokenising, the wide n-gram part, the
network -- the rest being HTTP (uvicorn, FastAPI, asyncio). Last a soak at ``--soak-clients`` on
the default runtime with its resident memory at start and end.

Targets: 0 errors; the default never worse than naive (requests/s >= naive's and p99 <= 1.2x
naive's at 1, 8, 32 and 64 clients, on both runtimes); service >= 50 % of the raw model at 64
clients; soak: 0 errors, memory flat. Run it on a quiet machine: the numbers are throughput on
shared CPUs.
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
from pathlib import Path

from bench.harness import ROOT, record_results, require_shared_data
from bench.headlines import Headline
from bench.serve_load import closed_loop, open_loop, percentile

# This benchmark's rows in BENCHMARKS.md's summary (bench/headlines.py says how they are read)
HEADLINES = (
    Headline("speed, serving and memory", "Serving: ", "req_per_s", name="Serving, micro-batching vs naive, 32 clients",
             kformer={"system": "^micro-batching$", "clients": "^32$"},
             baseline={"system": "^naive", "clients": "^32$"}, target=">= baseline"),
)

TARGETS = ("Targets: 0 errors at every level; the default (micro-batching) never worse than naive -- requests/s >= "
           "naive's and p99 <= 1.2x naive's at 1, 8, 32 and 64 closed-loop clients on both runtimes; service >= 50 % "
           "of the raw model's throughput (same runtime) at 64 clients; soak: 0 errors, memory flat.")
PATH = "/v1/models/tickets:predict"
NOISE = 0.97  # the two modes run the same code at 1 client; repeats of one run differ by up to 3 %
MODES = (("micro-batching", []), ("naive (--no-batching)", ["--no-batching"]))


# --- the services ------------------------------------------------------------------------------------


class Service:
    """A `kformer serve` subprocess on 127.0.0.1: one process (``--workers 1``, what the recorded
    rows measured) unless ``extra`` names ``--workers`` (the default, auto, may start more)."""

    def __init__(self, model: Path, port: int, extra: list[str], log: Path, name: str = "tickets"):
        self.port = port
        self.log = log
        if "--workers" not in extra:
            extra = [*extra, "--workers", "1"]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kformer", "serve", "--model", f"{name}={model}", "--port", str(port), *extra],
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


def measure(service: Service, bodies: list[bytes], seconds: float, limit: int, clients: int | None = None,
            rate: float | None = None) -> dict:
    """One load level against ``service``, closed loop (``clients``) or open loop (``rate``
    requests/s): requests/s, latency percentiles, errors, batch size, CPU."""
    before_batches, before_cpu = service.batches(), service.cpu_seconds()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    if rate is None:
        load, wall = asyncio.run(closed_loop(service.port, PATH, bodies, clients, seconds, limit))
    else:
        load, wall = asyncio.run(open_loop(service.port, PATH, bodies, rate, seconds))
    used = resource.getrusage(resource.RUSAGE_SELF)
    after_batches, after_cpu = service.batches(), service.cpu_seconds()
    calls = after_batches[1] - before_batches[1]
    errors = {str(status): n for status, n in load.statuses.items() if status != 200}
    return {
        **({"clients": clients} if rate is None else {"rate": round(rate)}),
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


def raw_throughput(classifier, texts: list[str], batch: int, seconds: float) -> float:
    """Texts/s of ``classifier``'s network alone on its runtime, on pre-tokenised batches of
    ``batch`` texts, each cut into calls as the classifier cuts a batch (:mod:`bench.serve_costs`)."""
    from bench.serve_costs import run_network

    ids = classifier.features(texts)
    batches = [ids[start:start + batch] for start in range(0, len(ids) - batch + 1, batch)]
    for chunk in batches[:3]:
        run_network(classifier, chunk)  # any first-call cost outside the timing
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for chunk in batches:
            run_network(classifier, chunk)
            done += len(chunk)
            if time.perf_counter() - started >= seconds:
                break
    return done / (time.perf_counter() - started)


def load_times(model: Path, work: Path, runtimes: list[str]) -> list[dict]:
    """Seconds to load (and warm) a copy of ``model`` on each ONNX runtime: first converting its
    network, then again -- a restart or a reload -- reading back the conversion kept in its
    ``runtimes/`` folder (the service's start-up and reload before and after keeping it)."""
    import shutil

    from kformer.tasks import load

    rows = []
    for runtime in (r for r in runtimes if r != "keras"):
        copy = work / f"load-{runtime}"
        shutil.copytree(model, copy, ignore=shutil.ignore_patterns("runtimes", "training"))
        for when in ("converting (before: every load)", "kept conversion (after: a restart or reload)"):
            started = time.perf_counter()
            load(copy, runtime=runtime).warmup()
            rows.append({"runtime": runtime, "system": f"load and warm up, {when}",
                         "seconds": time.perf_counter() - started})
            print(rows[-1], flush=True)
    return rows


# --- main --------------------------------------------------------------------------------------------


def closed_rows(services: dict[str, Service], runtime: str, bodies: list[bytes], args) -> list[dict]:
    """Once ``services`` (name -> service) are ready, a closed-loop row of each at each of
    ``args.clients``, the services taking turns at every level."""
    for service in services.values():
        service.wait_ready()
    rows = []
    for clients in [int(n) for n in args.clients.split(",")]:
        for name, service in services.items():
            rows.append({"runtime": runtime, "system": name, "loop": "closed",
                         **measure(service, bodies, args.seconds, args.max_requests, clients=clients)})
            print(rows[-1], flush=True)
    return rows


def stop_all(services: dict[str, Service], runtime: str) -> dict[str, int | None]:
    """SIGTERM every service; their exit codes by ``"runtime name"``."""
    return {f"{runtime} {name}": service.stop() for name, service in services.items()}


def run_runtime(runtime: str, model: Path, bodies: list[bytes], args, port: int, work: Path) -> tuple[list[dict], dict]:
    """Closed- and open-loop rows of both modes on ``runtime``; also the services' exit codes."""
    services = {name: Service(model, port + i, ["--runtime", runtime, *extra], work / f"{runtime}-{i}.log")
                for i, (name, extra) in enumerate(MODES)}
    rows, exits = [], {}
    try:
        rows = closed_rows(services, runtime, bodies, args)
        capacity = max(r["req_per_s"] for r in rows if r["system"] == MODES[1][0])
        for share in (0.5, 0.9):
            for name, service in services.items():
                row = measure(service, bodies, args.open_seconds, args.max_requests, rate=share * capacity)
                rows.append({"runtime": runtime, "system": name, "loop": f"open, {share:.0%} of naive capacity", **row})
                print(rows[-1], flush=True)
    finally:
        exits = stop_all(services, runtime)
    return rows, exits


def verdicts(rows: list[dict], runtimes: list[str], levels: list[int]) -> list[str]:
    """One line per runtime: is the default never worse than naive (closed loop)?"""
    lines = []
    by = {(r["runtime"], r["system"], r.get("clients")): r for r in rows if r.get("loop") == "closed"}
    for runtime in runtimes:
        checks = []
        for clients in levels:
            on, off = by.get((runtime, MODES[0][0], clients)), by.get((runtime, MODES[1][0], clients))
            if on and off:
                rate, tail = on["req_per_s"] / off["req_per_s"], on["p99_ms"] / off["p99_ms"]
                verdict = "" if rate >= 1 and tail <= 1.2 else (
                    " (within the 3 % a repeat of the same run differs by)" if rate >= NOISE and tail <= 1.2 else " (WORSE)")
                checks.append(f"{clients}: {rate:.2f}x req/s, p99 {tail:.2f}x{verdict}")
        lines.append(f"{runtime}, default vs naive by clients: " + "; ".join(checks) + ".")
    return lines


def add_model_args(parser) -> None:
    """The flags of the served model, shared with ``bench.serve_workers``: a trained tickets folder
    (or the budget to train one) and the runtimes to serve it on."""
    parser.add_argument("--model", type=Path, help="a trained tickets model folder (default: train one)")
    parser.add_argument("--train-minutes", type=float, default=5.0, help="training budget without --model")
    parser.add_argument("--runtimes", default="onnx,keras", help="runtimes to serve on (default onnx,keras)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser)
    parser.add_argument("--clients", default="1,8,32,64", help="closed-loop concurrency levels (default 1,8,32,64)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds per closed-loop level and mode (default 20)")
    parser.add_argument("--open-seconds", type=float, default=20.0, help="seconds per open-loop rate and mode")
    parser.add_argument("--max-requests", type=int, default=100_000, help="most requests per level and mode")
    parser.add_argument("--soak-seconds", type=float, default=600.0, help="soak length at --soak-clients (0: none)")
    parser.add_argument("--soak-clients", type=int, default=32)
    parser.add_argument("--port", type=int, default=8731, help="first of the two ports used on 127.0.0.1")
    parser.add_argument("--no-record", action="store_true", help="print the table; do not append to BENCHMARKS.md")
    args = parser.parse_args()

    from bench.serve_costs import costs_per_request
    from kformer.data.readers import read_labelled
    from kformer.tasks import load

    work = Path(tempfile.mkdtemp(prefix="kformer-bench-serve-"))
    model = args.model or train_tickets(args.train_minutes, work / "tickets")
    data = require_shared_data("it-service-tickets")
    texts = [t for t in read_labelled(data / "test.csv.gz").texts if t.strip()][:5000]
    bodies = [json.dumps({"instances": [t[:10_000]]}).encode() for t in texts]
    runtimes, levels = args.runtimes.split(","), [int(n) for n in args.clients.split(",")]
    rows, exits, notes = load_times(model, work, runtimes), {}, [TARGETS]
    for runtime in runtimes:
        measured, stopped = run_runtime(runtime, model, bodies, args, args.port, work)
        rows += measured
        exits.update(stopped)
        classifier = load(model, runtime=runtime)
        classifier.warmup()
        print(f"+ raw model on {runtime}, pre-tokenised batches of 32", flush=True)
        raw = raw_throughput(classifier, texts, 32, seconds=max(5.0, args.seconds))
        rows.append({"runtime": runtime, "system": "raw model, pre-tokenised batches of 32", "req_per_s": raw})
        top = next((r for r in measured if r["system"] == MODES[0][0] and r.get("clients") == max(levels)), None)
        if top:
            notes.append(f"{runtime}: at {max(levels)} clients the service reaches "
                         f"{100 * top['req_per_s'] / raw:.0f} % of the raw model's {raw:,.0f} texts/s on {runtime}. "
                         + costs_per_request(classifier, texts, bodies, top))
        del classifier
    notes += verdicts(rows, runtimes, levels)
    if args.soak_seconds > 0:
        soak = Service(model, args.port, ["--runtime", runtimes[0]], work / "soak.log")
        try:
            soak.wait_ready()
            print(f"+ soak: {args.soak_clients} clients for {args.soak_seconds:g} s", flush=True)
            rss_start = soak.rss_mib()
            row = measure(soak, bodies, args.soak_seconds, 10**9, clients=args.soak_clients)
            rows.append({"runtime": runtimes[0], "system": f"soak ({args.soak_seconds:g} s)", "loop": "closed", **row})
            notes.append(f"Soak: {row['requests']} requests, errors {row['errors']}, service RSS {rss_start:.0f} MiB "
                         f"at start, {soak.rss_mib():.0f} MiB at end.")
        finally:
            exits["soak"] = soak.stop()
    notes.append(f"Services exited with {exits} after SIGTERM. Model: {model}. One request = one ticket; "
                 "load_cpu_% = this load process's CPU (100 = one core); service_cpu_% = the service's.")
    if args.no_record:
        from bench.harness import results_table

        print(results_table(rows) + "\n\n" + "\n\n".join(notes))
    else:
        record_results("Serving: kformer serve, micro-batching vs naive", rows, "\n\n".join(notes))


if __name__ == "__main__":
    main()
