"""Text classification: settings, training, the model folder, prediction, evaluation, attention.

The whole life cycle as plain functions (no argparse, no printing, no ``sys.exit``)::

    from kformer.tasks import classify

    result = classify.train({"epochs": 3}, ("tickets.csv"), "runs/tickets")   # or (texts, labels)
    model = classify.load("runs/tickets")                                     # or kformer.load(...)
    model.predict(["my screen is flickering"], top_k=3, threshold=0.6)
    model.evaluate("test.csv")                                                # accuracy, macro-F1, ...
    model.attention_maps("my screen is flickering").maps["encoder"]           # (layers, heads, L, L)

A classify model folder (written only by :func:`train`, read only by :func:`load`) holds, beside
the common manifest keys of :mod:`kformer.folders`:

==============  ==========================================================================
``kind``        ``"encoder"`` (kformer's encoder, ids from ``vocab.txt``) or ``"bert"``
                (a KerasHub ``BertTextClassifier`` that carries its own tokenizer)
``labels``      the label names, exactly as written in the data; output ``i`` is ``labels[i]``
``vocab_file``  ``vocab.txt`` (encoder) or null
``max_length``, ``tokenizer``, ``truncation``: how texts become ids
``text_column``, ``label_column``: the columns of the training file
``backbone``, ``recipe``, ``metrics``
``wide``        (runs with ``wide``) ``{"weight", "file", "vocab_file", "features"}``: the
                n-gram part in ``wide.npz`` + ``wide_vocab.json`` and its weight in the
                probabilities (:mod:`kformer.tasks.classify_wide`)
==============  ==========================================================================

``training/`` keeps what ``resume`` needs: ``state.json`` (labels, settings, auto choices),
``vocab.txt`` and the last epoch's checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import typing
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from kformer.config import (
    AUTO,
    Auto,
    as_config,
    build_config,
    coerce,
    setting,
    to_dict,
)
from kformer.data.readers import LabelledTexts
from kformer.errors import BadInput, CorruptModel, Unsupported
from kformer.folders import MODEL_FILE
from kformer.tasks.base import AttentionMaps, TaskModel, TrainResult, check_texts, write_curves
from kformer.tasks.training_folder import check_out_folder, resumable_state_dir, training_folder

if TYPE_CHECKING:
    from kformer.parallel import Cluster, DistributeConfig
    from kformer.training import Progress

TASK = "classify"
VOCAB_FILE = "vocab.txt"
STATE_FILE = "state.json"
SCRATCH_BACKBONES = ("scratch", "bert-scratch")
# settings a resumed run takes from the caller; all others come from training/state.json
RESUMABLE = ("epochs", "patience", "max_minutes")
MAX_LABELS = 1000  # more labels in the training data is refused (see _read_all)
# early stopping keeps the epoch of best validation macro-F1 (a Keras F1Score over the validation
# batches: argmax vs label, per-class F1 averaged); validation loss can rise while accuracy climbs
MONITOR = "val_macro_f1"

Data = str | os.PathLike | tuple[Sequence[str], Sequence[str]] | LabelledTexts


# --- settings -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClassifyConfig:
    """Every setting of a classify run (recipe sections ``[data]``, ``[model]``, ``[training]``)."""

    # what a recipe that does not name these gets (:func:`kformer.config.make_config`): recipes
    # written before the wide part train as they were measured
    RECIPE_DEFAULTS: ClassVar[dict[str, Any]] = {"wide": False}

    text_column: str = setting("text", "data", "column holding the text")
    label_column: str = setting("label", "data", "column holding the label")
    tokenizer: Literal["word", "wordpiece"] = setting("word", "data", "word or wordpiece (scratch backbones only)")
    truncation: Literal["head", "tail", "head_tail"] | Auto = setting(
        AUTO, "data", "which part of a long text to keep, word tokenizer (auto: head_tail when more than 5 % "
        "of the training texts are cut, else head)")
    ngrams: int = setting(1, "data", "2: the word vocabulary also holds word bigrams (fastText-style)")
    vocab_size: int | Auto = setting(AUTO, "data", "vocabulary size learned from the training text (auto: every "
                                     "distinct training word, at most 30,000)")
    max_length: int | Auto = setting(AUTO, "data", "tokens per text; longer texts are truncated (auto: the 95th "
                                     "percentile of the training texts' lengths, within 16..256)")
    valid_fraction: float = setting(0.1, "data", "stratified hold-out share when no validation data is given")

    backbone: str = setting("scratch", "model", "scratch | bert-scratch | minilm | a KerasHub/Hugging Face BERT folder")
    pooling: Literal["mean", "cls"] = setting(
        "mean", "model", "BERT backbones' text vector: mean of the non-padding token vectors (how all-MiniLM-L6-v2 "
        "was trained), or cls: the [CLS] pooler")
    freeze: bool = setting(
        False, "model", "BERT backbones: keep the backbone's weights; text vectors are computed once (cached in "
        "training/) and only the head is trained")
    freeze_token_embedding: bool = setting(
        False, "model", "pretrained BERT backbones: keep the token embedding table as loaded while the rest "
        "fine-tunes (MiniLM: 11.7M of its 22.7M weights)")
    wide: bool | Auto = setting(
        AUTO, "model", "also fit a TF-IDF n-gram + logistic regression part on the training split and mix its "
        "probabilities with the network's by a weight chosen on validation (auto: on for scratch backbones, off for "
        "pretrained ones and freeze; a recipe that does not name it: off)")
    wide_refit: bool = setting(
        False, "model", "once the mix weight is chosen, fit the wide part again on the training and validation "
        "texts together (same C; its time counts in max_minutes; on in the banking77-minilm and imdb-best recipes)")
    wide_ngrams: int = setting(2, "model", "longest word n-gram of the wide part: 1 (words), 2 (words and word "
                               "pairs) or 3 (also triples: on IMDB +0.3 points for the part alone, twice its fit time)")
    dim: int | Auto = setting(AUTO, "model", "model width (auto: 128; 64 for few rows or long texts)")
    heads: int | Auto = setting(AUTO, "model", "attention heads (auto: 4 at dim 128, else 2)")
    ff_dim: int | Auto = setting(AUTO, "model", "feed-forward width (auto: twice dim)")
    blocks: int | Auto = setting(AUTO, "model", "encoder blocks (auto: 1; 2 from 100,000 rows of short texts)")
    dropout: float | Auto = setting(AUTO, "model", "dropout rate (auto: 0.2 below 500 training rows per class, else 0.1)")
    positions: Literal["learned", "sinusoidal"] = setting("learned", "model", "position embeddings")
    window: int = setting(0, "model", "> 0: self-attention within windows of this many tokens (long documents)")

    epochs: int | Auto = setting(AUTO, "training", "maximum epochs, early stopping may end sooner (auto: about 3,300 "
                                 "steps, within 3..40, fitted to max_minutes)")
    batch_size: int | Auto = setting(AUTO, "training", "texts per training step (auto: 32, 64 from 20,000 rows, "
                                     "128 from 100,000)")
    learning_rate: float | Auto = setting(AUTO, "training", "peak learning rate (auto: 2e-3 from scratch, 1e-3 below "
                                          "2,000 rows, 1e-4 pretrained)")
    warmup: float = setting(0.1, "training", "fraction of all steps spent warming up")
    decay: Literal["cosine", "linear", "none"] = setting("cosine", "training", "none: a constant rate, no warmup")
    weight_decay: float = setting(0.01, "training", "AdamW weight decay")
    label_smoothing: float | Auto = setting(AUTO, "training", "label smoothing, 0 = off (auto: 0.1 from 10 classes)")
    class_weights: bool = setting(False, "training", "weight classes inversely to their frequency")
    patience: int | Auto = setting(AUTO, "training", "epochs without validation macro-F1 improvement before "
                                   "stopping (auto: a quarter of the epochs, at least 3)")
    seed: int = setting(0, "training", "random seed")
    max_minutes: float | None = setting(None, "training", "stop after this many minutes, keeping the best weights")
    calibrate: bool = setting(
        False, "training", "choose the unknown route's threshold on the validation set (its labels the training "
        "data lacks are out-of-scope texts); predict and serve use it by default")
    precision: Literal["float32", "mixed_bfloat16"] = setting(
        "float32", "training", "mixed_bfloat16: compute in bfloat16 (weights and outputs stay float32); see bench/precision.py")

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            coerce(getattr(self, f.name), hints[f.name], f.name)  # types and choices
        for name in ("epochs", "max_length", "batch_size", "vocab_size", "dim", "heads", "ff_dim", "blocks"):
            if getattr(self, name) != AUTO and getattr(self, name) < 1:
                raise BadInput(f"{{field}} must be at least 1, got {getattr(self, name)}", field=name)
        for name in ("dropout", "warmup", "weight_decay", "label_smoothing", "valid_fraction"):
            if getattr(self, name) != AUTO and not 0.0 <= getattr(self, name) < 1.0:
                raise BadInput(f"setting {{field}} = {getattr(self, name)} must be at least 0 and below 1", field=name)
        if self.patience != AUTO and self.patience < 0:
            raise BadInput(f"{{field}} must be 0 or more, got {self.patience}", field="patience")
        if self.ngrams not in (1, 2) or (self.ngrams == 2 and self.tokenizer != "word"):
            raise BadInput(f'setting {{field}} = {self.ngrams!r}: use 1, or 2 with tokenizer = "word"', field="ngrams")
        if self.freeze and (self.backbone == "scratch" or self.pooling != "mean"):
            raise BadInput("{field} needs a BERT backbone (minilm, a folder, bert-scratch) with pooling = \"mean\"",
                           field="freeze")
        if self.freeze_token_embedding and self.scratch:
            raise BadInput("{field} needs a pretrained BERT backbone (minilm or a folder): a scratch model's "
                           "embeddings must be learned", field="freeze_token_embedding")
        if self.wide_ngrams not in (1, 2, 3):
            raise BadInput(f"setting {{field}} = {self.wide_ngrams!r}: use 1, 2 or 3", field="wide_ngrams")
        if self.window < 0:
            raise BadInput(f"setting {{field}} = {self.window} must be 0 (full attention) or a window length", field="window")
        if self.learning_rate != AUTO and self.learning_rate <= 0:
            raise BadInput(f"{{field}} must be above 0, got {self.learning_rate}", field="learning_rate")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise BadInput(f"{{field}} must be above 0, got {self.max_minutes}", field="max_minutes")

    @property
    def scratch(self) -> bool:
        """True when the network is learned from nothing (and so is its vocabulary)."""
        return self.backbone in SCRATCH_BACKBONES


def _resolve_auto(config: ClassifyConfig, train: LabelledTexts,
                  valid: LabelledTexts) -> tuple[ClassifyConfig, dict[str, dict[str, Any]], str]:
    """``config`` with its ``"auto"`` settings chosen from the training split (rules:
    :mod:`kformer.tasks.classify_auto`), what was chosen why (for metrics.json), and one line
    saying so (for ``progress``)."""
    from kformer.tasks.classify_auto import choose, data_stats, describe

    stats = data_stats(train.texts, train.labels, len(valid))
    config, auto = choose(config, stats)
    return config, auto.to_json(), describe(stats, auto.to_json())


def _report_settings(progress: Progress | None, line: str) -> None:
    """A ``"settings"`` progress event carrying ``line`` (the auto choices), before training."""
    if progress is not None:
        from kformer.training import ProgressEvent

        progress(ProgressEvent("settings", 0.0, message=line))


def _check_backbone(config: ClassifyConfig) -> None:
    if not config.scratch:
        from kformer.models.pretrained import backbone_source

        backbone_source(config.backbone)  # a missing package or folder fails before any writing


# --- data -----------------------------------------------------------------------------------------


def as_labelled(data: Data, text_column: str = "text", label_column: str = "label", name: str = "data") -> LabelledTexts:
    """``data`` (a path, a ``(texts, labels)`` pair of lists, or LabelledTexts) as LabelledTexts.

    In-memory rows with an empty text or label are dropped (and counted), as the readers do.
    """
    if isinstance(data, LabelledTexts):
        return data
    if isinstance(data, str | os.PathLike):
        from kformer.data.readers import read_labelled

        return read_labelled(data, text_column, label_column)
    if not (isinstance(data, tuple | list) and len(data) == 2):
        raise BadInput(f"{{field}} must be a file path, a (texts, labels) pair or LabelledTexts, not {type(data).__name__}",
                       field=name)
    texts = check_texts(data[0], f"{name}.texts")
    labels = [str(label).strip() for label in data[1]]
    if len(texts) != len(labels):
        raise BadInput(f"{{field}}: {len(texts)} texts but {len(labels)} labels", field=name)
    rows = [(t.strip(), lb) for t, lb in zip(texts, labels, strict=True) if t.strip() and lb]
    if not rows:
        raise BadInput("{field} has no rows with both a text and a label", field=name)
    return LabelledTexts([t for t, _ in rows], [lb for _, lb in rows], f"<{name}>", len(texts) - len(rows))


def _read_all(config: ClassifyConfig, data: Data, valid: Data | None, test: Data | None):
    """Train/valid/test as LabelledTexts, checked (no Keras import, so bad input fails fast)."""
    from kformer.data.splits import check_label_counts

    if data is None:
        raise BadInput("{field} is required: a labelled file or (texts, labels)", field="data")
    columns = (config.text_column, config.label_column)
    train = as_labelled(data, *columns, "data")
    if len(set(train.labels)) < 2:
        raise BadInput(f"{train.source} has a single label '{train.labels[0]}'; a classifier needs at least two",
                       field="data")
    if len(set(train.labels)) > MAX_LABELS:
        raise BadInput(
            f"{train.source} has {len(set(train.labels)):,} different labels in {len(train):,} rows; kformer classifies "
            f"into at most {MAX_LABELS:,} (its report and confusion matrix grow with the square): check "
            "--label-column, or group rare labels", field="data")
    valid = None if valid is None else as_labelled(valid, *columns, "valid")
    if valid is None:
        check_label_counts(train.labels, 2, "a stratified hold-out needs")
    test = None if test is None else as_labelled(test, *columns, "test")
    return train, valid, test


def _subset(data: LabelledTexts, rows, source: str, dropped: int = 0) -> LabelledTexts:
    return LabelledTexts([data.texts[i] for i in rows], [data.labels[i] for i in rows], source, dropped)


def _split(config: ClassifyConfig, train: LabelledTexts, valid: LabelledTexts | None):
    """``(train, valid)``: a stratified hold-out of ``train`` when no ``valid`` is given."""
    from kformer.data.splits import stratified_split

    if valid is None:
        keep, held = stratified_split(train.labels, config.valid_fraction, config.seed)
        valid = _subset(train, held, f"{train.source} (hold-out)")
        train = _subset(train, keep, train.source, train.dropped)
    return train, valid


def _check_labels(labels: list[str], data: LabelledTexts, field: str, message: str) -> None:
    """BadInput naming ``field`` when ``data`` has labels outside ``labels``; ``message`` holds
    ``{shown}`` where they go."""
    unseen = sorted(set(data.labels) - set(labels))
    if unseen:
        raise BadInput(message.replace("{shown}", ", ".join(repr(u) for u in unseen[:5])), field=field)


def _one_hot(labels: Sequence[str], index: dict[str, int]) -> np.ndarray:
    """``(n, classes)`` float32."""
    y = np.zeros((len(labels), len(index)), dtype="float32")
    y[np.arange(len(labels)), [index[label] for label in labels]] = 1.0
    return y


# --- the loaded model -----------------------------------------------------------------------------


class Classifier(TaskModel):
    """A loaded classify folder: the Keras model, its tokenizer and the label names.

    ``kind`` is ``"encoder"`` (kformer's encoder; ``tokenizer`` turns texts into ids) or
    ``"bert"`` (a KerasHub ``BertTextClassifier``; its preprocessor's tokenizer makes the ids).
    Both are fed length-bucketed batches of ids (:mod:`kformer.data.batching`), as in training.
    """

    task: ClassVar[str] = TASK
    parameters: ClassVar[dict[str, Any]] = {"top_k": 1, "threshold": None, "unknown_label": "unknown"}

    def __init__(self, folder: Path, manifest: dict, model, tokenizer=None):
        super().__init__(folder, manifest)
        self.model = model
        self.tokenizer = tokenizer
        self.labels: list[str] = [str(label) for label in manifest["labels"]]
        self.kind: str = manifest.get("kind", "encoder")
        # ids (batch, width) int32 -> probabilities (batch, classes) float32 on another runtime
        # (kformer.runtimes.use_runtime); None: the Keras model
        self.predictor = None
        # the wide n-gram part and its weight (kformer.tasks.classify_wide.Mix), mixed into
        # probabilities; None: the network alone
        self.wide = None
        # kind "bert" on TensorFlow: the network as one graph of any (batch, width), built on first use
        self._bert_graph = None

    @property
    def threshold(self) -> float | None:
        """The unknown route's threshold chosen on validation data (``calibrate``), or None."""
        value = self.manifest.get("threshold")
        return None if value is None else float(value)

    def metadata(self) -> dict[str, Any]:
        runtime = getattr(self.predictor, "name", "keras")
        return {**super().metadata(), "labels": list(self.labels), "kind": self.kind, "runtime": runtime}

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
        """One batch: ids ``(batch, width)`` -> probabilities ``(batch, classes)`` float32.

        The batch is padded to a :func:`~kformer.data.batching.batch_bucket` (and its width is
        already a width bucket), so the network meets only the shapes :meth:`warmup` compiled.
        """
        from kformer.data.batching import BATCH_BUCKETS, batch_bucket, pad_rows

        if self._any_shape():  # one graph for every shape: the batch as it is
            return self._run_network(ids)
        largest = BATCH_BUCKETS[-1]
        if self.predictor is None and len(ids) > largest:  # the Keras network meets only warmed batch sizes
            return np.concatenate([self._probabilities_of_ids(ids[i:i + largest]) for i in range(0, len(ids), largest)])
        return self._run_network(pad_rows(ids, batch_bucket(len(ids))))[: len(ids)]

    def _run_network(self, ids: np.ndarray) -> np.ndarray:
        if self.predictor is not None:
            return self.predictor(ids)
        if self.kind == "encoder":
            return np.asarray(self.model.predict_on_batch(ids), dtype="float32")
        if self._any_shape():
            return self._as_probabilities(self._bert_graph(ids))
        import keras

        from kformer.models.pretrained import bert_inputs

        # another backend: keras.Model's own predict_on_batch. The ids are already tokenized, so
        # KerasHub's override (which runs the string preprocessor first) is skipped without touching
        # the model; XLA compiles the prediction step once per (batch, width) shape (warmup).
        if not getattr(self, "_xla", False):
            self.model.jit_compile, self.model.predict_function, self._xla = True, None, True
        return self._as_probabilities(np.asarray(keras.Model.predict_on_batch(self.model, bert_inputs(ids)[0]),
                                                 dtype="float32"))

    def _as_probabilities(self, outputs: np.ndarray) -> np.ndarray:
        """A BERT classifier's outputs ``(batch, classes)`` as probabilities: KerasHub classifiers
        built without ``activation="softmax"`` (folders from other tools) return logits."""
        import keras

        if getattr(self.model, "activation", None) is keras.activations.softmax:
            return outputs
        return _softmax(outputs)

    def _any_shape(self) -> bool:
        """True when the Keras network is a BERT classifier run as one TensorFlow graph that takes
        every ``(batch, width)`` (:func:`~kformer.models.pretrained.bert_graph_function`): its
        batches are cut to exactly their longest row and never padded with rows."""
        if self.kind != "bert" or self.predictor is not None:
            return False
        if self._bert_graph is None:
            from kformer.models.pretrained import bert_graph_function

            self._bert_graph = bert_graph_function(self.model) or False
        return bool(self._bert_graph)

    def probabilities(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Class probabilities ``(len(texts), len(labels))`` float32, rows in input order.

        Texts are tokenised once, sorted by length and cut into batches of ``batch_size`` (at
        most the largest batch bucket, 64, for the Keras network), each cut to its longest row's
        width bucket (BERT on TensorFlow: to exactly its longest row, :meth:`_any_shape`). A folder
        with a wide part returns the network's and the wide part's probabilities mixed with weight
        ``w`` (geometric; linear in folders written before: :func:`kformer.tasks.classify_wide.mix`)."""
        from kformer.data.batching import BATCH_BUCKETS, bucket_width, length_bucketed_batches

        texts = check_texts(texts)
        batch_size = _positive_int(batch_size, "batch_size")
        if self.predictor is None:  # a longer batch would be cut to 64 rows anyway, all at its longest width
            batch_size = min(batch_size, BATCH_BUCKETS[-1])
        ids = self.features(texts)
        lengths = (ids != 0).sum(axis=1)
        probs = np.zeros((len(texts), len(self.labels)), dtype="float32")
        exact = self._any_shape()
        for rows in length_bucketed_batches(lengths, batch_size):
            longest = max(int(lengths[rows].max()), 1)
            width = longest if exact else bucket_width(longest, ids.shape[1])
            probs[rows] = self._probabilities_of_ids(ids[rows, :width])
        return probs if self.wide is None else self.wide(probs, texts)  # a wide part: the mix

    def predict(self, texts: Sequence[str], *, top_k: int = 1, threshold: float | None = None,
                unknown_label: str = "unknown", batch_size: int = 64) -> list[dict[str, Any]]:
        """One dict per text: ``label``, ``probability``, ``unknown``, ``top_k`` (label/probability
        pairs, most likely first).

        With ``threshold``, a text whose best probability is below it gets ``unknown_label`` as its
        label (``unknown`` is True; ``top_k`` still shows what the model thought). ``None`` takes
        the folder's calibrated threshold (a run with ``calibrate``; :attr:`threshold`), if any;
        0 turns the unknown route off.
        """
        top_k = _positive_int(top_k, "top_k")
        if threshold is None:
            threshold = self.threshold
        if threshold is not None:
            if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0.0 <= threshold <= 1.0:
                raise BadInput(f"{{field}} must be between 0 and 1, got {threshold!r}", field="threshold")
        if not isinstance(unknown_label, str):
            raise BadInput(f"{{field}} must be a string, not {type(unknown_label).__name__}", field="unknown_label")
        probs = self.probabilities(texts, batch_size=batch_size)
        order = np.argsort(-probs, axis=1, kind="stable")[:, : min(top_k, len(self.labels))]
        results = []
        for row, best in zip(probs, order, strict=True):
            top = [{"label": self.labels[j], "probability": round(float(row[j]), 6)} for j in best]
            unknown = threshold is not None and float(row[best[0]]) < threshold
            results.append({"label": unknown_label if unknown else top[0]["label"],
                            "probability": top[0]["probability"], "unknown": bool(unknown), "top_k": top})
        return results

    def predict_instances(self, instances: list[str], parameters: dict[str, Any] | None = None) -> list[dict]:
        """The REST form of :meth:`predict`: ``parameters`` may hold top_k, threshold, unknown_label."""
        return self.predict(check_texts(instances, "instances"), **self.check_parameters(parameters))

    def scores(self, data: LabelledTexts | Iterable[LabelledTexts], batch_size: int = 64) -> dict[str, Any]:
        """:func:`kformer.metrics.classification_scores` of the model on ``data`` (LabelledTexts, or
        chunks of them: only one chunk's texts are held at a time, the rest is counts); labels the
        model never saw are listed after its own (always wrong)."""
        from collections import Counter

        from kformer.metrics import classification_scores

        counts: Counter[tuple[str, str]] = Counter()  # (true, predicted) -> rows
        for chunk in [data] if isinstance(data, LabelledTexts) else data:
            predicted = self.probabilities(chunk.texts, batch_size=batch_size).argmax(axis=1)
            counts.update(zip(chunk.labels, (self.labels[i] for i in predicted), strict=True))
        pairs = list(counts)
        unseen = sorted({true for true, _ in pairs} - set(self.labels))
        scores = classification_scores([t for t, _ in pairs], [p for _, p in pairs], labels=self.labels + unseen,
                                       sample_weight=[counts[pair] for pair in pairs])
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
        scores = self.scores(chunks if limit is None else _first_rows(chunks, limit), batch_size)
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
        label = self.labels[int(self._probabilities_of_ids(ids)[0].argmax())]
        return AttentionMaps({"encoder": stack}, {"encoder": tokens}, {"encoder": tokens}, output=label)

    def export_plan(self):
        """token ids -> probabilities, and raw texts -> probabilities and labels where the
        tokenizer runs in a graph (:mod:`kformer.tasks.classify_export`)."""
        from kformer.tasks.classify_export import classifier_plan

        return classifier_plan(self)

    def warmup(self) -> None:
        """One prediction per batch bucket and width bucket up to ``max_length``: every shape a
        request of up to 64 texts can bring, so none waits for a compile (BERT on TensorFlow: one
        batch traces the graph every shape runs in, and one text is tokenised)."""
        from kformer.data.batching import BATCH_BUCKETS, bucket_width

        if self._any_shape():
            self.probabilities(["warm up"])
            return
        for width in sorted({bucket_width(n, self.max_length) for n in range(1, self.max_length + 1)}):
            for rows in BATCH_BUCKETS:
                self._probabilities_of_ids(np.full((rows, width), 1, dtype="int32"))


predict = Classifier.predict
evaluate = Classifier.evaluate
attention_maps = Classifier.attention_maps


def _first_rows(chunks: Iterable[LabelledTexts], limit: int) -> Iterator[LabelledTexts]:
    """The chunks holding the first ``limit`` rows (the last one cut short); reading stops there."""
    for chunk in chunks:
        if limit <= 0:
            return
        yield LabelledTexts(chunk.texts[:limit], chunk.labels[:limit], chunk.source, chunk.dropped)
        limit -= len(chunk)


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def _positive_int(value, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise BadInput(f"{{field}} must be a whole number, got {value!r}", field=field)
    if value < 1:
        raise BadInput(f"{{field}} must be at least 1, got {value}", field=field)
    return int(value)


def load(folder: str | os.PathLike) -> Classifier:
    """Open a classify model folder (also those written before the format had a version)."""
    from kformer.folders import load_keras_model, read_manifest

    folder = Path(folder)
    manifest = read_manifest(folder, task=TASK, required=["labels"])
    labels = manifest["labels"]
    if not isinstance(labels, list) or not labels:
        raise CorruptModel(f"{folder}/kformer.json has no label names; retrain the model", field="model_dir")
    kind = manifest.get("kind", "encoder")
    if kind == "bert":
        import keras_hub  # noqa: F401  registers the KerasHub classes the file refers to

        import kformer.models.bert_classifier  # noqa: F401  registers MeanPoolBertClassifier
    with _quiet_custom_compile(kind):
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
    classifier = Classifier(folder, manifest, model, tokenizer)
    if manifest.get("wide"):
        from kformer.tasks.classify_wide import load_mix

        classifier.wide = load_mix(folder, manifest["wide"], classifier.labels)
    return classifier


# --- training -------------------------------------------------------------------------------------


def train(config: ClassifyConfig | dict[str, Any] | None = None, data: Data | None = None,
          out: str | os.PathLike | None = None, *, valid: Data | None = None, test: Data | None = None,
          resume: bool = False, progress: Progress | None = None, command: list[str] | None = None,
          distribute: DistributeConfig | None = None) -> TrainResult:
    """Train a classifier on ``data``, score it on ``valid`` and ``test``, and write the folder ``out``.

    ``data``/``valid``/``test``: a file (CSV/TSV/JSONL, ``.gz``, or a folder of label folders), a
    ``(texts, labels)`` pair of lists, or LabelledTexts. Without ``valid`` a stratified
    ``valid_fraction`` of ``data`` is held out. ``resume`` continues the run in ``out`` from its
    last checkpoint with its saved settings and labels (only epochs, patience and max_minutes
    may change). ``progress`` receives :class:`~kformer.training.ProgressEvent` objects;
    ``command`` is recorded in ``metrics.json``. Bad input fails before anything is written, and
    a failed fresh run leaves no folder behind. ``distribute`` trains data-parallel as one process
    of that job (:mod:`kformer.parallel`; JAX backend): ``batch_size`` is the global batch, process
    0 writes ``out``, the others only their checkpoints beside it (their result's ``folder``).
    """
    config = as_config(ClassifyConfig, config)
    if out is None:
        raise BadInput("{field} is required: the model folder to write", field="out")
    out = Path(out)
    train_data, valid_data, test_data = _read_all(config, data, valid, test)
    cluster = None
    if distribute is not None:
        from kformer.parallel import start

        cluster = start(distribute)  # waits for every process of the job
        out = cluster.folder(out)
    check_out_folder(out)
    if resume:  # settings, labels and auto choices as the run began
        config, labels, auto = _saved_state(resumable_state_dir(out), config)
        train_data, valid_data = _split(config, train_data, valid_data)
        from kformer.tasks.classify_auto import describe

        auto_line = describe(None, auto)
    else:
        _check_backbone(config)
        train_data, valid_data = _split(config, train_data, valid_data)
        config, auto, auto_line = _resolve_auto(config, train_data, valid_data)
        labels = sorted(set(train_data.labels))
    _check_labels(labels, train_data, "data", "label(s) {shown} of {field} are not among the checkpoint's labels; "
                  "resume with the same data or train into a new folder")
    out_of_scope = None
    if config.calibrate:  # validation labels the training data lacks: out-of-scope texts for the threshold
        valid_data, out_of_scope = _scope_split(labels, valid_data)
    _check_labels(labels, valid_data, "valid", "validation label(s) {shown} never occur in the training data; fix {field}"
                  " (or pass --calibrate: they are then out-of-scope texts for the unknown route)")
    if cluster is not None:
        if config.freeze:
            raise Unsupported("{field} trains one small head on cached text vectors; run it without --distribute",
                              field="freeze")
        cluster.check_batch_size(config.batch_size)
    if auto:
        _report_settings(progress, auto_line)
    with training_folder(out, resume) as state_dir:  # refuses a foreign or busy folder; cleans up on failure
        if not resume:
            from kformer.artifacts import write_json_atomic

            write_json_atomic(state_dir / STATE_FILE, {"labels": labels, "settings": to_dict(config), "auto": auto})
        extra = {"auto": auto} if command is None else {"command": list(command), "auto": auto}
        metrics = _run(config, labels, extra, out, state_dir, (train_data, valid_data, test_data), resume, progress,
                       cluster, out_of_scope)
    return TrainResult(out, metrics, config, auto)


def _saved_state(state_dir: Path, config: ClassifyConfig):
    """``(config, labels, auto)`` of the run being resumed; ``config`` gives only :data:`RESUMABLE`."""
    try:
        saved = json.loads((state_dir / STATE_FILE).read_text(encoding="utf-8"))
        labels = [str(label) for label in saved["labels"]]
        settings = dict(saved["settings"])
    except (ValueError, KeyError, TypeError):
        raise CorruptModel(f"{state_dir / STATE_FILE} is corrupt; train without resume", field="resume") from None
    saved_config = build_config(ClassifyConfig, settings, sources=(str(state_dir / STATE_FILE),))
    given = {name: getattr(config, name) for name in RESUMABLE if getattr(config, name) != AUTO}
    resumed = dataclasses.replace(saved_config, **given)  # "auto" keeps what the first run chose
    return resumed, labels, saved.get("auto", {})


def _vocabulary(config: ClassifyConfig, texts: Sequence[str], state_dir: Path, resume: bool) -> list[str] | None:
    """The scratch backbones' vocabulary: learned and saved to ``training/vocab.txt``, or read
    back from it on resume. None for pretrained backbones (they bring their own)."""
    from kformer.text.vocabulary import (
        RESERVED_TOKENS,
        learn_vocabulary,
        load_vocabulary,
        save_vocabulary,
    )
    from kformer.text.words import bigram_vocabulary

    if not config.scratch:
        return None
    path = state_dir / VOCAB_FILE
    if resume:
        return load_vocabulary(path)
    if config.ngrams == 2:
        vocabulary = bigram_vocabulary(texts, config.vocab_size, RESERVED_TOKENS)
    else:
        vocabulary = learn_vocabulary(texts, config.vocab_size, config.tokenizer)
    save_vocabulary(vocabulary, path)
    return vocabulary


def _vocabulary_summary(config: ClassifyConfig, vocabulary: list[str]) -> dict[str, Any]:
    """``{"requested", "size"}`` of the learned vocabulary, and a ``note`` when the training text
    had fewer distinct tokens than ``vocab_size`` (the vocabulary is then capped, not padded)."""
    summary: dict[str, Any] = {"requested": config.vocab_size, "size": len(vocabulary)}
    if len(vocabulary) < config.vocab_size:
        summary["note"] = (f"the training text has only {len(vocabulary)} distinct tokens (reserved ones included), "
                           f"fewer than vocab_size {config.vocab_size}: the vocabulary was capped")
    return summary


def _build_model(config: ClassifyConfig, n_labels: int, vocabulary: list[str] | None):
    """``(uncompiled model, kind)``: kformer's encoder, or a KerasHub BERT for the other backbones."""
    if config.backbone == "scratch":
        from kformer.models.classifier import build_encoder_classifier

        model = build_encoder_classifier(
            len(vocabulary), n_labels, config.max_length, dim=config.dim, heads=config.heads, ff_dim=config.ff_dim,
            blocks=config.blocks, dropout=config.dropout, positions=config.positions, window=config.window,
        )
        return model, "encoder"
    from kformer.models.pretrained import build_bert_classifier

    model = build_bert_classifier(
        config.backbone, n_labels, config.max_length, vocabulary=vocabulary, layers=config.blocks,
        heads=config.heads, dim=config.dim, ff_dim=config.ff_dim, dropout=config.dropout, pooling=config.pooling,
        freeze_token_embedding=config.freeze_token_embedding,
    )
    return model, "bert"


# AdamW leaves these variables undecayed in BERT models: every bias and LayerNorm's scale/offset
NO_WEIGHT_DECAY = ("^bias$", "^gamma$", "^beta$")
# kinds whose whole-network training step runs under XLA: a pretrained BERT's step on CPU
# TensorFlow (no XLA under Keras' "auto") took 1.6-1.8x the CPU time of the XLA step (MiniLM,
# batch 32 x 24 tokens, side by side under load); kformer's scratch encoder keeps Keras' choice
XLA_KINDS = ("bert",)


def _compile(model, config: ClassifyConfig, steps_per_epoch: int, kind: str = "encoder", *, initial_step: int = 0,
             cluster: Cluster | None = None, xla: bool = False) -> list:
    """Compile ``model`` (AdamW, clipnorm 1, warmup then ``config.decay``); returns the callbacks
    the schedule needs. With ``max_minutes`` the rate is set per batch by
    :func:`~kformer.training.budget_schedule`: it decays by steps or by the clock, whichever is
    further, so a run cut by its time budget ends at a low rate (with a ``cluster``, every process
    takes process 0's rate: :func:`~kformer.parallel.follow_chief_rate`; ``initial_step``: a resumed
    run's step). BERT models keep biases and LayerNorm weights out of weight decay. ``xla``
    compiles the training step with XLA (``jit_compile=True``) whatever the
    backend would choose: Keras' ``"auto"`` turns XLA off on a CPU-only TensorFlow, where the
    MiniLM fine-tuning step then costs 1.6-1.8x the work (:data:`XLA_KINDS`); XLA compiles once per
    batch shape, so the batches must come in few shapes (:func:`_batches`). Validation then runs
    as a plain graph (:func:`~kformer.models.pretrained.graph_validation`: nothing compiled per
    shape)."""
    import keras

    from kformer.training import WarmupDecay, budget_schedule

    total = max(1, steps_per_epoch * config.epochs)
    peak, warmup = float(config.learning_rate), int(total * config.warmup)
    callbacks = []
    if config.decay == "none":  # a constant rate, as in the reference lesson
        schedule = peak
    elif config.max_minutes is not None:
        schedule = 0.0  # a variable the callback sets before every batch
        from kformer.parallel import follow_chief_rate

        callbacks.append(budget_schedule(peak, warmup, total, config.max_minutes * 60.0, final_ratio=0.0,
                                         decay=config.decay, initial_step=initial_step))
        callbacks += follow_chief_rate(cluster, clocked=True)
    else:
        schedule = WarmupDecay(peak, warmup, total, config.decay)
    optimizer = keras.optimizers.AdamW(schedule, weight_decay=config.weight_decay, clipnorm=1.0)
    if kind == "bert":
        optimizer.exclude_from_weight_decay(var_names=list(NO_WEIGHT_DECAY))
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.CategoricalCrossentropy(label_smoothing=config.label_smoothing),
        metrics=["accuracy", keras.metrics.F1Score(average="macro", name=MONITOR[4:])],
        jit_compile=True if xla else "auto",
    )
    if xla:
        from kformer.models.pretrained import graph_validation

        callbacks.append(graph_validation())
    return callbacks


def _sample_weights(config: ClassifyConfig, labels: list[str], train_labels: list[str]) -> np.ndarray | None:
    """``(n,)`` float32 weights inversely proportional to class frequency, or None."""
    if not config.class_weights:
        return None
    from sklearn.utils.class_weight import compute_class_weight

    weights = compute_class_weight("balanced", classes=np.array(labels), y=np.array(train_labels))
    by_label = dict(zip(labels, weights, strict=True))
    return np.array([by_label[label] for label in train_labels], dtype="float32")


def _batches(kind: str, ids, y, batch_size: int, shuffle: bool, seed: int = 0, sample_weight=None, first_epoch: int = 0,
             cluster: Cluster | None = None):
    """A ``tf.data.Dataset`` of length-bucketed batches (BERT models get their input dicts);
    ``first_epoch`` is where a resumed run starts (it sees the order of that epoch). With a
    ``cluster``: this process's rows of the global batches. For :data:`XLA_KINDS` (one XLA
    compile per batch shape) every training batch (``shuffle``) has ``batch_size`` rows: the short
    one is filled up with copies of its rows weighted 0 (:func:`~kformer.data.batching.fill_batch`),
    so the step meets only ``(batch_size, width bucket)`` shapes. Validation batches keep their
    rows (the same few shapes every epoch; a filled batch would skew ``val_loss``)."""
    from kformer.data.batching import BucketedBatches, fill_batch
    from kformer.models.pretrained import bert_inputs

    make = BucketedBatches if cluster is None else cluster.batches
    data = make(ids, y, batch_size, shuffle=shuffle, seed=seed, sample_weight=sample_weight,
                first_epoch=first_epoch).dataset()
    if kind in XLA_KINDS and shuffle and cluster is None:
        data = data.map(lambda *batch: fill_batch(batch, batch_size))
    return data.map(bert_inputs) if kind == "bert" else data


def _manifest(config: ClassifyConfig, labels: list[str], kind: str) -> dict[str, Any]:
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


def _fit(classifier: Classifier, config: ClassifyConfig, splits, state_dir: Path, resume: bool, progress,
         cluster: Cluster | None = None):
    """Compile and train ``classifier.model`` in place; returns :class:`~kformer.training.FitResult`."""
    from kformer.training import FitPlan, fit, last_checkpoint

    if config.freeze:
        return _fit_frozen(classifier, config, splits, state_dir, resume, progress)
    train, valid = splits
    index = {label: i for i, label in enumerate(classifier.labels)}
    x_train, x_valid = classifier.features(train.texts), classifier.features(valid.texts)
    weights = _sample_weights(config, classifier.labels, train.labels)
    done = last_checkpoint(state_dir) if resume else None
    train_batches = _batches(classifier.kind, x_train, _one_hot(train.labels, index), config.batch_size, True,
                             config.seed, weights, first_epoch=0 if done is None else done[1], cluster=cluster)
    valid_batches = _batches(classifier.kind, x_valid, _one_hot(valid.labels, index), max(config.batch_size, 64), False,
                             cluster=cluster)
    model = classifier.model
    steps = math.ceil(len(train) / config.batch_size)
    schedule = _compile(model, config, steps, classifier.kind, initial_step=0 if done is None else done[1] * steps,
                        cluster=cluster, xla=classifier.kind in XLA_KINDS)
    preprocessor = getattr(model, "preprocessor", None)
    if classifier.kind == "bert":
        model.preprocessor = None  # batches are already token ids; the saved model keeps its preprocessor
    try:
        plan = FitPlan(epochs=config.epochs, out_dir=state_dir, patience=config.patience,
                       max_minutes=config.max_minutes, monitor=MONITOR, resume=resume, batch_size=config.batch_size)
        return fit(model, train_batches, valid_batches, plan, callbacks=schedule, progress=progress,
                   agree=None if cluster is None else cluster.agree)
    finally:
        if classifier.kind == "bert":
            model.preprocessor = preprocessor


def _scope_split(labels: list[str], valid: LabelledTexts) -> tuple[LabelledTexts, LabelledTexts | None]:
    """``(in-scope rows, out-of-scope rows or None)`` of ``valid``: out of scope are the rows
    whose label is not among the training ``labels``."""
    known = set(labels)
    inside = [i for i, label in enumerate(valid.labels) if label in known]
    if len(inside) == len(valid):
        return valid, None
    if not inside:
        raise BadInput("{field} holds none of the training labels; calibration needs in-scope validation texts",
                       field="valid")
    outside = [i for i, label in enumerate(valid.labels) if label not in known]
    return _subset(valid, inside, valid.source, valid.dropped), _subset(valid, outside, f"{valid.source} (out of scope)")


def _calibrate(classifier: Classifier, valid: LabelledTexts, out_of_scope: LabelledTexts | None,
               batch_size: int) -> dict[str, Any]:
    """metrics.json's ``calibration``: the unknown route's threshold chosen on the validation
    predictions (:func:`kformer.tasks.calibration.choose_threshold`) and what it does there."""
    from kformer.tasks.calibration import choose_threshold

    probs = classifier.probabilities(valid.texts, batch_size)
    index = {label: i for i, label in enumerate(classifier.labels)}
    correct = probs.argmax(axis=1) == np.array([index[label] for label in valid.labels])
    oos = None if out_of_scope is None else classifier.probabilities(out_of_scope.texts, batch_size).max(axis=1)
    summary = choose_threshold(probs.max(axis=1), correct, oos)
    if out_of_scope is not None:
        summary["labels_out_of_scope"] = sorted(set(out_of_scope.labels))
    return summary


def _fit_frozen(classifier: Classifier, config: ClassifyConfig, splits, state_dir: Path, resume: bool, progress):
    """``freeze``: the frozen backbone's mean-pooled text vectors of the training and validation
    texts, computed once (:func:`_cached_vectors`), train only the head (the model's dropout and
    dense layers, so the folder's model still predicts from raw text)."""
    from kformer.models.pretrained import frozen_parts
    from kformer.training import FitPlan, fit, last_checkpoint

    train, valid = splits
    index = {label: i for i, label in enumerate(classifier.labels)}
    encoder, head = frozen_parts(classifier.model)
    vectors = _cached_vectors(state_dir, classifier, encoder, {"train": train.texts, "valid": valid.texts})
    done = last_checkpoint(state_dir) if resume else None
    steps = math.ceil(len(train) / config.batch_size)
    schedule = _compile(head, config, steps, "bert", initial_step=0 if done is None else done[1] * steps)
    plan = FitPlan(epochs=config.epochs, out_dir=state_dir, patience=config.patience, max_minutes=config.max_minutes,
                   monitor=MONITOR, resume=resume, batch_size=config.batch_size)
    return fit(head, (vectors["train"], _one_hot(train.labels, index)), (vectors["valid"], _one_hot(valid.labels, index)),
               plan, callbacks=schedule, progress=progress)


VECTORS_FILE = "text_vectors.npz"


def _cached_vectors(state_dir: Path, classifier: Classifier, encoder, texts: dict[str, Sequence[str]]):
    """``{name: (len(texts[name]), dim) float32}`` text vectors, read from ``training/`` when it
    holds those of the same texts and backbone (a resumed run), else computed and saved there."""
    import hashlib

    from kformer.models.pretrained import text_vectors

    digest = hashlib.sha256(json.dumps([classifier.manifest.get("backbone"), classifier.max_length, texts],
                                       sort_keys=True).encode("utf-8")).hexdigest()
    path = state_dir / VECTORS_FILE
    if path.is_file():
        with contextlib.suppress(OSError, ValueError, KeyError), np.load(path) as cached:
            if str(cached["digest"]) == digest:
                return {name: np.asarray(cached[name]) for name in texts}
    vectors = {name: text_vectors(encoder, classifier.features(rows)) for name, rows in texts.items()}
    partial = path.with_name(path.name + ".partial.npz")
    np.savez(partial, digest=np.array(digest), **vectors)
    os.replace(partial, path)
    return vectors


def _summary(scores: dict) -> dict:
    return {"accuracy": scores["accuracy"], "macro_f1": scores["macro_f1"], "n": scores["n"]}


def _run(config, labels, extra: dict, out: Path, state_dir: Path, data, resume: bool, progress,
         cluster: Cluster | None = None, out_of_scope: LabelledTexts | None = None) -> dict[str, Any]:
    """Build, fit, score and write the folder; returns the metrics written to metrics.json. With a
    ``cluster`` the model is built and fitted data-parallel, scored in each process alone, and
    written by process 0 only."""
    from kformer.folders import write_model_folder
    from kformer.text.vocabulary import make_tokenizer, save_vocabulary
    from kformer.training import set_seed
    from kformer.viz import plot_confusion_matrix

    train, valid, test = data
    set_seed(config.seed)
    vocabulary = _vocabulary(config, train.texts, state_dir, resume)
    from kformer.precision import precision_scope

    parallel = contextlib.nullcontext if cluster is None else cluster.scope
    with parallel(), precision_scope(config.precision):
        model, kind = _build_model(config, len(labels), vocabulary)
    tokenizer = make_tokenizer(vocabulary, config.max_length, config.tokenizer, config.truncation) if kind == "encoder" else None
    manifest = _manifest(config, labels, kind)
    classifier = Classifier(out, manifest, model, tokenizer)
    fit_config, wide_part = config, None
    if config.wide is True:  # fitted on the training split, weight chosen on valid (a run resumed from before
        # the wide part has "auto" left unresolved: it stays as it began, without)
        from kformer.tasks.classify_wide import fit_timed

        wide_part, wide_seconds = fit_timed(train, labels, class_weights=config.class_weights, valid=valid,
                                            word_ngrams=config.wide_ngrams)
        if config.max_minutes is not None:  # --max-minutes bounds the wide part and the network together
            refit_share = (len(train) + len(valid)) / len(train) if config.wide_refit else 0.0  # its rows / the fit's
            wide_minutes = wide_seconds / 60.0 * (1.0 + refit_share)
            fit_config = dataclasses.replace(config, max_minutes=max(config.max_minutes - wide_minutes, 0.1))
    with parallel():
        result = _fit(classifier, fit_config, (train, valid), state_dir, resume, progress, cluster)
    batch_size = max(config.batch_size, 64)
    wide = None
    if config.wide is True:
        from kformer.tasks.classify_wide import add_wide

        wide = add_wide(classifier, wide_part, wide_seconds, valid, batch_size=batch_size)
    valid_scores = classifier.scores(valid, batch_size)
    calibration = _calibrate(classifier, valid, out_of_scope, batch_size) if config.calibrate else None
    if classifier.wide is not None:
        from kformer.tasks import classify_wide

        if config.wide_refit:  # after everything validation decides (weight, scores, threshold)
            wide["refit"] = classify_wide.refit(classifier, train, valid, class_weights=config.class_weights,
                                                word_ngrams=config.wide_ngrams)
        if test is not None:
            wide["test_accuracy"] = classify_wide.part_accuracies(classifier, test, batch_size)
    test_scores = classifier.scores(test, batch_size) if test is not None else None
    metrics = {
        "valid": _summary(valid_scores),
        "test": _summary(test_scores) if test_scores else None,
        "train_seconds": round(result.seconds, 2),
        "epochs_run": result.initial_epoch + result.epochs_run,
        "best_epoch": None if result.best_epoch is None else result.best_epoch + 1,
        "stopped_by_time_budget": result.stopped_by_budget,
        "splits": {"train": len(train), "valid": len(valid), "test": len(test) if test else 0,
                   "dropped_empty": train.dropped},
        "recipe": to_dict(config),
        **({"vocabulary": _vocabulary_summary(config, vocabulary)} if vocabulary else {}),
        **({"calibration": calibration} if calibration else {}),
        **({"wide": wide} if wide else {}),
        **extra,
    }
    if calibration:  # predict and serve route below it to the unknown label by default
        manifest = {**manifest, "threshold": calibration["threshold"]}
    if classifier.wide is not None:
        manifest = {**manifest, "wide": classifier.wide.manifest()}

    def write_files(stage: Path) -> None:
        if vocabulary:
            save_vocabulary(vocabulary, stage / VOCAB_FILE)
        if classifier.wide is not None:
            classifier.wide.part.save(stage)
        write_curves(state_dir, stage)
        plot_confusion_matrix(valid_scores["confusion"], valid_scores["labels"], stage / "confusion_valid.png")

    if cluster is None or cluster.chief:
        with _quiet_custom_compile(kind):
            write_model_folder(out, TASK, model, {**manifest, "metrics": metrics}, metrics, write_files)
    return metrics


@contextlib.contextmanager
def _quiet_custom_compile(kind: str):
    """Silence Keras' warning that a KerasHub task's own ``compile`` is not replayed from its saved
    config (on saving and loading; the model is recompiled by hand where that matters)."""
    with warnings.catch_warnings():
        if kind == "bert":
            warnings.filterwarnings("ignore", message=r"`compile\(\)` was not called")
        yield
