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

Signatures (SavedModel) and files (ONNX) -- ``B`` batch, ``L`` ids per text (at most
``max_length``), ``S`` source ids, ``T`` target ids so far, ``D`` model width, ``V`` target vocabulary:

* classify: ``serving_default`` ``token_ids`` int32 ``(B, L)`` -> ``probabilities`` float32
  ``(B, classes)``; ``texts`` (SavedModel only, when the tokenizer runs in the graph) strings
  ``(B,)`` -> ``probabilities`` and ``labels`` (the most likely label, string ``(B,)``). A
  classifier with a wide n-gram part (``wide``, :mod:`kformer.tasks.classify_wide`) is refused
  (Unsupported): its scikit-learn part has no graph form.
* translate / arithmetic: ``encode`` ``source_ids`` int32 ``(B, S)`` -> ``encoder_outputs``
  float32 ``(B, S, D)``; ``decode_step`` ``target_in`` int32 ``(B, T)`` (``[START]`` + tokens so
  far), ``encoder_outputs``, ``source_ids`` -> ``logits`` float32 ``(B, V)`` of the next token;
  ``serving_default`` (SavedModel only) ``source_ids`` -> ``target_ids`` int32
  ``(B, max_target_length)``, greedy decoding, ``[END]`` then 0s.

ONNX goes through Keras' exporter (tf2onnx): ``pip install 'kformer[export]'``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kformer.artifacts import new_staging_folder
from kformer.errors import BadInput, KformerError, Unsupported

