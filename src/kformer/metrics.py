"""Metrics users know: masked sequence loss/accuracy, BLEU/chrF, classification reports."""


# --- Sequence loss and accuracy that ignore padding (helper B: seq2seq) ---------------------------
# Token id 0 is padding in every kformer vocabulary (kformer.text.specials.PAD_ID); these score only
# real target tokens, so a batch's padding length never changes the numbers.

import keras  # noqa: E402
from keras import ops  # noqa: E402

SEQUENCE_PAD_ID = 0


@keras.saving.register_keras_serializable(package="kformer")
class MaskedSparseCategoricalCrossentropy(keras.losses.Loss):
    """Token-level cross-entropy over non-padding targets, with optional label smoothing.

    ``y_true`` (batch, T) int ids (0 = padding), ``y_pred`` (batch, T, vocab) logits (or
    probabilities with ``from_logits=False``). Returns the mean over real tokens of the whole batch
    (sum of token losses / number of non-padding tokens), so short and long batches weigh tokens
    equally. ``label_smoothing`` spreads that much probability mass uniformly over the vocabulary.
    """

    def __init__(self, label_smoothing=0.0, from_logits=True, pad_id=SEQUENCE_PAD_ID,
                 name="masked_sparse_categorical_crossentropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.label_smoothing = float(label_smoothing)
        self.from_logits = bool(from_logits)
        self.pad_id = int(pad_id)

    def call(self, y_true, y_pred):
        """Per-token losses (batch, T), zero at padding.

        The smoothed target distribution ``(1 - eps) * one_hot + eps / vocab`` goes through one
        fused softmax cross-entropy (TensorFlow's computes the gradient ``softmax - target`` in the
        same pass). The same loss written as log-softmax + a gather of the true token's log
        probability spent about a quarter of the en-es training step in the gather's gradient, a
        scatter over the ``(batch * T, vocab)`` logits (``python -m bench.roofline``)."""
        y_true = ops.cast(y_true, "int32")
        y_pred = ops.cast(y_pred, "float32")
        vocab = ops.shape(y_pred)[-1]
        target = ops.one_hot(y_true, vocab, dtype="float32")
        if self.label_smoothing:
            eps = self.label_smoothing
            target = target * (1.0 - eps) + eps / ops.cast(vocab, "float32")
        if self.from_logits:
            losses = ops.categorical_crossentropy(target, y_pred, from_logits=True)
        else:
            losses = -ops.sum(target * ops.log(ops.clip(y_pred, 1e-7, 1.0)), axis=-1)
        mask = ops.cast(ops.not_equal(y_true, self.pad_id), losses.dtype)
        return losses * mask

    def __call__(self, y_true, y_pred, sample_weight=None):
        # Reduced here, not by keras.losses.Loss, so a Keras mask riding on y_pred cannot rescale it.
        losses = self.call(y_true, y_pred)
        mask = ops.cast(ops.not_equal(ops.cast(y_true, "int32"), self.pad_id), losses.dtype)
        if sample_weight is not None:
            weight = ops.cast(sample_weight, losses.dtype)
            while len(weight.shape) < len(mask.shape):
                weight = ops.expand_dims(weight, -1)
            mask = mask * weight
            losses = losses * weight
        return ops.divide_no_nan(ops.sum(losses), ops.sum(mask))

    def get_config(self):
        config = super().get_config()
        config.update(label_smoothing=self.label_smoothing, from_logits=self.from_logits, pad_id=self.pad_id)
        return config


@keras.saving.register_keras_serializable(package="kformer")
class MaskedAccuracy(keras.metrics.Metric):
    """Fraction of non-padding target tokens whose arg-max prediction is right, over all batches seen.

    ``y_true`` (batch, T) int ids, 0 = padding; ``y_pred`` (batch, T, vocab) scores.
    """

    def __init__(self, pad_id=SEQUENCE_PAD_ID, name="masked_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.pad_id = int(pad_id)
        self.correct = self.add_variable(shape=(), initializer="zeros", name="correct")
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "int32")
        predicted = ops.cast(ops.argmax(y_pred, axis=-1), "int32")
        mask = ops.cast(ops.not_equal(y_true, self.pad_id), "float32")
        if sample_weight is not None:
            weight = ops.cast(sample_weight, "float32")
            while len(weight.shape) < len(mask.shape):
                weight = ops.expand_dims(weight, -1)
            mask = mask * weight
        hits = ops.cast(ops.equal(y_true, predicted), "float32") * mask
        self.correct.assign_add(ops.sum(hits))
        self.total.assign_add(ops.sum(mask))

    def result(self):
        return ops.divide_no_nan(self.correct, self.total)

    def reset_state(self):
        self.correct.assign(0.0)
        self.total.assign(0.0)

    def get_config(self):
        config = super().get_config()
        config.update(pad_id=self.pad_id)
        return config


# --- Translation metrics (helper C: translate) ----------------------------------------------------
# Corpus-level BLEU and chrF as sacrebleu computes them (its default 13a tokenisation and chrF
# character 6-grams), so numbers compare with published ones; exact match after whitespace trimming.


def translation_scores(hypotheses, references) -> dict:
    """``{"bleu", "chrf", "exact_match", "n"}`` of hypotheses against one reference each.

    BLEU and chrF are on sacrebleu's 0..100 scale; exact_match is a 0..1 fraction.
    """
    import sacrebleu

    hypotheses, references = [str(h) for h in hypotheses], [str(r) for r in references]
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        return {"bleu": 0.0, "chrf": 0.0, "exact_match": 0.0, "n": 0}
    exact = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references, strict=True)) / len(hypotheses)
    return {
        "bleu": float(sacrebleu.corpus_bleu(hypotheses, [references]).score),
        "chrf": float(sacrebleu.corpus_chrf(hypotheses, [references]).score),
        "exact_match": float(exact),
        "n": len(hypotheses),
    }


