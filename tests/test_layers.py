"""The reference lesson's facts about attention and Transformer blocks, asserted.

Runs under every Keras backend (CI runs it with KERAS_BACKEND=tensorflow and =jax).
"""

import warnings

import keras
import numpy as np
import pytest
from keras import ops

import kformer  # noqa: F401  (sets the default backend before Keras loads)
from kformer.layers import (
    DecoderBlock,
    EncoderBlock,
    MaskedGlobalAveragePooling,
    TokenAndPositionEmbedding,
    attention_mask,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
    sinusoidal_table,
)

rng = np.random.default_rng(0)


def random(*shape):
    return rng.normal(size=shape).astype("float32")


def numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


# --- scaled dot-product attention -------------------------------------------------------------


def test_by_hand_attention_matches_fused_and_rows_sum_to_one():
    q, k, v = random(1, 3, 8), random(1, 5, 8), random(1, 5, 8)
    output, weights = scaled_dot_product_attention(q, k, v)
    assert tuple(weights.shape) == (1, 3, 5)
    np.testing.assert_allclose(numpy(ops.sum(weights, axis=-1)), np.ones((1, 3)), atol=1e-6)
    # keras.ops.dot_product_attention takes (batch, seq, heads, depth): one head here.
    fused = ops.dot_product_attention(q[:, :, None], k[:, :, None], v[:, :, None])
    np.testing.assert_allclose(numpy(output), numpy(fused)[:, :, 0], atol=1e-6)


def test_by_hand_attention_is_the_formula():
    q, k, v = random(2, 4, 6), random(2, 4, 6), random(2, 4, 3)
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(6)
    expected_weights = np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)
    output, weights = scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(numpy(weights), expected_weights, atol=1e-6)
    np.testing.assert_allclose(numpy(output), expected_weights @ v, atol=1e-5)


def test_padded_keys_get_exactly_zero_weight():
    ids = np.array([[4, 7, 9, 0, 0], [3, 0, 0, 0, 0]])
    q, k, v = random(2, 5, 8), random(2, 5, 8), random(2, 5, 8)
    _, weights = scaled_dot_product_attention(q, k, v, mask=attention_mask(key_mask=padding_mask(ids)))
    weights = numpy(weights)
    assert np.all(weights[0, :, 3:] == 0.0)
    assert np.all(weights[1, :, 1:] == 0.0)
    np.testing.assert_allclose(weights.sum(-1), np.ones((2, 5)), atol=1e-6)
    np.testing.assert_allclose(weights[1, :, 0], np.ones(5), atol=1e-6)


def test_causal_mask_is_lower_triangular():
    mask = numpy(causal_mask(4))
    np.testing.assert_array_equal(mask, np.tril(np.ones((4, 4), dtype=bool)))
    _, weights = scaled_dot_product_attention(random(1, 4, 8), random(1, 4, 8), random(1, 4, 8), mask=mask[None])
    weights = numpy(weights)[0]
    np.testing.assert_allclose(weights[0], [1.0, 0.0, 0.0, 0.0], atol=1e-7)
    assert np.all(np.triu(weights, k=1) == 0.0)
    np.testing.assert_allclose(weights.sum(-1), np.ones(4), atol=1e-6)


def test_causal_mask_with_offset_for_incremental_decoding():
    np.testing.assert_array_equal(numpy(causal_mask(1, 5, offset=2)), [[True, True, True, False, False]])


def test_attention_mask_merges_padding_and_causal():
    ids = np.array([[5, 6, 0]])
    merged = numpy(attention_mask(key_mask=padding_mask(ids), causal=True, query_length=3))
    np.testing.assert_array_equal(merged[0], [[1, 0, 0], [1, 1, 0], [1, 1, 0]])
    assert attention_mask() is None


# --- parameter counts -------------------------------------------------------------------------


@pytest.mark.parametrize("heads,key_dim,width,expected", [(4, 4, 16, 1_088), (8, 16, 64, 33_216)])
def test_multi_head_attention_parameter_counts(heads, key_dim, width, expected):
    layer = keras.layers.MultiHeadAttention(num_heads=heads, key_dim=key_dim)
    x = random(1, 5, width)
    layer(x, x)
    assert layer.count_params() == expected


def test_encoder_block_parameters_and_shape():
    block = EncoderBlock(32, heads=2, ff_dim=64)
    x = random(2, 200, 32)
    assert tuple(block(x).shape) == (2, 200, 32)
    assert block.count_params() == 8_544
    assert block.self_attention.count_params() == 4_224
    assert block.ff_hidden.count_params() + block.ff_output.count_params() == 4_192
    assert block.attention_norm.count_params() + block.ff_norm.count_params() == 128


@pytest.mark.parametrize("dim,heads,ff_dim", [(16, 2, 32), (64, 8, 256)])
def test_decoder_block_parameters_follow_the_formula(dim, heads, ff_dim):
    block = DecoderBlock(dim, heads, ff_dim)
    block(random(2, 3, dim), random(2, 7, dim))
    attention = 4 * (dim * dim + dim)  # query, key, value, output projections with biases
    feed_forward = (dim * ff_dim + ff_dim) + (ff_dim * dim + dim)
    norms = 3 * 2 * dim
    assert block.count_params() == 2 * attention + feed_forward + norms


# --- masks flowing through blocks -------------------------------------------------------------


def _pooled_encoder(embedding):
    ids = keras.Input(shape=(None,), dtype="int32")
    x = embedding(ids)
    x = EncoderBlock(16, heads=2, ff_dim=32, dropout=0.0)(x)
    x = EncoderBlock(16, heads=2, ff_dim=32, dropout=0.0)(x)
    return keras.Model(ids, MaskedGlobalAveragePooling()(x))


