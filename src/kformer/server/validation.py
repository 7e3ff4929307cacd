"""Reading and checking request bodies: size, JSON, instances and parameters.

Every problem is a :class:`~kformer.errors.BadInput` (422) naming the field at fault, or
:class:`BodyTooLarge` (413); none of them becomes a 500.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import ClientDisconnect, Request

from kformer.errors import BadInput
from kformer.server.http_errors import BodyTooLarge

BODY_KEYS = ("instances", "parameters")


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The request body, refused with 413 as soon as it is known to exceed ``max_bytes``."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise BodyTooLarge(f"the body has {int(declared):,} bytes; the limit is {max_bytes:,}", field="body")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise BodyTooLarge(f"the body has more than {max_bytes:,} bytes, the limit", field="body")
            chunks.append(chunk)
    except ClientDisconnect:
        raise BadInput("the client went away before sending the whole body", field="body") from None
    return b"".join(chunks)


def parse_json(body: bytes, keys: tuple[str, ...] = BODY_KEYS) -> dict[str, Any]:
    """The body as a JSON object holding no keys but ``keys``."""
    if not body.strip():
        raise BadInput('the body is empty; send JSON such as {"instances": ["some text"]}', field="body")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput("the body is not UTF-8 text", field="body") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"the body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", field="body") from None
    except RecursionError:
        raise BadInput("the body's JSON is nested too deeply", field="body") from None
    if not isinstance(data, dict):
        raise BadInput(f'the body must be a JSON object such as {{"instances": [...]}}, not a {kind_of(data)}', field="body")
    unknown = [key for key in data if key not in keys]
    if unknown:
        raise BadInput(f"unknown field {{field}}; a request has {_and(keys)}", field=str(unknown[0])[:100])
    return data


def check_instances(data: dict[str, Any], max_instances: int, max_chars: int) -> list[str]:
    """``data["instances"]``: a non-empty list of at most ``max_instances`` non-empty strings of
    at most ``max_chars`` characters each."""
    if "instances" not in data:
        raise BadInput('{field} is missing; send {"instances": ["some text"]}', field="instances")
    return check_texts(data["instances"], "instances", max_instances, max_chars)


def check_texts(texts: Any, field: str, max_instances: int, max_chars: int) -> list[str]:
    """``texts`` (the request's ``field``): a non-empty list of at most ``max_instances``
    non-empty strings of at most ``max_chars`` characters each."""
    if not isinstance(texts, list):
        raise BadInput(f"{{field}} must be a list of strings, not a {kind_of(texts)}", field=field)
    if not texts:
        raise BadInput("{field} is empty; send at least one text", field=field)
    if len(texts) > max_instances:
        raise BadInput(
            f"{{field}} holds {len(texts)} texts; the limit is {max_instances} per request (max_instances)",
            field=field,
        )
    for i, text in enumerate(texts):
        where = f"{field}[{i}]"
        if not isinstance(text, str):
            raise BadInput(f"{{field}} must be a string, not a {kind_of(text)}", field=where)
        if not text.strip():
            raise BadInput("{field} is empty", field=where)
        if len(text) > max_chars:
            raise BadInput(f"{{field}} has {len(text):,} characters; the limit is {max_chars:,} (max_chars)", field=where)
    return texts


def check_parameters(data: dict[str, Any]) -> dict[str, Any]:
    """``data["parameters"]`` (a JSON object; absent = {})."""
    parameters = data.get("parameters", {})
    if parameters is None:
        return {}
    if not isinstance(parameters, dict):
        raise BadInput(f"{{field}} must be an object such as {{\"top_k\": 3}}, not a {kind_of(parameters)}", field="parameters")
    return parameters


def _and(words: tuple[str, ...]) -> str:
    return " and ".join(words) if len(words) < 3 else ", ".join(words[:-1]) + " and " + words[-1]


def kind_of(value: Any) -> str:
    """A JSON value's kind in words: object, list, string, boolean, null, number."""
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number" if isinstance(value, int | float) else type(value).__name__
    )
