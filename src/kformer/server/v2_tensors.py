"""Tensors of the Open Inference Protocol (KServe v2) on the wire: JSON ``data``, and the binary
tensor data extension (what ``tritonclient.http`` sends and asks for by default).

A request or response with binary data is its JSON header followed by the tensors' bytes; the
header's length is the ``Inference-Header-Content-Length`` HTTP header, and each tensor with binary
data says its size in ``parameters.binary_data_size``. ``BYTES`` elements are each a 4-byte
little-endian length and the bytes; numbers are little-endian, ``BOOL`` one byte each.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from kformer.errors import BadInput

HEADER_LENGTH = "Inference-Header-Content-Length"
DATATYPES = {"string": "BYTES", "float32": "FP32", "bool": "BOOL", "int64": "INT64"}
_NUMPY = {"FP32": "<f4", "BOOL": "?", "INT64": "<i8"}


def split_body(body: bytes, header_length: str | None) -> tuple[bytes, bytes]:
    """``(JSON header, binary data)`` of a request body (all JSON without ``header_length``)."""
    if header_length is None:
        return body, b""
    if not header_length.isdigit() or int(header_length) > len(body):
        raise BadInput(f"the {HEADER_LENGTH} header must be a byte count within the body's {len(body)} bytes, "
                       f"not {header_length[:30]!r}", field=HEADER_LENGTH)
    return body[: int(header_length)], body[int(header_length):]


def decode_bytes(blob: bytes, field: str) -> list[str]:
    """The UTF-8 strings of a BYTES tensor's binary data (each a 4-byte length, then the bytes)."""
    texts, at = [], 0
    while at < len(blob):
        if at + 4 > len(blob):
            raise BadInput("{field}: its binary data ends inside an element's length", field=field)
        (size,) = struct.unpack_from("<I", blob, at)
        at += 4
        if at + size > len(blob):
            raise BadInput("{field}: an element of its binary data is longer than the data left", field=field)
        try:
            texts.append(blob[at:at + size].decode("utf-8"))
        except UnicodeDecodeError:
            raise BadInput("{field}: an element is not UTF-8 text", field=field) from None
        at += size
    return texts


def flatten(data: Any) -> list:
    """Nested lists (a tensor in row-major order) as one flat list."""
    if not isinstance(data, list):
        return [data]
    flat: list = []
    for item in data:
        flat.extend(flatten(item))
    return flat


def encode(values: list, datatype: str) -> bytes:
    """The binary data of a flat list of ``datatype`` values."""
    if datatype == "BYTES":
        parts = []
        for value in values:
            raw = value.encode("utf-8")
            parts.append(struct.pack("<I", len(raw)) + raw)
        return b"".join(parts)
    return np.asarray(values, dtype=_NUMPY[datatype]).tobytes()


def output_tensor(name: str, datatype: str, rows: list, rank: int, binary: bool) -> tuple[dict[str, Any], bytes]:
    """``(the output's JSON, its binary data or b"")`` for one value (rank 1) or one list (rank
    2) per instance."""
    shape = [len(rows)] if rank == 1 else [len(rows), len(rows[0]) if rows else 0]
    flat = flatten(rows) if rank == 2 else list(rows)
    tensor: dict[str, Any] = {"name": name, "datatype": datatype, "shape": shape}
    if not binary:
        tensor["data"] = flat
        return tensor, b""
    blob = encode(flat, datatype)
    tensor["parameters"] = {"binary_data_size": len(blob)}
    return tensor, blob
