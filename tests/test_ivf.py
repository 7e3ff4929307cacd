"""The inverted-file index of the kNN-MT datastore (kformer.models.ivf): its layout, its search
against brute force, the padding of its fixed-size windows and the choice of nprobe."""

from __future__ import annotations

import numpy as np
import pytest

from kformer.models import ivf
from kformer.models.retrieval import knn_probs, knn_tensors, nearest


def clustered(entries: int, dim: int = 16, clusters: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(keys (entries, dim) float16, queries (64, dim) float32)`` around the same random centres."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)) * 4
    keys = centres[rng.integers(0, clusters, entries)] + rng.standard_normal((entries, dim))
    queries = centres[rng.integers(0, clusters, 64)] + rng.standard_normal((64, dim))
    return keys.astype("float16"), queries.astype("float32")


@pytest.fixture(scope="module")
def index():
    keys, queries = clustered(3000)
    order, layout = ivf.build_ivf(keys, seed=0)
    return {"keys": keys[order].astype("float32"), "order": order, "layout": layout, "queries": queries}


def test_the_layout_sorts_every_entry_into_one_list(index):
    layout, order = index["layout"], index["order"]
    assert sorted(order.tolist()) == list(range(3000))
    assert layout.offsets[0] == 0 and layout.offsets[-1] == 3000 and np.all(layout.sizes >= 1)
    assert layout.lists >= ivf.default_lists(3000) // 2 and layout.capacity <= int(np.ceil(3000 / ivf.default_lists(3000)))
    again_order, again = ivf.build_ivf(clustered(3000)[0], seed=0)  # seeded: the same lists
    assert np.array_equal(again_order, order) and np.array_equal(again.offsets, layout.offsets)


def searched(index, nprobe: int, k: int, loop: bool = False, queries=None):
    """``(distances, indices)`` as numpy of :func:`ivf.ivf_nearest`: eagerly by one gather, or
    (``loop``) by the loop of slices compiled by XLA, as the decode loops run it."""
    layout = index["layout"]
    queries = index["queries"] if queries is None else queries
    padded = ivf.key_tensors(index["keys"], padding=layout.capacity)
    tensors = ivf.ivf_tensors(layout, nprobe)._replace(loop=loop)
    search = ivf.ivf_nearest
    if loop:
        import tensorflow as tf

        search = tf.function(ivf.ivf_nearest, jit_compile=True)
    return tuple(np.asarray(t) for t in search(queries, *padded, tensors, k))


def test_every_list_probed_finds_the_brute_force_neighbours(index):
    layout = index["layout"]
    exact_d, exact_i = (np.asarray(t) for t in nearest(index["queries"], *ivf.key_tensors(index["keys"]), 16))
    found_d, found_i = searched(index, layout.lists, 16)
    assert np.array_equal(found_i, exact_i)  # recall 1.0, same order
    np.testing.assert_allclose(found_d, exact_d, rtol=1e-4, atol=1e-3)
    assert ivf.recall_at_k(found_i, ivf.exact_neighbours(index["queries"], index["keys"], 16)) == 1.0
    assert np.array_equal(ivf.ivf_search(index["queries"], index["keys"], layout, layout.lists, 16), exact_i)


def test_the_compiled_loop_the_gather_and_the_numpy_reference_agree(index):
    gathered_d, gathered_i = searched(index, 3, 16)
    looped_d, looped_i = searched(index, 3, 16, loop=True)
    assert np.array_equal(looped_i, gathered_i)
    np.testing.assert_allclose(looped_d, gathered_d, rtol=1e-4, atol=1e-3)
    assert np.array_equal(ivf.ivf_search(index["queries"], index["keys"], index["layout"], 3, 16), gathered_i)


def test_the_compiled_search_takes_every_tensor_as_an_input(index):
    # XLA's TensorFlow bridge folds whatever a slice's start depends on into compile-time constants
    # when it can: the queries and the index then became constants (a recompile per query batch,
    # and ~29 s more compiling per decode shape on the recipe's 7,238 lists).
    import re

    import tensorflow as tf

    layout = index["layout"]
    padded = ivf.key_tensors(index["keys"], padding=layout.capacity)
    tensors = ivf.ivf_tensors(layout, 3)
    hlo = tf.function(ivf.ivf_nearest, jit_compile=True).experimental_get_compiler_ir(
        tf.constant(index["queries"]), *padded, tensors, 16)(stage="hlo")
    entry = hlo[hlo.index("ENTRY"):].split("\n")[0]  # the entry computation's signature
    assert len(re.findall(r"arg\d+\.\d+: ", entry)) == 7  # queries, keys, key norms and the index's 4


def test_padding_is_never_a_neighbour(index):
    layout, keys32 = index["layout"], index["keys"]
    k = layout.capacity + 3  # one list holds fewer: the rest of the window is padding
    distances, indices = searched(index, 1, k)
    assert np.array_equal(searched(index, 1, k, loop=True)[1], indices)
    coarse = np.square(index["queries"][:, None, :] - layout.centroids[None]).sum(-1)
    for query, row_d, row_i, nearest_list in zip(index["queries"], distances, indices, coarse.argmin(1), strict=True):
        start, stop = layout.offsets[nearest_list], layout.offsets[nearest_list + 1]
        real = row_i >= 0
        assert real.sum() == stop - start and np.all(np.isinf(row_d[~real]))  # exactly the list's entries
        assert np.all((row_i[real] >= start) & (row_i[real] < stop))
        np.testing.assert_allclose(row_d[real], np.square(keys32[row_i[real]] - query).sum(-1), rtol=1e-4, atol=1e-3)
    values = np.arange(len(keys32)) % 7 + 4
    knn = knn_tensors(keys32, values, 1.0, 1.0, layout, 1)
    probs = np.asarray(knn_probs(index["queries"], knn._replace(ivf=knn.ivf._replace(loop=False)), k, 16))
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)  # padding weighs nothing, and no NaN
    assert np.all(probs[:, :4] == 0)


def test_nprobe_is_the_fewest_lists_reaching_the_recall_target(index):
    nprobe, layout = ivf.choose_nprobe(index["keys"], index["layout"], 8)
    assert layout.recall_k == 8 and max(layout.recall) == nprobe and layout.recall[nprobe] >= ivf.RECALL_TARGET
    assert all(recall < ivf.RECALL_TARGET for n, recall in layout.recall.items() if n < nprobe)
    assert nprobe < layout.lists  # clustered keys: a few lists hold the neighbours
