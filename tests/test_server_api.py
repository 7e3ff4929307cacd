"""The REST service through its ASGI app (no sockets): routes, limits, errors, batching, auth, reload.

Fake TaskModels stand in for trained ones where the service's own logic is under test (batching,
queue, timeouts, reload); tests/test_server_models.py serves real tiny models end to end.
"""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest
from server_helpers import LOAD_WAIT_S

from kformer.errors import BadInput, CorruptModel
from kformer.server import ServeConfig, create_app
from kformer.tasks.base import AttentionMaps, TaskModel


class FakeClassifier(TaskModel):
    """Labels a text "long" or "short"; remembers every batch it was given."""

    task = "classify"
    parameters = {"top_k": 1, "threshold": 0.0, "unknown_label": "unknown"}

    def __init__(self, folder: Path | None = None, *, delay: float = 0.0, gate: threading.Event | None = None,
                 prefix: str = ""):
        super().__init__(folder or Path("/nonexistent"), {"labels": ["long", "short"], "recipe": {"epochs": 1},
                                                          "metrics": {"accuracy": 0.5}})
        self.delay, self.gate, self.prefix = delay, gate, prefix
        self.batches: list[list[str]] = []
        self.warmed = False

    def metadata(self):
        return {**super().metadata(), "labels": self.manifest["labels"]}

    def warmup(self):
        if self.gate is not None:
            assert self.gate.wait(10)
        self.warmed = True

    def predict(self, instances, **parameters):
        self.batches.append(list(instances))
        time.sleep(self.delay)
        for i, text in enumerate(instances):
            if text == "bug":
                raise RuntimeError("secret internal detail")
            if text == "bad":
                raise BadInput("{field} is not something this model reads", field=f"instances[{i}]")
        if not isinstance(parameters["top_k"], int) or isinstance(parameters["top_k"], bool):
            raise BadInput("{field} must be a whole number", field="parameters.top_k")
        return [{"label": self.prefix + ("long" if len(t) > 5 else "short"), "probability": 1.0, "text": t}
                for t in instances]

    def attention_maps(self, text):
        tokens = text.split()
        n = len(tokens)
        return AttentionMaps({"encoder": np.full((1, 2, n, n), 1.0 / n, "float32")}, {"encoder": tokens},
                             {"encoder": tokens}, output="short")


@asynccontextmanager
async def serving(models, config: ServeConfig | None = None, *, loader=None, wait: bool = True, headers=None):
    """The app started (lifespan) and an httpx client talking to it in-process."""
    app = create_app(models, config, loader=loader)
    async with app.router.lifespan_context(app):
        if wait:
            assert await asyncio.to_thread(app.state.service.loaded.wait, LOAD_WAIT_S)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://kformer", headers=headers, timeout=20) as client:
            yield client, app


def run(coro):
    return asyncio.run(coro)


def error_of(response, status):
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "field"} and "Traceback" not in body["error"]
    return body


def test_readiness_waits_for_warmup_and_ends_at_shutdown():
    gate = threading.Event()
    model = FakeClassifier(gate=gate)

    async def body():
        async with serving({"m": model}, wait=False) as (client, app):
            assert (await client.get("/v2/health/live")).status_code == 200
            ready = await client.get("/v2/health/ready")
            assert ready.status_code == 503 and ready.json()["loading"] == ["m"] and ready.headers["Retry-After"]
            busy = error_of(await client.post("/v1/models/m:predict", json={"instances": ["x"]}), 503)
            assert "loading" in busy["error"]
            assert (await client.get("/v1/models")).json()["models"][0]["state"] == "LOADING"
            gate.set()
            assert await asyncio.to_thread(app.state.service.loaded.wait, LOAD_WAIT_S)
            assert model.warmed and (await client.get("/v2/health/ready")).status_code == 200
            app.state.service.begin_shutdown()  # what SIGTERM does first
            assert (await client.get("/v2/health/ready")).json()["shutting_down"] is True
            assert (await client.get("/v2/health/ready")).status_code == 503

    run(body())


