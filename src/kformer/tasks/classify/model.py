"""A loaded classifier, and the classify model folder: the one place that writes and reads it.

A classify model folder (written only by :func:`write_folder`, read only by :func:`load`) holds,
beside the common manifest keys of :mod:`kformer.folders`:

==============  ==========================================================================
``kind``        ``"encoder"`` (kformer's encoder, ids from ``vocab.txt``) or ``"bert"``
                (a KerasHub ``BertTextClassifier`` that carries its own tokenizer: its
                vocabulary, ``lowercase`` and ``strip_accents`` are in ``model.keras``)
``labels``      the label names, exactly as written in the data; output ``i`` is ``labels[i]``
``vocab_file``  ``vocab.txt`` (encoder) or null
``max_length``, ``tokenizer``, ``truncation``: how texts become ids
``text_column``, ``label_column``: the columns of the training file
``backbone``, ``pooling`` (bert), ``recipe``, ``metrics``
``threshold``   (runs with ``calibrate``) the unknown route's threshold chosen on validation, in
                the units of the out-of-scope score (``ood``; without it: the best probability)
``ood``         (runs whose ``ood_score`` is not the probability) ``{"score", "units", "files", ...}``:
                the statistics of the training texts' network vectors or TF-IDF vectors in
                ``ood/*.npy`` (no pickle; :mod:`kformer.tasks.classify.ood`, :mod:`.ood_text`),
                the score the unknown route thresholds
``wide``        (runs with ``wide``) ``{"weight", "rule", "file", "vocab_file", "features"}``:
                the n-gram part in ``wide.npz`` + ``wide_vocab.json`` and its weight in the
                probabilities (:mod:`kformer.tasks.classify.wide`)
==============  ==========================================================================

and ``model.keras``, ``metrics.json``, ``curves.png``, ``confusion_valid.png``. ``training/``
keeps what ``resume`` needs: ``state.json`` (labels, settings, auto choices), ``vocab.txt`` and
the last epoch's checkpoint.
"""

from __future__ import annotations

import contextlib
import copy
import os
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from kformer.config import to_dict
from kformer.data.readers import LabelledTexts
from kformer.errors import BadInput, CorruptModel, Unsupported
from kformer.folders import MODEL_FILE, TRAINING_DIR
from kformer.tasks.base import AttentionMaps, TaskModel, check_texts, write_curves
from kformer.tasks.classify.calibration import RouteCounts
from kformer.tasks.classify.data import Data, as_labelled, first_rows
from kformer.tasks.classify.ood import PROBABILITY, in_scope_scores
from kformer.tasks.classify.runtimes import check_runtime, make_predictor
from kformer.tasks.classify.settings import TASK

if TYPE_CHECKING:
    from kformer.tasks.classify.ood import OodScore
    from kformer.tasks.classify.wide import Mix

VOCAB_FILE = "vocab.txt"


