"""Where a classifier's network runs: Keras (the default), ONNX Runtime, or ONNX Runtime with
8-bit weights -- the classifier's ``runtime``, chosen when it is loaded
(``kformer.load(folder, runtime="onnx")``; ``kformer serve --runtime``).

A predictor turns token ids ``(batch, width)`` int32 into probabilities ``(batch, classes)``
float32 -- for a classifier with a distance out-of-scope score (:mod:`kformer.tasks.classify.ood`),
followed by the pooled text vectors: ``(batch, classes + dim)``, or every encoder block's pooled
vectors (``vectors="layers"``): ``(batch, classes + blocks * dim)`` (:attr:`width` columns).
``"onnx"`` converts the network to ONNX (the same conversion as ``kformer export --format onnx``)
once per folder version, kept in the folder's ``runtimes/`` (:func:`kformer.folders.converted`);
attention maps still come from the Keras model. ``"onnx-int8"`` also
quantizes the converted network's matrix weights to 8 bits (ONNX Runtime's dynamic quantization:
activations are quantized per batch as they run): faster for large networks (a fine-tuned
MiniLM), at a small cost in accuracy that BENCHMARKS.md measures. Other tasks keep Keras (their
decoding loop is kformer's own).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from kformer.data.batching import BATCH_BUCKETS
from kformer.errors import BadInput

RUNTIMES = ("keras", "onnx", "onnx-int8")


def check_runtime(runtime: str, field: str = "runtime") -> str:
    if runtime not in RUNTIMES:
        raise BadInput(f"{{field}} must be one of {', '.join(RUNTIMES)}, not {runtime!r}", field=field)
    return runtime


def vector_mode(vectors: bool | str | None) -> str | None:
    """The network vectors a predictor adds: None, ``"last"`` (the text vector; True says so too) or ``"layers"``."""
    if vectors in (None, False):
        return None
    if vectors is True or vectors == "last":
        return "last"
    if vectors == "layers":
        return "layers"
    raise ValueError(f"unknown vectors {vectors!r}: None, 'last' or 'layers'")


def make_predictor(classifier, runtime: str = "keras", vectors: bool | str | None = None):
    """What runs ``classifier``'s network on ``runtime`` (for ONNX Runtime: converted now); with
    ``vectors`` (:func:`vector_mode`), each row's pooled text vector -- or every encoder block's --
    follows its probabilities."""
    check_runtime(runtime)
    vectors = vector_mode(vectors)
    if runtime == "keras":
        return KerasPredictor(classifier.model, classifier.kind, vectors=vectors)
    from kformer.threads import thread_count

    return OnnxPredictor.for_classifier(classifier, thread_count(), int8=runtime == "onnx-int8", vectors=vectors)


class KerasPredictor:
    """ids ``(batch, width)`` int32 -> probabilities ``(batch, classes)`` float32 with the Keras
    network: kformer's encoder (``kind`` ``"encoder"``) or a KerasHub BERT classifier (``"bert"``).

    The caller pads batches to few shapes (XLA compiles once per shape) and cuts them at
    :attr:`max_batch` rows, except where :attr:`any_shape` says one graph takes them all.
    """

    name = "keras"
    max_batch = BATCH_BUCKETS[-1]  # the largest batch warmup compiles

    def __init__(self, model, kind: str, vectors: bool | str | None = None):
        from kformer.tasks.classify.batch_plan import CallCosts

        self.model, self.kind = model, kind
        self.classes = int(model.outputs[0].shape[-1])
        # what runs: the model, or (``vectors``) the model whose rows end with the pooled text vector(s)
        self.network = model
        self.vectors = vector_mode(vectors)
        if self.vectors:
            from kformer.models.classifier import with_text_vectors

            self.network = with_text_vectors(model, layers=self.vectors == "layers")
        self.width = int(self.network.outputs[0].shape[-1])  # columns of a call's output
        self.costs = CallCosts(pads_rows=True)  # a call runs at a compiled batch size: rows are padded up
        # kind "bert" on TensorFlow: the network as one graph of any (batch, width), built on first
        # use (any_shape; False: none on this backend)
        self.graph = None
        self._xla = False  # kind "bert" elsewhere: predict_on_batch switched to XLA on first use

    @property
    def any_shape(self) -> bool:
        """True when the network is a BERT classifier run as one TensorFlow graph that takes every
        ``(batch, width)`` (:func:`~kformer.models.pretrained.bert_graph_function`): its batches
        are cut to exactly their longest row and never padded with rows."""
        if self.kind != "bert":
            return False
        if self.graph is None:
            from kformer.models.pretrained import bert_graph_function

            self.graph = bert_graph_function(self.network) or False
        return bool(self.graph)

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        if self.kind == "encoder":
            return np.asarray(self.network.predict_on_batch(ids), dtype="float32")
        if self.any_shape:
            return self._as_probabilities(self.graph(ids))
        import keras

        from kformer.models.pretrained import bert_inputs

        # another backend: keras.Model's own predict_on_batch. The ids are already tokenized, so
        # KerasHub's override (which runs the string preprocessor first) is skipped without touching
        # the model; XLA compiles the prediction step once per (batch, width) shape (warmup).
        if not self._xla:
            self.network.jit_compile, self.network.predict_function, self._xla = True, None, True
        return self._as_probabilities(np.asarray(keras.Model.predict_on_batch(self.network, bert_inputs(ids)[0]),
                                                 dtype="float32"))

    def _as_probabilities(self, outputs: np.ndarray) -> np.ndarray:
        """A BERT classifier's outputs ``(batch, classes[ + dim])`` with probabilities first:
        KerasHub classifiers built without ``activation="softmax"`` (folders from other tools)
        return logits."""
        import keras

        if getattr(self.model, "activation", None) is keras.activations.softmax:
            return outputs
        logits = outputs[:, : self.classes]
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        return np.concatenate([shifted / shifted.sum(axis=1, keepdims=True), outputs[:, self.classes:]], axis=1)


class OnnxPredictor:
    """ids ``(batch, width)`` int32 -> probabilities ``(batch, classes)`` float32 with ONNX Runtime
    (any batch size; widths as the caller's buckets); with ``vectors``, a network converted with
    its pooled text vectors: ``(batch, classes + dim)``."""

    any_shape = False
    max_batch = None

    def __init__(self, onnx_model: bytes, threads: int | None = None, name: str = "onnx",
                 vectors: bool | str | None = None):
        from kformer.extras import require
        from kformer.tasks.classify.batch_plan import CallCosts

        self.name = name
        self.costs = CallCosts(pads_rows=False)  # any batch size runs as it is
        require(f"the {name} runtime", "export", ("onnxruntime",), field="runtime")
        import onnxruntime as ort

        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = int(threads)
            options.inter_op_num_threads = 1
        # idle pool threads sleep instead of spinning: they would take the cores the service's
        # event loop and inference thread need between calls
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(onnx_model, options, providers=["CPUExecutionProvider"])
        self.input = self.session.get_inputs()[0].name
        self.vectors = vector_mode(vectors)
        self.width = self.session.get_outputs()[0].shape[-1]  # columns of a call's output
        if not isinstance(self.width, int):
            raise ValueError(f"the converted network's output has no fixed width ({self.width!r})")

    @classmethod
    def for_classifier(cls, classifier, threads: int | None = None, int8: bool = False,
                       vectors: bool | str | None = None) -> OnnxPredictor:
        """``classifier``'s network (token ids -> probabilities[, pooled text vectors]) as ONNX; with
        ``int8``, its matrix weights quantized to 8 bits (:func:`quantize_int8`). Converted once per
        folder version and kept with the folder (:func:`kformer.folders.converted`): a restart or
        reload reads it back."""
        from kformer.folders import converted

        def convert(path: Path) -> None:
            from kformer.models.export_plan import onnx_file, require_onnx
            from kformer.tasks.classify.export import network_endpoint

            require_onnx()
            endpoint = network_endpoint(classifier, vectors)
            if not int8:
                onnx_file(endpoint, path, classifier.model)
                return
            with tempfile.TemporaryDirectory(prefix="kformer-onnx-") as tmp:
                onnx_file(endpoint, Path(tmp) / "network.onnx", classifier.model)
                quantize_int8(Path(tmp) / "network.onnx", path)

        vectors = vector_mode(vectors)
        name = "network" + {None: "", "last": "-vectors", "layers": "-layer-vectors"}[vectors] + ("-int8" if int8 else "")
        name += ".onnx"
        return cls(converted(classifier.folder, name, convert), threads, "onnx-int8" if int8 else "onnx", vectors)

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
