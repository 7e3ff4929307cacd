"""Token and position embeddings (``kformer.layers.positions``): the lesson's facts, asserted."""

import keras
import numpy as np
import pytest
from layer_helpers import assert_config_round_trip, numpy

from kformer.layers import EncoderBlock, TokenAndPositionEmbedding, sinusoidal_table


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