def test_models_status_metadata_predict_explain():
    async def body():
        async with serving({"tickets": FakeClassifier()}) as (client, _):
            listed = (await client.get("/v1/models")).json()["models"]
            assert listed == [{"name": "tickets", "task": "classify", "version": "1", "state": "AVAILABLE"}]
            status = (await client.get("/v1/models/tickets")).json()
            assert status == {"model_version_status": [{"version": "1", "state": "AVAILABLE",
                                                        "status": {"error_code": "OK", "error_message": ""}}]}
            meta = (await client.get("/v1/models/tickets/metadata")).json()
            assert meta["labels"] == ["long", "short"] and meta["task"] == "classify"
            assert meta["metrics"] == {"accuracy": 0.5} and meta["parameters"]["top_k"] == 1
            answer = await client.post("/v1/models/tickets:predict",
                                       json={"instances": ["a laptop", "hi"], "parameters": {"top_k": 2}})
            assert answer.status_code == 200
            assert [p["label"] for p in answer.json()["predictions"]] == ["long", "short"]
            assert answer.json()["model"] == "tickets"
            explained = (await client.post("/v1/models/tickets:explain", json={"instances": ["my screen flickers"]})).json()
            encoder = explained["maps"]["encoder"]
            assert encoder["rows"] == ["my", "screen", "flickers"] and np.array(encoder["weights"]).shape == (1, 2, 3, 3)
            assert explained["output"] == "short"

    run(body())


def test_bad_requests_are_4xx_with_the_field_never_500():
    config = ServeConfig(max_instances=3, max_chars=20, max_body_bytes=2000)

    async def body():
        async with serving({"m": FakeClassifier()}, config) as (client, _):
            predict = "/v1/models/m:predict"
            cases = [
                (b"{not json", 422, "body", "not valid JSON"),
                (b"", 422, "body", "empty"),
                (b"\xff\xfe", 422, "body", "UTF-8"),
                (b"[1, 2]", 422, "body", "JSON object"),
                (b"[" * 5000 + b"]" * 5000, 413, "body", "limit"),
                (json.dumps({"instances": "one string"}).encode(), 422, "instances", "list of strings"),
                (json.dumps({"texts": ["x"]}).encode(), 422, "texts", "unknown field"),
                (json.dumps({}).encode(), 422, "instances", "missing"),
                (json.dumps({"instances": []}).encode(), 422, "instances", "at least one"),
                (json.dumps({"instances": ["a", 3]}).encode(), 422, "instances[1]", "string"),
                (json.dumps({"instances": ["a", "  "]}).encode(), 422, "instances[1]", "empty"),
                (json.dumps({"instances": ["x" * 21]}).encode(), 422, "instances[0]", "limit is 20"),
                (json.dumps({"instances": ["a"] * 4}).encode(), 422, "instances", "limit is 3"),
                (json.dumps({"instances": ["a"], "parameters": [1]}).encode(), 422, "parameters", "object"),
                (json.dumps({"instances": ["a"], "parameters": {"beam": 2}}).encode(), 422, "parameters.beam", "unknown"),
                (json.dumps({"instances": ["a"], "parameters": {"top_k": "3"}}).encode(), 422, "parameters.top_k", "whole"),
                (json.dumps({"instances": ["ok", "bad"]}).encode(), 422, "instances[1]", "not something"),
                (json.dumps({"instances": ["x" * 3000]}).encode(), 413, "body", "limit is 2,000"),
            ]
            for raw, status, field, words in cases:
                got = error_of(await client.post(predict, content=raw, headers={"content-type": "application/json"}), status)
                assert got["field"] == field and words in got["error"], (raw[:40], got)

            async def chunks():  # no Content-Length: the limit applies while reading
                for _ in range(10):
                    yield b" " * 500

            assert error_of(await client.post(predict, content=chunks()), 413)["field"] == "body"
            missing = error_of(await client.post("/v1/models/nope:predict", json={"instances": ["x"]}), 404)
            assert missing["field"] == "model" and "served: m" in missing["error"]
            error_of(await client.get("/v1/models/nope"), 404)
            error_of(await client.get("/v1/nothing"), 404)
            error_of(await client.get("/v1/models/m:predict"), 404)
            error_of(await client.delete("/v1/models"), 405)
            two = error_of(await client.post("/v1/models/m:explain", json={"instances": ["a", "b"]}), 422)
            assert two["field"] == "instances" and "limit is 1" in two["error"]
            bug = error_of(await client.post(predict, json={"instances": ["bug"]}), 500)
            assert "secret" not in bug["error"] and "RuntimeError" in bug["error"]

    run(body())


