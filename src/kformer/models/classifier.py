"""Text classifiers: kformer's own encoder model, and loading/predicting for any classify folder.

A classify model folder holds ``kformer.json`` (task ``classify``, ``kind``, label names, recipe,
metrics), ``model.keras`` and, for kformer's encoder, ``vocab.txt``. ``load_classifier`` and
``predict_texts`` are plain functions so that a server can call them without the CLI.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kformer.errors import KformerError

MODEL_FILE = "model.keras"


def build_encoder_classifier(
    vocab_size: int,
    num_classes: int,
    max_length: int,
    dim: int = 64,
    heads: int = 2,
    ff_dim: int = 128,
    blocks: int = 1,
    dropout: float = 0.1,
    positions: str = "learned",
    window: int = 0,
):
    """Token ids ``(batch, seq <= max_length)`` -> class probabilities ``(batch, num_classes)``.

    ``TokenAndPositionEmbedding`` -> ``blocks`` x ``EncoderBlock`` -> mean over real tokens
    (padding masked) -> dropout -> softmax. Layers are named ``embedding``, ``encoder_<i>`` so
    that attention maps can be read back out of a saved model.

    ``window > 0``: local attention. The ids are cut into windows of ``window`` tokens
    (:class:`SplitWindows`, ``(batch * windows, window)``), each window is embedded (positions
    within the window) and encoded on its own, and the mean runs over the real tokens of all
    windows (:class:`WindowedAverage`). Attention then costs ``seq * window`` instead of ``seq**2``,
    so long documents fit a CPU time budget.
    """
    import keras

    from kformer.layers import EncoderBlock, MaskedGlobalAveragePooling, TokenAndPositionEmbedding

    SplitWindows, WindowedAverage = _window_layers()
    ids = keras.Input((None,), dtype="int32", name="token_ids")  # any length up to max_length
    inputs = SplitWindows(window, name="windows")(ids) if window else ids
    x = TokenAndPositionEmbedding(vocab_size, window or max_length, dim, positions=positions, name="embedding")(inputs)
    x = keras.layers.Dropout(dropout, name="embedding_dropout")(x)
    for i in range(blocks):
        x = EncoderBlock(dim, heads, ff_dim, dropout=dropout, name=f"encoder_{i}")(x)
    if window:
        x = WindowedAverage(name="pooling")([x, inputs, ids])
    else:
        x = MaskedGlobalAveragePooling(name="pooling")(x)
    x = keras.layers.Dropout(dropout, name="head_dropout")(x)
    probs = keras.layers.Dense(num_classes, activation="softmax", dtype="float32", name="classes")(x)
    return keras.Model(ids, probs, name="kformer_encoder_classifier")


@functools.cache
def _window_layers():
    """``(SplitWindows, WindowedAverage)``, defined (and registered for loading) on first use, so
    that importing this module needs no Keras."""
    import keras
    from keras import ops

    def pad_to_windows(ids, window):
        length = ops.shape(ids)[1]
        if length is None:  # symbolic shape while the model is built: nothing to pad
            return ids
        return ops.pad(ids, [[0, 0], [0, (-length) % window]])

    @keras.saving.register_keras_serializable(package="kformer")
    class SplitWindows(keras.layers.Layer):
        """ids ``(batch, seq)`` -> ``(batch * ceil(seq / window), window)``, 0-padded at the end."""

        def __init__(self, window: int, **kwargs):
            super().__init__(**kwargs)
            self.window = int(window)

        def call(self, ids):
            return ops.reshape(pad_to_windows(ids, self.window), (-1, self.window))

        def compute_output_shape(self, input_shape):
            return (None, self.window)

        def get_config(self):
            return {**super().get_config(), "window": self.window}

    @keras.saving.register_keras_serializable(package="kformer")
    class WindowedAverage(keras.layers.Layer):
        """``[x (batch * windows, window, dim), window_ids (batch * windows, window), ids (batch, seq)]``
        -> ``(batch, dim)``: the mean over the real tokens of all of a text's windows."""

        def call(self, inputs):
            x, window_ids, ids = inputs
            real = ops.expand_dims(ops.cast(ops.not_equal(window_ids, 0), x.dtype), -1)
            batch, dim = ops.shape(ids)[0], ops.shape(x)[-1]
            sums = ops.sum(ops.reshape(ops.sum(x * real, axis=1), (batch, -1, dim)), axis=1)
            counts = ops.sum(ops.reshape(ops.sum(real, axis=1), (batch, -1)), axis=1, keepdims=True)
            return sums / ops.maximum(counts, 1.0)

        def compute_mask(self, inputs, mask=None):
            return None

        def compute_output_shape(self, input_shape):
            return (input_shape[2][0], input_shape[0][-1])

    return SplitWindows, WindowedAverage


def encoder_attention_maps(model, ids) -> list[np.ndarray]:
    """Self-attention weights of every encoder block: a list of ``(batch, heads, seq, seq)`` arrays."""
    from kformer.layers import padding_mask

    if any(layer.name == "windows" for layer in model.layers):  # local attention: the first window
        ids = ids[:, : model.get_layer("windows").window]
    x = model.get_layer("embedding")(ids)
    mask = padding_mask(ids)
    maps = []
    i = 0
    while True:
        try:
            block = model.get_layer(f"encoder_{i}")
        except ValueError:
            break
        x, scores = block(x, mask=mask, return_attention_scores=True, training=False)
        maps.append(np.asarray(scores))
        i += 1
    return maps


