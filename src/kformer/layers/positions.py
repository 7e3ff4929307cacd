"""Token embeddings plus learned or sinusoidal position information, and position ids that let
a model meet sequences longer than any it trained on.

:class:`AbacusPositions` and :class:`RandomizedPositions` make the ids a
:class:`TokenAndPositionEmbedding` looks up (its ``position_ids`` argument): while training they
move each sequence to a random place in a longer table, so every row of the table is trained
although every training sequence is short; at inference they are a fixed function of the
position. What kformer adds to the papers: the two as Keras layers that draw one set of ids per
row for a source and its target together (an encoder-decoder needs both shifted alike), and
inference ids that are deterministic.
"""

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

    def call(self, ids, start_index=0, position_ids=None):
        """``ids (batch, seq)`` -> ``(batch, seq, dim)``; ``start_index`` offsets the positions
        (incremental decoding embeds one token at position ``start_index``); ``position_ids``
        ``(batch or 1, seq)`` int, when given, are the positions instead (below ``max_length``),
        e.g. from :class:`AbacusPositions`."""
        if position_ids is None:
            position_ids = ops.arange(ops.shape(ids)[-1]) + start_index
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


@keras.saving.register_keras_serializable(package="kformer")
class AbacusPositions(keras.layers.Layer):
    """Position ids that count places from the start, moved by a random offset while training
    (McLeish et al. 2024, "Transformers Can Do Arithmetic with the Right Embeddings").

    With one token per digit place (kformer's arithmetic columns, ones first) the index of a
    token is the place of its digits within the numbers, which is what Abacus embeddings count.
    Training on sequences of at most ``n`` tokens would train only the first ``n`` rows of a
    position table; the random offset ``k`` (uniform over ``0 .. max_positions - length`` for
    each row of the batch) trains every row, so a sequence up to ``max_positions`` long meets
    only trained rows at inference, where the offset is off.

    Args:
        max_positions: rows of the position table the ids index (ids stay below it).
        seed: seed of the offsets (None: from Keras' global seed).

    Call:
        ``layer(ids, length=None, start_index=0, training=None)`` -> int32 ids: training
        ``(batch, length)`` = ``arange(length) + k``; otherwise ``(1, length)`` =
        ``arange(length) + start_index``. ``ids`` ``(batch, seq)`` gives the batch size and,
        unless ``length`` is given, the length.
    """

    def __init__(self, max_positions, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.max_positions = int(max_positions)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, ids, length=None, start_index=0, training=None):
        length = ops.shape(ids)[1] if length is None else length
        steps = ops.expand_dims(ops.arange(length, dtype="int32"), 0)
        if not training:
            return steps + ops.cast(start_index, "int32")
        room = ops.cast(ops.maximum(self.max_positions - length + 1, 1), "float32")
        draw = keras.random.uniform((ops.shape(ids)[0], 1), seed=self.seed_generator)
        return steps + ops.cast(ops.floor(draw * room), "int32")

    def get_config(self):
        return {**super().get_config(), "max_positions": self.max_positions, "seed": self.seed}


@keras.saving.register_keras_serializable(package="kformer")
class RandomizedPositions(keras.layers.Layer):
    """Randomized positions (Ruoss et al. 2023, "Randomized Positional Encodings Boost Length
    Generalization of Transformers"): while training, each row's ids are a sorted random sample
    of distinct ids from ``0 .. max_positions - 1``, so the model learns from the order of its
    positions and not their distances; at inference the ids are spread evenly over the same range,
    ``floor(i * max_positions / max_length)`` for position ``i``.

    Args:
        max_positions: rows of the position table the ids index.
        max_length: the longest sequence at inference (at most ``max_positions``).
        seed: seed of the samples (None: from Keras' global seed).

    Call: as :class:`AbacusPositions` (training ``(batch, length)``, otherwise ``(1, length)``).
    """

    def __init__(self, max_positions, max_length, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 1 <= int(max_length) <= int(max_positions):
            raise ValueError(f"max_length must be between 1 and max_positions ({max_positions}), not {max_length}")
        self.max_positions = int(max_positions)
        self.max_length = int(max_length)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, ids, length=None, start_index=0, training=None):
        length = ops.shape(ids)[1] if length is None else length
        if not training:
            steps = ops.expand_dims(ops.arange(length, dtype="int32"), 0) + ops.cast(start_index, "int32")
            return (steps * self.max_positions) // self.max_length
        scores = keras.random.uniform((ops.shape(ids)[0], self.max_positions), seed=self.seed_generator)
        _, chosen = ops.top_k(scores, length)
        return ops.sort(ops.cast(chosen, "int32"), axis=-1)

    def get_config(self):
        return {**super().get_config(), "max_positions": self.max_positions, "max_length": self.max_length,
                "seed": self.seed}
