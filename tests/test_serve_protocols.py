"""TensorFlow Serving's REST API and the Open Inference Protocol (KServe v2), spoken by clients
nobody here wrote: the request bodies of TF Serving's own REST documentation, ``tritonclient.http``
(the ``[test]`` extra) and, where an interpreter with it is named, the ``kserve`` SDK's REST client.

Fakes stand in for trained models where the protocol's own logic is under test; the tiny real
models (trained once per session) answer the clients end to end.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from server_helpers import uvicorn_thread
from test_server_api import FakeClassifier, error_of, run, serving

from kformer.server import ServeConfig, create_app


class Labeller(FakeClassifier):
    """A fake classifier answering whole rows: label, probability, unknown, top_k."""

    def predict(self, instances, **parameters):
        self.batches.append(list(instances))
        rows = []
        for text in instances:
            ranked = ["long", "short"] if len(text) > 5 else ["short", "long"]
            top = [{"label": label, "probability": p} for label, p in zip(ranked, (0.75, 0.25), strict=True)][: parameters["top_k"]]
            rows.append({"label": top[0]["label"], "probability": 0.75, "unknown": False, "top_k": top})
        return rows


# --- TensorFlow Serving's REST API ---------------------------------------------------------------------
# The bodies below are quoted from https://www.tensorflow.org/tfx/serving/api_rest ("Predict API",
# "Example"), with only their values changed where noted.


def test_tf_serving_request_bodies_from_its_documentation():
    async def body():
        async with serving({"tickets": Labeller()}) as (client, _):
            version = (await client.get("/v1/models/tickets")).json()["model_version_status"][0]["version"]

            # "List of 3 scalar tensors": {"instances": [ "foo", "bar", "baz" ]}
            rows = await client.post("/v1/models/tickets:predict", json={"instances": ["foo", "bar", "baz"]})
            assert rows.status_code == 200, rows.text
            assert [p["label"] for p in rows.json()["predictions"]] == ["short", "short", "short"]

            # "(Optional) Serving signature to use": "signature_name": <string>
            named = await client.post("/v1/models/tickets:predict",
                                      json={"signature_name": "serving_default", "instances": ["a longer text"]})
            assert named.json()["predictions"][0]["label"] == "long"
            # the docs' "signature_name": "classify_objects" names a signature this model lacks
            wrong = error_of(await client.post("/v1/models/tickets:predict", json={
                "signature_name": "classify_objects", "instances": ["foo"]}), 422)
            assert wrong["field"] == "signature_name" and "serving_default" in wrong["error"]

            # columnar: "The value for inputs key can either a single input tensor or a map of input name to
            # tensors"; the answer is "outputs", one entry per named output
            for inputs in (["foo", "a longer text"], {"text": ["foo", "a longer text"]}):
                columns = await client.post("/v1/models/tickets:predict",
                                            json={"inputs": inputs, "parameters": {"top_k": 2}})
                assert columns.status_code == 200, columns.text
                outputs = columns.json()["outputs"]
                assert outputs["label"] == ["short", "long"] and outputs["unknown"] == [False, False]
                assert outputs["top_k_label"] == [["short", "long"], ["long", "short"]]
                assert outputs["top_k_probability"] == [[0.75, 0.25], [0.75, 0.25]]
                assert "predictions" not in columns.json()

            # the docs' columnar example names inputs this model does not have
            tagged = error_of(await client.post("/v1/models/tickets:predict", json={"inputs": {
                "tag": ["foo", "bar"], "signal": [[1, 2, 3, 4, 5], [3, 4, 1, 2, 5]],
                "sensor": [[[1, 2], [3, 4]], [[4, 5], [6, 8]]]}}), 422)
            assert tagged["field"] == "inputs" and "'text'" in tagged["error"]
            rowwise = error_of(await client.post("/v1/models/tickets:predict", json={"instances": [
                {"tag": "foo", "signal": [1, 2, 3, 4, 5], "sensor": [[1, 2], [3, 4]]}]}), 422)
            assert rowwise["field"] == "instances[0]"
            assert (await client.post("/v1/models/tickets:predict",
                                      json={"instances": [{"text": "foo"}]})).json()["predictions"][0]["label"] == "short"
            both = error_of(await client.post("/v1/models/tickets:predict",
                                              json={"instances": ["a"], "inputs": ["a"]}), 422)
            assert "not both" in both["error"]

            # curl -d '{"instances": [1.0,2.0,5.0]}' -X POST http://localhost:8501/v1/models/half_plus_three:predict
            numbers = error_of(await client.post("/v1/models/tickets:predict", json={"instances": [1.0, 2.0, 5.0]}), 422)
            assert numbers["field"] == "instances[0]" and "string" in numbers["error"]
            # curl -i -d '{"instances": [1.0,5.0]}' -X POST http://localhost:8501/v1/models/half:predict -> 404
            missing = error_of(await client.post("/v1/models/half:predict", json={"instances": [1.0, 5.0]}), 404)
            assert "half" in missing["error"]

            # GET http://host:port/v1/models/${MODEL_NAME}[/versions/${VERSION}|/labels/${LABEL}][/metadata]
            # and POST ...[/versions/${VERSION}|/labels/${LABEL}]:predict
            status = {"model_version_status": [{"version": version, "state": "AVAILABLE",
                                                 "status": {"error_code": "OK", "error_message": ""}}]}
            for prefix in (f"/v1/models/tickets/versions/{version}", "/v1/models/tickets/labels/latest"):
                assert (await client.get(prefix)).json() == status
                meta = (await client.get(f"{prefix}/metadata")).json()
                assert meta["model_spec"] == {"name": "tickets", "signature_name": "", "version": version}
                signature = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]
                assert signature["inputs"]["text"]["dtype"] == "DT_STRING"
                assert signature["outputs"]["probability"]["dtype"] == "DT_FLOAT" and meta["labels"] == ["long", "short"]
                answer = await client.post(f"{prefix}:predict", json={"instances": ["foo"]})
                assert answer.status_code == 200 and answer.json()["version"] == version
            for path in ("/v1/models/tickets/versions/123", "/v1/models/tickets/labels/stable",
                         "/v1/models/tickets/versions/123/metadata"):
                assert "version" in error_of(await client.get(path), 404)["error"]
            stale = error_of(await client.post("/v1/models/tickets/versions/123:predict", json={"instances": ["a"]}), 404)
            assert stale["field"] == "version" and version in stale["error"]

    run(body())


# --- the Open Inference Protocol, as plain JSON ---------------------------------------------------------


def infer_body(texts, **more):
    return {"inputs": [{"name": "text", "shape": [len(texts)], "datatype": "BYTES", "data": texts}], **more}


def test_open_inference_json_requests_and_errors():
    async def body():
        async with serving({"tickets": Labeller()}) as (client, _):
            server = (await client.get("/v2")).json()
            assert server["name"] == "kformer" and "binary_tensor_data" in server["extensions"]
            meta = (await client.get("/v2/models/tickets")).json()
            version = meta["versions"][0]
            assert meta["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
            assert {o["name"]: o["datatype"] for o in meta["outputs"]} == {
                "label": "BYTES", "probability": "FP32", "unknown": "BOOL", "top_k_label": "BYTES",
                "top_k_probability": "FP32"}
            assert (await client.get(f"/v2/models/tickets/versions/{version}/ready")).json()["ready"] is True

            answer = await client.post("/v2/models/tickets/infer", json=infer_body(
                ["foo", "a longer text"], id="req-1", parameters={"top_k": 2},
                outputs=[{"name": "label"}, {"name": "top_k_probability"}]))
            assert answer.status_code == 200, answer.text
            got = answer.json()
            assert got["id"] == "req-1" and got["model_name"] == "tickets" and got["model_version"] == version
            assert got["outputs"] == [
                {"name": "label", "datatype": "BYTES", "shape": [2], "data": ["short", "long"]},
                {"name": "top_k_probability", "datatype": "FP32", "shape": [2, 2], "data": [0.75, 0.25, 0.75, 0.25]}]
            column = {"name": "text", "shape": [1, 1], "datatype": "BYTES", "data": [["a longer text"]]}
            assert (await client.post(f"/v2/models/tickets/versions/{version}/infer", json={"inputs": [column]})
                    ).json()["outputs"][0]["data"] == ["long"]

            cases = [
                ({"inputs": [{"name": "texts", "shape": [1], "datatype": "BYTES", "data": ["a"]}]}, 422, "inputs[0].name"),
                ({"inputs": [{"name": "text", "shape": [1], "datatype": "FP32", "data": [1.0]}]}, 422, "inputs[0].datatype"),
                ({"inputs": [{"name": "text", "shape": [3], "datatype": "BYTES", "data": ["a"]}]}, 422, "inputs[0].shape"),
                ({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": [7]}]}, 422, "inputs[0].data[0]"),
                (infer_body(["foo"], outputs=[{"name": "logits"}]), 422, "outputs[0].name"),
                (infer_body(["foo"], parameters={"beam": 2}), 422, "parameters.beam"),
                (infer_body(["foo"], extra=1), 422, "extra"),
                ({"inputs": []}, 422, "inputs"),
            ]
            for request, status, field in cases:
                error = error_of(await client.post("/v2/models/tickets/infer", json=request), status)
                assert error["field"] == field, (request, error)
            assert "no model named" in error_of(await client.post("/v2/models/nope/infer", json=infer_body(["a"])),
                                                404)["error"]
            assert error_of(await client.get("/v2/models/tickets/versions/9/ready"), 404)["field"] == "version"

    run(body())


# --- real clients against the tiny real models ----------------------------------------------------------


@pytest.fixture(scope="module")
def served(tiny_models):
    """The tiny classifier, translator and arithmetic model behind a uvicorn thread: the base URL,
    each model's inputs, what the library itself predicts for them, and the library's models."""
    import kformer
    from kformer.models import generation

    inputs = {"tickets": ["my laptop screen will not boot", "please refund the duplicate charge"],
              "en-ta": ["one two", "three"], "arith": ["12+34", "50-7"]}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(generation, "COMPILE", False)  # tiny models decode a few steps: quicker eagerly
        library = {name: kformer.load(folder) for name, folder in tiny_models.items()}
        expected = {name: model.predict(inputs[name], **({"top_k": 2} if name == "tickets" else {}))
                    for name, model in library.items()}
        with uvicorn_thread(create_app(dict(tiny_models), ServeConfig())) as url:
            yield url, inputs, expected, library


def test_tritonclient_http_infers_every_task_in_json_and_binary(served):
    import numpy as np
    import tritonclient.http as triton
    from tritonclient.utils import InferenceServerException

    url, inputs, expected, _ = served
    client = triton.InferenceServerClient(url.removeprefix("http://"))
    try:
        assert client.is_server_live() and client.is_server_ready()
        assert client.get_server_metadata()["name"] == "kformer"
        for name, texts in inputs.items():
            assert client.is_model_ready(name)
            outputs = [o["name"] for o in client.get_model_metadata(name)["outputs"]]
            for binary in (True, False):
                tensor = triton.InferInput("text", [len(texts)], "BYTES")
                tensor.set_data_from_numpy(np.array(texts, dtype=object), binary_data=binary)
                requested = [triton.InferRequestedOutput(o, binary_data=binary) for o in outputs]
                parameters = {"top_k": 2} if name == "tickets" else None
                result = client.infer(name, [tensor], outputs=requested, parameters=parameters)
                want = expected[name]
                if name == "tickets":
                    assert texts_of(result.as_numpy("label")) == [w["label"] for w in want]
                    np.testing.assert_allclose(result.as_numpy("probability"), [w["probability"] for w in want],
                                               atol=1e-6)
                    assert result.as_numpy("top_k_label").shape == (2, 2)
                elif name == "en-ta":
                    assert texts_of(result.as_numpy("translation")) == [w["translation"] for w in want]
                else:
                    solved = result.as_numpy("solved")
                    assert list(solved) == [w["answer"] is not None for w in want]
                    assert [int(a) for a, s in zip(result.as_numpy("answer"), solved, strict=True) if s] == [
                        w["answer"] for w in want if w["answer"] is not None]
        default = client.infer("arith", [_bytes_input(triton, ["1+2"])])  # no outputs named: all, binary
        assert set(default.get_response()["outputs"][0]) >= {"name", "parameters"}
        with pytest.raises(InferenceServerException) as refused:
            client.infer("arith", [_bytes_input(triton, ["12*3"])])
        assert refused.value.status() == "422" and "12*3" in refused.value.message()
    finally:
        client.close()


def texts_of(array) -> list[str]:
    """A BYTES output as strings (tritonclient gives bytes for binary data, str for JSON data)."""
    return [value.decode() if isinstance(value, bytes) else value for value in array]


def _bytes_input(triton, texts):
    import numpy as np

    tensor = triton.InferInput("text", [len(texts)], "BYTES")
    tensor.set_data_from_numpy(np.array(texts, dtype=object))
    return tensor


def test_tf_serving_columnar_and_row_forms_on_real_models(served):
    import httpx

    url, inputs, expected, _ = served
    for name, texts in inputs.items():
        parameters = {"top_k": 2} if name == "tickets" else {}
        rows = httpx.post(f"{url}/v1/models/{name}/labels/latest:predict",
                          json={"signature_name": "serving_default", "instances": texts, "parameters": parameters})
        assert rows.status_code == 200 and rows.json()["predictions"] == expected[name]
        columns = httpx.post(f"{url}/v1/models/{name}:predict", json={"inputs": {"text": texts},
                                                                       "parameters": parameters}).json()["outputs"]
        key = {"tickets": "label", "en-ta": "translation", "arith": "solved"}[name]
        assert len(columns[key]) == len(texts)
        if name != "arith":
            assert columns[key] == [row[key] for row in expected[name]]


def guide_blocks(marker: str) -> list[str]:
    """The python blocks of docs/serving.md whose not-run reason names this test file and ``marker``."""
    from test_docs import ROOT, blocks

    return [block.code for block in blocks(ROOT / "docs" / "serving.md")
            if block.language == "python" and block.not_run and "test_serve_protocols" in block.not_run
            and marker in block.code]


def test_the_guides_tritonclient_example_runs(served):
    import numpy as np

    url, _, _, library = served
    (code,) = guide_blocks("tritonclient")
    namespace: dict = {}
    exec(code.replace("localhost:8000", url.removeprefix("http://")), namespace)
    namespace["client"].close()
    expected = library["tickets"].predict(["my laptop will not boot", "refund my invoice"], top_k=2)
    assert texts_of(namespace["result"].as_numpy("label")) == [row["label"] for row in expected]
    np.testing.assert_allclose(namespace["result"].as_numpy("top_k_probability"),
                               [[pair["probability"] for pair in row["top_k"]] for row in expected], atol=1e-6)


def test_the_guides_kserve_example_runs_where_an_interpreter_with_kserve_is_named(served):
    """kserve pins pandas < 3 and protobuf < 7, so it is not in the [test] extra (docs/serving.md);
    KFORMER_KSERVE_PYTHON names a Python that has it (an environment of its own: it only speaks HTTP;
    `make test` makes .venv-kserve and names it)."""
    import ast

    python = os.environ.get("KFORMER_KSERVE_PYTHON")
    if not python:  # `make test` makes one (.venv-kserve); CI runs `make test`, so there it must be set
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("KFORMER_KSERVE_PYTHON is not set: run `make test`, which installs kserve in .venv-kserve",
                        pytrace=False)
        pytest.skip("set KFORMER_KSERVE_PYTHON to a Python with kserve installed (`make test` does)")
    url, _, _, library = served
    (code,) = guide_blocks("kserve")
    done = subprocess.run([python, "-c", code.replace("http://localhost:8000", url)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert texts_of(ast.literal_eval(done.stdout.strip())) == library["en-ta"].translate(["How are you?"])
