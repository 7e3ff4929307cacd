"""The decoder block: causal self-attention, cross-attention over the encoder, feed-forward.

It supports incremental decoding: a key/value cache for self-attention (one new position per
step) and the encoder's keys/values for cross-attention computed once per generation.
"""

from __future__ import annotations

import keras
from keras import ops
from keras_hub.layers import CachedMultiHeadAttention

from kformer.layers.masks import attention_mask, drop_keras_mask
from kformer.layers.residual import ResidualBlock


@keras.saving.register_keras_serializable(package="kformer")
class DecoderBlock(ResidualBlock):
    """One Transformer decoder block: ``(batch, T, dim)`` + encoder ``(batch, S, dim)`` -> ``(batch, T, dim)``.

    Args: as :class:`EncoderBlock` (``dim``, ``heads``, ``ff_dim``, ``dropout``, ``norm_first``,
    ``attention_window``: with it, self-attention sees that many positions before its own and
    cross-attention the source positions at most that far from its own index).

    Call:
        ``block(x, encoder_outputs, mask=None, encoder_mask=None,
        self_attention_cache=None, cache_update_index=None, cross_attention_cache=None,
        return_attention_scores=False, training=None)``

        - ``encoder_outputs`` ``(batch, S, dim)``, or None when ``cross_attention_cache`` is given;
          one of the two is required (a ``ValueError`` otherwise).
        - ``mask`` ``(batch, T)``: target padding (keys); self-attention is always causal.
          Keras fills it in when ``x`` comes from a masking embedding.
        - ``encoder_mask`` ``(batch, S)``: source padding; padded encoder positions get zero weight.
        - ``self_attention_cache`` ``(batch, 2, max_T, heads, dim // heads)`` with
          ``cache_update_index`` (position of ``x``'s first token): keys/values of ``x`` are written
          into the cache there and the queries see every cached position up to their own.
        - ``cross_attention_cache`` ``(batch, 2, S, heads, dim // heads)`` from
          :meth:`cross_attention_cache`: the encoder's keys/values, reused every step
          (``encoder_outputs`` may then be None).

    Returns:
        ``y``; with ``return_attention_scores`` also ``self_scores (batch, heads, T, T*)`` and
        ``cross_scores (batch, heads, T, S)``; with a self-attention cache the updated cache comes
        second: ``(y, cache)`` or ``(y, cache, self_scores, cross_scores)``.
    """

    def __init__(self, dim, heads, ff_dim, dropout=0.1, norm_first=False, attention_dropout=0.0, attention_window=0,
                 **kwargs):
        super().__init__(dim, heads, ff_dim, dropout=dropout, norm_first=norm_first,
                         attention_dropout=attention_dropout, attention_window=attention_window, **kwargs)
        self.self_attention = self._attention("self_attention")
        self.self_attention_norm = self._norm("self_attention_norm")
        self.cross_attention = self._attention("cross_attention")
        self.cross_attention_norm = self._norm("cross_attention_norm")

    def _attention(self, name):
        return CachedMultiHeadAttention(
            num_heads=self.heads, key_dim=self.key_dim, dropout=self.attention_dropout, dtype=self.dtype_policy, name=name
        )

    def build(self, x_shape, encoder_outputs_shape=None):
        encoder_outputs_shape = x_shape if encoder_outputs_shape is None else encoder_outputs_shape
        self.self_attention.build(x_shape, x_shape)
        self.self_attention_norm.build(x_shape)
        self.cross_attention.build(x_shape, encoder_outputs_shape)
        self.cross_attention_norm.build(x_shape)
        self._build_feed_forward(x_shape)
        self.built = True

    def cross_attention_cache(self, encoder_outputs):
        """``(batch, S, dim)`` -> ``(batch, 2, S, heads, dim // heads)``: encoder keys and values."""
        encoder_outputs = drop_keras_mask(encoder_outputs)
        if not self.built:
            self.build(ops.shape(encoder_outputs), ops.shape(encoder_outputs))
        keys = self.cross_attention.key_dense(encoder_outputs)
        values = self.cross_attention.value_dense(encoder_outputs)
        return ops.stack((keys, values), axis=1)

    def empty_self_attention_cache(self, batch_size, max_length):
        """Zeros ``(batch, 2, max_length, heads, dim // heads)`` to start incremental decoding."""
        return ops.zeros((batch_size, 2, max_length, self.heads, self.key_dim), dtype=self.compute_dtype)

    def call(self, x, encoder_outputs=None, mask=None, encoder_mask=None, self_attention_cache=None,
             cache_update_index=None, cross_attention_cache=None, return_attention_scores=False, training=None):
        if encoder_outputs is None and cross_attention_cache is None:
            raise ValueError("DecoderBlock needs encoder_outputs (batch, S, dim) or a cross_attention_cache; "
                             "for a decoder-only stack use EncoderBlock with a causal attention mask")
        query_length = ops.shape(x)[1]
        if self_attention_cache is None:
            self_mask = attention_mask(key_mask=mask, causal=True, query_length=query_length, window=self.attention_window)
        else:
            self_mask = attention_mask(causal=True, query_length=query_length, window=self.attention_window,
                                       key_length=ops.shape(self_attention_cache)[2], offset=cache_update_index)
        memory = encoder_outputs if encoder_outputs is not None else cross_attention_cache[:, 0]
        cross_mask = attention_mask(key_mask=encoder_mask, window=self.attention_window, query_length=query_length,
                                    key_length=ops.shape(memory)[1],
                                    offset=0 if cache_update_index is None else cache_update_index)
        new_cache = None

        def attend_self(h):
            nonlocal new_cache
            h = drop_keras_mask(h)
            result = self.self_attention(h, h, attention_mask=self_mask, cache=self_attention_cache,
                                         cache_update_index=cache_update_index,
                                         return_attention_scores=return_attention_scores, training=training)
            if self_attention_cache is None:
                return result if return_attention_scores else (result, None)
            if return_attention_scores:
                output, scores, new_cache = result
                return output, scores
            output, new_cache = result
            return output, None

        def attend_encoder(h):
            h = drop_keras_mask(h)
            memory = h if encoder_outputs is None else drop_keras_mask(encoder_outputs)  # cached keys/values
            result = self.cross_attention(h, memory, attention_mask=cross_mask, cache=cross_attention_cache,
                                          return_attention_scores=return_attention_scores, training=training)
            if cross_attention_cache is not None:  # the cache comes back unchanged
                result = result[:-1] if return_attention_scores else result[0]
            output, scores = result if return_attention_scores else (result, None)
            if self.attention_window:  # a position with no source in its window reads nothing, not
                # a uniform average over every key (which would depend on how far the source is padded)
                sees_some = ops.any(cross_mask, axis=-1, keepdims=True)
                output = output * ops.cast(sees_some, output.dtype)
            return output, scores

        x, self_scores = self._residual(x, attend_self, self.self_attention_norm, training)
        x, cross_scores = self._residual(x, attend_encoder, self.cross_attention_norm, training)
        x = self._feed_forward(x, training)
        outputs = (x,) if new_cache is None else (x, new_cache)
        if return_attention_scores:
            outputs += (self_scores, cross_scores)
        return outputs[0] if len(outputs) == 1 else outputs

