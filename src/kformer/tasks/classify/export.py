"""How a classifier exports: its network (token ids -> probabilities) and, where the tokenizer runs
in a graph, raw texts -> probabilities and labels (:meth:`Classifier.export_plan`).

* ``serving_default`` / ``model.onnx``: ``token_ids`` int32 ``(B, L)`` -> ``probabilities`` float32
  ``(B, classes)``;
* ``texts`` (SavedModel only, when the tokenizer runs in the graph): strings ``(B,)`` ->
  ``probabilities`` and ``labels`` (the most likely label, string ``(B,)``).

A classifier with a wide n-gram part is refused (Unsupported): its scikit-learn part has no graph form.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kformer.errors import KformerError, Unsupported
from kformer.models.export_plan import Endpoint, Plan, Tensor

LABELS_FILE = "labels.txt"


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


def classifier_plan(classifier) -> Plan:
    """The export :class:`~kformer.models.export_plan.Plan` of a loaded
    :class:`~kformer.tasks.classify.Classifier` (refused with a wide part: see the module)."""
    if classifier.wide is not None:
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
