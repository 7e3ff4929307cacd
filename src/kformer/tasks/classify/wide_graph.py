"""A classifier's wide part and its mix as graph operations, so an export carries them: TensorFlow
ops for the SavedModel (:class:`TfWide`), ONNX operators for ``model.onnx``
(:func:`onnx_wide_features`, :func:`onnx_wide_probabilities`, :func:`add_onnx_outputs`).

Why these and not a converter: scikit-learn's ``TfidfVectorizer`` has no TensorFlow form, and
skl2onnx's converter does not take ``char_wb`` analyzers; both graphs here are written from what the
folder holds (:class:`~kformer.tasks.classify.wide.WidePart`: each block's n-grams in column
order and ``idf``, the weights) and give scikit-learn's features exactly, by these equivalences:

* ``lowercase`` is ``str.lower`` (TensorFlow: ICU's lowercasing; ONNX: ``StringNormalizer`` in the
  C.UTF-8 locale -- both differ from Python for a handful of characters, e.g. the dotted capital I);
* the word pattern ``(?u)\\b\\w\\w+\\b`` finds the maximal runs of two or more word characters
  (:data:`~kformer.text.char_classes.WORD_CHARS`);
* ``char_wb`` n-grams of ``n >= 2`` (kformer fits 2-5) are the n-grams of each whitespace-separated
  word padded with one space each side; in ONNX the text's characters are one sequence in which
  every whitespace character and the two ends are the space, so an n-gram crossing a word boundary
  has an inner space, which no term has;
* counts ``c`` become ``1 + log c`` (sublinear tf), times ``idf``, each block L2-normalised; then
  the logistic regression (``coef``, ``intercept``), a softmax, and the mix with the network's
  probabilities (:func:`~kformer.tasks.classify.wide.mix`, geometric or linear).

ONNX uses the standard ``TfIdfVectorizer``, ``StringNormalizer`` and ``LabelEncoder`` operators and
ONNX Runtime's ``com.microsoft.Tokenizer`` (regex tokenizing: in every ONNX Runtime build). ONNX has
no substring operator, so the ONNX ``texts`` input must already be cut to the part's first
:data:`~kformer.tasks.classify.wide.MAX_CHARS` characters (the SavedModel cuts them itself).

The features (each block's L2-normalised sublinear TF-IDF, the blocks side by side) are a step of
their own in both graphs (``TfWide.features``, :func:`onnx_wide_features`), computed once: the
logistic regression reads them, and so do the ``tfidf`` and ``combined`` out-of-scope scores
(:mod:`~kformer.tasks.classify.ood_text_graph`). The export takes ``texts`` wherever either reads
them (a part of weight 0 is read for the score and not mixed in).
"""

from __future__ import annotations

import numpy as np

from kformer.tasks.classify.wide import MAX_CHARS, TINY, Mix, WidePart
from kformer.text.char_classes import SPACE_CHARS, WORD_CHARS

WORD_TOKEN = f"[{WORD_CHARS}]{{2,}}"  # sklearn's (?u)\b\w\w+\b
ONNX_DOMAINS = {"com.microsoft": 1, "ai.onnx.ml": 2}


# --- TensorFlow (SavedModel) ----------------------------------------------------------------------


