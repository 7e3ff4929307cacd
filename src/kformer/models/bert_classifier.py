"""A KerasHub BERT classifier whose sentence vector is the mean of its token vectors.

all-MiniLM-L6-v2 (and sentence-transformers models generally) were trained with mean pooling over
the non-padding tokens; their ``[CLS]`` pooler is left over from the original BERT and untrained
for sentence meaning. :class:`MeanPoolBertClassifier` is ``keras_hub.models.BertTextClassifier``
with that pooling: same constructor, same preprocessor, same raw-string ``predict``, saved and
loaded with ``safe_mode=True`` (a registered class whose config is its constructor's arguments).
Importing this module registers it; :func:`kformer.tasks.classify.load` does so.
"""

from __future__ import annotations

import keras
import keras_hub
from keras_hub.src.models.bert.bert_backbone import bert_kernel_initializer

POOLINGS = ("mean", "cls")


@keras.saving.register_keras_serializable(package="kformer")
class MeanPoolBertClassifier(keras_hub.models.BertTextClassifier):
    """``BertTextClassifier`` with masked mean pooling instead of the ``[CLS]`` pooler.

    Inputs are the backbone's dict: ``token_ids`` and ``segment_ids`` ``(batch, L)`` int32,
    ``padding_mask`` ``(batch, L)`` bool. The backbone's ``sequence_output`` ``(batch, L, dim)``
    is averaged over the positions where ``padding_mask`` is True -> ``(batch, dim)``, then
    dropout and a dense layer give ``(batch, num_classes)`` (softmax with ``activation="softmax"``).
    Padding never changes a row's output, so length-bucketed batches agree with fully padded ones.
    """

    def __init__(self, backbone, num_classes, preprocessor=None, activation=None, dropout=0.1, **kwargs):
        # === Layers === (the order KerasHub's own classifier uses, so weights line up by name)
        self.backbone = backbone
        self.preprocessor = preprocessor
        backbone.get_layer("pooled_dense").trainable = False  # the [CLS] pooler: unused here
        self.pooling_layer = keras.layers.GlobalAveragePooling1D(dtype=backbone.dtype_policy, name="mean_pooling")
        self.output_dropout = keras.layers.Dropout(dropout, dtype=backbone.dtype_policy, name="classifier_dropout")
        self.output_dense = keras.layers.Dense(
            num_classes, kernel_initializer=bert_kernel_initializer(), activation=activation,
            dtype=backbone.dtype_policy, name="logits",
        )
        # === Functional model ===
        inputs = backbone.input
        sequence = backbone(inputs)["sequence_output"]
        pooled = self.pooling_layer(sequence, mask=inputs["padding_mask"])
        outputs = self.output_dense(self.output_dropout(pooled))
        # skip BertTextClassifier.__init__ (it builds the [CLS] head); the Task/Model init runs
        keras_hub.models.TextClassifier.__init__(self, inputs=inputs, outputs=outputs, **kwargs)
        # === Config ===
        self.num_classes = num_classes
        self.activation = keras.activations.get(activation)
        self.dropout = dropout
