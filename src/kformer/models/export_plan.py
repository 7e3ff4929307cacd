"""What an export of a network holds, and one endpoint as ONNX: the vocabulary every model
object answers ``export_plan()`` in (:meth:`kformer.tasks.base.TaskModel.export_plan`).

An export is a set of :class:`Endpoint` objects -- graph functions with named, typed inputs and
outputs -- plus the resources they use, the files to copy beside them and what
``metadata.json`` says (:class:`Plan`). :mod:`kformer.export` writes a plan as a SavedModel (every
endpoint a signature) or as ONNX files (:func:`onnx_file`, each endpoint that names a file);
:mod:`kformer.tasks.classify` also converts its network in memory to run on ONNX Runtime.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kformer.errors import Unsupported

ONNX_OPSET = 17
ONNX_FILE_LIMIT = 2**31  # bytes: protobuf's cap on one serialised message, hence on one .onnx file
# Weights from which a conversion collects the converter's garbage between its graph passes
# (:func:`_collecting_between_passes`); below it the collections would only cost time (~2 s a file).
COLLECT_FROM_BYTES = 2**28


@dataclass(frozen=True)
class Tensor:
    """One input or output of a signature: ``dtype``, ``shape`` (None = any size) and its meaning."""

    name: str
    dtype: str
    shape: tuple[int | None, ...]
    meaning: str

    def to_json(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "shape": list(self.shape), "meaning": self.meaning}


@dataclass(frozen=True)
class Endpoint:
    """A function the export offers: ``fn(*inputs)`` -> ``{output name: tensor}``.

    ``onnx``: also written as ``<onnx>.onnx`` for the ONNX format (None: SavedModel only). By
    default the endpoint itself is converted; ``onnx_via`` names another endpoint to convert
    instead (e.g. the network alone) and ``onnx_finish(model_proto)`` then edits the converted
    graph, in place, into this endpoint's inputs and outputs (e.g. operators the converter has no
    form for).
    """

    name: str
    fn: Callable
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    onnx: str | None = None
    onnx_via: Endpoint | None = None
    onnx_finish: Callable[[Any], None] | None = None
    tracked: tuple[Any, ...] = ()  # resources this endpoint alone uses (beside the plan's)
    text_ops: bool = False  # needs TensorFlow Text's ops: its own SavedModel, so the others load without them

    def input_signature(self) -> list:
        import keras

        return [keras.InputSpec(shape=t.shape, dtype=t.dtype, name=t.name) for t in self.inputs]

    def to_json(self) -> dict[str, Any]:
        return {"inputs": {t.name: t.to_json() for t in self.inputs},
                "outputs": {t.name: t.to_json() for t in self.outputs}}


@dataclass
class Plan:
    """What an export of one model holds: endpoints, resources to track, files to copy, metadata."""

    task: str
    endpoints: list[Endpoint]
    tracked: list[Any] = field(default_factory=list)
    write_files: Callable[[Path], None] = lambda folder: None
    info: dict[str, Any] = field(default_factory=dict)


def require_onnx() -> None:
    """Unsupported (with the install command) when the ONNX tool chain is missing."""
    from kformer.extras import require

    require("ONNX export", "export", ("onnx", "tf2onnx"), field="format")


def check_onnx_size(plan: Plan) -> None:
    """Unsupported, before anything is converted, when the weights ``plan`` tracks (the network,
    a translator's datastore: ``info["retrieval"]``) reach :data:`ONNX_FILE_LIMIT`: the file that
    holds them could not be written."""
    held = held_bytes(plan)
    if held >= ONNX_FILE_LIMIT:
        holder = "the model and its retrieval datastore hold" if "retrieval" in plan.info else "the model holds"
        raise Unsupported(f"{holder} {held / 1e9:.2f} GB of weights, more than the {ONNX_FILE_LIMIT / 1e9:.2f} GB "
                          "one ONNX file can hold; export it with --format saved_model, which has no such limit",
                          field="format")


def held_bytes(plan: Plan) -> int:
    """Bytes of the weights ``plan`` tracks (the network, a translator's datastore)."""
    import numpy as np

    return sum(math.prod(w.shape) * np.dtype(w.dtype).itemsize for r in plan.tracked for w in getattr(r, "weights", ()))


def onnx_file(endpoint: Endpoint, path: Path, model, large: bool = False) -> None:
    """Convert one endpoint (which runs the Keras ``model``) to ONNX at ``path`` (Keras' exporter,
    tf2onnx underneath; see :class:`Endpoint` for ``onnx_via`` and ``onnx_finish``); ``large``:
    the graph holds at least :data:`COLLECT_FROM_BYTES` of weights."""
    import onnx

    converted = endpoint.onnx_via or endpoint
    with _collecting_between_passes() if large else contextlib.nullcontext():
        try:
            with _optimizing_in_place():
                _convert(converted, path, model)
        except Unsupported:
            raise
        except Exception:  # noqa: BLE001  a tf2onnx optimizer pass failed on this graph: again, each pass on a copy
            _convert(converted, path, model)
    proto = onnx.load(str(path))
    for output, tensor in zip(proto.graph.output, converted.outputs, strict=True):  # the converter's names
        rename_value(proto.graph, output.name, tensor.name)
    if endpoint.onnx_finish is not None:
        endpoint.onnx_finish(proto)
    onnx.checker.check_model(proto)  # the converter leaves an operator it has no handler for in place
    onnx.save(proto, str(path))


def rename_value(graph, old: str, new: str) -> None:
    """Rename the value ``old`` to ``new`` everywhere in ``graph``."""
    if old == new:
        return
    for node in graph.node:
        node.input[:] = [new if name == old else name for name in node.input]
        node.output[:] = [new if name == old else name for name in node.output]
    for value in (*graph.input, *graph.output, *graph.value_info):
        if value.name == old:
            value.name = new


def _convert(endpoint: Endpoint, path: Path, model) -> None:
    import warnings

    from kformer.models.onnx_ops import register

    register()
    wrapper = _endpoint_model(endpoint, model)
    tf_log = logging.getLogger("tensorflow")
    level = tf_log.level
    tf_log.setLevel(logging.ERROR)  # tf2onnx's graph freezing warns about unrelated graph collections
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore", FutureWarning)  # Keras' numpy-2 patch of tf2onnx touches np.object
        try:
            wrapper.export(str(path), format="onnx", input_signature=endpoint.input_signature(), verbose=False,
                           opset_version=ONNX_OPSET)
        except ImportError as exc:
            raise Unsupported(f"ONNX export needs {exc.name}, which is not installed: "
                              "pip install 'kformer[export]'", field="format") from None
        finally:
            tf_log.setLevel(level)


@contextlib.contextmanager
def _optimizing_in_place():
    """tf2onnx runs its optimizer passes on a deep copy of the whole graph, weights included, so that
    a pass that fails can be dropped: ~50 copies, half or more of a small model's conversion (the
    test suite's tiny classifier: 1.3-1.9 s with them, 0.65 s without).
    Its ``TF2ONNX_CATCH_ERRORS`` variable turns the copies off (the same passes in the same order:
    the same operators and weights, named and ordered a little differently); a pass that then
    fails fails the conversion, which
    :func:`onnx_file` runs again the copying way. Set for this conversion only."""
    import os

    name = "TF2ONNX_CATCH_ERRORS"
    before = os.environ.get(name)
    os.environ[name] = "FALSE"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


@contextlib.contextmanager
def _collecting_between_passes():
    """tf2onnx deep-copies the whole graph, weights included, before each of its optimizer passes
    (to roll back one that fails): ~50 copies, reference cycles that Python's collector reaches
    late. A translator with a million-entry datastore (255 MB of keys) piled them up past 24 GB and
    was killed; collected after each pass, its conversion peaks at ~13 GB (in TensorFlow's graph
    freezing, before these passes). tf2onnx takes no optimizer list through its public
    ``from_function``, so its table is swapped for the conversion and restored after."""
    import gc
    from collections import OrderedDict

    from tf2onnx import optimizer

    table = optimizer._optimizers

    def collected(factory):
        def make():
            gc.collect()
            return factory()

        return make

    optimizer._optimizers = OrderedDict((name, collected(factory)) for name, factory in table.items())
    try:
        yield
    finally:
        optimizer._optimizers = table


def _endpoint_model(endpoint: Endpoint, model):
    """A Keras model whose ``call`` is the endpoint (what Keras' ONNX exporter takes); it holds
    ``model`` so that the export finds its weights."""
    import keras

    class EndpointModel(keras.Model):
        def __init__(self, inner, **kwargs):
            super().__init__(**kwargs)
            self.inner = inner

        def call(self, *inputs):
            outputs = endpoint.fn(*inputs)
            if len(endpoint.outputs) == 1:
                return outputs[endpoint.outputs[0].name]
            return tuple(outputs[t.name] for t in endpoint.outputs)

    wrapper = EndpointModel(model, name=endpoint.name)
    wrapper.built = True  # its weights are the built ``model``'s
    wrapper._called = True
    return wrapper