def _tf_module():
    import tensorflow as tf

    class TfWide(tf.Module):
        """Raw texts ``(B,)`` -> the wide part's TF-IDF features (:meth:`features`) -> its
        probabilities ``(B, classes)`` float32 (:meth:`probabilities`; calling it does both), as TF
        ops (a ``tf.Module``: track it in the export so its tables and weights are saved)."""

        def __init__(self, part: WidePart):
            super().__init__(name="wide_part")
            self.blocks = []
            offset = 0
            for block in part.blocks:
                keys = tf.constant(list(block.terms))
                values = tf.range(len(block.terms), dtype=tf.int64)
                table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, values), -1)
                self.blocks.append((block.analyzer, block.ngrams, table, tf.constant(block.idf), offset))
                offset += len(block.terms)
            self.width = offset  # F, the columns of all blocks
            self.tables = [b[2] for b in self.blocks]  # tracked
            self.coef_t = tf.Variable(part.coef.T, trainable=False, name="coef_t")  # (features, classes)
            self.intercept = tf.Variable(part.intercept, trainable=False, name="intercept")

        def __call__(self, texts):
            return self.probabilities(self.features(texts))

        def features(self, texts):
            """Raw texts ``(B,)`` -> a ``tf.SparseTensor`` ``(B, F)`` float32: each block's sublinear
            TF-IDF of its known n-grams, L2-normalised per row, the blocks side by side in column
            order (scikit-learn's ``part.transform``; one entry per nonzero (row, column), in no particular
            order: not for ops that need a canonically ordered SparseTensor)."""
            texts = tf.strings.lower(tf.strings.substr(tf.reshape(texts, [-1]), 0, MAX_CHARS, unit="UTF8_CHAR"),
                                     encoding="utf-8")
            rows = tf.shape(texts, out_type=tf.int64)[0]
            parts = []
            for analyzer, ngrams, table, idf, offset in self.blocks:
                grams, gram_rows = (_word_grams if analyzer == "word" else _char_wb_grams)(texts, ngrams)
                row, column, values = _block_features(grams, gram_rows, rows, table, idf)
                parts.append((row, column + offset, values))
            row, column, values = (tf.concat(list(part), axis=0) for part in zip(*parts, strict=True))
            return tf.SparseTensor(tf.stack([row, column], axis=1), values,
                                   tf.stack([rows, tf.constant(self.width, tf.int64)]))

        def probabilities(self, features):
            """The logistic regression's softmax ``(B, classes)`` of :meth:`features` ``(B, F)``."""
            row, column = features.indices[:, 0], features.indices[:, 1]
            logits = tf.math.unsorted_segment_sum(tf.gather(self.coef_t, column) * features.values[:, None], row,
                                                  features.dense_shape[0])
            return tf.nn.softmax(logits + self.intercept, axis=1)

    return TfWide


def tf_wide(part: WidePart):
    """The :class:`TfWide` module of ``part`` (TensorFlow imported only here)."""
    return _tf_module()(part)


def _word_grams(texts, ngrams):
    """Word n-grams of lowercased texts: flat strings and the row each belongs to."""
    import tensorflow as tf

    words = tf.strings.split(tf.strings.regex_replace(texts, f"[^{WORD_CHARS}]+", " "), " ")
    words = tf.ragged.boolean_mask(words, tf.strings.length(words, unit="UTF8_CHAR") >= 2)
    grams = tf.strings.ngrams(words, list(range(ngrams[0], ngrams[1] + 1)), separator=" ")
    return grams.flat_values, grams.value_rowids()


def _char_wb_grams(texts, ngrams):
    """``char_wb`` n-grams: each whitespace-separated word padded with a space each side."""
    import tensorflow as tf

    words = tf.strings.split(tf.strings.regex_replace(texts, f"[{SPACE_CHARS}]+", " "), " ")
    words = tf.ragged.boolean_mask(words, tf.strings.length(words) > 0)
    padded = tf.strings.join([" ", words.flat_values, " "])
    chars = tf.strings.unicode_split(padded, "UTF-8")
    grams = tf.strings.ngrams(chars, list(range(ngrams[0], ngrams[1] + 1)), separator="")
    word_rows = words.value_rowids()
    return grams.flat_values, tf.gather(word_rows, grams.value_rowids())


def _block_features(grams, gram_rows, rows, table, idf):
    """One block's features as ``(row, column, value)`` ``(nnz,)`` each: the sublinear TF-IDF of
    the known n-grams (``grams`` ``(G,)`` of rows ``gram_rows`` ``(G,)``, ``rows`` texts in all),
    L2-normalised per row; columns within the block."""
    import tensorflow as tf

    columns = table.lookup(grams)
    known = columns >= 0
    width = tf.cast(tf.shape(idf)[0], tf.int64)
    keys = tf.boolean_mask(gram_rows, known) * width + tf.boolean_mask(columns, known)
    unique, _, counts = tf.unique_with_counts(keys)
    row, column = unique // width, unique % width
    values = (1.0 + tf.math.log(tf.cast(counts, tf.float32))) * tf.gather(idf, column)
    norms = tf.sqrt(tf.math.unsorted_segment_sum(values * values, row, rows))
    return row, column, values / tf.gather(norms, row)


def tf_mix(deep, wide, mix: Mix):
    """:func:`kformer.tasks.classify.wide.mix` as TF ops (float32)."""
    import tensorflow as tf

    weight = float(mix.weight)
    if mix.rule == "linear":
        return (1.0 - weight) * deep + weight * wide
    logits = (1.0 - weight) * tf.math.log(tf.maximum(deep, TINY)) + weight * tf.math.log(tf.maximum(wide, TINY))
    return tf.nn.softmax(logits, axis=1)


# --- ONNX -----------------------------------------------------------------------------------------


