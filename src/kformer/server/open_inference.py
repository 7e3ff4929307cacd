"""The Open Inference Protocol (KServe v2, Triton's HTTP/REST API) over the served models.

- ``GET /v2``: the server's name, version and extensions;
- ``GET /v2/models/NAME[/versions/V]``: the model's metadata (platform, inputs, outputs);
- ``GET /v2/models/NAME[/versions/V]/ready``: 200 once the model is loaded and warm, 503 before;
- ``POST /v2/models/NAME[/versions/V]/infer``: one ``BYTES`` input named ``text`` (shape ``[n]``
  or ``[n, 1]``, JSON ``data`` or binary data) -> the task's outputs
  (:mod:`kformer.server.outputs`) as JSON ``data``, or binary where asked
  (``parameters.binary_data_output``, or an output's ``parameters.binary_data``). The request's
  other ``parameters`` are kformer's (``top_k``, ``beam``, ...).

Errors are ``{"error": "..."}`` (with the ``field`` at fault) and a 4xx status, as everywhere in
the service. The model version is the folder's fingerprint, as on the ``/v1`` paths.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from kformer import __version__
from kformer.errors import BadInput
from kformer.server.outputs import INPUT, Output, columns, outputs_of
from kformer.server.replies import disconnected, json_response
from kformer.server.service import Service
from kformer.server.tf_serving import check_version
from kformer.server.v2_tensors import (
    DATATYPES,
    HEADER_LENGTH,
    decode_bytes,
    flatten,
    output_tensor,
    split_body,
)
from kformer.server.validation import check_parameters, check_texts, kind_of, parse_json, read_body

EXTENSIONS = ["binary_tensor_data"]
REQUEST_KEYS = ("id", "parameters", "inputs", "outputs", "model_name")  # the kserve SDK sends model_name
BINARY_OUTPUT = "binary_data_output"  # a request parameter of the binary extension, not a model parameter
INFER_EXAMPLE = {"inputs": [{"name": INPUT, "shape": [1], "datatype": "BYTES", "data": ["my laptop will not boot"]}],
                 "parameters": {"top_k": 3}}


def model_metadata(name: str, version: str, task: str) -> dict[str, Any]:
    """The v2 model metadata response."""
    return {"name": name, "versions": [version], "platform": f"kformer_{task}",
            "inputs": [{"name": INPUT, "datatype": "BYTES", "shape": [-1]}],
            "outputs": [{"name": o.name, "datatype": DATATYPES[o.dtype], "shape": [-1] * o.rank}
                        for o in outputs_of(task)]}


def read_input(data: dict[str, Any], binary: bytes, max_instances: int, max_chars: int) -> list[str]:
    """The texts of the request's one input, ``text``: BYTES, shape ``[n]`` or ``[n, 1]``."""
    inputs = data.get("inputs")
    if not isinstance(inputs, list) or len(inputs) != 1 or not isinstance(inputs[0], dict):
        raise BadInput(f'{{field}} must be a list of one tensor, {{"name": "{INPUT}", "datatype": "BYTES", '
                       f'"shape": [n], "data": [...]}}, not a {kind_of(inputs)}'
                       + (f" of {len(inputs)}" if isinstance(inputs, list) else ""), field="inputs")
    tensor = inputs[0]
    if tensor.get("name") != INPUT:
        raise BadInput(f"{{field}} is '{str(tensor.get('name'))[:100]}'; this model's one input is '{INPUT}'",
                       field="inputs[0].name")
    if tensor.get("datatype") != "BYTES":
        raise BadInput(f"{{field}} is {str(tensor.get('datatype'))[:30]}; the input '{INPUT}' is BYTES (texts)",
                       field="inputs[0].datatype")
    shape = tensor.get("shape")
    if (not isinstance(shape, list) or len(shape) not in (1, 2) or not all(type(d) is int and d >= 0 for d in shape)
            or (len(shape) == 2 and shape[1] != 1)):
        raise BadInput(f"{{field}} must be [n] or [n, 1] (one text per instance), not {str(shape)[:60]}",
                       field="inputs[0].shape")
    parameters = tensor.get("parameters") or {}
    if "binary_data_size" in parameters:
        size = parameters["binary_data_size"]
        if type(size) is not int or size != len(binary):
            raise BadInput(f"{{field}} is {str(size)[:30]}, but the body holds {len(binary)} bytes after the "
                           "JSON header", field="inputs[0].parameters.binary_data_size")
        texts: Any = decode_bytes(binary, "inputs[0]")
    elif "data" in tensor:
        texts = flatten(tensor["data"]) if isinstance(tensor["data"], list) else tensor["data"]
    else:
        raise BadInput("{field} is missing (or parameters.binary_data_size with binary data)", field="inputs[0].data")
    texts = check_texts(texts, "inputs[0].data", max_instances, max_chars)
    if len(texts) != shape[0]:
        raise BadInput(f"{{field}} says {shape[0]} texts but the data holds {len(texts)}", field="inputs[0].shape")
    return texts


