"""`kformer serve --workers 2`: two worker processes on one port, as one service.

One real service of a tiny tickets classifier on 127.0.0.1 (its model calls slowed a little by the
``predict-sleep`` fault, so that requests are in flight when it matters): both workers answer, and
/metrics, whichever answers it, counts both; a reload from a broken folder under load is refused
by every worker with the reason while every request is answered by the old model, and a good
reload switches both; SIGTERM answers what is in flight, exits 0 and leaves no worker and no
metrics folder behind. Bad worker counts and a port in use are one line and a non-zero exit.

First, in this process, the supervisor's reload between two workers' lines with fake models: a
reload that fails in one worker leaves both serving the old model, one that succeeds switches both,
and a worker whose line to the supervisor closes stops itself.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path

import httpx
import pytest
from server_helpers import TINY_CLASSIFIER, free_port, wait_until_ready

from kformer.errors import CorruptModel
from kformer.server import ServeConfig
from kformer.tasks.base import TaskModel

PREDICT = "/v1/models/tickets:predict"
TICKET = {"instances": ["my laptop will not boot"]}


@pytest.fixture(scope="module")
def tickets(tmp_path_factory) -> Path:
    from conftest import write_tickets

    from kformer.tasks import classify

    root = tmp_path_factory.mktemp("workers")
    classify.train(TINY_CLASSIFIER, write_tickets(root / "tickets.csv", 240, seed=5), root / "tickets")
    return root / "tickets"


@pytest.fixture(scope="module")
def served(tickets, tmp_path_factory):
    """`kformer serve --workers 2` of ``tickets``; yields (url, process, log, its temporary folder).
    Stopped by the last test or, failing that, killed here with its workers."""
    temp = tmp_path_factory.mktemp("serve-tmp")  # where its metrics folder goes (TMPDIR)
    port, log = free_port(), temp / "serve.log"
    env = {**os.environ, "KFORMER_FAULT": "predict-sleep:0.1", "TMPDIR": str(temp), "KFORMER_THREADS": "1"}
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "kformer", "serve", "--model", f"tickets={tickets}", "--port", str(port),
             "--workers", "2", "--runtime", "keras", "--max-batch", "2", "--shutdown-grace-s", "20"],
            stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(url, process, log)
        yield url, process, log, temp
    finally:
        workers = children(process.pid)
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        for pid in workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (Linux)."""
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def answered_by(url: str, path: str = PREDICT, tries: int = 40, sent: list | None = None) -> dict[str, httpx.Response]:
    """Worker number -> an answer of that worker, sending until both have answered (each request
    on a connection of its own, 8 at a time, so that neither worker takes them all); ``sent``
    gets every answer's status."""
    seen: dict[str, httpx.Response] = {}
    sent = [] if sent is None else sent

    def one() -> None:
        response = (httpx.post(f"{url}{path}", json=TICKET, timeout=20) if path == PREDICT
                    else httpx.get(f"{url}{path}", timeout=20))
        sent.append(response.status_code)
        seen.setdefault(response.headers["x-kformer-worker"], response)

    for _ in range(tries):
        threads = [threading.Thread(target=one) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if len(seen) == 2:
            break
    assert set(sent) == {200}
    return seen


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample of metric ``name`` in a Prometheus exposition."""
    found = []
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
            found.append((labels, float(match.group(2))))
    return found


class Tagged(TaskModel):
    """A model that is only its folder's ``v``."""

    task = "classify"

    def __init__(self, folder: Path):
        manifest = json.loads((folder / "kformer.json").read_text(encoding="utf-8"))
        super().__init__(folder, {"labels": ["a"], "recipe": {}, "metrics": {}})
        self.v = manifest["v"]


def test_a_reload_that_fails_in_one_worker_switches_no_worker(tmp_path):
    from types import SimpleNamespace

    from kformer.server.cluster import Relayed, WorkerLink
    from kformer.server.registry import ModelRegistry
    from kformer.server.workers import Supervisor, Worker

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "kformer.json").write_text('{"task": "classify", "v": 1}', encoding="utf-8")
    failing = [False, False]

    def loader(index: int):
        def load(path):
            if failing[index]:
                raise CorruptModel(f"{path}/model.keras cannot be read in worker {index}", field="model_dir")
            return Tagged(Path(path))
        return load

    supervisor = Supervisor({"m": str(folder)}, ServeConfig())
    supervisor.metrics_dir = str(tmp_path)
    services, links, lines, gone = [], [], [], [threading.Event(), threading.Event()]
    for index in range(2):
        registry = ModelRegistry({"m": folder}, loader(index))
        registry.load_all()
        service = SimpleNamespace(registry=registry, loaded=threading.Event(), failed=None, shutting_down=False)
        service.loaded.set()
        ours, theirs = socket.socketpair()
        supervisor.workers.append(Worker(index, SimpleNamespace(pid=0, wait=lambda: 0, poll=lambda: 0),
                                         Connection(ours.detach())))
        links.append(WorkerLink(index, Connection(os.dup(theirs.fileno())), on_gone=gone[index].set))
        links[-1].attach(service)
        services.append(service)
        lines.append(theirs)
    for job in (supervisor._watch, supervisor._coordinate):
        threading.Thread(target=job, daemon=True).start()
    try:
        assert all(link.started.wait(10) for link in links)  # both said ready: the supervisor told both
        first = services[0].registry.get("m").version
        (folder / "kformer.json").write_text('{"task": "classify", "v": 2}', encoding="utf-8")
        failing[1] = True
        with pytest.raises(Relayed) as refused:
            links[0].reload("m")
        assert refused.value.http_status == 500 and refused.value.field == "model_dir"
        assert "cannot be read in worker 1" in str(refused.value)
        for service in services:  # worker 0 loaded v2 but did not swap it in
            assert service.registry.get("m").model.v == 1 and service.registry.get("m").version == first
            assert "cannot be read in worker 1" in service.registry.slot("m").error
        failing[1] = False
        version, previous = links[1].reload("m")
        assert previous == first and version != first
        for service in services:
            assert service.registry.get("m").model.v == 2 and service.registry.get("m").version == version
            assert service.registry.slot("m").error is None
    finally:
        services[1].shutting_down = True  # worker 1 stops first; worker 0 finds its line closed
        supervisor.stopping = True
        for line in lines:  # both lines close: the supervisor sees both workers end
            line.shutdown(socket.SHUT_RDWR)
            line.close()
    assert gone[0].wait(10) and not gone[1].is_set()  # a worker whose supervisor is gone stops itself


