"""The out-of-scope scores that read the text's wording (:mod:`~kformer.tasks.classify.ood_text`:
``tfidf`` and ``combined``) as graph operations, so an export computes the score the model folder
computes in NumPy/SciPy: TensorFlow ops for the SavedModel (:func:`tf_text_score`), ONNX operators
for ``model.onnx`` (:func:`onnx_text_score`). Both start from the wide part's TF-IDF features as
its graph already computes them (:mod:`~kformer.tasks.classify.wide_graph`: each block's sublinear
TF-IDF, L2-normalised, the blocks side by side), then:

* the novelty: the features' row scaled to unit length (as :func:`~.ood_text.unit_rows`), its
  cosine similarity with every row of the bank of training texts, and ``-(1 - s_k)`` with ``s_k``
  the ``k``-th largest similarity (``k`` at most the bank's rows);
* combined: ``(1 - w) (network - c0) / s0 + w (novelty - c1) / s1``, the network score being the
  graph's own (the best of the final, mixed probabilities, or the distance of
  :mod:`~kformer.tasks.classify.ood_graph`).

The bank stays sparse in both graphs (up to 20,000 rows by tens of thousands of n-gram columns, a
few hundred nonzeros a row: dense it would be gigabytes). A similarity is a sum over the n-grams
a text and a bank row share:

* TensorFlow: the bank a ``SparseTensor`` ``(N, F)`` (:func:`bank_coordinates`) times the dense
  unit texts ``(B, F)`` (``sparse_dense_matmul``): every bank nonzero times the batch, in one
  multithreaded kernel, holding ``(N, B)`` and ``(B, F)``;
* ONNX: a text at a time under ``Scan``, only one text's matches held. The bank is kept by
  column (:func:`bank_columns`); the text's nonzero columns (``NonZero``) pick their slices of
  the bank, laid end to end (``CumSum``), whose values times the text's are added into their
  bank rows (``ScatterElements`` with ``reduction="add"``: opset 16 or later): work in
  proportion to the matches, not to all the bank's nonzeros.

Then ``TopK``. Measured on a random 20,000-row bank of 200 nonzeros a row (50,000 columns), 64
texts, beside other work on 2 cores (ONNX Runtime on one thread): TensorFlow 0.7 s; ONNX 0.06 s
with columns drawn uniformly, 2.2 s with Zipf-distributed columns (common n-grams: some 680,000
matches a text), against 3.2 s either way gathering each text at every bank nonzero (Gather, Mul,
ScatterElements per row); SciPy 0.1-0.2 s.
Float32 sums of at most a few hundred products of unit-row entries: the similarities match
SciPy's to about 1e-7.
"""

from __future__ import annotations

import numpy as np

from kformer.tasks.classify.ood import MIN_SCALE
from kformer.tasks.classify.ood_text import COMBINED, TFIDF

SCATTER_ADD_OPSET = 16  # ScatterElements takes reduction="add" from opset 16


def novelty_of(score):
    """The :class:`~.ood_text.TfidfNovelty` a ``tfidf`` or ``combined`` score reads."""
    return score if score.kind == TFIDF else score.tfidf


def combined_terms(score) -> tuple[tuple[float, float], tuple[float, float]]:
    """``((a0, c0), (a1, c1))`` with combined = ``a0 (network - c0) + a1 (novelty - c1)``:
    ``a0 = (1 - w) / s0``, ``a1 = w / s1`` (float64, cast to float32 by the graphs)."""
    return (((1.0 - score.weight) / score.scale[0], score.centre[0]),
            (score.weight / score.scale[1], score.centre[1]))


def bank_coordinates(bank) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rows, columns, values)`` ``(nnz,)`` of a SciPy CSR ``bank`` ``(N, F)``: int32, int32,
    float32 (12 bytes a nonzero in the graph), row-major with columns ascending within a row (a
    canonical SparseTensor order)."""
    from scipy import sparse

    bank = sparse.csr_matrix(bank).sorted_indices()
    rows = np.repeat(np.arange(bank.shape[0], dtype="int32"), np.diff(bank.indptr))
    return rows, bank.indices.astype("int32"), bank.data.astype("float32")


def bank_columns(bank) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(starts, rows, values)`` of a SciPy ``bank`` ``(N, F)`` by column (CSC): column ``f``'s
    nonzeros are ``rows[starts[f]:starts[f + 1]]`` (int32, bank rows ascending) with ``values``
    (float32) alike; ``starts`` ``(F + 1,)`` int64. 12 bytes a nonzero in the graph."""
    from scipy import sparse

    bank = sparse.csc_matrix(bank).sorted_indices()
    return bank.indptr.astype("int64"), bank.indices.astype("int32"), bank.data.astype("float32")


