"""`kformer serve` under faults: good and faulty requests mixed, then SIGTERM under load.

    flock /tmp/kformer-bench.lock python -m bench.faults                 # trains the tickets model (~5 min)
    python -m bench.faults --model runs/tickets --clients 32 --seconds 30
    python -m bench.faults --tiny --clients 8 --seconds 3 --no-record     # smoke run (a tiny generated model)

One `kformer serve` subprocess on 127.0.0.1 is driven by this one asyncio process: ``--clients``
concurrent clients, each sending one request per connection, drawn from a fixed mix of good
requests (one ticket) and faults: malformed JSON, a form body (curl -d's content type; JSON
inside, so it is answered), 10,000 instances (422), a 2 MB body (413), a client that hangs up
halfway through its body (no answer expected), and a few clients trickling their headers in one
byte every 0.2 s (closed after ``--read-timeout-s``). After ``--sigterm-after`` seconds the
service gets SIGTERM while the load goes on.

Reported: requests sent by kind, answers by status, connections closed without an answer, and
requests lost: sent (written completely) before SIGTERM, expecting an answer, and not answered.
Target: 0 lost, 0 answers 5xx before SIGTERM, exit status 0, slow clients cut off within the
read timeout. Requests started after SIGTERM are refused (503 or connection refused), not lost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness import record_or_print
from bench.headlines import Headline
from bench.serve import Service, train_tickets

# This benchmark's rows in BENCHMARKS.md's summary (bench/headlines.py says how they are read)
HEADLINES = (
    Headline("speed, serving and memory", "Serving under faults", "lost", name="Serving under faults: good requests lost",
             kformer={"system": "^good$"}, target="== 0"),
)

KINDS = {  # kind: (share of requests, expected answer)
    "good": (0.70, "200"),
    "malformed JSON": (0.06, "422"),
    "form content type": (0.06, "200"),
    "10,000 instances": (0.06, "422"),
    "2 MB body": (0.06, "413"),
    "hangs up mid-body": (0.06, "none"),
}
SLOW_CLIENTS = 2


def request_bytes(kind: str, text: str) -> tuple[bytes, bytes]:
    """``(head, body)`` of one request of ``kind``."""
    content_type = "application/json"
    if kind == "malformed JSON":
        body = b'{"instances": ["' + text.encode() + b'"'
    elif kind == "form content type":
        body, content_type = json.dumps({"instances": [text]}).encode(), "application/x-www-form-urlencoded"
    elif kind == "10,000 instances":
        body = json.dumps({"instances": [text[:20]] * 10_000}).encode()
    elif kind == "2 MB body":
        body = json.dumps({"instances": ["x" * 2_000_000]}).encode()
    else:
        body = json.dumps({"instances": [text]}).encode()
    head = (f"POST /v1/models/tickets:predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    return head, body


@dataclass
class Outcome:
    kind: str
    sent_at: float | None = None  # when the request was written completely (None: never)
    status: str = "none"  # HTTP status, "refused", "closed" (no answer) or "none" (hung up on purpose)


@dataclass
class Run:
    outcomes: list[Outcome] = field(default_factory=list)
    sigterm_at: float = float("inf")
    slow_closed_after: list[float] = field(default_factory=list)


async def one_request(port: int, kind: str, text: str) -> Outcome:
    outcome = Outcome(kind)
    head, body = request_bytes(kind, text)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        outcome.status = "refused"
        return outcome
    try:
        if kind == "hangs up mid-body":
            writer.write(head + body[: len(body) // 2])
            await writer.drain()
            return outcome
        writer.write(head + body)
        await writer.drain()
        outcome.sent_at = time.monotonic()
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
        outcome.status = answer.split(b" ", 2)[1].decode()
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, IndexError):
        outcome.status = "closed"
    finally:
        writer.close()
    return outcome


async def client(port: int, texts: list[str], until: float, run: Run, rng: random.Random) -> None:
    kinds, weights = list(KINDS), [share for share, _ in KINDS.values()]
    while time.monotonic() < until:
        kind = rng.choices(kinds, weights)[0]
        outcome = await one_request(port, kind, rng.choice(texts))
        run.outcomes.append(outcome)
        if outcome.status == "refused":
            await asyncio.sleep(0.05)


async def slow_client(port: int, run: Run) -> None:
    """Trickles a request head one byte every 0.2 s; records when the service closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    head = b"POST /v1/models/tickets:predict HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"y" * 10_000
    try:
        for i in range(len(head)):
            writer.write(head[i : i + 1])
            await writer.drain()
            try:
                if await asyncio.wait_for(reader.read(1), 0.2) == b"":
                    break
            except TimeoutError:
                continue
    except OSError:
        pass
    run.slow_closed_after.append(time.monotonic() - started)
    writer.close()


