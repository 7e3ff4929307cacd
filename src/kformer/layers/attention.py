"""Scaled dot-product attention, written out by hand with ``keras.ops``.

This is the lesson's formula, kept readable and returning its weights so they can be tested
and drawn; the blocks themselves use Keras' ``MultiHeadAttention``, which can take the fused path.
"""

from __future__ import annotations

import keras
from keras import ops


def scaled_dot_product_attention(query, key, value, mask=None):
    """Attend ``query`` over ``key``/``value``: softmax(Q Kᵀ / √d) V.

    Args:
        query: ``(..., queries, depth)``.
        key: ``(..., keys, depth)``.
        value: ``(..., keys, value_depth)``.
        mask: optional bool, broadcastable to ``(..., queries, keys)``; True where a query may
            attend to a key. Masked keys get exactly zero weight; each row still sums to 1.

    Returns:
        ``(output, weights)``: output ``(..., queries, value_depth)``, weights ``(..., queries, keys)``.
    """
    depth = ops.shape(query)[-1]
    scores = ops.matmul(query, ops.swapaxes(key, -1, -2))
    scores = scores / ops.sqrt(ops.cast(depth, scores.dtype))
    if mask is not None:
        # A large finite negative (not -inf) so a fully masked row gives uniform weights, not NaN.
        scores = ops.where(ops.cast(mask, "bool"), scores, ops.cast(_mask_value(scores.dtype), scores.dtype))
    weights = ops.softmax(scores, axis=-1)
    return ops.matmul(weights, value), weights


def _mask_value(dtype) -> float:
    return -3e4 if keras.backend.standardize_dtype(dtype) in ("float16", "bfloat16") else -1e9
