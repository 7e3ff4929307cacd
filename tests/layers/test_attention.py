"""The lesson's facts about scaled dot-product attention (``kformer.layers.attention``), asserted.

The module is a function, not a layer: there is no config to round-trip. Runs under every
Keras backend (``make test`` runs ``tests/layers`` under TensorFlow and JAX).
"""

import numpy as np
from keras import ops
from layer_helpers import numpy, random

from kformer.layers import attention_mask, padding_mask, scaled_dot_product_attention


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