def test_concurrent_requests_share_batches_and_are_answered_correctly():
    model = FakeClassifier(delay=0.02)

    async def body():
        async with serving({"m": model}, ServeConfig(max_batch=8, batch_wait_ms=20)) as (client, _):
            texts = [f"t{i}" + "x" * (i % 9) for i in range(24)]
            answers = await asyncio.gather(*(client.post("/v1/models/m:predict", json={"instances": [t]}) for t in texts))
            for text, answer in zip(texts, answers, strict=True):
                assert answer.status_code == 200
                (prediction,) = answer.json()["predictions"]
                assert prediction["text"] == text and prediction["label"] == ("long" if len(text) > 5 else "short")
            assert max(len(batch) for batch in model.batches) > 1
            assert max(len(batch) for batch in model.batches) <= 8
            # a bad instance fails only its own request, not the batch it shared
            mixed = await asyncio.gather(*(client.post("/v1/models/m:predict", json={"instances": [t]})
                                           for t in ["good one", "bad", "fine", "also"]))
            assert [a.status_code for a in mixed] == [200, 422, 200, 200]
            metrics = (await client.get("/metrics")).text
            assert 'kformer_requests_total{model="m",route="/v1/models/{name}:predict",status="200"} 27.0' in metrics
            assert 'status="422"' in metrics and "kformer_batch_instances_bucket" in metrics
            assert "kformer_queue_depth 0.0" in metrics and "process_resident_memory_bytes" in metrics
            assert "kformer_requests_in_progress 1.0" in metrics  # every request answered but this /metrics one

    run(body())


def test_no_batching_calls_the_model_once_per_request():
    model = FakeClassifier(delay=0.01)

    async def body():
        async with serving({"m": model}, ServeConfig(batching=False)) as (client, _):
            answers = await asyncio.gather(*(client.post("/v1/models/m:predict", json={"instances": ["a", "b"]})
                                             for _ in range(6)))
            assert all(a.status_code == 200 for a in answers)
            assert [len(batch) for batch in model.batches] == [2] * 6

    run(body())


def _blocking_model(gate: threading.Event):
    """A FakeClassifier whose model call for the instance "block" waits (up to 10 s) for ``gate``;
    its ``stuck`` event is set once the inference thread is inside that call."""

    class Blocking(FakeClassifier):
        stuck = threading.Event()

        def predict(self, instances, **parameters):
            if instances[0] == "block":
                self.stuck.set()
                gate.wait(10)
            return super().predict(instances, **parameters)

    return Blocking()


async def _until_stuck(model) -> None:
    """Wait (up to 10 s) until the inference thread is blocked inside ``model``'s "block" call."""
    assert await asyncio.to_thread(model.stuck.wait, 10), "the inference thread never took the blocking job"


def test_full_queue_is_503_and_late_answers_are_504_and_skipped():
    gate = threading.Event()

    model = _blocking_model(gate)
    config = ServeConfig(max_queue=2, timeout_s=0.5, batching=False)

    async def body():
        async with serving({"m": model}, config) as (client, _):
            def post(text):
                return client.post("/v1/models/m:predict", json={"instances": [text]})

            first = asyncio.create_task(post("block"))
            await _until_stuck(model)
            queued = [asyncio.create_task(post(f"q{i}")) for i in range(2)]
            for _ in range(40):  # until both wait in the queue
                if app_depth(client) == 2:
                    break
                await asyncio.sleep(0.01)
            full = await post("one too many")
            assert error_of(full, 503)["error"].startswith("the queue is full") and full.headers["Retry-After"] == "1"
            results = await asyncio.gather(first, *queued)
            assert [r.status_code for r in results] == [504, 504, 504]
            assert "did not answer within 0.5 s" in results[1].json()["error"]
            gate.set()
            for _ in range(50):
                if len(model.batches) >= 1 and app_depth(client) == 0:
                    break
                await asyncio.sleep(0.05)
            assert (await post("after")).status_code == 200
            assert ["q0"] not in model.batches and ["q1"] not in model.batches  # the callers were gone

    def app_depth(client):
        return client._transport.app.state.service.worker.depth

    run(body())


