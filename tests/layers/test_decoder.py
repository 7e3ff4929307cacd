"""The decoder block (``kformer.layers.decoder``): the lesson's facts, asserted."""

import keras
import numpy as np
import pytest
from layer_helpers import (
    assert_config_round_trip,
    no_mask_destroying_warning,
    numpy,
    random,
    save_and_load,
)

from kformer.layers import DecoderBlock, EncoderBlock, TokenAndPositionEmbedding


@pytest.mark.parametrize("dim,heads,ff_dim", [(16, 2, 32), (64, 8, 256)])
def test_decoder_block_parameters_follow_the_formula(dim, heads, ff_dim):
    block = DecoderBlock(dim, heads, ff_dim)
    block(random(2, 3, dim), random(2, 7, dim))
    attention = 4 * (dim * dim + dim)  # query, key, value, output projections with biases
    feed_forward = (dim * ff_dim + ff_dim) + (ff_dim * dim + dim)
    norms = 3 * 2 * dim
    assert block.count_params() == 2 * attention + feed_forward + norms


def test_cross_attention_shapes():
    block = DecoderBlock(16, heads=2, ff_dim=32)
    outputs, self_scores, cross_scores = block(random(2, 3, 16), random(2, 7, 16), return_attention_scores=True)
    assert tuple(outputs.shape) == (2, 3, 16)
    assert tuple(cross_scores.shape) == (2, 2, 3, 7)
    assert tuple(self_scores.shape) == (2, 2, 3, 3)
    assert np.all(np.triu(numpy(self_scores), k=1) == 0.0)


def test_without_encoder_outputs_or_cross_attention_cache_is_a_value_error():
    block = DecoderBlock(16, heads=2, ff_dim=32)
    with pytest.raises(ValueError, match="encoder_outputs"):
        block(random(2, 3, 16))


def test_decoder_position_ignores_later_target_tokens():
    block = DecoderBlock(16, 2, 32, dropout=0.0)
    encoder_outputs = random(1, 7, 16)
    target = random(1, 5, 16)
    changed = target.copy()
    changed[:, 3:] = random(1, 2, 16)
    before, after = numpy(block(target, encoder_outputs)), numpy(block(changed, encoder_outputs))
    np.testing.assert_allclose(before[:, :3], after[:, :3], atol=1e-6)
    assert np.abs(before[:, 3:] - after[:, 3:]).max() > 1e-3


def test_decoder_respects_encoder_padding():
    block = DecoderBlock(16, 2, 32, dropout=0.0)
    encoder_outputs = random(1, 6, 16)
    encoder_mask = np.array([[True, True, True, True, False, False]])
    changed = encoder_outputs.copy()
    changed[:, 4:] = random(1, 2, 16)
    target = random(1, 3, 16)
    _, _, cross = block(target, encoder_outputs, encoder_mask=encoder_mask, return_attention_scores=True)
    assert np.all(numpy(cross)[..., 4:] == 0.0)
    np.testing.assert_allclose(
        numpy(block(target, encoder_outputs, encoder_mask=encoder_mask)),
        numpy(block(target, changed, encoder_mask=encoder_mask)),
        atol=1e-6,
    )


def test_decoder_target_padding_masks_keys():
    block = DecoderBlock(16, 2, 32, dropout=0.0)
    target = random(1, 4, 16)
    target_mask = np.array([[True, True, False, False]])
    _, self_scores, _ = block(target, random(1, 5, 16), mask=target_mask, return_attention_scores=True)
    assert np.all(numpy(self_scores)[..., 2:] == 0.0)


@pytest.mark.parametrize(("norm_first", "window"), [(False, 0), (True, 0), (True, 1)])
def test_incremental_decoding_with_cache_equals_full_pass(norm_first, window):
    block = DecoderBlock(16, 2, 32, dropout=0.0, norm_first=norm_first, attention_window=window)
    encoder_outputs, target = random(2, 7, 16), random(2, 5, 16)
    encoder_mask = np.array([[True] * 7, [True] * 4 + [False] * 3])
    full = numpy(block(target, encoder_outputs, encoder_mask=encoder_mask))
    cache = block.empty_self_attention_cache(2, 5)
    cross_cache = block.cross_attention_cache(encoder_outputs)
    steps = []
    for index in range(5):
        step, cache = block(
            target[:, index : index + 1],
            encoder_mask=encoder_mask,
            self_attention_cache=cache,
            cache_update_index=index,
            cross_attention_cache=cross_cache,
        )
        steps.append(numpy(step))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)


def test_cross_attention_cache_from_masked_encoder_output_does_not_warn():
    embedding = TokenAndPositionEmbedding(30, 8, 16)
    encoder_outputs = EncoderBlock(16, 2, 32)(embedding(np.array([[4, 5, 0]])))
    block = DecoderBlock(16, 2, 32)
    with no_mask_destroying_warning():
        cache = block.cross_attention_cache(encoder_outputs)
    assert tuple(cache.shape) == (1, 2, 3, 2, 8)


def test_windowed_decoder_sees_only_its_neighbourhood():
    """With ``window=1`` answer position i reads the source around index i and its own and the
    previous target position, however long the sequences: what lies farther changes nothing."""
    block = DecoderBlock(16, 2, 32, dropout=0.0, attention_window=1)
    encoder_outputs, target = random(1, 9, 16), random(1, 6, 16)
    far_source, far_target = encoder_outputs.copy(), target.copy()
    far_source[:, 5:] += 3.0  # source indices 5.. are more than 1 from positions 0..3
    far_target[:, :1] -= 3.0  # target position 0 is more than 1 before positions 2..
    before = numpy(block(target, encoder_outputs))
    np.testing.assert_allclose(numpy(block(target, far_source))[:, :4], before[:, :4], atol=1e-6)
    np.testing.assert_allclose(numpy(block(far_target, encoder_outputs))[:, 2:], before[:, 2:], atol=1e-6)
    assert np.abs(numpy(block(target, far_source))[:, 4:] - before[:, 4:]).max() > 1e-3


def test_config_round_trip():
    block = DecoderBlock(16, 2, 32, dropout=0.2, norm_first=True, attention_dropout=0.1, attention_window=2, name="decoder")
    target_mask = np.array([[True, True, True], [True, True, False]])
    encoder_mask = np.array([[True] * 7, [True, True, False, False, False, False, False]])
    assert_config_round_trip(
        block, random(2, 3, 16), random(2, 7, 16), mask=target_mask, encoder_mask=encoder_mask, return_attention_scores=True
    )


def test_blocks_save_and_load_safely_with_identical_outputs(tmp_path):
    source = keras.Input(shape=(None,), dtype="int32")
    target = keras.Input(shape=(None,), dtype="int32")
    with no_mask_destroying_warning():
        # learned positions on one side, sinusoidal on the other: one save covers both
        source_embedding = TokenAndPositionEmbedding(30, 8, 16, positions="learned")
        target_embedding = TokenAndPositionEmbedding(30, 8, 16, positions="sinusoidal")
        encoded = EncoderBlock(16, 2, 32, norm_first=True)(source_embedding(source))
        decoded = DecoderBlock(16, 2, 32)(target_embedding(target), encoded)
        model = keras.Model([source, target], keras.layers.Dense(30)(decoded))
        ids = [np.array([[3, 4, 5, 0]]), np.array([[2, 7, 8]])]
        expected = numpy(model(ids))
    loaded = save_and_load(model, tmp_path)
    np.testing.assert_allclose(numpy(loaded(ids)), expected, atol=1e-6)
    assert loaded.count_params() == model.count_params()
