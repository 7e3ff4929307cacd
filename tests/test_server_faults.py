"""The REST service under faults: bad bodies, huge requests, slow and vanishing clients, SIGTERM under load.

In this process, through the ASGI app and a fake model, where the app's own handling is under
test: malformed JSON, content types, a 10 MB body (413 before it is read), 10,000 instances (422
naming the limit), a client hanging up halfway through its body. Then one real `kformer serve`
subprocess with a tiny trained classifier for what only sockets show: headers trickling in
(closed after ``--read-timeout-s``), a connection that sends nothing, a head over 64 KiB (431),
clients that vanish mid-request (the service stays healthy), and SIGTERM under load (every
request sent before it is answered, then exit 0). The inference thread is slowed by the
``predict-sleep`` fault (:mod:`kformer.faults`), so requests are surely in flight at SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from server_helpers import LOAD_WAIT_S

from kformer.server import ServeConfig, create_app
from kformer.tasks.base import TaskModel

READ_TIMEOUT_S = 1.0
PREDICT = "/v1/models/m:predict"


class Echo(TaskModel):
    """Answers each text with its length; remembers every batch."""

    task = "classify"
    parameters = {"top_k": 1, "threshold": None, "unknown_label": "unknown"}

    def __init__(self):
        super().__init__(Path("/nonexistent"), {"labels": ["a"], "recipe": {}, "metrics": {}})
        self.batches: list[list[str]] = []

    def predict(self, instances, **parameters):
        self.batches.append(list(instances))
        return [{"label": "a", "length": len(text)} for text in instances]


@asynccontextmanager
async def serving(model: TaskModel, config: ServeConfig | None = None):
    app = create_app({"m": model}, config)
    async with app.router.lifespan_context(app):
        assert await asyncio.to_thread(app.state.service.loaded.wait, LOAD_WAIT_S)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://kformer", timeout=20) as client:
            yield client, app


def error_of(response: httpx.Response, status: int, field: str | None, *words: str) -> str:
    assert response.status_code == status, response.text[:300]
    body = response.json()
    assert set(body) == {"error", "field"} and body["field"] == field, body
    assert "Traceback" not in body["error"] and all(w in body["error"] for w in words), body
    return body["error"]


def statuses(app) -> dict[str, float]:
    """Requests answered so far by status, from the service's metrics."""
    counts: dict[str, float] = {}
    for metric in app.state.service.metrics.registry.collect():
        for sample in metric.samples:
            if sample.name == "kformer_requests_total":
                counts[sample.labels["status"]] = counts.get(sample.labels["status"], 0) + sample.value
    return counts


def test_malformed_bodies_content_types_and_huge_requests_get_a_4xx_naming_the_problem():
    model = Echo()

    async def body():
        async with serving(model) as (client, app):
            json_type = {"content-type": "application/json"}
            for raw, field, words in [
                (b'{"instances": ["a"]', "body", ("not valid JSON", "line 1")),
                (b"{'instances': ['a']}", "body", ("not valid JSON",)),
                (b'{"instances": ["a"]} trailing', "body", ("not valid JSON", "Extra data")),
                (b"\x00\x01\x02", "body", ("not valid JSON",)),
                (b'{"instances": [NaN]}', "instances[0]", ("must be a string",)),
                (b"[" * 200_000 + b"]" * 200_000, "body", ("nested too deeply",)),
            ]:
                error_of(await client.post(PREDICT, content=raw, headers=json_type), 422, field, *words)

            # the content type is not checked: a JSON body is read as JSON (curl -d sends it as a
            # form); a body that is not JSON is refused as such, whatever its type says
            for content_type in ("text/plain", "application/x-www-form-urlencoded", "application/octet-stream"):
                answer = await client.post(PREDICT, content=b'{"instances": ["abc"]}', headers={"content-type": content_type})
                assert answer.status_code == 200 and answer.json()["predictions"] == [{"label": "a", "length": 3}]
            error_of(await client.post(PREDICT, data={"instances": "abc"}), 422, "body", "not valid JSON")
            error_of(await client.post(PREDICT, files={"instances": ("a.txt", b"abc")}), 422, "body", "not valid JSON")

            # 10 MB: refused from its Content-Length before reading, or while streaming without one
            ten_mb = b'{"instances": ["' + b"x" * 10_000_000 + b'"]}'
            error_of(await client.post(PREDICT, content=ten_mb, headers=json_type), 413, "body", "limit is 1,048,576")
            sent = []

            async def chunks():
                for _ in range(100):
                    sent.append(100_000)
                    yield b"x" * 100_000

            error_of(await client.post(PREDICT, content=chunks(), headers=json_type), 413, "body", "1,048,576")
            assert sum(sent) <= 1_300_000  # reading stopped at the limit, not after 10 MB

            many = json.dumps({"instances": ["a"] * 10_000}).encode()
            error_of(await client.post(PREDICT, content=many, headers=json_type), 422, "instances",
                     "10000 texts", "the limit is 64 per request (max_instances)")

            assert model.batches == [["abc"]] * 3  # nothing refused reached the model
            assert (await client.get("/v2/health/ready")).status_code == 200
            assert not any(status.startswith("5") for status in statuses(app)), statuses(app)

    asyncio.run(body())


