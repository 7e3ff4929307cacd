"""The load generators of ``bench.serve``: closed loop (each client sends its next request when its
answer is in) and open loop (requests start at a fixed rate, whatever the answers do).

Both are one asyncio process with minimal keep-alive HTTP/1.1 clients, so the load generator costs
little (its CPU share is reported). A closed loop hides tail latency -- a slow answer also delays
the next requests -- so the open loop starts request ``i`` at ``i / rate`` seconds and counts its
latency from then, on whichever connection is free (a new one when none is: it never waits for a
connection, so a stalled service cannot slow the arrivals down).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter


class Load:
    """Results of one load level: latencies (s) of answered requests and statuses of all."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.statuses: Counter = Counter()
        self.sent = 0


class Connection:
    """One keep-alive HTTP/1.1 connection to ``127.0.0.1:port``, opened on first use."""

    def __init__(self, port: int):
        self.port, self.reader, self.writer = port, None, None

    async def post(self, path: str, body: bytes) -> int:
        """The status of ``POST path`` with the JSON ``body``; raises OSError and the like on failures."""
        request = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status, length = int(head.split(b" ", 2)[1]), 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        await self.reader.readexactly(length)
        if b"connection: close" in head.lower():
            self.close()
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def _send(connection: Connection, path: str, body: bytes, started: float, load: Load) -> bool:
    """One request on ``connection``, its latency counted from ``started``; False on a failure."""
    try:
        status = await connection.post(path, body)
    except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
        load.statuses["connection error"] += 1
        connection.close()
        return False
    load.statuses[status] += 1
    if status == 200:
        load.latencies.append(time.perf_counter() - started)
    return True


async def _closed_client(port: int, path: str, bodies: list[bytes], offset: int, until: float, limit: int,
                         load: Load) -> None:
    connection, i = Connection(port), offset
    while time.perf_counter() < until and load.sent < limit:
        load.sent += 1
        body = bodies[i % len(bodies)]
        i += 1
        if not await _send(connection, path, body, time.perf_counter(), load):
            await asyncio.sleep(0.05)
    connection.close()


async def closed_loop(port: int, path: str, bodies: list[bytes], clients: int, seconds: float,
                      limit: int) -> tuple[Load, float]:
    """``clients`` connections sending back to back for ``seconds`` (at most ``limit`` requests);
    (results, wall seconds)."""
    load = Load()
    started = time.perf_counter()
    until = started + seconds
    await asyncio.gather(*(_closed_client(port, path, bodies, c * 7919, until, limit, load) for c in range(clients)))
    return load, time.perf_counter() - started


async def open_loop(port: int, path: str, bodies: list[bytes], rate: float, seconds: float) -> tuple[Load, float]:
    """Requests started at ``rate`` per second for ``seconds``, latency counted from each one's
    scheduled start; (results, wall seconds until the last answer)."""
    load, idle, tasks = Load(), [], []
    started = time.perf_counter()

    async def one(i: int, due: float) -> None:
        connection = idle.pop() if idle else Connection(port)
        if await _send(connection, path, bodies[i % len(bodies)], due, load):
            idle.append(connection)

    total = int(rate * seconds)
    for i in range(total):
        due = started + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        load.sent += 1
        tasks.append(asyncio.ensure_future(one(i, due)))
    await asyncio.gather(*tasks)
    for connection in idle:
        connection.close()
    return load, time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]
