"""The encoder block (``kformer.layers.encoder``): the lesson's facts, asserted."""

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

from kformer.layers import (
    DecoderBlock,
    EncoderBlock,
    MaskedGlobalAveragePooling,
    TokenAndPositionEmbedding,
)


def test_encoder_block_parameters_and_shape():
    block = EncoderBlock(32, heads=2, ff_dim=64)
    x = random(2, 200, 32)
    assert tuple(block(x).shape) == (2, 200, 32)
    assert block.count_params() == 8_544
    assert block.self_attention.count_params() == 4_224
    assert block.ff_hidden.count_params() + block.ff_output.count_params() == 4_192
    assert block.attention_norm.count_params() + block.ff_norm.count_params() == 128


def test_self_attention_parameter_count_is_the_lesson_s():
    # The lesson's 4 heads x key_dim 4 at width 16. Its other case (8 heads x key_dim 16 at width
    # 64: 33,216) is not built here: kformer's blocks always use key_dim = dim / heads.
    block = EncoderBlock(16, heads=4, ff_dim=32)
    block.build((1, 5, 16))
    assert block.self_attention.count_params() == 1_088


@pytest.mark.parametrize("block_class", [EncoderBlock, DecoderBlock])
def test_width_must_divide_into_heads(block_class):
    with pytest.raises(ValueError, match="divisible"):
        block_class(16, heads=3, ff_dim=32)


def _pooled_encoder():
    ids = keras.Input(shape=(None,), dtype="int32")
    x = TokenAndPositionEmbedding(50, 10, 16)(ids)
    x = EncoderBlock(16, heads=2, ff_dim=32, dropout=0.0)(x)
    x = EncoderBlock(16, heads=2, ff_dim=32, dropout=0.0)(x)
    return keras.Model(ids, MaskedGlobalAveragePooling()(x))


def test_mask_flows_from_token_and_position_embedding_and_survives_save_load(tmp_path):
    with no_mask_destroying_warning():
        model = _pooled_encoder()
        padded = np.array([[5, 6, 7, 0, 0, 0], [9, 8, 0, 0, 0, 0]])
        pooled = numpy(model(padded))
    np.testing.assert_allclose(pooled[0], numpy(model(padded[:1, :3]))[0], atol=1e-5)
    np.testing.assert_allclose(pooled[1], numpy(model(padded[1:, :2]))[0], atol=1e-5)
    np.testing.assert_allclose(numpy(save_and_load(model, tmp_path)(padded)), pooled, atol=1e-6)


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


def test_self_attention_without_positions_is_permutation_equivariant():
    block = EncoderBlock(16, 2, 32, dropout=0.0)
    x = random(1, 6, 16)
    permutation = np.array([3, 0, 5, 1, 4, 2])
    np.testing.assert_allclose(numpy(block(x[:, permutation])), numpy(block(x))[:, permutation], atol=1e-5)


def test_pre_norm_differs_from_post_norm():
    keras.utils.set_random_seed(3)
    x = random(1, 4, 16)
    post, pre = EncoderBlock(16, 2, 32, dropout=0.0), EncoderBlock(16, 2, 32, dropout=0.0, norm_first=True)
    post(x)
    pre(x)
    pre.set_weights(post.get_weights())
    assert np.abs(numpy(pre(x)) - numpy(post(x))).max() > 1e-3


def test_config_round_trip():
    block = EncoderBlock(16, 2, 32, dropout=0.2, norm_first=True, attention_dropout=0.1, attention_window=2, name="encoder")
    mask = np.array([[True, True, True, False, False, False]])
    assert_config_round_trip(block, random(1, 6, 16), mask=mask, return_attention_scores=True)


def test_dtype_policy_survives_the_config_and_reaches_the_sublayers():
    block = EncoderBlock(16, 2, 32, dtype="mixed_bfloat16")
    clone = EncoderBlock.from_config(block.get_config())
    assert clone.dtype_policy.name == "mixed_bfloat16"
    sublayers = [clone.self_attention, clone.attention_norm, clone.ff_hidden, clone.ff_output, clone.ff_norm]
    assert {layer.dtype_policy.name for layer in sublayers} == {"mixed_bfloat16"}
