"""Transformer building blocks: attention, masks, positions, encoder and decoder blocks.

``MaskedGlobalAveragePooling`` is Keras' ``GlobalAveragePooling1D``, which already averages
over real tokens only when a mask arrives with its input; it is exported under this name so
classifiers read as what they do.
"""

from keras.layers import GlobalAveragePooling1D as MaskedGlobalAveragePooling

from kformer.layers.attention import scaled_dot_product_attention
from kformer.layers.contrastive import SupervisedContrastive, supervised_contrastive_loss
from kformer.layers.decoder import DecoderBlock
from kformer.layers.encoder import EncoderBlock
from kformer.layers.masks import attention_mask, band_mask, causal_mask, padding_mask
from kformer.layers.positions import (
    AbacusPositions,
    RandomizedPositions,
    TokenAndPositionEmbedding,
    sinusoidal_table,
)
from kformer.layers.windows import SplitWindows, WindowedAverage

__all__ = [
    "AbacusPositions",
    "DecoderBlock",
    "EncoderBlock",
    "MaskedGlobalAveragePooling",
    "RandomizedPositions",
    "SplitWindows",
    "SupervisedContrastive",
    "TokenAndPositionEmbedding",
    "WindowedAverage",
    "attention_mask",
    "band_mask",
    "causal_mask",
    "padding_mask",
    "scaled_dot_product_attention",
    "sinusoidal_table",
    "supervised_contrastive_loss",
]
