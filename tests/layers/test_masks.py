"""Padding and causal masks (``kformer.layers.masks``): the lesson's facts, asserted.

The module holds functions, not layers: there is no config to round-trip.
"""

import numpy as np
from layer_helpers import numpy, random

from kformer.layers import (
    attention_mask,
    band_mask,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
)


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


def test_band_mask_keeps_a_fixed_neighbourhood_and_joins_causal():
    np.testing.assert_array_equal(numpy(band_mask(1, 6, offset=3, window=1)), [[0, 0, 1, 1, 1, 0]])
    merged = numpy(attention_mask(causal=True, window=1, query_length=4))[0]
    np.testing.assert_array_equal(merged, [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]])
