"""Where a classifier's predictions run: Keras (the default) or ONNX Runtime.

``use_runtime(model, "onnx")`` converts a loaded classifier's network to ONNX in memory (the
same conversion as ``kformer export --format onnx``) and makes its ``predict`` /
``probabilities`` run there; attention maps still come from the Keras model. Other tasks keep
Keras (their decoding loop is kformer's own). ``kformer serve --runtime`` calls it for every model.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from kformer.errors import BadInput, Unsupported

RUNTIMES = ("keras", "onnx")


def check_runtime(runtime: str, field: str = "runtime") -> str:
    if runtime not in RUNTIMES:
        raise BadInput(f"{{field}} must be one of {', '.join(RUNTIMES)}, not {runtime!r}", field=field)
    return runtime


class OnnxPredictor:
    """ids ``(batch, width)`` int32 -> probabilities ``(batch, classes)`` float32 with ONNX Runtime."""

    name = "onnx"

    def __init__(self, onnx_model: bytes, threads: int | None = None):
        try:
            import onnxruntime as ort
        except ImportError:
            raise Unsupported("the onnx runtime needs onnxruntime: pip install onnx onnxruntime tf2onnx",
                              field="runtime") from None
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = int(threads)
            options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(onnx_model, options, providers=["CPUExecutionProvider"])
        self.input = self.session.get_inputs()[0].name

    @classmethod
    def for_classifier(cls, classifier, threads: int | None = None) -> OnnxPredictor:
        """Convert ``classifier``'s network (its ``serving_default`` export) to ONNX in memory."""
        from kformer.export import classifier_endpoint, onnx_file, require_onnx

        require_onnx()
        with tempfile.TemporaryDirectory(prefix="kformer-onnx-") as tmp:
            path = Path(tmp) / "model.onnx"
            onnx_file(classifier_endpoint(classifier), path, classifier.model)
            return cls(path.read_bytes(), threads)

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        return self.session.run(None, {self.input: np.asarray(ids, dtype="int32")})[0].astype("float32", copy=False)


def use_runtime(model: Any, runtime: str) -> Any:
    """``model`` (a loaded task model) predicting on ``runtime``; returns it. Only classifiers
    change: other tasks keep Keras whatever ``runtime`` says."""
    from kformer.threads import thread_count

    check_runtime(runtime)
    if getattr(model, "task", None) != "classify":
        return model
    model.predictor = None if runtime == "keras" else OnnxPredictor.for_classifier(model, thread_count())
    return model
