"""Token embeddings plus learned or sinusoidal position information."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops


def sinusoidal_table(max_length: int, dim: int) -> np.ndarray:
    """``(max_length, dim)`` float32: PE(pos, 2i) = sin(pos / 10000^(2i/dim)), PE(pos, 2i+1) = cos(…)."""
    positions = np.arange(max_length, dtype=np.float64)[:, None]
    even_dims = np.arange(0, dim, 2, dtype=np.float64)[None, :]
    angles = positions / np.power(10000.0, even_dims / dim)
    table = np.zeros((max_length, dim), dtype=np.float64)
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles[:, : dim // 2])
    return table.astype("float32")


@keras.saving.register_keras_serializable(package="kformer")
class TokenAndPositionEmbedding(keras.layers.Layer):
    """Token embedding plus position embedding: ``(batch, seq)`` ids -> ``(batch, seq, dim)``.

    Args:
        vocab_size: number of token ids.
        max_length: longest sequence (positions ``0 .. max_length-1``).
        dim: embedding width.
        positions: ``"learned"`` (a trained table) or ``"sinusoidal"`` (the fixed sine/cosine
            table, no weights).
        mask_zero: report id 0 as padding through ``compute_mask`` so the blocks downstream
            ignore it without being told.
    """

    def __init__(self, vocab_size, max_length, dim, positions="learned", mask_zero=True, **kwargs):
        super().__init__(**kwargs)
        if positions not in ("learned", "sinusoidal"):
            raise ValueError(f"positions must be 'learned' or 'sinusoidal', not {positions!r}")
        self.vocab_size = int(vocab_size)
        self.max_length = int(max_length)
        self.dim = int(dim)
        self.positions = positions
        self.mask_zero = bool(mask_zero)
        self.supports_masking = self.mask_zero
        self.token_embedding = keras.layers.Embedding(
            self.vocab_size, self.dim, dtype=self.dtype_policy, name="token_embedding"
        )
        if positions == "learned":
            self.position_embedding = keras.layers.Embedding(
                self.max_length, self.dim, dtype=self.dtype_policy, name="position_embedding"
            )
        else:
            self.position_embedding = None
            self._sinusoids = sinusoidal_table(self.max_length, self.dim)

    def build(self, input_shape):
        self.token_embedding.build(input_shape)
        if self.position_embedding is not None:
            self.position_embedding.build((None,))
        self.built = True

    def call(self, ids, start_index=0):
        """``ids (batch, seq)`` -> ``(batch, seq, dim)``; ``start_index`` offsets the positions
        (incremental decoding embeds one token at position ``start_index``)."""
        length = ops.shape(ids)[-1]
        position_ids = ops.arange(length) + start_index
        tokens = self.token_embedding(ids)
        if self.position_embedding is not None:
            position_vectors = self.position_embedding(position_ids)
        else:
            table = ops.convert_to_tensor(self._sinusoids, dtype=tokens.dtype)
            position_vectors = ops.take(table, position_ids, axis=0)
        return tokens + ops.cast(position_vectors, tokens.dtype)

    def compute_mask(self, ids, mask=None):
        if not self.mask_zero:
            return None
        return ops.not_equal(ids, 0)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocab_size": self.vocab_size,
                "max_length": self.max_length,
                "dim": self.dim,
                "positions": self.positions,
                "mask_zero": self.mask_zero,
            }
        )
        return config