FORMATS = ("saved_model", "onnx")
METADATA_FILE = "metadata.json"
README_FILE = "README.txt"
LABELS_FILE = "labels.txt"
SAVED_MODEL_DIR = "1"
EXPORT_MARKER = "kformer_export"  # metadata.json key telling an export folder from anything else
ONNX_OPSET = 17


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

    ``onnx``: also written as ``<onnx>.onnx`` for the ONNX format (None: SavedModel only).
    """

    name: str
    fn: Callable
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    onnx: str | None = None

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
    plan = plan_for(model)
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
    try:
        return bool(json.loads((folder / METADATA_FILE).read_text(encoding="utf-8")).get(EXPORT_MARKER))
    except (OSError, ValueError, AttributeError):
        return False


def require_onnx() -> None:
    """Unsupported (with the install command) when the ONNX tool chain is missing."""
    from kformer.extras import require

    require("ONNX export", "export", ("onnx", "tf2onnx"), field="format")


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


def write_saved_model(plan: Plan, stage: Path) -> list[str]:
    """Every endpoint as a signature of one SavedModel in ``stage/1``."""
    import keras

    archive = keras.export.ExportArchive()
    for resource in plan.tracked:
        archive.track(resource)
    for endpoint in plan.endpoints:
        archive.add_endpoint(endpoint.name, endpoint.fn, input_signature=endpoint.input_signature())
    archive.write_out(str(stage / SAVED_MODEL_DIR), verbose=False)
    return [SAVED_MODEL_DIR]


def write_onnx(plan: Plan, stage: Path) -> list[str]:
    """Each endpoint that has an ONNX name as ``stage/<name>.onnx``."""
    written = []
    for endpoint in plan.endpoints:
        if endpoint.onnx:
            onnx_file(endpoint, stage / f"{endpoint.onnx}.onnx", plan.tracked[0])
            written.append(f"{endpoint.onnx}.onnx")
    return written


def onnx_file(endpoint: Endpoint, path: Path, model) -> None:
    """Convert one endpoint (which runs the Keras ``model``) to ONNX at ``path`` (Keras' exporter,
    tf2onnx underneath)."""
    import warnings

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


def _endpoint_model(endpoint: Endpoint, model):
    """A Keras model whose ``call`` is the endpoint (what Keras' ONNX exporter takes); it holds
    ``model`` so that the export finds its weights."""
    import keras

    class EndpointModel(keras.Model):
        def __init__(self, inner, **kwargs):
            super().__init__(**kwargs)
            self.inner = inner

        def call(self, *inputs):
            return endpoint.fn(*inputs)[endpoint.outputs[0].name]

    wrapper = EndpointModel(model, name=endpoint.name)
    wrapper.built = True  # its weights are the built ``model``'s
    wrapper._called = True
    return wrapper


def _metadata(plan: Plan, format: str, model_dir: Path, files: list[str]) -> dict[str, Any]:
    from kformer import __version__

    if format == "saved_model":
        signatures = {e.name: e.to_json() for e in plan.endpoints}
    else:
        signatures = {f"{e.onnx}.onnx": e.to_json() for e in plan.endpoints if e.onnx}
    return {EXPORT_MARKER: __version__, "format": format, "task": plan.task, "source": str(model_dir.resolve()),
            "files": files, "signatures": signatures, **plan.info}


def describe(metadata: dict[str, Any]) -> str:
    """README.txt: what each signature (SavedModel) or file (ONNX) takes and returns."""
    lines = [f"kformer export of a {metadata['task']} model ({metadata['format']}), from {metadata['source']}", ""]
    if metadata["format"] == "saved_model":
        lines += [f"SavedModel in {SAVED_MODEL_DIR}/ (TensorFlow Serving: --model_base_path=<this folder>).",
                  "Load it: tf.saved_model.load('<this folder>/1').signatures[NAME](**inputs)", ""]
    else:
        lines += ["ONNX files; run them with onnxruntime.InferenceSession(FILE).run(None, inputs).", ""]
    for name, signature in metadata["signatures"].items():
        lines.append(f"{name}")
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


# --- what each task exports -----------------------------------------------------------------------


def plan_for(model) -> Plan:
    """The export plan of a loaded task model (:func:`kformer.tasks.load`)."""
    if model.task == "classify":
        return _classifier_plan(model)
    if model.task in ("translate", "arithmetic"):
        return _seq2seq_plan(model)
    raise Unsupported(f"models of task {model.task!r} cannot be exported", field="model_dir")


def classifier_endpoint(classifier) -> Endpoint:
    """``serving_default`` of a classifier: ``token_ids`` int32 ``(B, L)`` -> ``probabilities``
    float32 ``(B, classes)`` (also ``model.onnx``)."""
    token_ids = Tensor("token_ids", "int32", (None, None),
                       f"token ids, 0-padded, at most {classifier.max_length} per row (vocab.txt line = id)")
    probabilities = Tensor("probabilities", "float32", (None, len(classifier.labels)),
                           "class probabilities; column i is labels.txt line i")
    probs_of_ids = classifier_function(classifier)
    return Endpoint("serving_default", lambda ids: {"probabilities": probs_of_ids(ids)}, (token_ids,),
                    (probabilities,), onnx="model")


def _classifier_plan(classifier) -> Plan:
    if getattr(classifier, "wide", None) is not None:
        raise Unsupported(f"{classifier.folder} mixes a wide n-gram part (scikit-learn) into its probabilities, which "
                          "an export cannot carry; retrain with --no-wide to export it", field="model_dir")
    import tensorflow as tf

    labels = list(classifier.labels)
    by_ids = classifier_endpoint(classifier)
    probabilities, probs_of_ids = by_ids.outputs[0], by_ids.fn
    endpoints = [by_ids]
    tracked: list[Any] = [classifier.model]
    tokenize, reason = _graph_tokenizer(classifier)
    if tokenize is not None:
        label_table = tf.constant(labels)
        tracked.append(tokenize)

        def from_texts(texts):
            probs = probs_of_ids(tokenize(texts))["probabilities"]
            return {"probabilities": probs, "labels": tf.gather(label_table, tf.argmax(probs, axis=1))}

        endpoints.append(Endpoint("texts", from_texts, (Tensor("texts", "string", (None,), "raw texts"),),
                                  (probabilities, Tensor("labels", "string", (None,), "the most likely label"))))

    def write_files(folder: Path) -> None:
        (folder / LABELS_FILE).write_text("\n".join(labels) + "\n", encoding="utf-8")
        (folder / "vocab.txt").write_text("\n".join(_classifier_vocabulary(classifier)) + "\n", encoding="utf-8")

    info = {"labels": labels, "labels_file": LABELS_FILE, "vocabulary_files": ["vocab.txt"],
            "max_length": classifier.max_length, "kind": classifier.kind,
            "texts_signature": reason or "strings in: the tokenizer runs in the graph (needs TensorFlow Text's ops)"}
    return Plan("classify", endpoints, tracked, write_files, info)


def classifier_function(classifier) -> Callable:
    """ids ``(B, L)`` int32 -> probabilities ``(B, classes)`` float32, as a graph function."""
    import keras

    model = classifier.model
    if classifier.kind == "encoder":
        return lambda ids: model(ids, training=False)
    from kformer.models.pretrained import bert_inputs

    def bert(ids):
        outputs = keras.Model.__call__(model, bert_inputs(ids)[0], training=False)
        return _as_probabilities(outputs)

    return bert


def _as_probabilities(outputs):
    """KerasHub classifiers may end in logits: a softmax unless rows already sum to 1."""
    import tensorflow as tf

    outputs = tf.cast(outputs, tf.float32)
    sums = tf.reduce_sum(outputs, axis=1, keepdims=True)
    is_probs = tf.reduce_all(tf.abs(sums - 1.0) < 1e-3) & tf.reduce_all(outputs >= 0.0)
    return tf.cond(is_probs, lambda: outputs, lambda: tf.nn.softmax(outputs, axis=1))


def _graph_tokenizer(classifier):
    """``(tokenizer usable in a graph, None)`` or ``(None, why there is no texts signature)``."""
    if classifier.kind == "bert":
        from kformer.text.vocabulary import CHARS_PER_TOKEN_LIMIT

        preprocessor = classifier.model.preprocessor
        limit = classifier.max_length * CHARS_PER_TOKEN_LIMIT
        return _BertTexts(preprocessor, limit), None
    tokenizer = classifier.tokenizer
    if not hasattr(tokenizer, "index"):  # KerasHub's WordPieceTokenizer: a graph layer already
        return _WordPieceTexts(tokenizer), None
    from kformer.text.graph_words import GraphWordTokenizer

    try:
        return GraphWordTokenizer(tokenizer.vocabulary, tokenizer.sequence_length, tokenizer.truncation), None
    except KformerError as exc:
        return None, f"no texts signature: {exc}"


def _clean(texts, max_chars: int):
    """:func:`kformer.text.vocabulary.clean_text` as graph ops: ``<br>`` and runs of spaces to one
    space, trimmed, cut to ``max_chars``."""
    import tensorflow as tf

    texts = tf.strings.regex_replace(texts, r"(?i)<br\s*/?>", " ")
    texts = tf.strings.strip(tf.strings.regex_replace(texts, r"\s+", " "))
    return tf.strings.substr(texts, 0, max_chars, unit="UTF8_CHAR")


def _no_empty_rows(ids):
    """An all-padding row gets ``[UNK]`` first, as :func:`kformer.text.vocabulary.encode` does."""
    import tensorflow as tf

    from kformer.text.specials import PAD_ID, UNK_ID

    empty = tf.reduce_all(tf.equal(ids, PAD_ID), axis=1)
    return tf.concat([tf.where(empty, tf.constant(UNK_ID, ids.dtype), ids[:, 0])[:, None], ids[:, 1:]], axis=1)


class _WordPieceTexts:
    """Strings -> ids with the classifier's KerasHub WordPiece tokenizer (a Keras layer)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.limit = tokenizer.sequence_length * 16

    def __call__(self, texts):
        import tensorflow as tf

        return _no_empty_rows(tf.cast(self.tokenizer(_clean(texts, self.limit)), tf.int32))


class _BertTexts:
    """Strings -> ``[CLS] ... [SEP]`` ids with a KerasHub classifier's own preprocessor."""

    def __init__(self, preprocessor, limit: int):
        self.preprocessor, self.limit = preprocessor, limit

    def __call__(self, texts):
        import tensorflow as tf

        return tf.cast(self.preprocessor(_clean(texts, self.limit))["token_ids"], tf.int32)


def _classifier_vocabulary(classifier) -> list[str]:
    if classifier.kind == "bert":
        return list(classifier.model.preprocessor.tokenizer.get_vocabulary())
    return list(classifier.tokenizer.get_vocabulary())


def _seq2seq_plan(task_model) -> Plan:
    import tensorflow as tf

    from kformer.layers import padding_mask
    from kformer.models.generation import _greedy_loop

    model = task_model.model
    source_ids = Tensor("source_ids", "int32", (None, None),
                        f"source token ids, 0-padded, at most {model.max_source_length} per row")
    encoder_outputs = Tensor("encoder_outputs", "float32", (None, None, model.dim), "the encode signature's output")
    target_in = Tensor("target_in", "int32", (None, None),
                       "[START] (id 2) and the target ids chosen so far (at most max_target_length)")
    logits = Tensor("logits", "float32", (None, model.target_vocab_size), "next-token logits after target_in")
    target_ids = Tensor("target_ids", "int32", (None, model.max_target_length),
                        "greedy output ids: tokens, [END] (id 3), then 0s")

    def encode(source):
        return {"encoder_outputs": tf.cast(model.encode(source, training=False)[0], tf.float32)}

    def decode_step(target, encoded, source):
        encoded = tf.cast(encoded, model.dtype_policy.compute_dtype)
        step = model.decode(target, encoded, padding_mask(source), training=False)[:, -1, :]
        return {"logits": tf.cast(step, tf.float32)}

    # a translator caps each row at ceil(a * n) + b tokens for an n-subword source, as Translator.decode_limits
    rule = task_model.decode_length if task_model.task == "translate" else None

    def greedy(source):
        length = model.max_target_length
        if rule is None:
            limits = tf.fill(tf.shape(source)[:1], length)
        else:
            subwords = tf.reduce_sum(tf.cast(tf.not_equal(source, 0), tf.float64), axis=1)  # float64: the same ceil as Python
            limits = tf.minimum(tf.cast(tf.math.ceil(rule["per_source_token"] * subwords), tf.int32)
                                + int(rule["extra"]), length)
        return {"target_ids": _greedy_loop(model, source, tf.constant(length, tf.int32), limits, length, True)}

    endpoints = [
        Endpoint("serving_default", greedy, (source_ids,), (target_ids,)),
        Endpoint("encode", encode, (source_ids,), (encoder_outputs,), onnx="encoder"),
        Endpoint("decode_step", decode_step, (target_in, encoder_outputs, source_ids), (logits,), onnx="decoder_step"),
    ]
    if task_model.task == "translate":
        vocab_files = _spm_files(task_model)
    else:
        vocab_files = ["vocab.txt"]
    source_folder = Path(task_model.folder)

    def write_files(folder: Path) -> None:
        if task_model.task == "translate":
            for name in vocab_files:
                shutil.copyfile(source_folder / name, folder / name)
        else:
            tokens = task_model.format.vocabulary.to_json()
            (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")

    info = {"vocabulary_files": vocab_files, "max_source_length": model.max_source_length,
            "max_target_length": model.max_target_length, "special_ids": {"pad": 0, "start": 2, "end": 3}}
    if task_model.task == "arithmetic":
        info["arithmetic_format"] = task_model.format.to_json()
    return Plan(task_model.task, endpoints, [model], write_files, info)


def _spm_files(translator) -> list[str]:
    """The SentencePiece files of a translate folder (one when the vocabulary is shared)."""
    from kformer.tasks.translate import SOURCE_VOCAB_FILE, TARGET_VOCAB_FILE

    vocab = translator.manifest.get("vocab") or {}
    return list(dict.fromkeys([vocab.get("source", SOURCE_VOCAB_FILE), vocab.get("target", TARGET_VOCAB_FILE)]))
