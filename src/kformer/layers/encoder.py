"""The encoder block: self-attention and feed-forward, each with residual + layer norm."""

from __future__ import annotations

import keras
from keras import ops

from kformer.layers.masks import attention_mask, drop_keras_mask
from kformer.layers.residual import ResidualBlock


@keras.saving.register_keras_serializable(package="kformer")
class EncoderBlock(ResidualBlock):
    """One Transformer encoder block: ``(batch, seq, dim)`` -> ``(batch, seq, dim)``.

    Args:
        dim: model width; each of the ``heads`` heads has width ``dim // heads``.
        heads: attention heads.
        ff_dim: hidden width of the feed-forward network.
        dropout: dropout on the attention and feed-forward outputs before each residual add.
        attention_dropout: dropout on the attention weights (off by default: it costs a
            ``(batch, heads, seq, seq)`` mask per step and the reference does without).
        norm_first: pre-norm instead of the reference's post-norm.
        attention_window: when above 0, each position attends only to positions at most this far away
            (local attention, :func:`~kformer.layers.masks.band_mask`); 0 attends everywhere.

    Call:
        ``block(x, mask=None, return_attention_scores=False, training=None)``. ``mask`` is the
        ``(batch, seq)`` padding mask; Keras hands it over from an ``Embedding(mask_zero=True)``
        or ``TokenAndPositionEmbedding`` and the block passes it on. With
        ``return_attention_scores=True`` returns ``(y, scores)``, scores ``(batch, heads, seq, seq)``.
    """

    def __init__(self, dim, heads, ff_dim, dropout=0.1, norm_first=False, attention_dropout=0.0, attention_window=0,
                 **kwargs):
        super().__init__(dim, heads, ff_dim, dropout=dropout, norm_first=norm_first,
                         attention_dropout=attention_dropout, attention_window=attention_window, **kwargs)
        self.self_attention = keras.layers.MultiHeadAttention(
            num_heads=self.heads,
            key_dim=self.key_dim,
            dropout=self.attention_dropout,
            dtype=self.dtype_policy,
            name="self_attention",
        )
        self.attention_norm = self._norm("attention_norm")

    def build(self, x_shape):
        self.self_attention.build(x_shape, x_shape)
        self.attention_norm.build(x_shape)
        self._build_feed_forward(x_shape)
        self.built = True

    def call(self, x, mask=None, return_attention_scores=False, training=None):
        keys_mask = attention_mask(key_mask=mask, window=self.attention_window, query_length=ops.shape(x)[1],
                                   key_length=ops.shape(x)[1])

        def attend(h):
            h = drop_keras_mask(h)
            # Asking for scores only when wanted lets Keras take its fused attention path.
            result = self.self_attention(
                h, h, attention_mask=keys_mask, return_attention_scores=return_attention_scores, training=training
            )
            return result if return_attention_scores else (result, None)

        x, scores = self._residual(x, attend, self.attention_norm, training)
        x = self._feed_forward(x, training)
        return (x, scores) if return_attention_scores else x