class OnnxGraph:
    """Nodes and initializers being added to an ONNX graph, with fresh names under ``prefix``."""

    def __init__(self, prefix: str):
        self.prefix, self.nodes, self.initializers, self.count = prefix, [], [], 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{self.prefix}{hint}_{self.count}"

    def const(self, value, hint: str = "c") -> str:
        from onnx import numpy_helper

        name = self.name(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, kind: str, inputs: list[str], hint: str = "", domain: str = "", **attributes) -> str:
        from onnx import helper

        out = self.name(hint or kind.lower())
        self.nodes.append(helper.make_node(kind, inputs, [out], domain=domain or None, **attributes))
        return out


def _onnx_counts(g: OnnxGraph, lowered: str, block) -> str:
    """Counts ``(B, terms)`` float32 of one block's n-grams in the lowercased texts."""
    lo, hi = block.ngrams
    grams = [term.split(" ") if block.analyzer == "word" else list(term) for term in block.terms]
    order = sorted(range(len(grams)), key=lambda i: len(grams[i]))  # the pool lists 1-grams, then 2-grams, ...
    if block.analyzer == "word":
        tokens = g.op("Tokenizer", [lowered], "words", domain="com.microsoft", mark=0, mincharnum=1, pad_value="#",
                      tokenexp=WORD_TOKEN)
        pool = {"pool_strings": [token for i in order for token in grams[i]]}
    else:
        # every character a token; whitespace, the padding and both ends become the space (id 1)
        chars = sorted({c for gram in grams for c in gram} - {" "})
        spaces = [chr(c) for c in range(0x110000) if chr(c).isspace()]
        keys = spaces + ["##"] + chars
        encoder = g.op("LabelEncoder", [g.op("Tokenizer", [lowered], "chars", domain="com.microsoft", mark=0,
                                             mincharnum=1, pad_value="##", tokenexp="(?s).")],
                       "char_ids", domain="ai.onnx.ml", keys_strings=keys,
                       values_int64s=[1] * (len(spaces) + 1) + list(range(2, len(chars) + 2)), default_int64=0)
        ids = {c: i + 2 for i, c in enumerate(chars)}
        ids[" "] = 1
        rows = g.op("Shape", [encoder], "shape", start=0, end=1)
        edge = g.op("Expand", [g.const(np.array([[1]], dtype="int64")), g.op("Concat", [rows, g.const(
            np.array([1], dtype="int64"))], axis=0)], "edge")
        tokens = g.op("Concat", [edge, encoder, edge], "padded_ids", axis=1)
        pool = {"pool_int64s": [ids[c] for i in order for c in grams[i]]}
    starts, position = [], 0  # where the n-grams of each n = 1 .. hi begin in the pool
    for n in range(1, hi + 1):
        starts.append(position)
        position += n * sum(1 for i in order if len(grams[i]) == n)
    return g.op("TfIdfVectorizer", [tokens], "counts", mode="TF", min_gram_length=lo, max_gram_length=hi,
                max_skip_count=0, ngram_counts=starts, ngram_indexes=order, **pool)


def _onnx_block_features(g: OnnxGraph, counts: str, idf: np.ndarray) -> str:
    """Sublinear TF-IDF of ``counts``, each row L2-normalised."""
    tf = g.op("Where", [g.op("Greater", [counts, g.const(np.float32(0))]),
                        g.op("Add", [g.op("Log", [g.op("Max", [counts, g.const(np.float32(1))])]),
                                     g.const(np.float32(1))]),
                        g.const(np.float32(0))], "tf")
    values = g.op("Mul", [tf, g.const(idf.astype("float32"), "idf")], "tfidf")
    norm = g.op("Sqrt", [g.op("ReduceSum", [g.op("Mul", [values, values]), g.const(np.array([1], dtype="int64"))],
                              keepdims=1)])
    return g.op("Div", [values, g.op("Max", [norm, g.const(np.float32(TINY))])], "features")


def onnx_wide_features(g: OnnxGraph, texts: str, part: WidePart) -> str:
    """Nodes: raw texts ``(B,)`` (cut to :data:`MAX_CHARS`) -> the wide part's TF-IDF features
    ``(B, F)`` float32 (dense): each block's sublinear TF-IDF, L2-normalised per row, the blocks
    side by side in column order (what :meth:`TfWide.features` gives, and ``part.transform``)."""
    lowered = g.op("StringNormalizer", [texts], "lowered", case_change_action="LOWER", locale="C.UTF-8")
    features = [_onnx_block_features(g, _onnx_counts(g, lowered, block), block.idf) for block in part.blocks]
    return features[0] if len(features) == 1 else g.op("Concat", features, "features", axis=1)


