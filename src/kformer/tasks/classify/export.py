"""How a classifier exports (:meth:`Classifier.export_plan`): its network, its wide n-gram part and
their mix as graph operations (:mod:`kformer.tasks.classify.wide_graph`), its out-of-scope score
(:mod:`kformer.tasks.classify.ood_graph` for a distance, :mod:`kformer.tasks.classify.ood_text_graph`
for the TF-IDF novelty and the combined rule), its labels and threshold.

* ``serving_default`` / ``model.onnx``: ``token_ids`` int32 ``(B, L)`` -- and, when the classifier
  mixes in a wide part or its score is ``tfidf`` or ``combined``, ``texts`` string ``(B,)`` (the
  same texts, cut to the wide part's ``max_chars``: the wide part reads their n-grams;
  ``metadata.json["wide"]`` is then set, its ``weight`` 0 where the part is read for the score
  alone and not mixed in) -- -> ``probabilities`` float32 ``(B, classes)`` (what ``kformer
  predict`` gives), ``labels`` string ``(B,)`` (the most likely label) and ``ood_score`` float32
  ``(B,)`` (the score the unknown route thresholds, as ``kformer predict``'s: the best
  probability, minus a distance of the pooled text vector, the TF-IDF novelty or the combined
  rule; ``metadata.json["ood"]`` says which);
* ``texts`` (SavedModel, when the tokenizer runs in a graph): strings ``(B,)`` -> the same
  outputs: no tokenizing outside.

ONNX has no operators for kformer's tokenizers (Unicode normalisation, WordPiece), so ONNX clients
tokenise the texts themselves: ``metadata.json["tokenizer"]`` says exactly how, and
``docs/onnx_classify_client.py`` does it. The calibrated threshold and the unknown label are in the
metadata (a client applies them: where ``ood_score`` is below the threshold, the label is the
unknown label).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kformer.errors import KformerError
from kformer.models.export_plan import Endpoint, Plan, Tensor

LABELS_FILE = "labels.txt"
UNKNOWN_LABEL = "unknown"  # what predict and serve answer below the threshold (Classifier.parameters)


def network_endpoint(classifier, vectors: bool | str | None = None) -> Endpoint:
    """The network alone: ``token_ids`` int32 ``(B, L)`` -> ``probabilities`` float32 ``(B,
    classes)`` (what the ``onnx`` runtimes convert); with ``vectors``, ``outputs`` ``(B, classes +
    dim)``: the probabilities followed by the pooled text vector (``"layers"``: every encoder
    block's, ``(B, classes + blocks * dim)``)."""
    outputs_of_ids = classifier_function(classifier, vectors)
    if not vectors:
        return Endpoint("network", lambda ids: {"probabilities": outputs_of_ids(ids)}, (_token_ids(classifier),),
                        (_probabilities(classifier),), onnx="model")
    outputs = Tensor("outputs", "float32", (None, None), "class probabilities (column i is labels.txt line i), then "
                     "the pooled text vector")
    return Endpoint("network_vectors", lambda ids: {"outputs": outputs_of_ids(ids)}, (_token_ids(classifier),),
                    (outputs,), onnx="model")


def _token_ids(classifier) -> Tensor:
    return Tensor("token_ids", "int32", (None, None),
                  f"token ids, 0-padded, at most {classifier.max_length} per row (vocab.txt line = id; how to "
                  "tokenise: metadata.json \"tokenizer\")")


def _probabilities(classifier) -> Tensor:
    return Tensor("probabilities", "float32", (None, len(classifier.labels)),
                  "class probabilities; column i is labels.txt line i")


LABELS = Tensor("labels", "string", (None,), "the most likely label (where ood_score is below the metadata's "
                "threshold a client answers its unknown_label instead)")
OOD_SCORE = Tensor("ood_score", "float32", (None,), "the in-scope score the threshold applies to, higher = more in "
                   "scope: the best probability or minus a distance (metadata.json \"ood\")")


def classifier_plan(classifier) -> Plan:
    """The export :class:`~kformer.models.export_plan.Plan` of a loaded
    :class:`~kformer.tasks.classify.Classifier`."""
    import tensorflow as tf

    from kformer.tasks.classify.wide import MAX_CHARS
    from kformer.tasks.classify.wide_graph import add_onnx_outputs

    labels = list(classifier.labels)
    network, held = _scored_network(classifier)
    distance = OOD_SCORE in network.outputs  # the network scores a distance; else the route reads the probability
    wide, text_score = _texts_read(classifier)
    outputs, tracked = _classifier_outputs(network, distance, wide, text_score, tf.constant(labels))
    inputs = (network.inputs[0],)
    if wide is not None:
        reads = " and ".join(what for what, used in (("its probabilities", wide.weight > 0),
                                                     ("its TF-IDF novelty", text_score is not None)) if used)
        inputs += (Tensor("texts", "string", (None,), f"the same texts, each cut to its first {MAX_CHARS} "
                          f"characters (the wide n-gram part reads them: {reads})"),)
    returned = (network.outputs[0], LABELS, OOD_SCORE)
    by_ids = Endpoint("serving_default", outputs, inputs, returned, onnx="model", onnx_via=network,
                      onnx_finish=lambda proto: add_onnx_outputs(proto, labels, wide, distance, text_score))
    endpoints = [by_ids]
    tokenize, reason = _graph_tokenizer(classifier)
    if tokenize is not None:
        from kformer.text.graph_words import GraphWordTokenizer

        tokenize(tf.constant(["build"]))  # Keras layers build on their first call; only built ones export
        # WordPiece runs on TensorFlow Text's ops; kformer's word tokenizer on core TensorFlow alone
        endpoints.append(Endpoint("texts", lambda texts: outputs(tokenize(texts), texts),
                                  (Tensor("texts", "string", (None,), "raw texts"),), returned,
                                  tracked=(getattr(tokenize, "resource", tokenize),),  # what holds its tables
                                  text_ops=not isinstance(tokenize, GraphWordTokenizer)))

    def write_files(folder: Path) -> None:
        (folder / LABELS_FILE).write_text("\n".join(labels) + "\n", encoding="utf-8")
        (folder / "vocab.txt").write_text("\n".join(_classifier_vocabulary(classifier)) + "\n", encoding="utf-8")

    info = {"labels": labels, "labels_file": LABELS_FILE, "vocabulary_files": ["vocab.txt"],
            "max_length": classifier.max_length, "kind": classifier.kind,
            "threshold": classifier.threshold, "unknown_label": UNKNOWN_LABEL, "ood": _ood_info(classifier),
            "wide": None if wide is None else {"weight": wide.weight, "rule": wide.rule, "features": wide.part.features,
                                               "max_chars": MAX_CHARS},
            "tokenizer": tokenizer_spec(classifier),
            "texts_signature": reason or _texts_signature(endpoints[-1])}
    return Plan("classify", endpoints, [classifier.model, *held, *tracked], write_files, info)


def _texts_read(classifier) -> tuple[Any, Any]:
    """``(wide, text score)``: the classifier's :class:`~kformer.tasks.classify.wide.Mix` where the
    graph reads the texts (mixed in with weight > 0, or read by the score), else None; its
    ``tfidf`` or ``combined`` out-of-scope score, else None."""
    from kformer.tasks.classify.ood_text import SCORES

    text_score = classifier.ood if getattr(classifier.ood, "kind", None) in SCORES else None
    reads = classifier.wide is not None and (classifier.wide.weight > 0 or text_score is not None)
    return (classifier.wide if reads else None), text_score


def _classifier_outputs(network: Endpoint, distance: bool, wide, text_score, label_table) -> tuple[Callable, list]:
    """``(outputs(ids, texts=None) -> {probabilities, labels, ood_score}, the modules it holds)``:
    the network (``network.fn``), the wide part's features (``wide``, read by its probabilities
    when its weight is above 0 and by ``text_score``), the mix, the labels and the score."""
    import tensorflow as tf

    from kformer.tasks.classify.wide_graph import tf_mix, tf_wide

    tracked: list[Any] = []
    part = score_module = None
    if wide is not None:
        part = tf_wide(wide.part)
        tracked.append(part)
    if text_score is not None:
        from kformer.tasks.classify.ood_text_graph import tf_text_score

        score_module = tf_text_score(text_score)
        tracked.append(score_module)

    def outputs(ids, texts=None):
        scored = network.fn(ids)
        probs = scored["probabilities"]
        features = part.features(texts) if part is not None else None
        if part is not None and wide.weight > 0:
            probs = tf_mix(probs, part.probabilities(features), wide)
        score = scored["ood_score"] if distance else tf.reduce_max(probs, axis=1)  # the network's score
        if score_module is not None:
            score = score_module(features, score)
        return {"probabilities": probs, "labels": tf.gather(label_table, tf.argmax(probs, axis=1)),
                "ood_score": score}

    return outputs, tracked


def _texts_signature(endpoint: Endpoint) -> str:
    """``metadata.json["texts_signature"]``: where the ``texts`` signature is and what it needs."""
    if endpoint.text_ops:
        return ("strings in: the tokenizer runs in the graph on TensorFlow Text's ops, so the signature is a second "
                "SavedModel, texts/1; `import tensorflow_text` before loading it")
    return "strings in: the tokenizer runs in the graph on core TensorFlow ops (plain TensorFlow loads it)"


def tokenizer_spec(classifier) -> dict[str, Any]:
    """How a client turns a text into ``token_ids`` (``metadata.json["tokenizer"]``; the reference
    client ``docs/onnx_classify_client.py`` follows it)."""
    from kformer.text.specials import PAD_ID, UNK_ID
    from kformer.text.vocabulary import CHARS_PER_TOKEN_LIMIT
    from kformer.text.wordpiece import WORDPIECE_STEP, export_rules

    common = {"vocabulary_file": "vocab.txt", "max_length": classifier.max_length, "pad_id": PAD_ID,
              "unknown_id": UNK_ID}
    empty = {"empty_text": f"a text with no token is the one id {UNK_ID} ([UNK])"}
    if classifier.kind == "encoder" and hasattr(classifier.tokenizer, "index"):
        tokenizer = classifier.tokenizer
        return {"kind": "word", **common, **empty, "truncation": tokenizer.truncation,
                "steps": ["if the text is longer than 2 * max_length * 16 characters: keep its first max_length * 16 "
                          "(truncation head) or those and, after a space, its last max_length * 16",
                          "lowercase (Python str.lower); <br>, <br/>, <br /> (any case) -> a space",
                          "if not ASCII: Unicode NFD, drop the nonspacing marks (category Mn)",
                          "tokens: the matches of the Python regex \\w+|[^\\w\\s]",
                          "keep max_length tokens (with word pairs in vocab.txt: max_length // 2) by truncation: head "
                          "= the first, tail = the last, head_tail = the first quarter and the rest from the end",
                          "id = the token's vocab.txt line (0-based), unknown_id when absent",
                          "word pairs (vocab.txt lines with a space): append the ids of the known 'a b' pairs of "
                          "consecutive kept tokens, up to max_length ids in all",
                          "pad with pad_id to max_length"],
                "word_pairs": tokenizer.with_bigrams}
    pieces = classifier.model.preprocessor.tokenizer if classifier.kind == "bert" else classifier.tokenizer
    wordpiece = export_rules(pieces)
    steps = [f"<br>, <br/>, <br /> (any case) -> a space; runs of whitespace -> one space; strip; keep the first "
             f"{classifier.max_length * CHARS_PER_TOKEN_LIMIT} characters", WORDPIECE_STEP]
    if classifier.kind == "bert":
        return {"kind": "bert", **common, **wordpiece,
                "steps": [*steps, "[CLS] + the first max_length - 2 pieces + [SEP] (their vocab.txt ids), "
                          "padded with pad_id"]}
    return {"kind": "wordpiece", **common, **empty, **wordpiece,
            "steps": [*steps, "the first max_length piece ids, padded with pad_id; no pieces: one unknown_id"]}


def _scored_network(classifier) -> tuple[Endpoint, list[Any]]:
    """``(endpoint, what it holds)``: ``token_ids`` -> ``probabilities`` (the network's) and, for a
    distance score (or a combined score's distance), ``ood_score`` ``(B,)`` computed from the
    pooled text vectors in the graph (:mod:`~kformer.tasks.classify.ood_graph`, whose module the
    export must track)."""
    from kformer.tasks.classify.ood_text import COMBINED, TFIDF

    kind = getattr(classifier.ood, "kind", None)
    distance = classifier.ood.network if kind == COMBINED else None if kind == TFIDF else classifier.ood
    if distance is None:
        return network_endpoint(classifier), []
    from kformer.tasks.classify.ood_graph import tf_ood_score

    outputs_of_ids = classifier_function(classifier, vectors=distance.vectors)
    score = tf_ood_score(distance)
    classes = len(classifier.labels)

    def scored(ids):
        outputs = outputs_of_ids(ids)
        return {"probabilities": outputs[:, :classes], "ood_score": score(outputs[:, classes:])}

    return Endpoint("network", scored, (_token_ids(classifier),), (_probabilities(classifier), OOD_SCORE),
                    onnx="model"), [score]


def _ood_info(classifier) -> dict[str, str]:
    """``metadata.json["ood"]``: which score ``ood_score`` is, and its units (combined: also its
    network score)."""
    from kformer.tasks.classify.ood import PROBABILITY, UNITS
    from kformer.tasks.classify.ood_text import COMBINED
    from kformer.tasks.classify.ood_text import UNITS as TEXT_UNITS

    kind = PROBABILITY if classifier.ood is None else classifier.ood.kind
    info = {"score": kind, "units": {**UNITS, **TEXT_UNITS}[kind], "output": "ood_score"}
    if kind == COMBINED:
        info["network"] = classifier.ood.network_kind
    return info


def classifier_function(classifier, vectors: bool | str | None = None) -> Callable:
    """ids ``(B, L)`` int32 -> probabilities ``(B, classes)`` float32, as a graph function; with
    ``vectors``, ``(B, classes + dim)``: then the pooled text vector (``"layers"``: every encoder
    block's, ``(B, classes + blocks * dim)``; :func:`~kformer.models.classifier.with_text_vectors`)."""
    import keras

    from kformer.models.classifier import with_text_vectors
    from kformer.tasks.classify.runtimes import vector_mode

    vectors = vector_mode(vectors)
    model = with_text_vectors(classifier.model, layers=vectors == "layers") if vectors else classifier.model
    if classifier.kind == "encoder":
        return lambda ids: model(ids, training=False)
    from kformer.models.pretrained import bert_inputs

    classes = len(classifier.labels)

    def bert(ids):
        outputs = keras.Model.__call__(model, bert_inputs(ids)[0], training=False)
        if not vectors:
            return _as_probabilities(outputs)
        import tensorflow as tf

        return tf.concat([_as_probabilities(outputs[:, :classes]), tf.cast(outputs[:, classes:], tf.float32)], axis=1)

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
        self.tokenizer = self.resource = tokenizer
        self.limit = tokenizer.sequence_length * 16

    def __call__(self, texts):
        import tensorflow as tf

        return _no_empty_rows(tf.cast(self.tokenizer(_clean(texts, self.limit)), tf.int32))


class _BertTexts:
    """Strings -> ``[CLS] ... [SEP]`` ids with a KerasHub classifier's own preprocessor."""

    def __init__(self, preprocessor, limit: int):
        self.preprocessor, self.limit = preprocessor, limit
        self.resource = preprocessor

    def __call__(self, texts):
        import tensorflow as tf

        return tf.cast(self.preprocessor(_clean(texts, self.limit))["token_ids"], tf.int32)


def _classifier_vocabulary(classifier) -> list[str]:
    if classifier.kind == "bert":
        return list(classifier.model.preprocessor.tokenizer.get_vocabulary())
    return list(classifier.tokenizer.get_vocabulary())