# --- TensorFlow (SavedModel) ----------------------------------------------------------------------


def tf_text_score(score):
    """A ``tf.Module`` computing ``score`` (tfidf or combined): called with the wide part's
    features (``TfWide.features``: a ``tf.SparseTensor`` ``(B, F)`` float32) and the graph's
    network score ``(B,)`` float32 (combined reads it; tfidf ignores it), it gives the in-scope
    scores ``(B,)`` float32. Track it in the export so its bank is saved with the graph."""
    import tensorflow as tf

    class TfTextScore(tf.Module):
        def __init__(self):
            super().__init__(name=f"ood_{score.kind}")
            novelty = novelty_of(score)
            rows, columns, values = bank_coordinates(novelty.bank)
            self.kind, self.shape = score.kind, tuple(int(n) for n in novelty.bank.shape)  # (N, F)
            self.k = min(int(novelty.k), self.shape[0])
            self.bank_indices = tf.Variable(np.stack([rows, columns], axis=1), trainable=False,
                                            name="bank_indices")  # (nnz, 2) int32: cast to int64 when used
            self.bank_values = tf.Variable(values, trainable=False, name="bank_values")
            self.terms = combined_terms(score) if score.kind == COMBINED else None

        def __call__(self, features, network=None):
            novelty = self.novelty(features)
            if self.terms is None:
                return novelty
            (a0, c0), (a1, c1) = self.terms
            return a0 * (tf.cast(network, tf.float32) - c0) + a1 * (novelty - c1)

        def novelty(self, features):
            """``(B,)``: ``s_k - 1`` of the unit rows of ``features`` ``(B, F)`` (sparse) against the bank."""
            row, batch = features.indices[:, 0], features.dense_shape[0]
            norms = tf.sqrt(tf.math.unsorted_segment_sum(tf.square(features.values), row, batch))  # (B,)
            unit = features.values / tf.maximum(tf.gather(norms, row), MIN_SCALE)
            queries = tf.scatter_nd(features.indices, unit, tf.stack([batch, tf.constant(self.shape[1], tf.int64)]))
            bank = tf.SparseTensor(tf.cast(self.bank_indices, tf.int64), self.bank_values, self.shape)
            similarity = tf.sparse.sparse_dense_matmul(bank, queries, adjoint_b=True)  # (N, B)
            return tf.math.top_k(tf.transpose(similarity), k=self.k).values[:, self.k - 1] - 1.0

    return TfTextScore()


# --- ONNX -----------------------------------------------------------------------------------------


def require_opset(model, version: int = SCATTER_ADD_OPSET) -> None:
    """Raise ``model``'s default-domain opset to ``version`` where it is lower (the converter's
    :data:`~kformer.models.export_plan.ONNX_OPSET` is already 17)."""
    for item in model.opset_import:
        if item.domain in ("", "ai.onnx") and item.version < version:
            item.version = version


def onnx_text_score(g, score, features: str, network: str) -> str:
    """Nodes of ``g`` (a :class:`~kformer.tasks.classify.wide_graph.OnnxGraph`): the wide part's
    dense ``features`` ``(B, F)`` float32 (``onnx_wide_features``) and the network score
    ``network`` ``(B,)`` float32 (read by combined) -> the in-scope scores ``(B,)`` float32."""
    novelty = _onnx_novelty(g, novelty_of(score), features)
    if score.kind != COMBINED:
        return novelty
    (a0, c0), (a1, c1) = combined_terms(score)

    def term(value: str, a: float, c: float) -> str:
        return g.op("Mul", [g.op("Sub", [value, g.const(np.float32(c))]), g.const(np.float32(a))])

    return g.op("Add", [term(network, a0, c0), term(novelty, a1, c1)], "combined")


def _onnx_novelty(g, novelty, features: str) -> str:
    """Nodes: features ``(B, F)`` -> ``s_k - 1`` ``(B,)``, each row scaled to unit length and
    scored by :func:`_onnx_row_body` under a ``Scan`` (one row at a time). A zero row is appended
    and its score dropped: ONNX Runtime's Scan fails on an empty batch."""
    from onnx import TensorProto, helper

    norm = g.op("Sqrt", [g.op("ReduceSum", [g.op("Mul", [features, features]),
                                            g.const(np.array([1], dtype="int64"))], keepdims=1)])
    unit = g.op("Div", [features, g.op("Max", [norm, g.const(np.float32(MIN_SCALE))])], "unit_features")
    width = np.array([1, novelty.bank.shape[1]], dtype="int64")
    padded = g.op("Concat", [unit, g.op("ConstantOfShape", [g.const(width, "pad_shape")],
                                        value=helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0]))], axis=0)
    scanned = g.name("novelty_padded")
    g.nodes.append(helper.make_node("Scan", [padded], [scanned], body=_onnx_row_body(g.prefix, novelty),
                                    num_scan_inputs=1))
    return g.op("Slice", [scanned, g.const(np.array([0], dtype="int64")), g.const(np.array([-1], dtype="int64"))],
                "novelty")