@pytest.mark.parametrize(("cores", "workers"), [(1, 1), (2, 2), (3, 3), (4, 4), (16, 4)])
def test_auto_is_one_worker_per_usable_core_at_most_four(monkeypatch, cores, workers):
    from kformer import threads
    from kformer.server.config import auto_workers

    monkeypatch.setattr(threads, "usable_cores", lambda: cores)
    assert auto_workers() == workers
    assert ServeConfig().workers == ServeConfig(workers="auto").workers == workers  # the default is auto
    assert ServeConfig(workers=3).workers == 3  # a number given is kept, above the cap too
    assert ServeConfig(workers=8).workers == 8


def test_auto_is_one_worker_where_more_are_unsupported(monkeypatch):
    from kformer import threads
    from kformer.server import config

    monkeypatch.setattr(threads, "usable_cores", lambda: 8)
    monkeypatch.setattr(config, "SEVERAL_WORKERS", False)  # not Linux or macOS
    assert config.auto_workers() == 1


def test_serve_help_says_the_workers_default_is_auto(monkeypatch, capsys):
    from kformer import threads
    from kformer.cli import build_parser
    from kformer.cli.serve import _workers

    monkeypatch.setattr(threads, "usable_cores", lambda: 16)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--workers N|auto" in text
    assert "default auto: one per usable CPU core, at most 4 (1 on one core); 4 here" in text
    assert "1-1.4 GB resident per worker" in text
    assert _workers("auto") == _workers(" AUTO ") == "auto" and _workers("3") == 3