def test_a_client_that_hangs_up_halfway_through_its_body_is_skipped():
    model = Echo()

    async def body():
        async with serving(model) as (client, app):
            messages = [{"type": "http.request", "body": b'{"instances": ["half', "more_body": True},
                        {"type": "http.disconnect"}]
            sent = []

            async def receive():
                return messages.pop(0) if messages else {"type": "http.disconnect"}

            async def send(message):
                sent.append(message)

            scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                     "scheme": "http", "path": PREDICT, "raw_path": PREDICT.encode(), "query_string": b"",
                     "headers": [(b"content-type", b"application/json"), (b"content-length", b"1000")],
                     "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "root_path": ""}
            await app(scope, receive, send)
            assert sent[0]["status"] == 422 and b"went away" in sent[1]["body"]
            answer = await client.post(PREDICT, json={"instances": ["after"]})
            assert answer.status_code == 200 and model.batches == [["after"]]

    asyncio.run(body())


# --- one real `kformer serve` --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`kformer serve` of a tiny tickets classifier on 127.0.0.1 with --read-timeout-s 1 and every
    model call slowed by 0.15 s; yields (port, process, log). Stopped by the tests or at the end."""
    from conftest import write_tickets
    from server_helpers import TINY_CLASSIFIER, free_port, wait_until_ready

    from kformer.tasks import classify

    root = tmp_path_factory.mktemp("faults")
    classify.train(TINY_CLASSIFIER, write_tickets(root / "tickets.csv", 240, seed=5), root / "tickets")
    port, log = free_port(), root / "serve.log"
    env = {**os.environ, "KFORMER_FAULT": "predict-sleep:0.15", "TF_CPP_MIN_LOG_LEVEL": "3"}
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "kformer", "serve", "--model", f"tickets={root / 'tickets'}", "--port", str(port),
             "--read-timeout-s", str(READ_TIMEOUT_S), "--max-batch", "8", "--shutdown-grace-s", "20",
             "--workers", "1"],  # one process, as the tests expect (the default, auto, may start more)
            stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until_ready(f"http://127.0.0.1:{port}", process, log)
        yield port, process, log
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def closed_after(sock: socket.socket, trickle: bytes = b"", every: float = 0.2, limit: float = 10.0) -> float:
    """Seconds until the server closes ``sock`` while we send ``trickle`` one byte per ``every`` s."""
    started = time.monotonic()
    sock.settimeout(every)
    for i in range(int(limit / every)):
        if trickle:
            try:
                sock.sendall(trickle[i % len(trickle): i % len(trickle) + 1])
            except OSError:  # reset: closed
                return time.monotonic() - started
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - started
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - started
    return float("inf")


def ready_and_answering(port: int) -> None:
    url = f"http://127.0.0.1:{port}"
    assert httpx.get(f"{url}/v2/health/ready", timeout=5).status_code == 200
    answer = httpx.post(f"{url}/v1/models/tickets:predict", json={"instances": ["my laptop screen"]}, timeout=20)
    assert answer.status_code == 200 and answer.json()["predictions"][0]["label"]


def test_slow_silent_and_oversized_clients_are_cut_off(served):
    port, _, _ = served
    address = ("127.0.0.1", port)
    head = b"POST /v1/models/tickets:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Slow: "
    with socket.create_connection(address) as slow:
        slow.sendall(head[:20])
        assert READ_TIMEOUT_S - 0.2 <= closed_after(slow, trickle=head[20:] + b"y" * 100) <= READ_TIMEOUT_S + 2
    with socket.create_connection(address) as silent:
        assert closed_after(silent) <= READ_TIMEOUT_S + 2
    body = b'{"instances": ["my laptop"]}'
    with socket.create_connection(address) as slow_body:  # the head arrives, the body trickles
        slow_body.sendall(head[:-9] + f"Content-Length: {len(body)}\r\n\r\n".encode())
        assert closed_after(slow_body, trickle=body) <= READ_TIMEOUT_S + 2
    with socket.create_connection(address) as huge:
        huge.settimeout(10)
        huge.sendall(head + b"y" * 70_000)
        answer = huge.recv(65536)
        assert answer.startswith(b"HTTP/1.1 431 ") and b'"field": null' in answer
    ready_and_answering(port)


def test_clients_that_vanish_mid_request_leave_the_service_healthy(served):
    port, _, log = served
    body = b'{"instances": ["my laptop will not boot"]}'
    request = (f"POST /v1/models/tickets:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode()
    for sent in (request[:30], request + body[:10], request + body):  # in the head, in the body, awaiting the answer
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(sent)
    ready_and_answering(port)
    assert "Traceback" not in log.read_text()


async def _request(port: int, body: bytes, sent: list[float]) -> tuple[int, float]:
    """One POST on its own connection; (status, time answered). ``sent`` gets the time it was written."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write((f"POST /v1/models/tickets:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
    await writer.drain()
    sent.append(time.monotonic())
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        return int(head.split(b" ", 2)[1]), time.monotonic()
    finally:
        writer.close()


