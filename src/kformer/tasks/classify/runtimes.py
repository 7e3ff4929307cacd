"""Where a classifier's predictions run: Keras (the default), ONNX Runtime, or ONNX Runtime
with 8-bit weights.

``use_runtime(model, "onnx")`` converts a loaded classifier's network to ONNX in memory (the
same conversion as ``kformer export --format onnx``) and makes its ``predict`` /
``probabilities`` run there; attention maps still come from the Keras model. ``"onnx-int8"``
also quantizes the converted network's matrix weights to 8 bits (ONNX Runtime's dynamic
quantization: activations are quantized per batch as they run): faster for large networks
(a fine-tuned MiniLM), at a small cost in accuracy that BENCHMARKS.md measures. Other tasks keep
Keras (their decoding loop is kformer's own). ``kformer serve --runtime`` calls it for every model.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from kformer.errors import BadInput, Unsupported

RUNTIMES = ("keras", "onnx", "onnx-int8")


def check_runtime(runtime: str, field: str = "runtime") -> str:
    if runtime not in RUNTIMES:
        raise BadInput(f"{{field}} must be one of {', '.join(RUNTIMES)}, not {runtime!r}", field=field)
    return runtime


class OnnxPredictor:
    """ids ``(batch, width)`` int32 -> probabilities ``(batch, classes)`` float32 with ONNX Runtime."""

    def __init__(self, onnx_model: bytes, threads: int | None = None, name: str = "onnx"):
        self.name = name
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
    def for_classifier(cls, classifier, threads: int | None = None, int8: bool = False) -> OnnxPredictor:
        """Convert ``classifier``'s network (its ``serving_default`` export) to ONNX in memory;
        with ``int8``, its matrix weights quantized to 8 bits (:func:`quantize_int8`)."""
        from kformer.models.export_plan import onnx_file, require_onnx
        from kformer.tasks.classify_export import classifier_endpoint

        require_onnx()
        with tempfile.TemporaryDirectory(prefix="kformer-onnx-") as tmp:
            path = Path(tmp) / "model.onnx"
            onnx_file(classifier_endpoint(classifier), path, classifier.model)
            if int8:
                path = quantize_int8(path, Path(tmp) / "model-int8.onnx")
            return cls(path.read_bytes(), threads, "onnx-int8" if int8 else "onnx")

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        return self.session.run(None, {self.input: np.asarray(ids, dtype="int32")})[0].astype("float32", copy=False)


def quantize_int8(path: Path, out: Path) -> Path:
    """ONNX Runtime's dynamic quantization of the model at ``path`` (MatMul/Gemm weights to 8 bits,
    activations quantized per batch at run time), written to ``out``; returns ``out``.

    Weights are signed 8-bit with one scale per output channel. Measured on a fine-tuned MiniLM
    (BANKING77 test, the network alone, 92.37 % in float): one scale per weight matrix cost 0.75
    points (91.62 %); unsigned weights kept the accuracy (92.56 %) but ran ~12 % slower (379 vs
    428 texts/s); per channel kept both (92.50 %, 428 texts/s).
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(path), str(out), weight_type=QuantType.QInt8, per_channel=True)
    return out


def use_runtime(model: Any, runtime: str) -> Any:
    """``model`` (a loaded task model) predicting on ``runtime``; returns it. Only classifiers
    change: other tasks keep Keras whatever ``runtime`` says."""
    from kformer.threads import thread_count

    check_runtime(runtime)
    if getattr(model, "task", None) != "classify":
        return model
    model.predictor = None if runtime == "keras" else OnnxPredictor.for_classifier(
        model, thread_count(), int8=runtime == "onnx-int8")
    return model
