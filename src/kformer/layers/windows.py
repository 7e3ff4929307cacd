"""Local self-attention for long documents: cut ids into windows, encode each, average them back.

``SplitWindows`` turns ``(batch, seq)`` ids into ``(batch * windows, window)`` rows, so an encoder
block attends only within a window (cost ``seq * window`` instead of ``seq ** 2``);
``WindowedAverage`` folds the encoded windows back into one ``(batch, dim)`` vector per text,
averaging over real (non-padding) tokens only.
"""

from __future__ import annotations

import keras
from keras import ops


def _pad_to_windows(ids, window: int):
    length = ops.shape(ids)[1]
    if length is None:  # symbolic shape while the model is built: nothing to pad
        return ids
    return ops.pad(ids, [[0, 0], [0, (-length) % window]])


@keras.saving.register_keras_serializable(package="kformer")
class SplitWindows(keras.layers.Layer):
    """ids ``(batch, seq)`` -> ``(batch * ceil(seq / window), window)``, 0-padded at the end.

    Args:
        window: tokens per window.
    """

    def __init__(self, window: int, **kwargs):
        super().__init__(**kwargs)
        self.window = int(window)

    def call(self, ids):
        return ops.reshape(_pad_to_windows(ids, self.window), (-1, self.window))

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