def test_mask_flows_from_embedding_to_pooling_without_being_told():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = _pooled_encoder(keras.layers.Embedding(50, 16, mask_zero=True))
        padded = np.array([[5, 6, 7, 0, 0, 0]])
        unpadded = np.array([[5, 6, 7]])
        np.testing.assert_allclose(numpy(model(padded)), numpy(model(unpadded)), atol=1e-5)
    assert not [w for w in caught if "destroy" in str(w.message)]


def test_mask_flows_from_token_and_position_embedding():
    model = _pooled_encoder(TokenAndPositionEmbedding(50, 10, 16))
    padded = np.array([[5, 6, 7, 0, 0, 0], [9, 8, 0, 0, 0, 0]])
    np.testing.assert_allclose(numpy(model(padded))[0], numpy(model(padded[:1, :3]))[0], atol=1e-5)
    np.testing.assert_allclose(numpy(model(padded))[1], numpy(model(padded[1:, :2]))[0], atol=1e-5)


def test_encoder_scores_give_padded_keys_zero_weight():
    embedding = TokenAndPositionEmbedding(50, 10, 16)
    ids = np.array([[5, 6, 7, 0, 0]])
    x = embedding(ids)
    _, scores = EncoderBlock(16, 2, 32)(x, mask=embedding.compute_mask(ids), return_attention_scores=True)
    scores = numpy(scores)
    assert scores.shape == (1, 2, 5, 5)
    assert np.all(scores[..., 3:] == 0.0)
    # Real queries spread all their weight over real keys; padded queries attend nowhere.
    np.testing.assert_allclose(scores[:, :, :3].sum(-1), np.ones((1, 2, 3)), atol=1e-6)


def test_token_and_position_embedding_masks_id_zero():
    mask = TokenAndPositionEmbedding(10, 4, 8).compute_mask(np.array([[3, 0, 2, 0]]))
    np.testing.assert_array_equal(numpy(mask), [[True, False, True, False]])


# --- positions --------------------------------------------------------------------------------


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


def test_self_attention_without_positions_is_permutation_equivariant():
    block = EncoderBlock(16, 2, 32, dropout=0.0)
    x = random(1, 6, 16)
    permutation = np.array([3, 0, 5, 1, 4, 2])
    np.testing.assert_allclose(numpy(block(x[:, permutation])), numpy(block(x))[:, permutation], atol=1e-5)


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


# --- decoder ----------------------------------------------------------------------------------


def test_cross_attention_shapes():
    block = DecoderBlock(16, heads=2, ff_dim=32)
    outputs, self_scores, cross_scores = block(random(2, 3, 16), random(2, 7, 16), return_attention_scores=True)
    assert tuple(outputs.shape) == (2, 3, 16)
    assert tuple(cross_scores.shape) == (2, 2, 3, 7)
    assert tuple(self_scores.shape) == (2, 2, 3, 3)
    assert np.all(np.triu(numpy(self_scores), k=1) == 0.0)


def test_keras_cross_attention_gives_per_head_scores():
    layer = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)
    output, scores = layer(random(2, 3, 16), random(2, 7, 16), return_attention_scores=True)
    assert tuple(output.shape) == (2, 3, 16)
    assert tuple(scores.shape) == (2, 2, 3, 7)


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
    decoder_mask = np.array([[True, True, False, False]])
    _, self_scores, _ = block(target, random(1, 5, 16), mask=decoder_mask, return_attention_scores=True)
    assert np.all(numpy(self_scores)[..., 2:] == 0.0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_incremental_decoding_with_cache_equals_full_pass(norm_first):
    block = DecoderBlock(16, 2, 32, dropout=0.0, norm_first=norm_first)
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


def test_pre_norm_differs_from_post_norm():
    keras.utils.set_random_seed(3)
    x = random(1, 4, 16)
    post, pre = EncoderBlock(16, 2, 32, dropout=0.0), EncoderBlock(16, 2, 32, dropout=0.0, norm_first=True)
    post(x)
    pre(x)
    pre.set_weights(post.get_weights())
    assert np.abs(numpy(pre(x)) - numpy(post(x))).max() > 1e-3


# --- serialization ----------------------------------------------------------------------------


@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
def test_blocks_save_and_load_safely_with_identical_outputs(tmp_path, positions):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, ids = _encoder_decoder_model(positions)
        expected = numpy(model(ids))
    assert not [w for w in caught if "destroy" in str(w.message)]
    path = tmp_path / "blocks.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(numpy(loaded(ids)), expected, atol=1e-6)
    assert loaded.count_params() == model.count_params()


def _encoder_decoder_model(positions):
    source = keras.Input(shape=(None,), dtype="int32")
    target = keras.Input(shape=(None,), dtype="int32")
    encoded = EncoderBlock(16, 2, 32, norm_first=True)(TokenAndPositionEmbedding(30, 8, 16, positions=positions)(source))
    decoded = DecoderBlock(16, 2, 32)(TokenAndPositionEmbedding(30, 8, 16, positions=positions)(target), encoded)
    model = keras.Model([source, target], keras.layers.Dense(30)(decoded))
    ids = [np.array([[3, 4, 5, 0]]), np.array([[2, 7, 8]])]
    return model, ids


def test_cross_attention_cache_from_masked_encoder_output_does_not_warn():
    embedding = TokenAndPositionEmbedding(30, 8, 16)
    encoder_outputs = EncoderBlock(16, 2, 32)(embedding(np.array([[4, 5, 0]])))
    block = DecoderBlock(16, 2, 32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = block.cross_attention_cache(encoder_outputs)
    assert tuple(cache.shape) == (1, 2, 3, 2, 8)
    assert not [w for w in caught if "destroy" in str(w.message)]