def _onnx_row_body(prefix: str, novelty):
    """The ``Scan`` body: one unit row ``(F,)`` -> ``s_k - 1`` (a scalar), the bank's columns
    (:func:`bank_columns`) its initializers."""
    from onnx import TensorProto, helper

    from kformer.tasks.classify.wide_graph import OnnxGraph

    body = OnnxGraph(f"{prefix}novelty_row_")
    row = body.name("row")
    starts, rows, values = (body.const(array, name) for array, name in
                            zip(bank_columns(novelty.bank), ("bank_starts", "bank_rows", "bank_values"), strict=True))
    owner, entries, row_values = _onnx_matches(body, row, starts)
    count = int(novelty.bank.shape[0])
    products = body.op("Mul", [body.op("Gather", [row_values, owner], axis=0),
                               body.op("Gather", [values, entries], axis=0)], "products")
    similarity = body.op("ScatterElements", [body.const(np.zeros(count, dtype="float32"), "zeros"),
                                             body.op("Gather", [rows, entries], axis=0), products],
                         "similarity", axis=0, reduction="add")  # (N,): added into each entry's bank row
    k = min(int(novelty.k), count)
    top = body.name("top")
    body.nodes.append(helper.make_node("TopK", [similarity, body.const(np.array([k], dtype="int64"), "k")],
                                       [top, body.name("top_rows")], axis=0))  # (k,) largest first
    kth = body.op("Gather", [top, body.const(np.array(k - 1, dtype="int64"), "last")], "kth", axis=0)
    out = body.op("Sub", [kth, body.const(np.float32(1.0), "one")], "row_novelty")
    return helper.make_graph(body.nodes, f"{prefix}novelty_row",
                             [helper.make_tensor_value_info(row, TensorProto.FLOAT, [None])],
                             [helper.make_tensor_value_info(out, TensorProto.FLOAT, [])], body.initializers)


def _onnx_matches(body, row: str, starts: str) -> tuple[str, str, str]:
    """Nodes: a row ``(F,)`` and the bank's column ``starts`` ``(F + 1,)`` (:func:`bank_columns`)
    -> ``(owner, entries, values)``. The row's ``Q`` nonzero columns that some bank row has are
    kept; for each of the ``M`` bank nonzeros in them, ``owner`` ``(M,)`` is its column's index
    among the kept ones and ``entries`` ``(M,)`` its index in the bank's column-major arrays;
    ``values`` ``(Q,)`` are the row's at the kept columns. The kept columns' slices are laid end
    to end: each slice's first position is marked 1, the running sum of the marks minus 1 is a
    position's owner, and its entry is its slice's start plus its place in the slice."""
    from onnx import TensorProto, helper

    def gather(data: str, indices: str) -> str:
        return body.op("Gather", [data, indices], axis=0)

    def filled(like: str, value: int) -> str:  # int64 ``value`` in the shape of ``like``
        return body.op("ConstantOfShape", [body.op("Shape", [like])],
                       value=helper.make_tensor("value", TensorProto.INT64, [1], [value]))

    columns = body.op("Reshape", [body.op("NonZero", [row]), body.const(np.array([-1], dtype="int64"))], "columns")
    first = gather(starts, columns)
    lengths = body.op("Sub", [gather(starts, body.op("Add", [columns, body.const(np.int64(1))])), first])
    kept = body.op("Greater", [lengths, body.const(np.int64(0))])
    columns, first, lengths = (body.op("Compress", [value, kept], axis=0) for value in (columns, first, lengths))
    offsets = body.op("CumSum", [lengths, body.const(np.int64(0))], "offsets", exclusive=1)  # (Q,)
    positions = body.op("Range", [body.const(np.int64(0)), body.op("ReduceSum", [lengths], keepdims=0),
                                  body.const(np.int64(1))], "positions")  # (M,)
    marks = body.op("ScatterElements", [filled(positions, 0), offsets, filled(offsets, 1)], "marks", axis=0)
    owner = body.op("Sub", [body.op("CumSum", [marks, body.const(np.int64(0))]), body.const(np.int64(1))], "owner")
    entries = body.op("Add", [gather(first, owner), body.op("Sub", [positions, gather(offsets, owner)])], "entries")
    return owner, entries, gather(row, columns)