def requested_outputs(data: dict[str, Any], task: str, binary_default: bool) -> list[tuple[Output, bool]]:
    """``(output, binary?)`` for each output the request names (every output when it names none)."""
    known = {o.name: o for o in outputs_of(task)}
    asked = data.get("outputs")
    if asked is None:
        return [(o, binary_default) for o in known.values()]
    if not isinstance(asked, list) or not all(isinstance(item, dict) for item in asked):
        raise BadInput('{field} must be a list such as [{"name": "label"}]', field="outputs")
    chosen = []
    for i, item in enumerate(asked):
        output = known.get(item.get("name"))
        if output is None:
            raise BadInput(f"{{field}} '{str(item.get('name'))[:100]}' is not an output of this model; its outputs "
                           f"are {', '.join(known)}", field=f"outputs[{i}].name")
        chosen.append((output, bool((item.get("parameters") or {}).get("binary_data", binary_default))))
    return chosen


def infer_response(name: str, version: str, request_id: Any, task: str, predictions: list[dict[str, Any]],
                   wanted: list[tuple[Output, bool]]) -> Response:
    """The infer response: JSON, or the JSON header and the binary outputs after it."""
    table = columns(task, predictions, [o.name for o, _ in wanted])
    tensors, blobs = [], []
    for output, binary in wanted:
        tensor, blob = output_tensor(output.name, DATATYPES[output.dtype], table[output.name], output.rank, binary)
        tensors.append(tensor)
        blobs.append(blob)
    body: dict[str, Any] = {"model_name": name, "model_version": version, "outputs": tensors}
    if request_id is not None:
        body["id"] = request_id
    if not any(blobs):
        return json_response(body)
    header = json_response(body).body
    return Response(header + b"".join(blobs), media_type="application/octet-stream",
                    headers={HEADER_LENGTH: str(len(header))})


def open_inference_routes(service: Service) -> APIRouter:
    """The server metadata route and each model route at the model's and a version's path."""
    router = APIRouter(tags=["Open Inference Protocol (v2)"])
    config = service.config

    @router.get("/v2")
    async def server_metadata() -> dict:
        """The server's name, version and protocol extensions."""
        return {"name": "kformer", "version": __version__, "extensions": EXTENSIONS}

    async def metadata(name: str, version: str | None = None) -> dict:
        """The model's platform, versions, input and outputs."""
        served = service.served(name)
        check_version(served, version, None)
        return model_metadata(name, served.version, served.model.task)

    async def ready(name: str, version: str | None = None) -> dict:
        """200 when the model is loaded and warm; 503 (an error) while it loads."""
        check_version(service.served(name), version, None)
        return {"name": name, "ready": True}

    async def infer(request: Request, name: str, version: str | None = None) -> Response:
        """Classify, translate or solve the texts of the input ``text``."""
        served = service.served(name)
        check_version(served, version, None)
        with service.arrival():
            header, binary = split_body(await read_body(request, config.max_body_bytes),
                                        request.headers.get(HEADER_LENGTH))
            data = parse_json(header, REQUEST_KEYS)
            if data.get("model_name", name) != name:
                raise BadInput(f"{{field}} '{str(data['model_name'])[:100]}' is not the model of the path, '{name}'",
                               field="model_name")
            texts = read_input(data, binary, config.max_instances, config.max_chars)
            parameters = dict(check_parameters(data))
            binary_default = bool(parameters.pop(BINARY_OUTPUT, False))
            wanted = requested_outputs(data, served.model.task, binary_default)
            pending = service.submit_predict(name, texts, parameters)
        predictions, served_version = await service.answer(pending, disconnected(request))
        return infer_response(name, served_version, data.get("id"), served.model.task, predictions, wanted)

    infer_body = {"requestBody": {"required": True, "content": {"application/json": {"example": INFER_EXAMPLE}}}}
    for prefix in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
        router.add_api_route(prefix, metadata, methods=["GET"])
        router.add_api_route(f"{prefix}/ready", ready, methods=["GET"])
        router.add_api_route(f"{prefix}/infer", infer, methods=["POST"], openapi_extra=infer_body)
    return router