def _requests_read(port: int) -> int:
    """Prediction requests the service has read: in progress (less this /metrics request) or answered."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith("kformer_requests_in_progress ")
              or (line.startswith("kformer_requests_total{") and ':predict"' in line)]
    return round(sum(values)) - 1


def test_sigterm_under_load_answers_every_request_then_exits_0(served):
    port, process, log = served
    bodies = [json.dumps({"instances": [f"ticket {i} my laptop will not boot"]}).encode() for i in range(40)]
    before = _requests_read(port)

    async def load():
        sent: list[float] = []
        tasks = [asyncio.create_task(_request(port, body, sent)) for body in bodies]
        deadline = time.monotonic() + 30
        # SIGTERM once the service has read every request (model calls take 0.15 s each, 8 a call): a
        # request still unread then would be closed unanswered, as any server's would
        while await asyncio.to_thread(_requests_read, port) - before < len(tasks):
            assert time.monotonic() < deadline, "the service did not read the 40 requests within 30 s"
            await asyncio.sleep(0.01)
        process.send_signal(signal.SIGTERM)
        return time.monotonic(), await asyncio.gather(*tasks)

    sigterm_at, answers = asyncio.run(load())
    assert [status for status, _ in answers] == [200] * len(bodies)
    assert sum(answered > sigterm_at for _, answered in answers) >= 10  # they were in flight at SIGTERM
    assert process.wait(timeout=30) == 0, log.read_text()[-3000:]
    assert "Traceback" not in log.read_text()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/v2/health/live", timeout=2)