class Classifier(TaskModel):
    """A classifier: its network (the Keras model, the tokenizer making its ids, the runtime it
    predicts on), the label names, and the parts that trained it beside it -- the ``wide`` n-gram
    part mixed into its probabilities, the calibrated ``threshold`` of the unknown route and the
    out-of-scope score ``ood`` it thresholds (None: the best probability).

    ``kind`` is ``"encoder"`` (kformer's encoder; ``tokenizer`` turns texts into ids) or
    ``"bert"`` (a KerasHub ``BertTextClassifier``; its preprocessor's tokenizer makes the ids).
    Both are fed length-bucketed batches of ids (:mod:`kformer.data.batching`), as in training.
    ``runtime`` (:mod:`kformer.tasks.classify.runtimes`): where the network predicts, ``keras``,
    ``onnx`` or ``onnx-int8`` (converted here); attention maps always come from the Keras model.
    """

    task: ClassVar[str] = TASK
    parameters: ClassVar[dict[str, Any]] = {"top_k": 1, "threshold": None, "unknown_label": "unknown"}

    def __init__(self, folder: Path, manifest: dict, model, tokenizer=None, *, wide: Mix | None = None,
                 ood: OodScore | None = None, runtime: str = "keras"):
        super().__init__(folder, manifest)
        self.model = model
        self.tokenizer = tokenizer
        self.labels: list[str] = [str(label) for label in manifest["labels"]]
        self.kind: str = manifest.get("kind", "encoder")
        # the wide n-gram part and its weight, mixed into probabilities; None: the network alone
        self.wide = wide
        # the unknown route's threshold chosen on validation data (``calibrate``), or None
        self.threshold: float | None = None if manifest.get("threshold") is None else float(manifest["threshold"])
        # the distance the unknown route thresholds (kformer.tasks.classify.ood), or None: the best probability
        self.ood = ood
        # ids (batch, width) int32 -> probabilities (batch, classes) float32 on the runtime (with an ood score
        # that reads network vectors: then those, (batch, classes + dim) or every block's (batch, classes + L * dim))
        self.predictor = make_predictor(self, runtime, vectors=getattr(ood, "vectors", None))

    def with_parts(self, *, wide: Mix | None, threshold: float | None, ood: OodScore | None = None) -> Classifier:
        """A classifier with this one's network (model, tokenizer and runtime: shared) and the
        ``wide`` part, ``threshold`` and ``ood`` score given: how a training run assembles what
        validation chose."""
        needed = getattr(ood, "vectors", None)
        covered = self.predictor.vectors == "layers" or self.predictor.vectors == needed
        assembled = self.with_vectors(layers=needed == "layers") if needed and not covered else copy.copy(self)
        assembled.wide, assembled.threshold, assembled.ood = wide, threshold, ood
        return assembled

    def with_vectors(self, layers: bool = False) -> Classifier:
        """This classifier predicting on Keras with its pooled text vectors (:meth:`text_vectors`),
        with ``layers`` every encoder block's: what fitting a distance score reads."""
        copied = copy.copy(self)
        copied.predictor = make_predictor(self, "keras", vectors="layers" if layers else "last")
        return copied

    @property
    def ood_kind(self) -> str:
        """The score the unknown route thresholds: ``"probability"`` or a distance (:attr:`ood`)."""
        return PROBABILITY if self.ood is None else self.ood.kind

    def metadata(self) -> dict[str, Any]:
        return {**super().metadata(), "labels": list(self.labels), "kind": self.kind, "runtime": self.predictor.name}

    @property
    def max_length(self) -> int:
        """The longest id sequence the model takes."""
        if self.kind == "bert":
            return int(self.model.preprocessor.sequence_length)
        return int(self.tokenizer.sequence_length)

    def features(self, texts: Sequence[str]) -> np.ndarray:
        """Token ids ``(len(texts), max_length)`` int32, 0-padded at the end."""
        from kformer.text.vocabulary import CHARS_PER_TOKEN_LIMIT, clean_text, encode

        if self.kind == "encoder":
            return encode(self.tokenizer, texts)
        from kformer.models.pretrained import bert_token_ids

        limit = self.max_length * CHARS_PER_TOKEN_LIMIT
        return bert_token_ids(self.model, [clean_text(t, limit) for t in texts])

    def _probabilities_of_ids(self, ids: np.ndarray) -> np.ndarray:
        """One batch: ids ``(batch, width)`` -> the network's probabilities ``(batch, classes)`` float32.

        On Keras the batch is padded to a :func:`~kformer.data.batching.batch_bucket` (and its
        width is already a width bucket), so the network meets only the shapes :meth:`warmup`
        compiled; ONNX Runtime takes it as it is.
        """
        from kformer.data.batching import batch_bucket, pad_rows

        if self.predictor.any_shape or not self.predictor.costs.pads_rows:  # any shape: the batch as it is
            return self._run_network(ids)
        largest = self.predictor.max_batch
        if largest and len(ids) > largest:  # the network meets only warmed batch sizes
            return np.concatenate([self._probabilities_of_ids(ids[i:i + largest]) for i in range(0, len(ids), largest)])
        return self._run_network(pad_rows(ids, batch_bucket(len(ids))))[: len(ids)]

    def _run_network(self, ids: np.ndarray) -> np.ndarray:
        return self.predictor(ids)

    def network_probabilities(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """The network's class probabilities ``(len(texts), len(labels))`` float32 (the Transformer
        alone, without the wide part), rows in input order (:meth:`network_outputs`)."""
        return self.network_outputs(texts, batch_size)[:, : len(self.labels)]

    def text_vectors(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """The network's pooled text vectors ``(len(texts), dim)`` float32 (the input of its last
        dense layer, inference mode), or from a predictor of every block's vectors those,
        ``(len(texts), blocks * dim)`` (the last ``dim`` columns: the text vector): what a distance
        score measures. Needs a predictor that computes them (a classifier with a distance
        ``ood``, or :meth:`with_vectors`)."""
        if not self.predictor.vectors:
            raise Unsupported("this classifier's predictor computes no text vectors (see Classifier.with_vectors)")
        return self.network_outputs(texts, batch_size)[:, len(self.labels):]

    def network_outputs(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """The network's outputs ``(len(texts), classes[ + dim])`` float32, rows in input order:
        probabilities, followed by the pooled text vector where the predictor computes it.

        Texts are tokenised once, sorted by length and cut into network calls of at most
        ``batch_size`` rows (at most the predictor's largest batch, 64 for Keras), each at its
        longest row's width bucket: the cuts of least cost the runtime measured at warmup
        (:func:`~kformer.tasks.classify.batch_plan.plan`; BERT on TensorFlow: batches cut to
        exactly their longest row)."""
        from kformer.data.batching import length_bucketed_batches
        from kformer.tasks.classify.batch_plan import plan

        texts = check_texts(texts)
        batch_size = _positive_int(batch_size, "batch_size")
        if self.predictor.max_batch:  # a longer batch would be cut anyway, all at its longest width
            batch_size = min(batch_size, self.predictor.max_batch)
        ids = self.features(texts)
        lengths = (ids != 0).sum(axis=1)
        probs = np.zeros((len(texts), self.predictor.width), dtype="float32")
        if self.predictor.any_shape:
            calls = [(rows, max(int(lengths[rows].max()), 1)) for rows in length_bucketed_batches(lengths, batch_size)]
        else:
            calls = plan(lengths, ids.shape[1], batch_size, self.predictor.costs)
        for rows, width in calls:
            probs[rows] = self._probabilities_of_ids(ids[rows, :width])
        return probs

    def probabilities(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Class probabilities ``(len(texts), len(labels))`` float32, rows in input order: the
        network's (:meth:`network_probabilities`), mixed with the wide part's when the classifier
        has one (geometric; linear in folders written before: :func:`kformer.tasks.classify.wide.mix`)."""
        return self.scored(texts, batch_size)[0]

    def scored(self, texts: Sequence[str], batch_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
        """``(probabilities (n, classes) float32, in-scope scores (n,) float64)`` of ``texts`` in one
        pass of the network: the score the unknown route thresholds, higher = more in scope --
        the best probability, or (with ``ood``) minus a distance of the pooled text vector(s)
        (:mod:`kformer.tasks.classify.ood`), the TF-IDF novelty or the combined rule
        (:mod:`kformer.tasks.classify.ood_text`)."""
        texts = check_texts(texts)
        probs, vectors = self.mixed_outputs(texts, batch_size)
        return probs, in_scope_scores(self.ood, probs, vectors, texts)

    def mixed_outputs(self, texts: Sequence[str], batch_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
        """``(probabilities (n, classes) float32 -- the network's mixed with the wide part's --,
        network vectors (n, width - classes): the predictor's vectors, or (n, 0))`` of checked
        ``texts``, in one pass of the network: what every in-scope score reads."""
        outputs = self.network_outputs(texts, batch_size)
        probs = outputs[:, : len(self.labels)]
        if self.wide is not None:
            probs = self.wide(probs, texts)
        return probs, outputs[:, len(self.labels):]

    def predict(self, texts: Sequence[str], *, top_k: int = 1, threshold: float | None = None,
                unknown_label: str = "unknown", batch_size: int = 64) -> list[dict[str, Any]]:
        """One dict per text: ``label``, ``probability``, ``unknown``, ``top_k`` (label/probability
        pairs, most likely first), and with a score other than the probability (``ood``) its
        ``ood_score``.

        With ``threshold``, a text whose in-scope score (:meth:`scored`: the best probability, or
        with ``ood`` minus the distance, ``kformer.json["ood"]["units"]``) is below it gets
        ``unknown_label`` as its label (``unknown`` is True; ``top_k`` still shows what the model
        thought). ``None`` takes the calibrated threshold (a run with ``calibrate``;
        :attr:`threshold`), if any; for the probability, 0 turns the unknown route off.
        """
        self.check_values({"top_k": top_k, "threshold": threshold, "unknown_label": unknown_label})
        if threshold is None:
            threshold = self.threshold
        probs, scores = self.scored(texts, batch_size=batch_size)
        order = np.argsort(-probs, axis=1, kind="stable")[:, : min(top_k, len(self.labels))]
        results = []
        for row, best, score in zip(probs, order, scores, strict=True):
            top = [{"label": self.labels[j], "probability": round(float(row[j]), 6)} for j in best]
            unknown = threshold is not None and float(score) < threshold
            results.append({"label": unknown_label if unknown else top[0]["label"],
                            "probability": top[0]["probability"], "unknown": bool(unknown), "top_k": top,
                            **({"ood_score": round(float(score), 6)} if self.ood_kind != PROBABILITY else {})})
        return results

    def check_values(self, parameters: dict[str, Any]) -> None:
        """``top_k`` a whole number >= 1, ``threshold`` None or within 0..1 (with a distance
        ``ood`` score: any finite number), ``unknown_label`` a string."""
        _positive_int(parameters["top_k"], "top_k")
        threshold = parameters["threshold"]
        if threshold is not None:
            if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not np.isfinite(threshold):
                raise BadInput(f"{{field}} must be a number, got {threshold!r}", field="threshold")
            if self.ood_kind == PROBABILITY and not 0.0 <= threshold <= 1.0:
                raise BadInput(f"{{field}} must be between 0 and 1, got {threshold!r}", field="threshold")
        if not isinstance(parameters["unknown_label"], str):
            raise BadInput(f"{{field}} must be a string, not {type(parameters['unknown_label']).__name__}",
                           field="unknown_label")

    def scores(self, data: LabelledTexts | Iterable[LabelledTexts], batch_size: int = 64) -> dict[str, Any]:
        """:func:`kformer.metrics.classification_scores` of the model on ``data`` (LabelledTexts, or
        chunks of them: only one chunk's texts are held at a time, the rest is counts); labels the
        model never saw are listed after its own (always wrong). With a calibrated :attr:`threshold`,
        also ``unknown_route``: what the route does there (:class:`~kformer.tasks.classify.calibration.RouteCounts`; rows of labels the
        model never saw are the out-of-scope ones)."""
        from collections import Counter

        from kformer.metrics import classification_scores

        counts: Counter[tuple[str, str]] = Counter()  # (true, predicted) -> rows
        route = RouteCounts()
        for chunk in [data] if isinstance(data, LabelledTexts) else data:
            probs, in_scope_scores = self.scored(chunk.texts, batch_size=batch_size)
            predicted = [self.labels[i] for i in probs.argmax(axis=1)]
            counts.update(zip(chunk.labels, predicted, strict=True))
            if self.threshold is not None:
                route.add(chunk.labels, predicted, in_scope_scores < self.threshold, set(self.labels))
        pairs = list(counts)
        unseen = sorted({true for true, _ in pairs} - set(self.labels))
        scores = classification_scores([t for t, _ in pairs], [p for _, p in pairs], labels=self.labels + unseen,
                                       sample_weight=[counts[pair] for pair in pairs])
        if self.threshold is not None:
            scores["unknown_route"] = {"threshold": self.threshold, "ood_score": self.ood_kind, **route.summary()}
        return {**scores, "unseen_labels": unseen}

    def evaluate(self, data: Data, *, batch_size: int = 64, out: str | os.PathLike | None = None,
                 limit: int | None = None, text_column: str | None = None,
                 label_column: str | None = None) -> dict[str, Any]:
        """Accuracy, macro-F1, per-class report, confusion matrix and ``unseen_labels`` on ``data``.

        A file is read with the model's text/label columns unless others are given, and streamed
        (:func:`~kformer.data.readers.iter_labelled`): memory stays bounded for a file of any size.
        ``limit`` scores only the first rows. With ``out``, ``confusion.png`` and ``report.json``
        are written there.
        """
        columns = (text_column or self.manifest.get("text_column") or "text",
                   label_column or self.manifest.get("label_column") or "label")
        if limit is not None:
            limit = _positive_int(limit, "limit")
        if isinstance(data, str | os.PathLike):
            from kformer.data.readers import iter_labelled

            chunks: Iterable[LabelledTexts] = iter_labelled(data, *columns)
        else:
            chunks = [as_labelled(data, *columns)]
        scores = self.scores(chunks if limit is None else first_rows(chunks, limit), batch_size)
        if out is not None:
            from kformer.artifacts import staged_folder, write_json_atomic
            from kformer.viz import plot_confusion_matrix

            with staged_folder(out) as stage:
                plot_confusion_matrix(scores["confusion"], scores["labels"], stage / "confusion.png")
                write_json_atomic(stage / "report.json", scores)
        return scores

    def attention_maps(self, text: str) -> AttentionMaps:
        """Encoder self-attention of every layer and head for ``text``: ``maps["encoder"]`` is
        ``(layers, heads, L, L)`` over its L tokens (the first window for windowed models);
        ``output`` is the network's predicted label (the Transformer alone: a wide n-gram part
        has no attention and is left out here)."""
        from kformer.models.classifier import encoder_attention_maps

        if self.kind != "encoder":
            raise Unsupported("attention maps are drawn for kformer's own encoder classifiers (backbone scratch)",
                              field="model_dir")
        if not isinstance(text, str):
            raise BadInput(f"{{field}} must be a string, not {type(text).__name__}", field="text")
        ids = self.features([text])
        ids = ids[:, : max(int((ids[0] != 0).sum()), 1)]
        stack = np.stack([m[0] for m in encoder_attention_maps(self.model, ids)])  # (layers, heads, L, L)
        vocabulary = self.tokenizer.get_vocabulary()
        tokens = [vocabulary[i] for i in ids[0, : stack.shape[-1]]]
        label = self.labels[int(self._probabilities_of_ids(ids)[0, : len(self.labels)].argmax())]
        return AttentionMaps({"encoder": stack}, {"encoder": tokens}, {"encoder": tokens}, output=label)

    def export_plan(self):
        """token ids -> probabilities, and raw texts -> probabilities and labels where the
        tokenizer runs in a graph (:mod:`kformer.tasks.classify.export`)."""
        from kformer.tasks.classify.export import classifier_plan

        return classifier_plan(self)

    def warmup(self) -> None:
        """One prediction per batch bucket and width bucket up to ``max_length``: every shape a
        request of up to 64 texts can bring, so none waits for a compile; then each shape once
        more, timed: the costs batches are cut by (:mod:`~kformer.tasks.classify.batch_plan`).
        BERT on TensorFlow: one batch traces the graph every shape runs in, and one text is
        tokenised."""
        import time

        from kformer.data.batching import BATCH_BUCKETS, bucket_width

        if self.predictor.any_shape:
            self.probabilities(["warm up"])
            return
        for width in sorted({bucket_width(n, self.max_length) for n in range(1, self.max_length + 1)}):
            for rows in BATCH_BUCKETS:
                ids = np.full((rows, width), 1, dtype="int32")
                self._probabilities_of_ids(ids)
                started = time.perf_counter()
                self._probabilities_of_ids(ids)
                self.predictor.costs.record(rows, width, time.perf_counter() - started)


def _positive_int(value, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise BadInput(f"{{field}} must be a whole number, got {value!r}", field=field)
    if value < 1:
        raise BadInput(f"{{field}} must be at least 1, got {value}", field=field)
    return int(value)


# --- the folder ---------------------------------------------------------------------------------------


def network_manifest(config, labels: list[str], kind: str) -> dict[str, Any]:
    """The manifest keys of a network of ``kind`` trained with ``config`` on ``labels``."""
    return {
        "kind": kind,
        "backbone": config.backbone,
        **({"pooling": config.pooling} if kind == "bert" else {}),
        "vocab_file": VOCAB_FILE if config.scratch else None,
        "labels": labels,
        "max_length": config.max_length,
        "tokenizer": config.tokenizer,
        "truncation": config.truncation,
        "text_column": config.text_column,
        "label_column": config.label_column,
        "recipe": to_dict(config),
    }


def write_folder(out: Path, classifier: Classifier, metrics: dict[str, Any], vocabulary: list[str] | None,
                 valid_scores: dict[str, Any]) -> None:
    """Write the model folder ``out`` of a trained ``classifier`` (made with a
    :func:`network_manifest`): its network, ``vocabulary`` (scratch backbones), wide part and
    threshold, ``metrics`` and the validation confusion matrix of ``valid_scores``."""
    from kformer.folders import write_model_folder
    from kformer.text.vocabulary import save_vocabulary
    from kformer.viz import plot_confusion_matrix

    manifest = dict(classifier.manifest)
    if classifier.threshold is not None:  # predict and serve route below it to the unknown label by default
        manifest["threshold"] = classifier.threshold
    if classifier.wide is not None:
        manifest["wide"] = classifier.wide.manifest()
    if classifier.ood is not None:
        manifest["ood"] = classifier.ood.manifest()

    def write_files(stage: Path) -> None:
        if vocabulary:
            save_vocabulary(vocabulary, stage / VOCAB_FILE)
        if classifier.wide is not None:
            classifier.wide.part.save(stage)
        if classifier.ood is not None:
            classifier.ood.save(stage)
        write_curves(out / TRAINING_DIR, stage)
        plot_confusion_matrix(valid_scores["confusion"], valid_scores["labels"], stage / "confusion_valid.png")

    with quiet_custom_compile(classifier.kind):
        write_model_folder(out, TASK, classifier.model, {**manifest, "metrics": metrics}, metrics, write_files)


def load(folder: str | os.PathLike, runtime: str = "keras") -> Classifier:
    """Open a classify model folder (also those written before the format had a version), its
    network predicting on ``runtime`` (``keras``, ``onnx`` or ``onnx-int8``)."""
    from kformer.folders import load_keras_model, read_manifest

    check_runtime(runtime)
    folder = Path(folder)
    manifest = read_manifest(folder, task=TASK, required=["labels"])
    labels = manifest["labels"]
    if not isinstance(labels, list) or not labels:
        raise CorruptModel(f"{folder}/kformer.json has no label names; retrain the model", field="model_dir")
    kind = manifest.get("kind", "encoder")
    if kind == "bert":
        import keras_hub  # noqa: F401  registers the KerasHub classes the file refers to

        import kformer.models.bert_classifier  # noqa: F401  registers MeanPoolBertClassifier
    with quiet_custom_compile(kind):
        model = load_keras_model(folder / manifest.get("model_file", MODEL_FILE))
    tokenizer = None
    if kind == "encoder":
        from kformer.text.vocabulary import load_vocabulary, make_tokenizer

        vocabulary = load_vocabulary(folder / (manifest.get("vocab_file") or VOCAB_FILE))
        tokenizer = make_tokenizer(vocabulary, int(manifest["max_length"]), manifest.get("tokenizer", "word"),
                                   manifest.get("truncation", "head"))
    n_out = int(model.outputs[0].shape[-1])
    if n_out != len(labels):
        raise CorruptModel(f"{folder}: the model has {n_out} outputs but kformer.json names {len(labels)} labels",
                           field="model_dir")
    wide = None
    if manifest.get("wide"):
        from kformer.tasks.classify.wide import load_mix

        wide = load_mix(folder, manifest["wide"], [str(label) for label in labels])
    ood = None
    if manifest.get("ood"):
        from kformer.tasks.classify.ood_text import load_ood

        ood = load_ood(folder, manifest["ood"], wide)
    return Classifier(folder, manifest, model, tokenizer, wide=wide, ood=ood, runtime=runtime)


@contextlib.contextmanager
def quiet_custom_compile(kind: str):
    """Silence Keras' warning that a KerasHub task's own ``compile`` is not replayed from its saved
    config (on saving and loading; the model is recompiled by hand where that matters)."""
    with warnings.catch_warnings():
        if kind == "bert":
            warnings.filterwarnings("ignore", message=r"`compile\(\)` was not called")
        yield
