"""An inverted-file index (IVF, a coarse quantiser) for the kNN-MT datastore, searched inside the
compiled decoding loops: each query scores only the entries of the lists nearest it.

Layout (what :func:`build_ivf` returns): the keys clustered by k-means and stored sorted by list,
one flat ``(entries, dim)`` array (on disk the same file as without an index; as a tensor
followed by ``capacity`` zero rows, so every window is in bounds), with ``offsets``
``(lists + 1,)``: list ``i`` holds the sorted entries ``offsets[i] .. offsets[i + 1] - 1``. A
k-means cluster larger than the mean list size is split into consecutive lists of equal size,
each with the cluster's centroid, so every list holds at most ``capacity`` entries and a query's
work has a static shape. At query time (:func:`ivf_nearest`, ``keras.ops`` only):

    queries (rows, dim) -> squared L2 to the centroids (rows, lists) -> the nprobe nearest lists
    -> a window of ``capacity`` entries from each list's offset (rows, nprobe * capacity), the
    slots past the list's size masked -> exact squared L2 to those keys -> top k

Compiled, the windows are read by a loop of slices (:func:`looped_scores`; XLA on a CPU copies a
gather element by element, 3x slower); eagerly by one gather (:func:`gathered_scores`).

Cost per query: ``lists + nprobe * capacity`` distances instead of ``entries``; with
``lists = LISTS_PER_ROOT * sqrt(entries)`` and capacity about ``entries / lists`` both terms grow
as ``sqrt(entries)``. ``nprobe`` is chosen at build time as the smallest of :data:`NPROBES` whose
recall@k against brute force reaches :data:`RECALL_TARGET` (:func:`choose_nprobe`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from keras import ops

# k-means lists per square root of the entries (1M entries: 4,000 lists of about 250). With
# nprobe about 16 the two terms of a query's cost, lists + nprobe * capacity, are then equal.
LISTS_PER_ROOT = 4
# k-means trains its centroids on at most this many sampled keys per list (faiss asks 39 .. 256)
TRAIN_PER_LIST = 64
# The nprobe values the build tries, smallest first; the number of lists (an exact search) last.
NPROBES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# The share of brute force's k nearest keys the chosen nprobe must find (on RECALL_QUERIES keys
# of the datastore, each one's own entry left out)
RECALL_TARGET = 0.95
RECALL_QUERIES = 256
# What one candidate costs in a compiled search, in brute-force entries (keys searched by the
# matrix product, which shares each key among the queries): 64 queries of dim 128 inside a
# compiled loop on this 2-core CPU took about 0.35 us per entry by brute force and 2-4 us per
# candidate through the index (100,000 and 20,000 entries, nprobe 16; looped_scores).
CANDIDATE_COST = 8
# Assignment and recall work in chunks of rows, so no intermediate passes about this many floats
CHUNK_FLOATS = 1 << 24


@dataclass(frozen=True)
class IvfLayout:
    """The index of a datastore whose keys are sorted by list (numpy): ``centroids (lists, dim)``
    float32 and ``offsets (lists + 1,)`` int64, ``recall`` (nprobe -> recall@``recall_k`` measured
    by :func:`choose_nprobe`)."""

    centroids: np.ndarray
    offsets: np.ndarray
    recall: dict = field(default_factory=dict)
    recall_k: int = 0

    @property
    def lists(self) -> int:
        return int(len(self.centroids))

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def capacity(self) -> int:
        return int(self.sizes.max())


class Ivf(NamedTuple):
    """An :class:`IvfLayout` as the tensors the decode loops take: centroids ``(lists, dim)`` and
    centroid_norms ``(lists,)`` float32, starts and sizes ``(lists,)`` int32; ``capacity`` and
    ``nprobe`` are Python ints (part of the compiled shape); ``loop`` (a Python bool) chooses
    how :func:`ivf_nearest` reads the lists: a loop of slices (compiled) or one gather (eager)."""

    centroids: object
    centroid_norms: object
    starts: object
    sizes: object
    capacity: int
    nprobe: int
    loop: bool = True


def key_tensors(keys: np.ndarray, padding: int = 0) -> tuple:
    """``(keys (entries + padding, dim), key_norms (entries + padding,))`` float32 tensors from
    numpy keys of any float dtype, ``padding`` zero rows after them (an index's windows read up
    to ``capacity`` rows past a list's start)."""
    keys32 = np.asarray(keys, dtype="float32")
    if padding:
        keys32 = np.concatenate([keys32, np.zeros((padding, keys32.shape[1]), dtype="float32")])
    return ops.convert_to_tensor(keys32), ops.convert_to_tensor(np.square(keys32).sum(axis=1))


def ivf_tensors(layout: IvfLayout, nprobe: int) -> Ivf:
    """The :class:`Ivf` tensors of ``layout``, searching ``nprobe`` lists per query."""
    centroids = np.asarray(layout.centroids, dtype="float32")
    return Ivf(ops.convert_to_tensor(centroids), ops.convert_to_tensor(np.square(centroids).sum(axis=1)),
               ops.convert_to_tensor(layout.offsets[:-1].astype("int32")),
               ops.convert_to_tensor(layout.sizes.astype("int32")), layout.capacity, int(nprobe))


def ivf_nearest(queries, keys, key_norms, ivf: Ivf, k: int):
    """The ``k`` keys nearest each query among the entries of its ``ivf.nprobe`` nearest lists:
    ``queries (rows, dim)``, ``keys (entries + capacity, dim)`` sorted by list and
    ``key_norms (entries + capacity,)`` (:func:`key_tensors` with ``padding=capacity``) ->
    ``(distances (rows, k)`` squared L2, nearest first, ``indices (rows, k) int32)``. When the
    probed lists hold fewer than ``k`` entries the rest are padding: distance ``inf``, index -1
    (at least one real entry comes first: no list is empty)."""
    queries = ops.cast(queries, "float32")
    query_norms = ops.sum(ops.square(queries), axis=-1, keepdims=True)  # (rows, 1)
    coarse = query_norms - 2.0 * ops.matmul(queries, ops.transpose(ivf.centroids)) + ivf.centroid_norms[None, :]
    probed = ops.cast(ops.top_k(-coarse, ivf.nprobe)[1], "int32")  # (rows, nprobe)
    width = ivf.nprobe * ivf.capacity
    slots = ops.arange(ivf.capacity, dtype="int32")
    candidates = ops.reshape(ops.take(ivf.starts, probed)[..., None] + slots[None, None, :], (-1, width))
    real = ops.reshape(ops.less(slots[None, None, :], ops.take(ivf.sizes, probed)[..., None]), (-1, width))
    scores = (looped_scores if ivf.loop else gathered_scores)(queries, keys, key_norms, candidates, ivf)
    distances = ops.where(real, query_norms + scores, np.inf)
    if width < k:  # fewer slots than neighbours: more padding
        filler = ops.zeros_like(distances[:, :1]) + ops.zeros((1, k - width))
        distances = ops.concatenate([distances, filler + np.inf], axis=1)
        candidates = ops.concatenate([candidates, ops.cast(filler, "int32")], axis=1)
    negative, best = ops.top_k(-distances, k)
    indices = ops.take_along_axis(candidates, ops.cast(best, "int32"), axis=1)
    found = ops.isfinite(negative)
    return ops.maximum(-negative, 0.0), ops.where(found, indices, -1)


def gathered_scores(queries, keys, key_norms, candidates, ivf: Ivf):
    """``|key|^2 - 2 query . key`` ``(rows, nprobe * capacity)`` for each query's ``candidates``
    (rows of ``keys``), by one gather: quick eagerly, but XLA on a CPU copies a gather element by
    element (the loop of :func:`looped_scores` is about 3x quicker compiled)."""
    gathered = ops.take(keys, candidates, axis=0)  # (rows, nprobe * capacity, dim)
    return ops.take(key_norms, candidates) - 2.0 * ops.einsum("rd,rmd->rm", queries, gathered)


def looped_scores(queries, keys, key_norms, candidates, ivf: Ivf):
    """:func:`gathered_scores` by a loop over the (query, list) pairs, each a slice of
    ``capacity`` rows from the list's start and one matrix-vector product. Compiled on a CPU
    (64 queries of dim 128, nprobe 16, inside a loop as in decoding): 2.7 ms against the gather's
    8.6 at 100,000 entries (brute force 33.8), 2.4 against 7.2 at 20,000 (brute force 7.2);
    eagerly each iteration costs a round trip.

    The starts ride in the loop's state, rewritten one element per iteration, rather than being
    read from outside it: XLA's TensorFlow bridge takes a slice's start as a compile-time
    constant wherever it can, and tries to evaluate any loop-invariant input it reads from on the
    host before it compiles the loop. Read from outside, the starts made it fold the queries, the
    centroids and the coarse search into constants (the decode loops compiled for ~29 s more per
    shape at 7,238 lists, and this function alone recompiled for every query batch); carried,
    they are the loop's own values and every input stays a parameter."""
    capacity, dim = ivf.capacity, int(keys.shape[1])
    starts = ops.reshape(candidates, (-1, ivf.nprobe, capacity))[:, :, 0]
    starts = ops.reshape(starts, (-1,))  # (rows * nprobe,)

    def score_list(i, state):
        scores, starts = state
        start = starts[i]
        block = ops.slice(keys, (start, 0), (capacity, dim))
        norms = ops.slice(key_norms, (start,), (capacity,))
        query = ops.take(queries, i // ivf.nprobe, axis=0)
        scores = ops.slice_update(scores, (i * capacity,), norms - 2.0 * ops.matmul(block, query[:, None])[:, 0])
        return scores, ops.slice_update(starts, (i,), start[None])  # the same values, not loop-invariant

    pairs = ops.shape(starts)[0]
    scores, _ = ops.fori_loop(0, pairs, score_list, (ops.zeros((pairs * capacity,), dtype="float32"), starts))
    return ops.reshape(scores, (-1, ivf.nprobe * capacity))


def pays(entries: int, layout: IvfLayout, nprobe: int) -> bool:
    """Whether searching ``nprobe`` lists costs less than brute force over ``entries`` keys
    (``lists + CANDIDATE_COST * nprobe * capacity < entries``)."""
    return layout.lists + CANDIDATE_COST * nprobe * layout.capacity < entries


# --- building ---------------------------------------------------------------------------------------


def default_lists(entries: int) -> int:
    """k-means clusters for a datastore of ``entries`` keys: ``LISTS_PER_ROOT * sqrt(entries)``."""
    return max(1, min(entries, round(LISTS_PER_ROOT * math.sqrt(entries))))


def build_ivf(keys: np.ndarray, lists: int | None = None, seed: int = 0) -> tuple[np.ndarray, IvfLayout]:
    """Cluster ``keys (entries, dim)`` into ``lists`` (default :func:`default_lists`) by k-means
    (scikit-learn's MiniBatchKMeans, at most 5 passes over a seeded sample of
    :data:`TRAIN_PER_LIST` keys per list): ``(order (entries,)``, the permutation that sorts the
    keys by list, ``layout)`` with clusters above the mean size split into equal consecutive lists
    (empty clusters dropped). ``recall`` is left empty (:func:`choose_nprobe` measures it)."""
    from sklearn.cluster import MiniBatchKMeans

    keys = np.asarray(keys, dtype="float32")
    entries = len(keys)
    clusters = default_lists(entries) if lists is None else max(1, min(int(lists), entries))
    rng = np.random.default_rng(seed)
    sample = keys[rng.choice(entries, size=min(entries, TRAIN_PER_LIST * clusters), replace=False)]
    kmeans = MiniBatchKMeans(n_clusters=clusters, init="random", n_init=1, batch_size=max(1024, 2 * clusters),
                             max_iter=5, random_state=seed).fit(sample)
    centroids = kmeans.cluster_centers_.astype("float32")
    assignment = nearest_centroid(keys, centroids)
    order = np.argsort(assignment, kind="stable")
    counts = np.bincount(assignment, minlength=clusters)
    capacity = math.ceil(entries / clusters)
    pieces = np.where(counts > 0, -(-counts // capacity), 0)  # lists each cluster becomes
    sizes = np.concatenate([np.diff(np.linspace(0, count, parts + 1).round().astype("int64"))
                            for count, parts in zip(counts, pieces, strict=True) if parts])
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype("int64")
    return order, IvfLayout(np.repeat(centroids, pieces, axis=0), offsets)


def nearest_centroid(keys: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """``(entries,)`` int64: each key's nearest centroid (squared L2), in chunks of rows."""
    norms = np.square(centroids).sum(axis=1)
    step = max(1, CHUNK_FLOATS // max(1, len(centroids)))
    return np.concatenate([np.argmin(norms[None, :] - 2.0 * keys[i : i + step] @ centroids.T, axis=1)
                           for i in range(0, len(keys), step)])


def exact_neighbours(queries: np.ndarray, keys: np.ndarray, k: int) -> np.ndarray:
    """``(rows, k)`` int64: each query's ``k`` nearest keys by brute force (numpy), nearest first."""
    queries, keys = np.asarray(queries, "float32"), np.asarray(keys, "float32")
    norms = np.square(keys).sum(axis=1)
    step = max(1, CHUNK_FLOATS // max(1, len(keys)))
    parts = []
    for i in range(0, len(queries), step):
        distances = norms[None, :] - 2.0 * queries[i : i + step] @ keys.T
        nearest = np.argpartition(distances, k - 1, axis=1)[:, :k]
        parts.append(np.take_along_axis(nearest, np.argsort(np.take_along_axis(distances, nearest, 1), 1), 1))
    return np.concatenate(parts)


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    """The share of ``truth``'s neighbours ``(rows, k)`` that ``found`` ``(rows, >= k)`` holds."""
    hits = sum(len(set(row[row >= 0].tolist()) & set(want.tolist())) for row, want in zip(found, truth, strict=True))
    return hits / truth.size


def ivf_search(queries: np.ndarray, keys: np.ndarray, layout: IvfLayout, nprobe: int, k: int) -> np.ndarray:
    """:func:`ivf_nearest` in numpy (for measuring recall at build time, where compiling the loop
    for every nprobe would cost more than the search): ``(rows, k)`` int64 indices, nearest first,
    -1 for padding; tied lists (a split cluster's) are taken in index order, as ``top_k`` does."""
    queries, keys = np.asarray(queries, "float32"), np.asarray(keys, "float32")
    centroids = np.asarray(layout.centroids, "float32")
    slots, sizes, starts = np.arange(layout.capacity), layout.sizes, layout.offsets[:-1]
    norms = np.square(keys).sum(axis=1)
    step = max(1, CHUNK_FLOATS // (nprobe * layout.capacity * keys.shape[1]))
    out = []
    for i in range(0, len(queries), step):
        chunk = queries[i : i + step]
        coarse = np.square(centroids).sum(1)[None, :] - 2.0 * chunk @ centroids.T
        probed = np.argsort(coarse, axis=1, kind="stable")[:, :nprobe]
        real = (slots[None, None, :] < sizes[probed][..., None]).reshape(len(chunk), -1)
        candidates = np.where(real, (starts[probed][..., None] + slots).reshape(len(chunk), -1), 0)
        distances = norms[candidates] - 2.0 * np.einsum("rd,rmd->rm", chunk, keys[candidates])
        distances = np.where(real, distances, np.inf)
        if distances.shape[1] < k:
            distances = np.pad(distances, ((0, 0), (0, k - distances.shape[1])), constant_values=np.inf)
            candidates = np.pad(candidates, ((0, 0), (0, k - candidates.shape[1])))
        best = np.argsort(distances, axis=1, kind="stable")[:, :k]
        found = np.take_along_axis(candidates, best, 1)
        out.append(np.where(np.isfinite(np.take_along_axis(distances, best, 1)), found, -1))
    return np.concatenate(out)


def choose_nprobe(keys: np.ndarray, layout: IvfLayout, k: int, seed: int = 0) -> tuple[int, IvfLayout]:
    """``(nprobe, layout with its recall)``: the smallest of :data:`NPROBES` (then every list)
    whose recall@``k`` against brute force reaches :data:`RECALL_TARGET` on
    :data:`RECALL_QUERIES` sampled keys (``keys`` sorted by list), each searched for ``k + 1``
    neighbours with its own entry left out."""
    keys = np.asarray(keys, dtype="float32")
    if len(keys) < 2:  # no other key to find
        return layout.lists, layout
    k = max(1, min(k, len(keys) - 1))
    rows = np.random.default_rng(seed).choice(len(keys), size=min(RECALL_QUERIES, len(keys)), replace=False)
    truth = without_self(exact_neighbours(keys[rows], keys, k + 1), rows, k)
    recall: dict[int, float] = {}
    for nprobe in [n for n in NPROBES if n < layout.lists] + [layout.lists]:
        found = without_self(ivf_search(keys[rows], keys, layout, nprobe, k + 1), rows, k)
        recall[nprobe] = round(recall_at_k(found, truth), 4)
        if recall[nprobe] >= RECALL_TARGET:
            break
    return nprobe, IvfLayout(layout.centroids, layout.offsets, recall, k)


def without_self(neighbours: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """``(rows, k)``: each row's neighbours less its own entry (or less its last one)."""
    kept = [[n for n in row if n != own][:k] for row, own in zip(neighbours.tolist(), rows.tolist(), strict=True)]
    return np.array(kept, dtype="int64")
