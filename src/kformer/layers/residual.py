"""What encoder and decoder blocks share: the feed-forward network and residual + layer norm."""

from __future__ import annotations

import keras


class ResidualBlock(keras.layers.Layer):
    """Base for Transformer blocks: config handling, the feed-forward net and the residual rule.

    Post-norm (the reference, "Attention is all you need"): ``x = norm(x + dropout(f(x)))``.
    Pre-norm (``norm_first=True``, steadier for deep stacks): ``x = x + dropout(f(norm(x)))``.
    """

    def __init__(self, dim, heads, ff_dim, dropout=0.1, norm_first=False, attention_dropout=0.0, attention_window=0,
                 **kwargs):
        super().__init__(**kwargs)
        if dim % heads:
            raise ValueError(f"dim ({dim}) must be divisible by heads ({heads})")
        self.dim = int(dim)
        self.heads = int(heads)
        self.ff_dim = int(ff_dim)
        self.dropout = float(dropout)
        self.norm_first = bool(norm_first)
        self.attention_dropout = float(attention_dropout)
        self.attention_window = int(attention_window)
        self.key_dim = self.dim // self.heads
        self.supports_masking = True
        self.ff_hidden = keras.layers.Dense(self.ff_dim, activation="relu", dtype=self.dtype_policy, name="ff_hidden")
        self.ff_output = keras.layers.Dense(self.dim, dtype=self.dtype_policy, name="ff_output")
        self.ff_norm = self._norm("ff_norm")
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)

    def _norm(self, name):
        return keras.layers.LayerNormalization(epsilon=1e-5, dtype=self.dtype_policy, name=name)

    def _build_feed_forward(self, x_shape):
        self.ff_hidden.build(x_shape)
        self.ff_output.build((*x_shape[:-1], self.ff_dim))
        self.ff_norm.build(x_shape)

    def _residual(self, x, sublayer, norm, training):
        """Apply ``sublayer`` (returning ``(y, extra)``) with residual + norm; return ``(x, extra)``."""
        if self.norm_first:
            y, extra = sublayer(norm(x))
            return x + self.dropout_layer(y, training=training), extra
        y, extra = sublayer(x)
        return norm(x + self.dropout_layer(y, training=training)), extra

    def _feed_forward(self, x, training):
        x, _ = self._residual(
            x,
            lambda h: (self.ff_output(self.ff_hidden(h)), None),
            self.ff_norm,
            training,
        )
        return x

    def compute_mask(self, inputs, mask=None):
        return mask

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "dim": self.dim,
                "heads": self.heads,
                "ff_dim": self.ff_dim,
                "dropout": self.dropout,
                "norm_first": self.norm_first,
                "attention_dropout": self.attention_dropout,
            }
        )
        config["attention_window"] = self.attention_window
        return config
