"""Padding and causal masks, and merging them into the ``(batch, queries, keys)`` form.

Convention everywhere in kformer: a mask is boolean and True means "real token / may attend".
"""

from __future__ import annotations

from keras import ops


def padding_mask(ids, pad_id: int = 0):
    """``(batch, seq)`` bool: True at real tokens, False at ``pad_id``."""
    return ops.not_equal(ids, pad_id)


def causal_mask(length, key_length=None, offset=0):
    """``(length, key_length)`` bool, lower triangular: query i may see keys ``j <= i + offset``.

    ``causal_mask(4)[0]`` is ``[True, False, False, False]``. ``offset`` is the position of the
    first query, which incremental decoding needs (one query at position ``offset``).
    """
    key_length = length if key_length is None else key_length
    query_positions = ops.expand_dims(ops.arange(length) + offset, 1)
    key_positions = ops.expand_dims(ops.arange(key_length), 0)
    return ops.greater_equal(query_positions, key_positions)


def band_mask(length, key_length=None, offset=0, window=1):
    """``(length, key_length)`` bool: query i may see keys ``j`` with ``|j - (i + offset)| <= window``
    (local attention: a fixed neighbourhood whatever the sequence's length)."""
    key_length = length if key_length is None else key_length
    query_positions = ops.expand_dims(ops.arange(length) + offset, 1)
    key_positions = ops.expand_dims(ops.arange(key_length), 0)
    return ops.less_equal(ops.abs(key_positions - query_positions), window)


def attention_mask(query_mask=None, key_mask=None, causal=False, query_length=None, key_length=None, offset=0,
                   window=0):
    """Merge masks into the ``(batch, queries, keys)`` bool form attention layers take.

    Args:
        query_mask: ``(batch, queries)`` bool, or None. Padded queries may attend nowhere; their
            rows come out uniform and are ignored downstream by the mask they carry.
        key_mask: ``(batch, keys)`` bool, or None. Padded keys get zero weight.
        causal: also forbid attending to later positions.
        query_length, key_length: needed for a causal mask when no padding mask gives them.
        offset: position of the first query (incremental decoding).
        window: when above 0, also forbid keys more than ``window`` positions from the query's
            own position (:func:`band_mask`; in cross-attention, from the same index of the source).

    Returns:
        bool ``(batch, queries, keys)`` (batch may be 1 for a causal-only mask), or None when
        there is nothing to mask.
    """
    merged = None
    if key_mask is not None:
        merged = ops.expand_dims(ops.cast(key_mask, "bool"), 1)
    if query_mask is not None:
        rows = ops.expand_dims(ops.cast(query_mask, "bool"), 2)
        merged = rows if merged is None else ops.logical_and(merged, rows)
    if causal or window:
        if query_length is None:
            query_length = ops.shape(query_mask)[1] if query_mask is not None else key_length
        if key_length is None:
            key_length = ops.shape(key_mask)[1] if key_mask is not None else query_length
    for wanted, make in ((causal, causal_mask), (window, lambda *a: band_mask(*a, window=window))):
        if wanted:
            shape = ops.expand_dims(make(query_length, key_length, offset), 0)
            merged = shape if merged is None else ops.logical_and(merged, shape)
    return merged


def drop_keras_mask(tensor):
    """A copy of ``tensor`` without the Keras mask it may carry.

    Blocks pass merged masks to attention explicitly; handing the attention layer a tensor that
    still carries a mask makes it build a second, full ``(batch, queries, keys)`` mask and makes
    its inner projections warn that they "destroy the mask".
    """
    return ops.copy(tensor)