def test_a_client_that_disconnects_is_skipped():
    gate = threading.Event()

    model = _blocking_model(gate)

    async def gone_client(app):
        """A raw ASGI request whose client hangs up right after sending its body."""
        messages = [{"type": "http.request", "body": b'{"instances": ["gone"]}', "more_body": False}]
        sent = []

        async def receive():
            if messages:
                return messages.pop(0)
            await asyncio.sleep(0.1)
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
                 "path": "/v1/models/m:predict", "raw_path": b"/v1/models/m:predict", "query_string": b"",
                 "headers": [(b"content-type", b"application/json")], "client": ("127.0.0.1", 1),
                 "server": ("127.0.0.1", 80), "root_path": ""}
        await app(scope, receive, send)
        return sent[0]["status"]

    async def body():
        async with serving({"m": model}, ServeConfig(batching=False)) as (client, app):
            first = asyncio.create_task(client.post("/v1/models/m:predict", json={"instances": ["block"]}))
            await _until_stuck(model)
            assert await gone_client(app) == 499
            gate.set()
            assert (await first).status_code == 200
            assert (await client.post("/v1/models/m:predict", json={"instances": ["after"]})).status_code == 200
            assert model.batches == [["block"], ["after"]]  # "gone" was never computed

    run(body())


def test_api_key_guards_everything_but_health_and_the_page(monkeypatch):
    monkeypatch.setenv("KFORMER_TEST_KEY", "s3cret")
    config = ServeConfig(api_key_env="KFORMER_TEST_KEY")

    async def body():
        async with serving({"m": FakeClassifier()}, config) as (client, _):
            for method, path in [("GET", "/v1/models"), ("GET", "/v1/models/m"), ("GET", "/v1/models/m/metadata"),
                                 ("POST", "/v1/models/m:predict"), ("POST", "/v1/models/m:explain"),
                                 ("POST", "/v1/models/m:reload"), ("GET", "/metrics")]:
                for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
                    refused = error_of(await client.request(method, path, headers=headers, json={"instances": ["x"]}), 401)
                    assert refused["field"] == "authorization"
            assert (await client.get("/v2/health/ready")).status_code == 200
            assert (await client.get("/")).status_code == 200
            ok = await client.post("/v1/models/m:predict", json={"instances": ["x"]}, headers={"Authorization": "Bearer s3cret"})
            assert ok.status_code == 200
            assert "access-control-allow-origin" not in ok.headers

    run(body())
    monkeypatch.delenv("KFORMER_TEST_KEY")
    with pytest.raises(BadInput, match="KFORMER_TEST_KEY"):
        create_app({}, config)


def test_cors_only_when_asked():
    async def body(config):
        async with serving({"m": FakeClassifier()}, config) as (client, _):
            response = await client.get("/v1/models", headers={"Origin": "http://desk.example"})
            return response.headers.get("access-control-allow-origin")

    assert run(body(ServeConfig())) is None
    assert run(body(ServeConfig(cors_origins=("http://desk.example",)))) == "http://desk.example"