async def drive(service: Service, texts: list[str], clients: int, seconds: float, sigterm_after: float) -> Run:
    run = Run()
    until = time.monotonic() + seconds

    async def sigterm() -> None:
        await asyncio.sleep(sigterm_after)
        run.sigterm_at = time.monotonic()
        service.process.send_signal(signal.SIGTERM)

    await asyncio.gather(sigterm(), *(slow_client(service.port, run) for _ in range(SLOW_CLIENTS)),
                         *(client(service.port, texts, until, run, random.Random(c)) for c in range(clients)))
    return run


def report(run: Run) -> tuple[list[dict], dict]:
    """Rows by kind (before / after SIGTERM) and the totals."""
    rows, totals = [], Counter()
    for kind, (_, expected) in KINDS.items():
        mine = [o for o in run.outcomes if o.kind == kind]
        before = [o for o in mine if o.sent_at is not None and o.sent_at < run.sigterm_at]
        lost = [o for o in before if expected != "none" and o.status in ("closed", "none")]
        statuses = Counter(o.status for o in mine)
        rows.append({"system": kind, "expected": expected, "sent": len(mine),
                     "answers": json.dumps(dict(sorted(statuses.items()))),
                     "sent_before_sigterm": len(before), "lost": len(lost),
                     "unexpected_before_sigterm": sum(o.status not in (expected, "closed", "none") for o in before)})
        totals.update(sent=len(mine), lost=len(lost), fivexx_before=sum(o.status.startswith("5") for o in before))
        totals.update({f"status {s}": n for s, n in statuses.items()})
    return rows, dict(totals)


def tiny_model(out: Path) -> Path:
    """A tiny classifier of generated tickets (the smoke run; seconds)."""
    from kformer.tasks import classify

    rng = random.Random(5)
    queues = {"Billing": ["invoice", "refund", "charge"], "Hardware": ["laptop", "screen", "battery"],
              "Access": ["password", "login", "vpn"]}
    filler = "please help me with my the a today urgent thanks".split()
    rows = [(" ".join(rng.sample(filler, 5) + rng.sample(queues[q], 2)), q) for q in rng.choices(list(queues), k=240)]
    classify.train({"max_length": 16, "vocab_size": 200, "dim": 16, "ff_dim": 32, "epochs": 2},
                   ([t for t, _ in rows], [q for _, q in rows]), out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a trained tickets model folder (default: train one)")
    parser.add_argument("--tiny", action="store_true", help="serve a tiny model of generated tickets (smoke run)")
    parser.add_argument("--train-minutes", type=float, default=5.0, help="training budget without --model")
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients (default 32)")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the load (default 30)")
    parser.add_argument("--sigterm-after", type=float, default=None, help="seconds into the load (default: 2/3 of it)")
    parser.add_argument("--read-timeout-s", type=float, default=2.0, help="the service's --read-timeout-s (default 2)")
    parser.add_argument("--port", type=int, default=8741)
    parser.add_argument("--no-record", action="store_true", help="print the table; do not append to BENCHMARKS.md")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="kformer-bench-faults-"))
    if args.tiny:
        model, texts = tiny_model(work / "tickets"), ["my laptop screen is black", "refund the duplicate charge"]
    else:
        from bench.harness import require_shared_data
        from kformer.data.readers import read_labelled

        model = args.model or train_tickets(args.train_minutes, work / "tickets")
        texts = [t[:5000] for t in read_labelled(require_shared_data("it-service-tickets") / "test.csv.gz").texts][:2000]
    service = Service(model, args.port, ["--read-timeout-s", str(args.read_timeout_s)], work / "serve.log")
    try:
        service.wait_ready()
        sigterm_after = args.sigterm_after if args.sigterm_after is not None else args.seconds * 2 / 3
        run = asyncio.run(drive(service, texts, args.clients, args.seconds, sigterm_after))
        exit_status = service.process.wait(timeout=120)
        shutdown_s = time.monotonic() - run.sigterm_at
    finally:
        if service.process.poll() is None:
            service.process.kill()
            service.process.wait(10)
    rows, totals = report(run)
    log = (work / "serve.log").read_text(encoding="utf-8", errors="replace")
    notes = (f"{totals['sent']} requests from {args.clients} clients over {args.seconds:g} s, SIGTERM at "
             f"{sigterm_after:g} s (exited {shutdown_s:.1f} s later, after the load); lost (sent before SIGTERM, no answer): **{totals['lost']}**; 5xx before "
             f"SIGTERM: {totals['fivexx_before']}; exit status {exit_status}; tracebacks in the service log: "
             f"{log.count('Traceback')}; {SLOW_CLIENTS} header-trickling clients closed after "
             f"{', '.join(f'{s:.1f}' for s in run.slow_closed_after)} s (read timeout {args.read_timeout_s:g} s). "
             "answers: HTTP status, 'closed' = connection closed without an answer, 'refused' = no connection "
             "(after SIGTERM), 'none' = the client hung up on purpose. Model: "
             f"{'tiny generated tickets' if args.tiny else model}.")
    record_or_print("Serving under faults: bad requests, slow clients, SIGTERM under load", rows, notes,
                    record=not args.no_record)


if __name__ == "__main__":
    main()
