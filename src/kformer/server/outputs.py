"""Each task's predictions as named tensors: what the TensorFlow Serving signature (columnar
``outputs``, metadata) and the Open Inference Protocol (v2) answer.

A row of ``predict`` is a dict (``{"label", "probability", "unknown", "top_k"}``, ``{"translation"}``,
``{"answer", ...}``); a protocol that speaks tensors gets one column per output below, in this order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

INPUT = "text"  # the one input of every served model: texts, one per instance


@dataclass(frozen=True)
class Output:
    """One named output: its ``dtype`` (``string``, ``float32``, ``bool``, ``int64``), rank (1:
    one value per instance; 2: a list per instance) and how to read it from a prediction."""

    name: str
    dtype: str
    rank: int
    read: Callable[[dict[str, Any]], Any]
    meaning: str


def _top(key: str) -> Callable[[dict[str, Any]], list]:
    return lambda row: [pair[key] for pair in row["top_k"]]


OUTPUTS: dict[str, tuple[Output, ...]] = {
    "classify": (
        Output("label", "string", 1, lambda row: row["label"], "the label (the unknown label below the threshold)"),
        Output("probability", "float32", 1, lambda row: row["probability"], "the most likely label's probability"),
        Output("unknown", "bool", 1, lambda row: row["unknown"], "true where the unknown route answered"),
        Output("top_k_label", "string", 2, _top("label"), "the top_k most likely labels, most likely first"),
        Output("top_k_probability", "float32", 2, _top("probability"), "their probabilities"),
    ),
    "translate": (Output("translation", "string", 1, lambda row: row["translation"], "the translation"),),
    "arithmetic": (
        Output("answer", "int64", 1, lambda row: row["answer"] if row["answer"] is not None else 0,
               "the answer (0 where solved is false)"),
        Output("solved", "bool", 1, lambda row: row["answer"] is not None, "false where the model wrote no number"),
    ),
}


def outputs_of(task: str) -> tuple[Output, ...]:
    """The outputs of a model of ``task``."""
    return OUTPUTS[task]


def columns(task: str, predictions: list[dict[str, Any]], names: list[str] | None = None) -> dict[str, list]:
    """``{output name: one value (or list) per prediction}`` for ``names`` (default: every output).
    A request's ``top_k`` is one number, so a rank-2 output's rows have one length."""
    return {o.name: [o.read(row) for row in predictions] for o in outputs_of(task) if names is None or o.name in names}
