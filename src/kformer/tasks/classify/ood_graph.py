"""A fitted distance score (:class:`~kformer.tasks.classify.ood.OodScore`) as TensorFlow ops, so an
export -- the SavedModel, and ``model.onnx`` converted from the same ops -- computes the score a
model folder computes in NumPy, and a client applies the folder's threshold to it.

Why not the NumPy formulas as written: the graph runs in float32, where the expanded Mahalanobis
form ``x'Px - 2x'Pm + m'Pm`` cancels large terms. Here the precision is factored once (in float64)
as ``P = W W'`` and the vectors are moved to whitened coordinates centred on the average class
mean, where the squared distance is a plain squared Euclidean distance of moderate numbers:
``|(x - c) W - (m - c) W|^2``. The nearest-neighbour score needs only a matrix product and the
k-th largest cosine similarity (``|a - b|^2 = 2 - 2 a.b`` for unit rows). The layer-wise
Mahalanobis score (``mahalanobis_layers``) is the same whitened distance per encoder block, on that
block's columns of the vectors, standardised by the block's training mean and deviation, averaged.
"""

from __future__ import annotations

import numpy as np

from kformer.tasks.classify.ood import LAYERS, OodScore


def graph_arrays(score: OodScore) -> dict[str, np.ndarray]:
    """The float32 arrays the graph holds: mahalanobis ``centre`` ``(D,)``, ``whiten`` ``(D, D)``
    (``W`` with ``W W' = P``), ``centres`` ``(C, D)`` (the class means, centred and whitened) and
    their squared norms ``centre_norms`` ``(C,)``; knn the ``bank`` ``(N, D)`` of unit rows."""
    if score.kind == "knn":
        return {"bank": np.asarray(score.arrays["bank"], dtype="float32")}
    if score.kind == LAYERS:  # each block's arrays stacked: centre (L, D), whiten (L, D, D), ...; and the standardisation
        blocks = [whitened(means, precision) for means, precision in
                  zip(score.arrays["layer_means"], score.arrays["layer_precisions"], strict=True)]
        return {**{name: np.stack([block[name] for block in blocks]) for name in blocks[0]},
                "layer_centre": score.arrays["layer_centre"].astype("float32"),
                "layer_scale": score.arrays["layer_scale"].astype("float32")}
    return whitened(score.arrays["means"], score.arrays["precision"])


def whitened(means: np.ndarray, precision: np.ndarray) -> dict[str, np.ndarray]:
    """One Mahalanobis score's float32 graph arrays from its ``means`` ``(C, D)`` and ``precision``
    ``(D, D)``: ``centre`` ``(D,)``, ``whiten`` ``(D, D)``, ``centres`` ``(C, D)``, ``centre_norms`` ``(C,)``."""
    means, precision = np.asarray(means, dtype="float64"), np.asarray(precision, dtype="float64")
    eigenvalues, eigenvectors = np.linalg.eigh((precision + precision.T) / 2.0)
    whiten = eigenvectors * np.sqrt(np.maximum(eigenvalues, 0.0))  # (D, D): whiten @ whiten.T == precision
    centre = means.mean(axis=0)
    centres = (means - centre) @ whiten
    return {"centre": centre.astype("float32"), "whiten": whiten.astype("float32"),
            "centres": centres.astype("float32"), "centre_norms": (centres ** 2).sum(axis=1).astype("float32")}


def tf_ood_score(score: OodScore):
    """A ``tf.Module`` mapping pooled vectors ``(B, D)`` float32 to in-scope scores ``(B,)``
    float32 (mahalanobis_layers: every block's, ``(B, L * D)``), higher = more in scope (what
    ``score(vectors)`` gives, to float32 rounding). Track it in the export so its arrays are saved
    with the graph."""
    import tensorflow as tf

    class TfOodScore(tf.Module):
        def __init__(self):
            super().__init__(name=f"ood_{score.kind}")
            self.kind, self.k = score.kind, min(int(score.k), int(score.arrays.get("bank", np.zeros((1, 1))).shape[0]))
            self.layers, self.dim = score.layers, score.dim // score.layers
            self.arrays = {name: tf.Variable(value, trainable=False, name=name)
                           for name, value in graph_arrays(score).items()}

        def __call__(self, vectors):
            vectors = tf.cast(vectors, tf.float32)
            if self.kind == "knn":
                unit = vectors / tf.maximum(tf.norm(vectors, axis=1, keepdims=True), 1e-12)
                similarity = tf.matmul(unit, self.arrays["bank"], transpose_b=True)  # (B, N)
                kth = tf.math.top_k(similarity, k=self.k).values[:, self.k - 1]
                return -tf.sqrt(tf.maximum(2.0 - 2.0 * kth, 0.0))
            if self.kind != LAYERS:
                return -self.nearest(vectors, self.arrays)
            standardised = [(self.nearest(vectors[:, i * self.dim:(i + 1) * self.dim],
                                          {name: value[i] for name, value in self.arrays.items()})
                             - self.arrays["layer_centre"][i]) / self.arrays["layer_scale"][i]
                            for i in range(self.layers)]
            return -tf.add_n(standardised) / float(self.layers)

        @staticmethod
        def nearest(vectors, arrays):
            """``(B,)``: the squared Mahalanobis distance of ``vectors`` ``(B, D)`` to the nearest class mean."""
            whitened = tf.matmul(vectors - arrays["centre"], arrays["whiten"])  # (B, D)
            squared = (tf.reduce_sum(tf.square(whitened), axis=1, keepdims=True)
                       - 2.0 * tf.matmul(whitened, arrays["centres"], transpose_b=True)
                       + arrays["centre_norms"][None, :])  # (B, C)
            return tf.maximum(tf.reduce_min(squared, axis=1), 0.0)

    return TfOodScore()