def test_reload_swaps_in_a_new_version_without_dropping_requests(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "kformer.json").write_text('{"task": "classify", "v": 1}', encoding="utf-8")

    def loader(path):
        manifest = json.loads((Path(path) / "kformer.json").read_text(encoding="utf-8"))
        if manifest.get("broken"):
            raise CorruptModel(f"{path}/model.keras cannot be read", field="model_dir")
        time.sleep(0.3)  # a slow load: requests keep flowing meanwhile
        return FakeClassifier(Path(path), delay=0.005, prefix=f"v{manifest['v']}-")

    async def body():
        async with serving({"m": folder}, ServeConfig(freeze_heap=True), loader=loader) as (client, _):
            first = (await client.get("/v1/models/m")).json()["model_version_status"][0]["version"]
            assert len(first) == 12 and gc.get_freeze_count() > 0  # the loaded heap is out of the collector's way
            (folder / "kformer.json").write_text('{"task": "classify", "v": 2}', encoding="utf-8")
            stop = asyncio.Event()

            async def traffic():
                labels = []
                while not stop.is_set():
                    answer = await client.post("/v1/models/m:predict", json={"instances": ["hello world"]})
                    assert answer.status_code == 200, answer.text
                    labels.append(answer.json()["predictions"][0]["label"])
                return labels

            clients = [asyncio.create_task(traffic()) for _ in range(4)]
            reloaded = (await client.post("/v1/models/m:reload")).json()
            await asyncio.sleep(0.1)
            stop.set()
            labels = [label for task in clients for label in await task]
            assert reloaded["previous_version"] == first and reloaded["version"] != first and reloaded["changed"]
            assert "v1-long" in labels and labels[-1] == "v2-long"
            (folder / "kformer.json").write_text('{"task": "classify", "v": 3, "broken": true}', encoding="utf-8")
            failed = error_of(await client.post("/v1/models/m:reload"), 500)
            assert "cannot be read" in failed["error"] and failed["field"] == "model_dir"
            status = (await client.get("/v1/models/m")).json()
            assert status["model_version_status"][0]["version"] == reloaded["version"]
            assert "cannot be read" in status["last_reload_error"]
            still = await client.post("/v1/models/m:predict", json={"instances": ["hello world"]})
            assert still.json()["predictions"][0]["label"] == "v2-long"
            error_of(await client.post("/v1/models/nope:reload"), 404)

    try:
        run(body())
    finally:
        gc.unfreeze()


def test_page_docs_and_openapi_are_served():
    async def body():
        async with serving({"m": FakeClassifier()}) as (client, _):
            page = await client.get("/")
            assert page.status_code == 200 and "<script src=\"/static/app.js\"" in page.text
            for name in ("app.js", "style.css"):
                assert (await client.get(f"/static/{name}")).status_code == 200
            assert (await client.get("/docs")).status_code == 200
            paths = (await client.get("/openapi.json")).json()["paths"]
            assert {"/v1/models/{name}:predict", "/v1/models/{name}:explain", "/v2/health/ready"} <= set(paths)

    run(body())