@dataclass
class Classifier:
    """A loaded classify folder: the Keras model, its preprocessing and the label names.

    ``kind`` is ``"encoder"`` (kformer's encoder; ``tokenizer`` turns texts into ids) or
    ``"bert"`` (a KerasHub ``BertTextClassifier`` whose own preprocessor tokenizes).
    """

    model: Any
    labels: list[str]
    kind: str
    tokenizer: Any = None
    manifest: dict = field(default_factory=dict)

    def features(self, texts: Sequence[str]):
        """Model inputs for a batch of raw texts."""
        from kformer.text.vocabulary import CHARS_PER_TOKEN_LIMIT, clean_text, encode

        if self.kind == "encoder":
            return encode(self.tokenizer, texts)
        # A KerasHub task runs its own preprocessor inside predict_on_batch: give it strings.
        limit = self.model.preprocessor.sequence_length * CHARS_PER_TOKEN_LIMIT
        return np.array([clean_text(t, limit) for t in texts])

    def probabilities(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        """Class probabilities ``(len(texts), len(labels))``."""
        texts = [str(t) for t in texts]
        starts = range(0, len(texts), batch_size)
        if progress:
            from tqdm import tqdm

            starts = tqdm(starts, desc="predicting", unit="batch", total=len(starts))
        if self.kind == "encoder":
            return self._encoder_probabilities(texts, starts, batch_size)
        parts = [np.asarray(self.model.predict_on_batch(self.features(texts[i:i + batch_size]))) for i in starts]
        if not parts:
            return np.zeros((0, len(self.labels)), dtype="float32")
        probs = np.concatenate(parts).astype("float32")
        if self.kind == "bert" and not np.allclose(probs.sum(axis=1), 1.0, atol=1e-3):
            probs = _softmax(probs)
        return probs


    def _encoder_probabilities(self, texts, starts, batch_size: int) -> np.ndarray:
        """Texts sorted by length, so each batch is cut to its longest row; results in input order."""
        from kformer.training import BucketedBatches

        ids = self.features(texts)
        order = np.argsort((ids != 0).sum(axis=1), kind="stable")
        batches = BucketedBatches(ids[order], np.zeros(len(texts)), batch_size=batch_size, shuffle=False)
        probs = np.zeros((len(texts), len(self.labels)), dtype="float32")
        for i in starts:
            rows = np.arange(i, min(i + batch_size, len(texts)))
            x = batches.x[rows, : batches.width(rows)]
            probs[order[rows]] = np.asarray(self.model.predict_on_batch(x))
        return probs


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def load_classifier(model_dir: str | os.PathLike) -> Classifier:
    """Load a folder written by ``kformer train classify`` (one-line KformerError if it is not one)."""
    from kformer.artifacts import load_keras_model, read_manifest

    model_dir = Path(model_dir)
    manifest = read_manifest(model_dir)
    if manifest.get("task") != "classify":
        raise KformerError(f"{model_dir} holds a '{manifest.get('task')}' model, not a text classifier")
    labels = manifest.get("labels")
    if not isinstance(labels, list) or not labels:
        raise KformerError(f"{model_dir}/kformer.json has no label names; retrain the model")
    kind = manifest.get("kind", "encoder")
    if kind == "bert":
        import keras_hub  # noqa: F401  registers the KerasHub classes the file refers to
    if kind == "encoder":
        _window_layers()  # registers the local-attention layers a model may use
    model = load_keras_model(model_dir / manifest.get("model_file", MODEL_FILE))
    tokenizer = None
    if kind == "encoder":
        from kformer.text.vocabulary import VOCAB_FILE, load_vocabulary, make_tokenizer

        vocabulary = load_vocabulary(model_dir / manifest.get("vocab_file", VOCAB_FILE))
        tokenizer = make_tokenizer(
            vocabulary, int(manifest["max_length"]), manifest.get("tokenizer", "word"), manifest.get("truncation", "head")
        )
    n_out = int(model.outputs[0].shape[-1])
    if n_out != len(labels):
        raise KformerError(f"{model_dir}: the model has {n_out} outputs but kformer.json names {len(labels)} labels")
    return Classifier(model=model, labels=[str(x) for x in labels], kind=kind, tokenizer=tokenizer, manifest=manifest)


def predict_texts(
    classifier: Classifier,
    texts: Sequence[str],
    top_k: int = 1,
    threshold: float | None = None,
    unknown_label: str = "unknown",
    batch_size: int = 64,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """One dict per text: ``label``, ``probability``, ``top_k`` (label/probability pairs), ``unknown``.

    With ``threshold``, a text whose best probability is below it gets ``unknown_label`` as its
    label (``unknown`` is True; ``top_k`` still shows what the model thought).
    """
    if top_k < 1:
        raise KformerError("--top-k must be at least 1")
    if threshold is not None and not 0.0 <= threshold <= 1.0:
        raise KformerError(f"--threshold must be between 0 and 1, got {threshold}")
    probs = classifier.probabilities(texts, batch_size=batch_size, progress=progress)
    k = min(top_k, len(classifier.labels))
    order = np.argsort(-probs, axis=1, kind="stable")[:, :k]
    results = []
    for row, best in zip(probs, order, strict=True):
        top = [{"label": classifier.labels[j], "probability": round(float(row[j]), 6)} for j in best]
        unknown = threshold is not None and float(row[best[0]]) < threshold
        results.append(
            {
                "label": unknown_label if unknown else top[0]["label"],
                "probability": top[0]["probability"],
                "unknown": bool(unknown),
                "top_k": top,
            }
        )
    return results
