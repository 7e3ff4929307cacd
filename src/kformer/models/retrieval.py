"""kNN-MT (Khandelwal et al. 2021, "Nearest Neighbor Machine Translation"): the next-token
distribution of a translator mixed with one read off its nearest neighbours in a datastore.

The datastore holds, for every target position of the training pairs, the decoder's final state
there (the key, ``(dim,)``, what the output projection reads) and the token that came next (the
value). At each decoding step the current state queries it: the ``k`` keys nearest in squared L2
distance (brute force: one matmul against every key, then ``top_k``; or, for a large datastore,
among the entries of the nearest lists of an inverted-file index, :mod:`kformer.models.ivf`) give

    p_knn(y) = sum over neighbours i with value y of softmax_i(-distance_i / temperature)

and the decoder picks from ``lambda * p_knn + (1 - lambda) * p_model``, mixed in probability
space, then taken as a log (:func:`mixed_log_probs`). Everything is ``keras.ops``, so the mixing
runs inside the compiled greedy and beam loops (:mod:`kformer.models.decode_loops`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from keras import ops

from kformer.models.ivf import Ivf, IvfLayout, ivf_nearest, ivf_tensors, key_tensors

# The model keeps at least this share of the mixture, so a token no neighbour names is never
# impossible (a repeat limit may forbid every neighbour's token): lambda 1 means 1 - 1e-6.
MODEL_FLOOR = 1e-6


class Knn(NamedTuple):
    """The datastore and mixing weights as tensors, what the decode loops take (``k`` apart: a
    Python int, part of the compiled shape).

    keys: ``(entries, dim)`` float32 (with an index: sorted by list and ``capacity`` zero rows
    after them); key_norms: ``(entries,)`` float32, each key's squared norm (the same rows);
    values: ``(entries,)`` int32 target ids; lam and temperature: float32 scalars; ivf: None
    (brute force) or the :class:`~kformer.models.ivf.Ivf` index the keys are sorted by.
    """

    keys: object
    key_norms: object
    values: object
    lam: object
    temperature: object
    ivf: Ivf | None = None


def knn_tensors(keys: np.ndarray, values: np.ndarray, lam: float, temperature: float,
                layout: IvfLayout | None = None, nprobe: int = 0) -> Knn:
    """A :class:`Knn` from numpy ``keys (entries, dim)`` (any float dtype) and ``values (entries,)``;
    with a ``layout`` (the keys sorted by its lists), searched through its ``nprobe`` nearest lists."""
    return Knn(*key_tensors(keys, 0 if layout is None else layout.capacity), ops.convert_to_tensor(np.asarray(values, dtype="int32")),
               ops.convert_to_tensor(float(lam), "float32"), ops.convert_to_tensor(float(temperature), "float32"),
               None if layout is None else ivf_tensors(layout, nprobe))


def held_in_weights(knn: Knn):
    """``(knn, layer)``: ``knn`` with its tensors (keys, key norms, values, the weights and an
    index's) moved into the non-trainable weights of a Keras layer, for an export to keep as
    weights (a converter leaves a captured constant as an input to feed, and a graph's constants
    are capped at 2 GB), and an index read by one gather (a graph run without XLA, as an export's
    is). Track ``layer`` with the export."""
    import keras

    layer = keras.layers.Layer(name="datastore", trainable=False)  # holds the weights; never called

    def held(name: str, tensor):  # initialised with the tensor itself: no zeros first (a datastore can be large)
        return layer.add_weight(shape=tuple(tensor.shape), dtype=keras.backend.standardize_dtype(tensor.dtype),
                                initializer=lambda shape, dtype: tensor, trainable=False, name=name)

    ivf = knn.ivf
    if ivf is not None:
        ivf = ivf._replace(loop=False, **{name: held(name, getattr(ivf, name))
                                          for name in ("centroids", "centroid_norms", "starts", "sizes")})
    layer.built = True
    return knn._replace(ivf=ivf, **{name: held(name, getattr(knn, name))
                                    for name in ("keys", "key_norms", "values", "lam", "temperature")}), layer


def nearest(queries, keys, key_norms, k: int):
    """The ``k`` keys nearest each query: ``queries (rows, dim)`` -> ``(distances (rows, k)``
    squared L2, nearest first, ``indices (rows, k) int32)``."""
    queries = ops.cast(queries, "float32")
    query_norms = ops.sum(ops.square(queries), axis=-1, keepdims=True)
    distances = query_norms - 2.0 * ops.matmul(queries, ops.transpose(keys)) + key_norms[None, :]
    negative, indices = ops.top_k(-distances, k)
    return ops.maximum(-negative, 0.0), ops.cast(indices, "int32")


def search(queries, knn: Knn, k: int):
    """``(distances, indices)`` ``(rows, k)`` of :func:`nearest` (brute force) or, with ``knn.ivf``,
    of :func:`~kformer.models.ivf.ivf_nearest` (padding: distance ``inf``, index -1)."""
    if knn.ivf is None:
        return nearest(queries, knn.keys, knn.key_norms, k)
    return ivf_nearest(queries, knn.keys, knn.key_norms, knn.ivf, k)


def knn_probs(queries, knn: Knn, k: int, vocab: int):
    """p_knn: ``queries (rows, dim)`` -> ``(rows, vocab)`` float32, each row a distribution over
    the values of its ``k`` nearest keys, weighted by ``softmax(-distance / temperature)`` (a
    padding neighbour of an IVF search, at distance ``inf``, weighs 0)."""
    distances, indices = search(queries, knn, k)
    weights = ops.softmax(-distances / knn.temperature, axis=-1)  # (rows, k)
    tokens = ops.take(knn.values, ops.maximum(indices, 0), axis=0)  # (rows, k)
    return ops.sum(weights[..., None] * ops.one_hot(tokens, vocab, dtype="float32"), axis=1)


def mixed_log_probs(states, logits, knn: Knn, k: int):
    """``log(lam * p_knn + (1 - lam) * softmax(logits))``: ``states (rows, dim)`` (the queries),
    ``logits (rows, vocab)`` -> float32 ``(rows, vocab)`` log-probabilities (lam capped at
    ``1 - MODEL_FLOOR``)."""
    logits = ops.cast(logits, "float32")
    p_model = ops.softmax(logits, axis=-1)
    p_knn = knn_probs(states, knn, k, ops.shape(logits)[-1])
    lam = ops.minimum(knn.lam, 1.0 - MODEL_FLOOR)
    return ops.log(lam * p_knn + (1.0 - lam) * p_model)


def typical_distance(keys: np.ndarray, k: int, sample: int = 64, seed: int = 0) -> float:
    """The median squared L2 distance from a sample of keys to their ``k``-th nearest key (numpy):
    the scale the temperatures are chosen against."""
    keys = np.asarray(keys, dtype="float32")
    rng = np.random.default_rng(seed)
    queries = keys[rng.choice(len(keys), size=min(sample, len(keys)), replace=False)]
    distances = (np.square(queries).sum(1)[:, None] - 2.0 * queries @ keys.T + np.square(keys).sum(1)[None, :])
    kth = np.partition(np.maximum(distances, 0.0), min(k, len(keys) - 1), axis=1)[:, min(k, len(keys) - 1)]
    return float(max(np.median(kth), 1e-6))