@pytest.mark.slow
def test_the_built_wheel_carries_the_page(tmp_path):
    """A regular `pip install .` serves the page: its files are package data in the wheel."""
    import shutil
    import subprocess
    import sys
    import zipfile

    root = Path(__file__).resolve().parents[1]
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (root / name).exists():
            shutil.copy(root / name, source / name)
    shutil.copytree(root / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(tmp_path / "dist"),
                    str(source)], check=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("kformer-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"kformer/server/static/{name}" for name in ("index.html", "app.js", "style.css")} <= names
    assert "kformer/server/app.py" in names and "kformer/recipes/tickets.toml" in names


# --- End to end with tiny real models (trained once per session) -------------------------------------


@pytest.fixture(scope="module")
def real_models(tiny_models):
    from kformer.models import generation

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(generation, "COMPILE", False)  # tiny models decode a few steps: quicker eagerly
        yield tiny_models


def test_real_models_answer_as_the_library_does(real_models):
    import kformer

    library = {name: kformer.load(folder) for name, folder in real_models.items()}
    tickets = ["my laptop screen will not boot", "please refund the duplicate charge", "locked out of my account"]

    async def body():
        async with serving(real_models, ServeConfig(batch_wait_ms=20)) as (client, app):
            listed = {m["name"]: m["task"] for m in (await client.get("/v1/models")).json()["models"]}
            assert listed == {"tickets": "classify", "en-ta": "translate", "arith": "arithmetic"}
            meta = (await client.get("/v1/models/tickets/metadata")).json()
            assert meta["labels"] == library["tickets"].manifest["labels"] and meta["recipe"] and meta["metrics"]

            async def predict(name, instances, parameters=None):
                answer = await client.post(f"/v1/models/{name}:predict",
                                           json={"instances": instances, "parameters": parameters or {}})
                assert answer.status_code == 200, answer.text
                return answer.json()["predictions"]

            # concurrent single-ticket requests share batches and get what the library gives each
            answers = await asyncio.gather(*(predict("tickets", [t], {"top_k": 3}) for t in tickets * 4))
            expected = library["tickets"].predict(tickets, top_k=3)
            for got, want in zip(answers, expected * 4, strict=True):
                assert got[0]["label"] == want["label"] and [t["label"] for t in got[0]["top_k"]] == [
                    t["label"] for t in want["top_k"]]
                assert got[0]["probability"] == pytest.approx(want["probability"], abs=1e-4)
            registry = app.state.service.metrics.registry
            requests = registry.get_sample_value("kformer_batch_requests_sum", {"model": "tickets"})
            calls = registry.get_sample_value("kformer_batch_requests_count", {"model": "tickets"})
            assert requests == len(answers) and calls < requests  # at least one call served several requests
            unknown = await predict("tickets", tickets[:1], {"threshold": 1.0, "unknown_label": "human"})
            assert unknown[0]["label"] == "human" and unknown[0]["unknown"]
            assert await predict("en-ta", ["one two", "three"]) == library["en-ta"].predict(["one two", "three"])
            beam = await predict("en-ta", ["one two"], {"beam": 2})
            assert beam[0]["translation"] == library["en-ta"].predict(["one two"], beam=2)[0]["translation"]
            assert "answer" in (await predict("arith", ["12+34"]))[0]
            bad_sum = error_of(await client.post("/v1/models/arith:predict", json={"instances": ["12+34", "12*3"]}), 422)
            assert bad_sum["field"] == "instances[1]"
            bad_beam = error_of(await client.post("/v1/models/en-ta:predict",
                                                  json={"instances": ["one"], "parameters": {"beam": 0}}), 422)
            assert bad_beam["field"] == "parameters.beam"
            seq2seq = (await client.post("/v1/models/en-ta:explain", json={"instances": ["one two"]})).json()
            assert set(seq2seq["maps"]) == {"encoder", "decoder_self", "cross"}
            cross = seq2seq["maps"]["cross"]
            assert np.array(cross["weights"]).shape[2:] == (len(cross["rows"]), len(cross["cols"]))
            encoder = (await client.post("/v1/models/tickets:explain", json={"instances": [tickets[0]]})).json()
            assert list(encoder["maps"]) == ["encoder"] and encoder["output"] == expected[0]["label"]
            same = (await client.post("/v1/models/tickets:reload")).json()
            assert same["changed"] is False and same["version"] == same["previous_version"]

    run(body())


def test_cli_serves_reloads_on_sighup_and_drains_on_sigterm(real_models, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from server_helpers import free_port, wait_until_ready

    port = free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "KFORMER_KEY": "k3y"}
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "kformer", "serve", "--model", f"tickets={real_models['tickets']}", "--port",
             str(port), "--api-key-env", "KFORMER_KEY", "--batch-wait-ms", "400",
             "--workers", "1"],  # this test is about one process (the default, auto, may start more)
            stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    auth = {"Authorization": "Bearer k3y"}
    try:
        wait_until_ready(url, process, log)
        assert httpx.get(f"{url}/v1/models", timeout=5).status_code == 401
        process.send_signal(signal.SIGHUP)
        for _ in range(100):
            if "swapped in" in log.read_text():
                break
            time.sleep(0.1)
        assert "swapped in" in log.read_text()
        results = {}

        def slow_request():  # waits 400 ms in the batching window: in flight when SIGTERM comes
            results["answer"] = httpx.post(f"{url}/v1/models/tickets:predict", json={"instances": ["my laptop"]},
                                           headers=auth, timeout=20)

        caller = threading.Thread(target=slow_request)
        caller.start()
        time.sleep(0.15)
        process.send_signal(signal.SIGTERM)
        caller.join(20)
        assert process.wait(timeout=30) == 0, log.read_text()
        assert results["answer"].status_code == 200 and results["answer"].json()["predictions"][0]["label"]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
