"""Token and position embeddings (``kformer.layers.positions``): the lesson's facts, asserted."""

import keras
import numpy as np
import pytest
from keras import ops
from layer_helpers import assert_config_round_trip, gradient, numpy

from kformer.layers import (
    AbacusPositions,
    EncoderBlock,
    RandomizedPositions,
    TokenAndPositionEmbedding,
    sinusoidal_table,
)


def test_sinusoidal_table_is_the_formula():
    table = sinusoidal_table(50, 16)
    for pos, i in [(0, 0), (3, 2), (49, 7)]:
        angle = pos / 10000 ** (2 * i / 16)
        assert table[pos, 2 * i] == pytest.approx(np.sin(angle), abs=1e-6)
        assert table[pos, 2 * i + 1] == pytest.approx(np.cos(angle), abs=1e-6)
    embedding = TokenAndPositionEmbedding(10, 50, 16, positions="sinusoidal")
    ids = np.array([[1, 1, 1]])
    embedding(ids)
    token_vector = numpy(embedding.token_embedding.embeddings)[1]
    np.testing.assert_allclose(numpy(embedding(ids))[0], token_vector + table[:3], atol=1e-6)
    assert embedding.count_params() == 10 * 16  # the table is fixed, not trained


def test_start_index_offsets_positions():
    embedding = TokenAndPositionEmbedding(10, 8, 4)
    ids = np.array([[3, 4, 5]])
    np.testing.assert_allclose(numpy(embedding(ids))[:, 2:], numpy(embedding(ids[:, 2:], start_index=2)), atol=1e-6)


def test_token_and_position_embedding_masks_id_zero():
    mask = TokenAndPositionEmbedding(10, 4, 8).compute_mask(np.array([[3, 0, 2, 0]]))
    np.testing.assert_array_equal(numpy(mask), [[True, False, True, False]])
    assert TokenAndPositionEmbedding(10, 4, 8, mask_zero=False).compute_mask(np.array([[3, 0]])) is None


@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
def test_positions_break_permutation_equivariance(positions):
    keras.utils.set_random_seed(1)
    embedding = TokenAndPositionEmbedding(20, 6, 16, positions=positions)
    block = EncoderBlock(16, 2, 32, dropout=0.0)
    ids = np.array([[4, 9, 2, 7, 11, 5]])
    permutation = np.array([3, 0, 5, 1, 4, 2])
    shuffled_then_encoded = numpy(block(embedding(ids[:, permutation])))
    encoded_then_shuffled = numpy(block(embedding(ids)))[:, permutation]
    assert np.abs(shuffled_then_encoded - encoded_then_shuffled).max() > 1e-2


@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
def test_config_round_trip(positions):
    embedding = TokenAndPositionEmbedding(20, 6, 8, positions=positions, mask_zero=False, name="embedding")
    ids = np.array([[4, 9, 0], [2, 0, 0]])
    clone = assert_config_round_trip(embedding, ids, start_index=1)
    assert clone.compute_mask(ids) is None


def test_unknown_positions_is_a_value_error():
    with pytest.raises(ValueError, match="positions"):
        TokenAndPositionEmbedding(20, 6, 8, positions="rotary")


def test_abacus_and_randomized_ids_are_random_only_while_training():
    ids = np.ones((64, 5), dtype="int32")
    abacus = AbacusPositions(12, seed=1)
    np.testing.assert_array_equal(numpy(abacus(ids)), [[0, 1, 2, 3, 4]])
    np.testing.assert_array_equal(numpy(abacus(ids[:, :1], start_index=3)), [[3]])
    drawn = numpy(abacus(ids, training=True))
    assert drawn.shape == (64, 5) and (np.diff(drawn, axis=1) == 1).all()  # counted from a random start
    assert drawn.min() == 0 and drawn.max() == 11 and len(set(drawn[:, 0])) > 4
    randomized = RandomizedPositions(20, 10, seed=1)
    np.testing.assert_array_equal(numpy(randomized(ids)), [[0, 2, 4, 6, 8]])  # evenly spread at inference
    drawn = numpy(randomized(ids, training=True))
    assert (np.diff(drawn, axis=1) > 0).all() and drawn.max() < 20 and len({tuple(r) for r in drawn}) > 32


@pytest.mark.parametrize("layer", [AbacusPositions(12, seed=3, name="abacus"),
                                   RandomizedPositions(20, 10, seed=3, name="randomized")])
def test_position_id_layers_config_round_trip(layer):
    ids = np.array([[4, 9, 0], [2, 0, 0]])
    clone = assert_config_round_trip(layer, ids, start_index=1)
    assert clone.max_positions == layer.max_positions


def test_abacus_training_reaches_table_rows_that_absolute_positions_never_train():
    """The length-extrapolation property: trained only on 4-token sequences, absolute positions
    leave rows 4.. of a 12-row table untouched (what a longer input would meet is untrained), while
    abacus ids train every row."""
    embedding = TokenAndPositionEmbedding(10, 12, 8)
    ids = np.random.default_rng(0).integers(1, 10, size=(256, 4))
    embedding(ids)
    abacus = AbacusPositions(12, seed=0)

    def rows_trained(position_ids):
        table_gradient = gradient(embedding, embedding.position_embedding.embeddings,
                                  lambda outputs: ops.sum(ops.square(outputs)),
                                  ids, position_ids=position_ids)
        return np.abs(table_gradient).sum(axis=1) > 0

    assert rows_trained(None).tolist() == [True] * 4 + [False] * 8
    assert rows_trained(abacus(ids, training=True)).all()
