"""TensorFlow Serving's REST API (https://www.tensorflow.org/tfx/serving/api_rest) over the served models.

- ``GET /v1/models/NAME[/versions/N | /labels/L]``: the model status (``model_version_status``);
- ``GET /v1/models/NAME[/versions/N | /labels/L]/metadata``: ``model_spec`` and the
  ``serving_default`` ``signature_def``, beside kformer's own metadata (task, labels, recipe, ...);
- ``POST /v1/models/NAME[/versions/N | /labels/L]:predict``: ``{"signature_name"?, "instances"}``
  (row format: strings, or objects ``{"text": ...}``) answered with ``predictions`` (one dict per
  instance), or ``{"signature_name"?, "inputs"}`` (columnar: a list of strings or ``{"text": [...]}``)
  answered with ``outputs`` (one list per named output, :mod:`kformer.server.outputs`);
  ``parameters`` (kformer's: ``top_k``, ``beam``, ...) in either.

A served model has one version, its folder's fingerprint, and one label, ``latest``, that names it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from kformer.errors import BadInput, ModelNotFound
from kformer.server.outputs import INPUT, columns, outputs_of
from kformer.server.registry import Served
from kformer.server.replies import disconnected, json_response
from kformer.server.service import Service
from kformer.server.validation import check_parameters, check_texts, parse_json, read_body

SIGNATURE = "serving_default"
LABEL = "latest"  # the one version label: the version served now
BODY_KEYS = ("signature_name", "instances", "inputs", "parameters")
DT_TYPES = {"string": "DT_STRING", "float32": "DT_FLOAT", "bool": "DT_BOOL", "int64": "DT_INT64"}
# the three ways a path names what it asks for: the model, one of its versions, or a version label
PREFIXES = ("/v1/models/{name}", "/v1/models/{name}/versions/{version}", "/v1/models/{name}/labels/{label}")
_TEXTS = {"type": "array", "items": {"type": "string"}, "minItems": 1}
PREDICT_BODY = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": {"type": "object", "properties": {
        "signature_name": {"type": "string", "enum": [SIGNATURE]},
        "instances": _TEXTS, "inputs": {"oneOf": [_TEXTS, {"type": "object", "properties": {INPUT: _TEXTS}}]},
        "parameters": {"type": "object"}}},
    "example": {"instances": ["my laptop will not boot"], "parameters": {"top_k": 3}}}}}}


def check_version(served: Served, version: str | None, label: str | None) -> None:
    """404 unless ``version`` / ``label`` (when given) names what ``served`` is."""
    if version is not None and version != served.version:
        raise ModelNotFound(f"model '{served.name}' has no version {version}; it serves version {served.version} "
                            "(one version per model: its folder's fingerprint)", field="version")
    if label is not None and label != LABEL:
        raise ModelNotFound(f"model '{served.name}' has no version label '{label}'; its one label is '{LABEL}'",
                            field="label")


def read_predict_body(data: dict[str, Any], max_instances: int, max_chars: int) -> tuple[list[str], bool]:
    """``(texts, columnar)`` from a ``:predict`` body: ``instances`` (row format) or ``inputs``
    (columnar), never both; ``signature_name`` absent or ``serving_default``."""
    signature = data.get("signature_name", SIGNATURE)
    if signature not in (SIGNATURE, ""):
        raise BadInput(f"{{field}} '{str(signature)[:100]}' is not a signature of this model; the one "
                       f"signature is '{SIGNATURE}'", field="signature_name")
    if "instances" in data and "inputs" in data:
        raise BadInput('a request has "instances" (row format) or "inputs" (columnar format), not both',
                       field="inputs")
    if "instances" not in data and "inputs" not in data:
        raise BadInput('{field} is missing; send {"instances": ["some text"]} (or the columnar '
                       '{"inputs": ["some text"]})', field="instances")
    if "instances" in data:
        instances = data["instances"]
        if isinstance(instances, list):
            instances = [_named_input(item, f"instances[{i}]") if isinstance(item, dict) else item
                         for i, item in enumerate(instances)]
        return check_texts(instances, "instances", max_instances, max_chars), False
    inputs = data["inputs"]
    field = "inputs"
    if isinstance(inputs, dict):
        inputs, field = _named_input(inputs, "inputs"), f"inputs.{INPUT}"
    return check_texts(inputs, field, max_instances, max_chars), True


def _named_input(item: dict[str, Any], field: str) -> Any:
    """The value of the one named input, ``text``, of an object of named inputs."""
    unknown = sorted(set(item) - {INPUT})
    if unknown or INPUT not in item:
        name = str(unknown[0])[:100] if unknown else "nothing"
        raise BadInput(f"{{field}} names input '{name}'; this model's one input is '{INPUT}' (strings)", field=field)
    return item[INPUT]


def model_status(service: Service, name: str, version: str | None, label: str | None) -> dict[str, Any]:
    """GetModelStatusResponse as JSON: the served version's state (or LOADING / END after a failure)."""
    slot = service.registry.slot(name)
    current = slot.current
    if current is not None:
        check_version(current, version, label)
    elif version is not None or label is not None:
        service.served(name)  # 503 while it loads
    status = {"error_code": "OK", "error_message": ""}
    if current is None and slot.error:
        status = {"error_code": "UNKNOWN", "error_message": slot.error}
    body: dict[str, Any] = {"model_version_status": [{
        "version": current.version if current else "",
        "state": "AVAILABLE" if current else ("END" if slot.error else "LOADING"),
        "status": status,
    }]}
    if current is not None and slot.error:
        body["last_reload_error"] = slot.error
    return body


