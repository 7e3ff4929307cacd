"""The supervised contrastive loss (SupCon, Khosla et al. 2020, the "L_out" form) of a batch of
text vectors, and a layer that adds it to a model's training loss (``keras.ops`` only).

Each row's target says what it is: a one-hot row belongs to that class; a uniform row (a "none of
these" text trained toward the uniform distribution, outlier exposure) belongs to no class; an
all-zero row is absent (a batch's filler copy weighted 0). For every anchor, a row of a class with
at least one other row of its class in the batch, the loss is minus the mean, over those other
rows (its positives), of the log-probability that the anchor picks the positive among all present
rows but itself, by the softmax of their cosine similarities over ``temperature``. Rows of no class
are never anchors nor positives, but stay in every anchor's denominator, so they are pushed away
from every class's cluster. The loss is the mean over the anchors (0 when a batch has none).
"""

from __future__ import annotations

import keras
from keras import ops

FAR = -1e9  # a similarity no row reaches: leaves a row out of a softmax's denominator


def supervised_contrastive_loss(vectors, targets, temperature: float):
    """The SupCon loss, a float32 scalar, of ``vectors`` ``(batch, dim)`` (normalised here) whose
    rows' ``targets`` ``(batch, classes)`` are one-hot (a class), uniform (no class) or zero
    (absent): see the module's docstring."""
    vectors = ops.cast(vectors, "float32")
    targets = ops.cast(targets, "float32")
    z = vectors / ops.maximum(ops.norm(vectors, axis=-1, keepdims=True), 1e-12)
    logits = ops.matmul(z, ops.transpose(z)) / temperature  # (batch, batch)
    present = ops.cast(ops.sum(targets, axis=-1) > 0, "float32")  # (batch,)
    classed = ops.cast(ops.max(targets, axis=-1) > 0.5, "float32")  # one-hot: 1; uniform over >= 2 classes: <= 0.5
    others = 1.0 - ops.eye(ops.shape(z)[0], dtype="float32")  # (batch, batch): every pair but a row with itself
    denominator = others * present[None, :]
    log_prob = logits - ops.logsumexp(ops.where(denominator > 0, logits, FAR), axis=-1, keepdims=True)
    same = ops.cast(ops.matmul(targets, ops.transpose(targets)) > 0.5, "float32")  # same class (one-hot rows)
    positives = same * others * (classed[:, None] * classed[None, :])
    counts = ops.sum(positives, axis=-1)  # (batch,)
    anchors = classed * ops.cast(counts > 0, "float32")
    per_anchor = -ops.sum(positives * log_prob, axis=-1) / ops.maximum(counts, 1.0)
    return ops.sum(anchors * per_anchor) / ops.maximum(ops.sum(anchors), 1.0)


@keras.saving.register_keras_serializable(package="kformer")
class SupervisedContrastive(keras.layers.Layer):
    """``[outputs, vectors (batch, dim), targets (batch, classes)] -> outputs``, unchanged; in
    training it adds ``weight x`` :func:`supervised_contrastive_loss` of the vectors to the
    model's loss (not in evaluation: ``val_loss`` stays the plain loss)."""

    def __init__(self, weight: float, temperature: float, **kwargs):
        super().__init__(**kwargs)
        self.weight = float(weight)
        self.temperature = float(temperature)

    def call(self, inputs, training=None):
        outputs, vectors, targets = inputs
        if training:
            self.add_loss(self.weight * supervised_contrastive_loss(vectors, targets, self.temperature))
        return outputs

    def compute_output_shape(self, input_shape):
        return input_shape[0]

    def get_config(self):
        return {**super().get_config(), "weight": self.weight, "temperature": self.temperature}