def onnx_wide_probabilities(g: OnnxGraph, features: str, part: WidePart) -> str:
    """Nodes: the wide part's features ``(B, F)`` (:func:`onnx_wide_features`) -> its probabilities
    ``(B, classes)``."""
    logits = g.op("Add", [g.op("MatMul", [features, g.const(part.coef.T.astype("float32"), "coef_t")]),
                          g.const(part.intercept.astype("float32"), "intercept")], "logits")
    return g.op("Softmax", [logits], "wide_probabilities", axis=1)


def onnx_mix(g: OnnxGraph, deep: str, wide: str, mix: Mix) -> str:
    """Nodes: :func:`kformer.tasks.classify.wide.mix` of two probability tensors."""
    weight = float(mix.weight)
    if mix.rule == "linear":
        return g.op("Add", [g.op("Mul", [deep, g.const(np.float32(1.0 - weight))]),
                            g.op("Mul", [wide, g.const(np.float32(weight))])], "mixed")

    def log(x: str, w: float) -> str:
        return g.op("Mul", [g.op("Log", [g.op("Max", [x, g.const(np.float32(TINY))])]), g.const(np.float32(w))])

    return g.op("Softmax", [g.op("Add", [log(deep, 1.0 - weight), log(wide, weight)])], "mixed", axis=1)


def add_onnx_outputs(model, labels: list[str], wide: Mix | None, distance: bool = False, text_score=None) -> None:
    """Turn ``model`` (a converted network: ``token_ids`` -> probabilities, and with ``distance``
    a second output ``ood_score``) into the classifier's ``model.onnx`` in place: with ``wide``
    (the part the graph reads), a ``texts`` input whose wide part is mixed in (weight > 0) and
    whose features ``text_score`` (a TF-IDF novelty or combined score,
    :mod:`~kformer.tasks.classify.ood_text_graph`) reads; outputs ``probabilities``, ``labels`` (the
    most likely label of each row) and ``ood_score``: the best probability, the converted
    distance, or ``text_score`` of the features and of either of those."""
    from onnx import TensorProto, helper

    from kformer.models.export_plan import rename_value

    graph = model.graph
    network = "network_probabilities"
    rename_value(graph, graph.output[0].name, network)
    g = OnnxGraph("kformer_")
    probs, features = network, None
    if wide is not None:
        graph.input.append(helper.make_tensor_value_info("texts", TensorProto.STRING, [None]))
        features = onnx_wide_features(g, "texts", wide.part)
    if wide is not None and wide.weight > 0:
        probs = onnx_mix(g, network, onnx_wide_probabilities(g, features, wide.part), wide)
    g.nodes.append(helper.make_node("Identity", [probs], ["probabilities"]))
    best = g.op("ArgMax", ["probabilities"], "best", axis=1, keepdims=0)
    g.nodes.append(helper.make_node("Gather", [g.const(np.array(labels, dtype=object), "label_names"), best],
                                    ["labels"], axis=0))
    _onnx_score(model, g, distance, text_score, features)
    graph.node.extend(g.nodes)
    graph.initializer.extend(g.initializers)
    classes = graph.output[0].type.tensor_type.shape.dim[-1].dim_value or None
    del graph.output[:]
    graph.output.extend([helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [None, classes]),
                         helper.make_tensor_value_info("labels", TensorProto.STRING, [None]),
                         helper.make_tensor_value_info("ood_score", TensorProto.FLOAT, [None])])
    have = {item.domain for item in model.opset_import}
    model.opset_import.extend(helper.make_opsetid(d, v) for d, v in ONNX_DOMAINS.items() if d not in have)


def _onnx_score(model, g: OnnxGraph, distance: bool, text_score, features: str | None) -> None:
    """Nodes of ``g`` giving ``ood_score`` ``(B,)``: the converted ``model``'s distance (with
    ``distance``; renamed ``network_ood_score`` where ``text_score`` reads it) or the best of the
    final ``probabilities``, and with ``text_score`` that score of the wide ``features`` and of it."""
    from onnx import helper

    from kformer.models.export_plan import rename_value

    score = "ood_score"
    if distance and text_score is not None:
        score = "network_ood_score"
        rename_value(model.graph, "ood_score", score)
    elif not distance:
        score = g.op("ReduceMax", ["probabilities"], "best_probability", axes=[1], keepdims=0)
    if text_score is not None:
        from kformer.tasks.classify.ood_text_graph import onnx_text_score, require_opset

        require_opset(model)
        score = onnx_text_score(g, text_score, features, score)
    if score != "ood_score":
        g.nodes.append(helper.make_node("Identity", [score], ["ood_score"]))
