"""Export a model folder for the runtimes teams deploy: a TensorFlow SavedModel or ONNX files.

``export(model_dir, out, format)`` writes ``out`` (atomically: a temporary folder renamed into
place) holding:

=================  ====================================================================================
``1/``             (``saved_model``) the SavedModel, in the version folder TensorFlow Serving expects
                   (``tensorflow_model_server --model_base_path=OUT``)
``model.onnx``     (``onnx``, classifiers) token ids -> probabilities
``encoder.onnx``,  (``onnx``, translate/arithmetic) the encoder and one decoder step
``decoder_step.onnx``
``labels.txt``     classifiers: output column ``i`` is line ``i``
``vocab.txt``,     the vocabulary the ids come from (``vocab.txt``; translators' SentencePiece
``*.spm``          ``vocab.spm`` or ``source.spm`` + ``target.spm``)
``metadata.json``  task, format, every signature/file with its inputs and outputs (dtype, shape,
                   meaning), labels, lengths; ``README.txt`` says the same in words
=================  ====================================================================================

What each model holds is its own business: :func:`export` loads the folder and writes the
:class:`~kformer.models.export_plan.Plan` the model object gives (``model.export_plan()``; the
classifier's and the seq2seq models' signatures are described there). ONNX goes through Keras'
exporter (tf2onnx; ``pip install 'kformer[export]'``), one file per endpoint that names one.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kformer.artifacts import new_staging_folder
from kformer.errors import BadInput
from kformer.folders import EXPORT_MARKER, read_export_metadata
from kformer.folders import EXPORT_METADATA as METADATA_FILE
from kformer.models.export_plan import (
    COLLECT_FROM_BYTES,
    Endpoint,
    Plan,
    check_onnx_size,
    held_bytes,
    onnx_file,
    require_onnx,
)

FORMATS = ("saved_model", "onnx")
README_FILE = "README.txt"
SAVED_MODEL_DIR = "1"
TEXT_OPS_DIR = "texts/1"  # a SavedModel beside the first, for TF Serving as --model_base_path=<out>/texts
LOAD_TEXT_OPS = "import tensorflow_text"  # registers TensorFlow Text's ops, which texts/1 needs


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export` wrote: the ``folder``, its ``format`` and ``metadata`` (as metadata.json)."""

    folder: Path
    format: str
    metadata: dict[str, Any]


# --- the public entry point -----------------------------------------------------------------------


