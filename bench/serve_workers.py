"""`kformer serve --workers N` beside one process, on both runtimes: requests/s and latency in a
closed loop at 1, 8, 32 and 64 clients, as a share of the raw model's throughput on the same runtime.

    flock /tmp/kformer-bench.lock python -m bench.serve_workers --model /tmp/bench-tickets   # ~8 minutes
    python -m bench.serve_workers                    # trains the tickets model first (~5 more minutes)
    python -m bench.serve_workers --model runs/tickets --seconds 3 --clients 1,8 --no-record  # smoke

For each runtime (``--runtimes onnx,keras``) one `kformer serve --runtime R --workers N` runs for each
worker count (``--workers 1,2``) on 127.0.0.1, side by side with the same tickets classifier, its
other options the defaults (micro-batching on). Closed loop (:mod:`bench.serve_load`, one asyncio
process): 1, 8, 32 and 64 clients, each sending its next request when its answer is in, for
``--seconds`` each; the worker counts take turns at each level, so a slow minute hurts both.
One request carries one ticket of the test split. Then the raw model on the same runtime (its
network on pre-tokenised batches of 32, as in ``bench.serve``), and each row's requests/s as a
share of it (``of_raw``). ``service_cpu_%`` counts the service's every process (100 = one core).

Target (issue 36): at 64 clients ``--workers 2`` reaches >= 60 % of the raw model's throughput on
the same runtime, with a p99 no worse than ``--workers 1``; 0 errors at every level. Run it on a
quiet machine: the numbers are throughput on shared CPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
from pathlib import Path

from bench.harness import record_or_print, require_shared_data
from bench.headlines import Headline
from bench.serve import (
    Service,
    add_model_args,
    closed_rows,
    raw_throughput,
    stop_all,
    train_tickets,
)

TITLE = "Serving with workers: kformer serve --workers 2 vs 1"
# This benchmark's rows in BENCHMARKS.md's summary (bench/headlines.py says how they are read)
HEADLINES = (
    Headline("speed, serving and memory", "Serving with workers", "of_raw", split="runtime", percent=True,
             name="Serving at 64 clients, share of the raw model's throughput, --workers 2 vs 1",
             kformer={"system": "^--workers 2$", "clients": "^64$"},
             baseline={"system": "^--workers 1$", "clients": "^64$"}, target=">= 0.6"),
    Headline("speed, serving and memory", "Serving with workers", "p99_ms", split="runtime",
             name="Serving at 64 clients, p99 latency, --workers 2 vs 1",
             kformer={"system": "^--workers 2$", "clients": "^64$"},
             baseline={"system": "^--workers 1$", "clients": "^64$"}, target="<= baseline"),
)
TARGETS = ("Target (issue 36): at 64 clients --workers 2 reaches >= 60 % of the raw model's throughput on the same "
           "runtime, with a p99 no worse than --workers 1; 0 errors at every level.")
PATH = "/v1/models/tickets:predict"
TARGET_SHARE = 0.6


class WorkersService(Service):
    """A `kformer serve` subprocess whose CPU counts its worker processes too."""

    def pids(self) -> list[int]:
        pid = self.process.pid
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            children = []
        return [pid, *map(int, children)]

    def cpu_seconds(self) -> float:
        total = 0.0
        for pid in self.pids():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # a worker that has just ended
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total


def run_runtime(runtime: str, model: Path, bodies: list[bytes], args, work: Path, exits: dict) -> list[dict]:
    """Closed-loop rows of every worker count on ``runtime``; the services' exit codes go to ``exits``."""
    counts = [int(n) for n in args.workers.split(",")]
    services = {f"--workers {n}": WorkersService(model, args.port + i, ["--runtime", runtime, "--workers", str(n)],
                                                 work / f"{runtime}-{n}.log") for i, n in enumerate(counts)}
    try:
        return closed_rows(services, runtime, bodies, args)
    finally:
        exits.update(stop_all(services, runtime))


def verdict(rows: list[dict], runtime: str, raw: float, top: int) -> str:
    """One line: each worker count's share of the raw model at ``top`` clients and, beyond one
    worker, its p99 against one worker's and whether the target is met."""
    at_top = {row["system"]: row for row in rows if row.get("clients") == top}
    one, parts = at_top.get("--workers 1"), []
    for name, row in at_top.items():
        part = f"{name} {100 * row['of_raw']:.0f} %"
        if one is not None and row is not one:
            met = row["of_raw"] >= TARGET_SHARE and row["p99_ms"] <= one["p99_ms"]
            part += f", p99 {row['p99_ms'] / one['p99_ms']:.2f}x one worker's ({'target met' if met else 'target MISSED'})"
        parts.append(part)
    return f"{runtime}: at {top} clients, of the raw model's {raw:,.0f} texts/s: " + "; ".join(parts) + "."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser)
    parser.add_argument("--workers", default="1,2", help="worker counts to compare (default 1,2)")
    parser.add_argument("--clients", default="1,8,32,64", help="closed-loop concurrency levels (default 1,8,32,64)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds per level and worker count (default 20)")
    parser.add_argument("--max-requests", type=int, default=100_000, help="most requests per level and worker count")
    parser.add_argument("--port", type=int, default=8741, help="first of the ports used on 127.0.0.1")
    parser.add_argument("--no-record", action="store_true", help="print the table; do not append to BENCHMARKS.md")
    args = parser.parse_args()
    # SIGTERM ends the run as Ctrl-C does: the services it started are stopped, not left running
    signal.signal(signal.SIGTERM, lambda sig, frame: sys.exit(128 + sig))

    from kformer.data.readers import read_labelled
    from kformer.tasks import load

    work = Path(tempfile.mkdtemp(prefix="kformer-bench-workers-"))
    model = args.model or train_tickets(args.train_minutes, work / "tickets")
    texts = [t for t in read_labelled(require_shared_data("it-service-tickets") / "test.csv.gz").texts if t.strip()][:5000]
    bodies = [json.dumps({"instances": [t[:10_000]]}).encode() for t in texts]
    top = max(int(n) for n in args.clients.split(","))
    rows, exits, notes = [], {}, [TARGETS]
    for runtime in args.runtimes.split(","):
        measured = run_runtime(runtime, model, bodies, args, work, exits)
        classifier = load(model, runtime=runtime)
        classifier.warmup()
        print(f"+ raw model on {runtime}, pre-tokenised batches of 32", flush=True)
        raw = raw_throughput(classifier, texts, 32, seconds=max(5.0, args.seconds))
        del classifier
        for row in measured:
            row["of_raw"] = row["req_per_s"] / raw
        rows += [*measured, {"runtime": runtime, "system": "raw model, pre-tokenised batches of 32", "req_per_s": raw}]
        notes.append(verdict(measured, runtime, raw, top))
    notes.append(f"Services exited with {exits} after SIGTERM. Model: {model}. One request = one ticket; of_raw = "
                 "req_per_s / the raw model's texts/s on the same runtime; load_cpu_% = this load process's CPU "
                 "(100 = one core); service_cpu_% = the service's, all its processes. Each worker runs "
                 "KFORMER_THREADS = the cores / N threads; the raw model runs on all the cores.")
    record_or_print(TITLE, rows, "\n\n".join(notes), record=not args.no_record)


if __name__ == "__main__":
    main()