def test_bad_worker_counts_are_one_line_errors(tickets):
    for value, words in (("0", "--workers must be a whole number of at least 1, not 0"),
                         ("65", "--workers must be at most 64"), ("two", "takes a whole number or 'auto'")):
        done = subprocess.run([sys.executable, "-m", "kformer", "serve", "--model", f"tickets={tickets}",
                               "--workers", value], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and words in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_both_workers_answer_and_metrics_count_both(served):
    url, process, _, _ = served
    sent: list[int] = []
    assert set(answered_by(url, sent=sent)) == {"0", "1"}
    for _ in range(50):  # a request is counted just after its answer is sent
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
        counted = sum(n for labels, n in samples(metrics, "kformer_requests_total")
                      if labels["route"] == "/v1/models/{name}:predict")
        computed = sum(n for _, n in samples(metrics, "kformer_batch_requests_sum"))
        if counted == computed == len(sent):  # both workers' requests, whichever worker answered /metrics
            break
        time.sleep(0.1)
    assert counted == computed == len(sent)
    assert [value for _, value in samples(metrics, "kformer_ready")] == [1.0]
    pids = {labels["pid"] for labels, _ in samples(metrics, "kformer_worker_resident_memory_bytes")}
    assert pids == {str(pid) for pid in children(process.pid)} and len(pids) == 2


def test_a_port_in_use_is_a_one_line_error(served, tickets):
    port = served[0].rsplit(":", 1)[1]  # refused before any worker starts
    done = subprocess.run([sys.executable, "-m", "kformer", "serve", "--model", f"tickets={tickets}", "--workers", "2",
                           "--port", port], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_broken_folder_reloads_nowhere_while_requests_keep_being_answered(served, tickets):
    url, _, log, _ = served
    statuses: Counter = Counter()
    stop = threading.Event()

    def client() -> None:
        with httpx.Client(base_url=url, timeout=20) as http:
            while not stop.is_set():
                statuses[http.post(PREDICT, json=TICKET).status_code] += 1

    clients = [threading.Thread(target=client) for _ in range(4)]
    for thread in clients:
        thread.start()
    model = tickets / "model.keras"
    good = model.read_bytes()
    try:
        time.sleep(0.5)
        before = dict(statuses)
        model.write_bytes(b"this is not a zip file")
        refused = httpx.post(f"{url}/v1/models/tickets:reload", timeout=120)
        time.sleep(0.5)
    finally:
        stop.set()
        for thread in clients:
            thread.join(30)
        model.write_bytes(good)
    assert refused.status_code == 500, refused.text
    assert refused.json()["field"] == "model_dir" and "model.keras" in refused.json()["error"]
    assert "corrupt" in refused.json()["error"]
    assert set(statuses) == {200} and statuses[200] > before.get(200, 0) > 0  # answered throughout, no error
    for answer in answered_by(url, "/v1/models/tickets").values():  # both workers kept the old model and say why
        assert "corrupt" in answer.json()["last_reload_error"]
    old = answered_by(url, "/v1/models/tickets")["0"].json()["model_version_status"][0]["version"]

    metrics = json.loads((tickets / "metrics.json").read_text())
    (tickets / "metrics.json").write_text(json.dumps({**metrics, "note": "retrained"}))  # a new version
    reloaded = httpx.post(f"{url}/v1/models/tickets:reload", timeout=120).json()
    assert reloaded["changed"] and reloaded["previous_version"] == old, reloaded
    for answer in answered_by(url, "/v1/models/tickets").values():  # both workers switched
        status = answer.json()
        assert status["model_version_status"][0]["version"] == reloaded["version"]
        assert "last_reload_error" not in status
    assert "Traceback" not in log.read_text()


def test_sigterm_answers_what_is_in_flight_and_leaves_no_worker_behind(served):
    url, process, log, temp = served
    workers = children(process.pid)
    assert len(workers) == 2 and list(temp.glob("kformer-metrics-*"))
    body = json.dumps(TICKET).encode()
    request = (f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    port = int(url.rsplit(":", 1)[1])
    sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(24)]
    for sock in sockets:  # 24 requests, 2 to a model call of 0.1 s: half a second of work or more for each worker
        sock.sendall(request)
    time.sleep(0.3)  # every request read by a worker; many still queued
    process.send_signal(signal.SIGTERM)
    sigterm_at, statuses, late = time.monotonic(), [], 0
    for sock in sockets:
        with sock:
            sock.settimeout(30)
            head = sock.recv(65536)
            statuses.append(int(head.split(b" ", 2)[1]))
            late += time.monotonic() > sigterm_at + 0.05
    assert statuses == [200] * len(sockets) and late >= 1  # some were answered after SIGTERM
    assert process.wait(timeout=40) == 0, log.read_text()[-3000:]
    assert not any(alive(pid) for pid in workers)
    assert not list(temp.glob("kformer-metrics-*"))  # the metrics folder is removed
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/v2/health/live", timeout=2)
    assert "Traceback" not in log.read_text()