def export(model_dir: str | os.PathLike, out: str | os.PathLike, format: str = "saved_model") -> ExportResult:
    """Export the model folder ``model_dir`` as ``format`` (``saved_model`` or ``onnx``) into ``out``.

    ``out`` must not exist, be empty, or hold an earlier export (which is replaced whole); anything
    else is refused (BadInput, field ``out``). The old export stays until the new one is complete.
    """
    from kformer.tasks import load

    if format not in FORMATS:
        raise BadInput(f"{{field}} must be one of {', '.join(FORMATS)}, not {format!r}", field="format")
    out = Path(out)
    check_out(out)
    if format == "onnx":
        require_onnx()
    model = load(model_dir)
    plan = model.export_plan()
    if format == "onnx":
        check_onnx_size(plan)
    with replaced_folder(out) as stage:
        files = write_saved_model(plan, stage) if format == "saved_model" else write_onnx(plan, stage)
        plan.write_files(stage)
        metadata = _metadata(plan, format, Path(model_dir), files)
        (stage / METADATA_FILE).write_text(json.dumps(metadata, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        (stage / README_FILE).write_text(describe(metadata), encoding="utf-8")
    return ExportResult(out, format, metadata)


def check_out(out: Path) -> None:
    """BadInput unless ``out`` is new, an empty folder or an earlier export."""
    if not out.exists():
        return
    if not out.is_dir():
        raise BadInput(f"{{field}} {out} is a file; give a new folder", field="out")
    if any(out.iterdir()) and not is_export(out):
        raise BadInput(f"{{field}} {out} is a folder that holds something other than a kformer export; "
                       "give a new folder", field="out")


def is_export(folder: Path) -> bool:
    """True when ``folder`` holds a kformer export (its metadata.json says so)."""
    return read_export_metadata(folder) is not None


class replaced_folder:  # noqa: N801  (a context manager used like a function)
    """Yield an empty staging folder beside ``out``; on success it replaces ``out`` whole.

    The old ``out`` is renamed aside and removed only after the new one is in place, so a failure
    at any point leaves either the old export or the new one, never a mixture.
    """

    def __init__(self, out: Path):
        self.out = out

    def __enter__(self) -> Path:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.stage = new_staging_folder(self.out)
        return self.stage

    def __exit__(self, kind, value, traceback) -> None:
        if kind is not None:
            shutil.rmtree(self.stage, ignore_errors=True)
            return
        old = None
        if self.out.exists():
            old = new_staging_folder(self.out, "old")
            os.replace(self.out, old / "export")
        os.replace(self.stage, self.out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


# --- writing --------------------------------------------------------------------------------------


def saved_model_dir(endpoint: Endpoint) -> str:
    """Where an endpoint's signature is: ``1`` (plain TensorFlow loads it), or ``texts/1`` for one
    that needs TensorFlow Text's ops (which a SavedModel must have registered to load at all)."""
    return TEXT_OPS_DIR if endpoint.text_ops else SAVED_MODEL_DIR


def write_saved_model(plan: Plan, stage: Path) -> list[str]:
    """Every endpoint as a signature of the SavedModel in ``stage/1``, but those needing
    TensorFlow Text's ops, which go to a second SavedModel in ``stage/texts/1``."""
    import keras

    written = []
    for folder in (SAVED_MODEL_DIR, TEXT_OPS_DIR):
        endpoints = [e for e in plan.endpoints if saved_model_dir(e) == folder]
        if not endpoints:
            continue
        archive = keras.export.ExportArchive()
        for resource in [*plan.tracked, *(r for e in endpoints for r in e.tracked)]:
            archive.track(resource)
        for endpoint in endpoints:
            archive.add_endpoint(endpoint.name, endpoint.fn, input_signature=endpoint.input_signature())
        archive.write_out(str(stage / folder), verbose=False)
        written.append(folder)
    return written


def write_onnx(plan: Plan, stage: Path) -> list[str]:
    """Each endpoint that has an ONNX name as ``stage/<name>.onnx``."""
    written, large = [], held_bytes(plan) >= COLLECT_FROM_BYTES
    for endpoint in plan.endpoints:
        if endpoint.onnx:
            onnx_file(endpoint, stage / f"{endpoint.onnx}.onnx", plan.tracked[0], large=large)
            written.append(f"{endpoint.onnx}.onnx")
    return written


def _metadata(plan: Plan, format: str, model_dir: Path, files: list[str]) -> dict[str, Any]:
    from kformer import __version__

    if format == "saved_model":
        signatures = {e.name: {**e.to_json(), "saved_model": saved_model_dir(e),
                               "load": load_line(saved_model_dir(e), e.name)} for e in plan.endpoints}
    else:
        signatures = {f"{e.onnx}.onnx": {**e.to_json(), "load": load_line(f"{e.onnx}.onnx", None)}
                      for e in plan.endpoints if e.onnx}
    return {EXPORT_MARKER: __version__, "format": format, "task": plan.task, "source": str(model_dir.resolve()),
            "files": files, "signatures": signatures, **plan.info}


def load_line(path: str, signature: str | None) -> str:
    """The Python that loads one signature of a SavedModel export (``path`` its folder) or one
    ONNX file (``signature`` None) and runs it on ``inputs`` ({name: array}) into ``outputs``."""
    if signature is None:
        return (f"import onnxruntime; session = onnxruntime.InferenceSession('<this folder>/{path}'); "
                "outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, inputs)))")
    imports = f"import tensorflow as tf; {LOAD_TEXT_OPS}" if path == TEXT_OPS_DIR else "import tensorflow as tf"
    return f"{imports}; outputs = tf.saved_model.load('<this folder>/{path}').signatures['{signature}'](**inputs)"


def describe(metadata: dict[str, Any]) -> str:
    """README.txt: what each signature (SavedModel) or file (ONNX) takes and returns."""
    lines = [f"kformer export of a {metadata['task']} model ({metadata['format']}), from {metadata['source']}", ""]
    if metadata["format"] == "saved_model":
        lines += [f"SavedModel in {SAVED_MODEL_DIR}/ (TensorFlow Serving: --model_base_path=<this folder>); "
                  "plain TensorFlow loads it, no other import needed."]
        if TEXT_OPS_DIR in metadata["files"]:
            lines += [f"The texts signature is a second SavedModel in {TEXT_OPS_DIR}/: its tokenizer needs TensorFlow "
                      f"Text's ops, so `{LOAD_TEXT_OPS}` first (pip install tensorflow-text; TensorFlow Serving: a "
                      "build with them, --model_base_path=<this folder>/texts)."]
        lines += ["Load each signature as its 'load:' line says, with inputs = {input name: tensor or array}.", ""]
    else:
        lines += ["ONNX files: run each as its 'load:' line says, with inputs = {input name: NumPy array}.", ""]
    for name, signature in metadata["signatures"].items():
        lines.append(f"{name}")
        if "load" in signature:
            lines.append(f"  load: {signature['load']}")
        for kind in ("inputs", "outputs"):
            for tensor, spec in signature[kind].items():
                shape = ", ".join("?" if d is None else str(d) for d in spec["shape"])
                lines.append(f"  {kind[:-1]:6} {tensor}: {spec['dtype']} ({shape}) - {spec['meaning']}")
        lines.append("")
    for key in ("labels_file", "vocabulary_files"):
        if metadata.get(key):
            lines.append(f"{key.replace('_', ' ')}: {metadata[key]}")
    lines.append("metadata.json holds all of this as JSON.")
    return "\n".join(lines) + "\n"
