"""kformer's encoder text classifier as a Keras network, and its attention weights.

Pure networks only: training, the model folder and prediction are :mod:`kformer.tasks.classify`.
"""

from __future__ import annotations

import numpy as np


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

    from kformer.layers import (
        EncoderBlock,
        MaskedGlobalAveragePooling,
        SplitWindows,
        TokenAndPositionEmbedding,
        WindowedAverage,
    )

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


HEAD_LAYERS = ("classes", "logits")  # the last dense layer: kformer's encoder, KerasHub's BERT classifiers


def with_text_vectors(model, layers: bool = False):
    """``model`` (a classifier whose last dense layer is one of :data:`HEAD_LAYERS`) as a network
    of the same inputs and weights whose output is its output ``(batch, classes)`` followed by
    the pooled text vector the dense layer reads ``(batch, dim)``: ``(batch, classes + dim)``
    float32 (dropout, before the dense layer, does nothing at inference).

    ``layers`` (kformer's encoder only): instead of the one text vector, the output of EVERY
    encoder block pooled by the model's own pooling layer, first block first: ``(batch, classes +
    blocks * dim)``; the last ``dim`` columns are the text vector the dense layer reads."""
    import keras

    names = {layer.name for layer in model.layers}
    head = next((name for name in HEAD_LAYERS if name in names), None)
    if head is None:
        raise ValueError(f"the classifier has no dense layer named {' or '.join(HEAD_LAYERS)}")
    vector = layer_vectors(model) if layers else model.get_layer(head).input
    outputs = keras.ops.concatenate([keras.ops.cast(model.output, "float32"), keras.ops.cast(vector, "float32")], axis=-1)
    return keras.Model(model.input, outputs, name=f"{model.name}_with_{'layer_' if layers else ''}vectors")


def encoder_blocks(model) -> list:
    """The ``encoder_<i>`` blocks of kformer's encoder classifier, first first (none: ``[]``)."""
    names = {layer.name for layer in model.layers}
    return [model.get_layer(f"encoder_{i}") for i in range(len(names)) if f"encoder_{i}" in names]


def layer_vectors(model):
    """The symbolic ``(batch, blocks * dim)`` of kformer's encoder classifier ``model``: each
    encoder block's output pooled by the model's ``pooling`` layer (the masked mean over real
    tokens; windowed models: over the real tokens of all windows), concatenated first block first."""
    import keras

    blocks = encoder_blocks(model)
    if not blocks or "pooling" not in {layer.name for layer in model.layers}:
        raise ValueError("per-layer vectors need kformer's encoder classifier (encoder_<i> blocks, a pooling layer)")
    pool = model.get_layer("pooling")
    if any(layer.name == "windows" for layer in model.layers):
        windows = model.get_layer("windows").output
        pooled = [pool([block.output, windows, model.input]) for block in blocks]
    else:
        pooled = [pool(block.output) for block in blocks]
    return pooled[0] if len(pooled) == 1 else keras.ops.concatenate(pooled, axis=-1)


HEAD_DROPOUTS = ("head_dropout", "classifier_dropout")  # the dropout before HEAD_LAYERS: kformer's, KerasHub's
CONTRAST_TARGETS = "contrast_targets"  # the training network's input of each row's target (one-hot, uniform or 0)


def with_contrastive_loss(model, weight: float, temperature: float):
    """A training network for ``model`` (a classifier with one of :data:`HEAD_DROPOUTS` before
    its last dense layer): the same weights and output ``(batch, classes)``, whose inputs are
    ``model``'s as a dict (kformer's encoder: ``{"token_ids"}``) plus :data:`CONTRAST_TARGETS`
    ``(batch, classes)`` float32, and which in training adds ``weight x`` the supervised
    contrastive loss (:class:`~kformer.layers.SupervisedContrastive`) of the pooled text vector
    ``(batch, dim)``, the dropout's input (what the distance scores read at inference). ``model``
    itself is not changed: it is what is saved and exported."""
    import keras

    from kformer.layers import SupervisedContrastive

    names = {layer.name for layer in model.layers}
    dropout = next((name for name in HEAD_DROPOUTS if name in names), None)
    if dropout is None:
        raise ValueError(f"the classifier has no pooled text vector (no layer named {' or '.join(HEAD_DROPOUTS)})")
    inputs = dict(model.input) if isinstance(model.input, dict) else {"token_ids": model.input}
    targets = keras.Input((int(model.output.shape[-1]),), dtype="float32", name=CONTRAST_TARGETS)
    contrast = SupervisedContrastive(weight, temperature, name="supervised_contrastive")
    outputs = contrast([model.output, model.get_layer(dropout).input, targets])
    return keras.Model({**inputs, CONTRAST_TARGETS: targets}, outputs, name=f"{model.name}_contrastive")