def signature_def(task: str) -> dict[str, Any]:
    """The ``serving_default`` SignatureDef of a served model of ``task`` as TF Serving writes it."""

    def tensor(name: str, dtype: str, rank: int) -> dict[str, Any]:
        return {"dtype": dtype, "tensor_shape": {"dim": [{"size": "-1", "name": ""}] * rank, "unknown_rank": False},
                "name": name}

    return {"inputs": {INPUT: tensor(INPUT, "DT_STRING", 1)},
            "outputs": {o.name: tensor(o.name, DT_TYPES[o.dtype], o.rank) for o in outputs_of(task)},
            "method_name": "tensorflow/serving/predict"}


def model_metadata(service: Service, name: str, version: str | None, label: str | None) -> dict[str, Any]:
    """GetModelMetadataResponse (``model_spec``, ``metadata.signature_def``) and kformer's metadata."""
    served = service.served(name)
    check_version(served, version, label)
    task = served.model.task
    return {"model_spec": {"name": name, "signature_name": "", "version": served.version},
            "metadata": {"signature_def": {"signature_def": {SIGNATURE: signature_def(task)}}},
            "name": name, "version": served.version, **served.model.metadata()}


def tf_serving_routes(service: Service) -> APIRouter:
    """The status, metadata and predict routes, each at the model's, a version's and a label's path."""
    router = APIRouter(tags=["TensorFlow Serving"])
    config = service.config

    async def status(name: str, version: str | None = None, label: str | None = None) -> dict:
        """TensorFlow Serving's model status."""
        return model_status(service, name, version, label)

    async def metadata(name: str, version: str | None = None, label: str | None = None) -> dict:
        """TensorFlow Serving's metadata shape, with task, labels, recipe, metrics and parameters."""
        return model_metadata(service, name, version, label)

    async def predict(request: Request, name: str, version: str | None = None, label: str | None = None) -> Response:
        """Answer ``instances`` with ``predictions`` (one dict each), or ``inputs`` with ``outputs``."""
        check_version(service.served(name), version, label)
        with service.arrival():
            data = parse_json(await read_body(request, config.max_body_bytes), BODY_KEYS)
            texts, columnar = read_predict_body(data, config.max_instances, config.max_chars)
            pending = service.submit_predict(name, texts, check_parameters(data))
        predictions, served_version = await service.answer(pending, disconnected(request))
        body: dict[str, Any] = {"model": name, "version": served_version}
        if columnar:
            body["outputs"] = columns(service.served(name).model.task, predictions)
        else:
            body["predictions"] = predictions
        return json_response(body)

    for prefix in PREFIXES:
        router.add_api_route(prefix, status, methods=["GET"])
        router.add_api_route(f"{prefix}/metadata", metadata, methods=["GET"])
        router.add_api_route(f"{prefix}:predict", predict, methods=["POST"], openapi_extra=PREDICT_BODY)
    return router