def longest_run(items) -> int:
    """The most times one item follows itself in ``items`` (0 for none)."""
    best = run = 0
    previous = object()
    for item in items:
        run = run + 1 if item == previous else 1
        best, previous = max(best, run), item
    return best


def repetition_share(hypotheses, pieces=None, max_run: int = 3) -> float:
    """The share (0..1) of ``hypotheses`` in which a word -- or, with ``pieces`` (one id or piece
    list per hypothesis, e.g. the target vocabulary's encoding), a subword -- repeats more than
    ``max_run`` times in a row: the stuck loop of an undertrained decoder (``a a a a``, ``2000000``)."""
    hypotheses = [str(h) for h in hypotheses]
    if not hypotheses:
        return 0.0
    pieces = [[]] * len(hypotheses) if pieces is None else list(pieces)
    if len(pieces) != len(hypotheses):
        raise ValueError(f"{len(pieces)} piece lists but {len(hypotheses)} hypotheses")
    stuck = sum(max(longest_run(h.split()), longest_run(p)) > max_run for h, p in zip(hypotheses, pieces, strict=True))
    return stuck / len(hypotheses)


# --- Classification report (helper A: classify) ---------------------------------------------------
# Labels are the user's strings; scikit-learn does the arithmetic so the numbers match its docs.


def classification_scores(y_true, y_pred, labels=None, sample_weight=None) -> dict:
    """Accuracy, macro-F1, per-class precision/recall/F1/support and the confusion matrix.

    ``y_true``/``y_pred`` are label strings; ``labels`` fixes the order (default: sorted union).
    ``sample_weight`` counts each row that many times (so pairs of labels with their counts can
    stand for any number of rows).
    Returns ``{"accuracy", "macro_f1", "n", "labels", "per_class": {label: {...}}, "confusion": [[...]]}``
    where ``confusion[i][j]`` counts true ``labels[i]`` predicted as ``labels[j]``.
    """
    from sklearn.metrics import (
        accuracy_score,
        confusion_matrix,
        f1_score,
        precision_recall_fscore_support,
    )

    y_true, y_pred = [str(y) for y in y_true], [str(y) for y in y_pred]
    if len(y_true) != len(y_pred):
        raise ValueError(f"{len(y_true)} true labels but {len(y_pred)} predictions")
    if labels is None:
        labels = sorted(set(y_true) | set(y_pred))
    labels = [str(x) for x in labels]
    if not y_true:
        return {"accuracy": 0.0, "macro_f1": 0.0, "n": 0, "labels": labels, "per_class": {}, "confusion": []}
    present = [label for label in labels if label in set(y_true)]
    weights = {"sample_weight": sample_weight}
    precision, recall, f1, support = precision_recall_fscore_support(y_true, y_pred, labels=labels, zero_division=0,
                                                                     **weights)
    return {
        "accuracy": float(accuracy_score(y_true, y_pred, **weights)),
        "macro_f1": float(f1_score(y_true, y_pred, labels=present, average="macro", zero_division=0, **weights)),
        "n": len(y_true) if sample_weight is None else int(round(sum(sample_weight))),
        "labels": labels,
        "per_class": {
            label: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
            for label, p, r, f, s in zip(labels, precision, recall, f1, support, strict=True)
        },
        "confusion": confusion_matrix(y_true, y_pred, labels=labels, **weights).astype(int).tolist(),
    }


def format_classification_report(scores: dict) -> str:
    """A plain-text table of :func:`classification_scores` (per-class rows, then the totals)."""
    width = max([len(label) for label in scores["per_class"]] + [10])
    lines = [f"{'label':<{width}}  precision  recall  f1     support"]
    for label, row in scores["per_class"].items():
        lines.append(f"{label:<{width}}  {row['precision']:9.3f}  {row['recall']:6.3f}  {row['f1']:5.3f}  {row['support']:7d}")
    lines.append(f"accuracy {scores['accuracy']:.4f}   macro-F1 {scores['macro_f1']:.4f}   n {scores['n']}")
    return "\n".join(lines)
