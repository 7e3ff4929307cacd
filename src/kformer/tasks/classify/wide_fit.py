"""Fitting a classifier's wide part in a training run (the part itself: :mod:`.wide`).

A TF-IDF + multinomial logistic regression, fitted on the TRAINING split only (scikit-learn; no
Keras here):

=================  ==========================================================================
features           word 1-2 grams (1-3 with the run's ``wide_ngrams = 3``; sublinear tf, at
                   least :data:`MIN_DF` training texts); for
                   short texts -- the training texts' median is at most :data:`SHORT_TEXT_WORDS`
                   words -- also character 2-5 grams within word boundaries (``char_wb``),
                   which catch misspellings and word pieces a short text has few words for.
                   Each block is L2-normalised on its own; a text is read up to
                   :data:`~kformer.tasks.classify.wide.MAX_CHARS` characters
size caps          at most :data:`WORD_FEATURES` word and :data:`CHAR_FEATURES` char n-grams
                   (the most frequent), and at most :data:`MAX_COEFFICIENTS` weights in all
                   (classes x features), so the saved part stays under ~25 MB
two classes        the features scaled by their naive-Bayes log-count ratios (:func:`nb_ratios`,
                   as NBSVM); the scaling is folded into the saved weights, so prediction
                   applies plain TF-IDF features
model              logistic regression (L2; lbfgs, liblinear for two classes); ``C`` =
                   :data:`C`, for two classes the value of :data:`C_GRID` with the lowest
                   validation log-loss (:func:`fit`); balanced class weights when the run has
                   ``class_weights``
=================  ==========================================================================

The part's weight ``w`` in the mix is chosen on the validation split (:func:`choose_weight`: of
the grid 0, 0.05, ..., 1 the lowest validation log-loss of the mix; :func:`choose_mix`).
``metrics.json`` records under ``"wide"`` the validation (and test) accuracy of the Transformer
alone, the wide part alone and the mix: what each part contributes.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from kformer.tasks.classify.wide import (
    TINY,
    Block,
    Mix,
    WidePart,
    clip_texts,
    mix,
    vectorizer_settings,
)

SHORT_TEXT_WORDS = 32  # median words per training text at or below which char n-grams are added
WORD_NGRAMS, CHAR_NGRAMS = (1, 2), (2, 5)
MIN_DF = 2  # an n-gram must occur in this many training texts (1 when that leaves none)
WORD_FEATURES, CHAR_FEATURES = 400_000, 200_000
MAX_COEFFICIENTS = 12_000_000  # classes x features: 24 MB of float16 at most
C = 10.0  # inverse L2 strength of the logistic regression (more than two classes, or no validation split)
C_GRID = (10.0, 30.0, 100.0)  # two classes with a validation split: the values tried (lowest log-loss wins)
NB_ALPHA = 1.0  # added to each class's feature sums in the naive-Bayes ratios (two classes)
MAX_ITER = 1000
WEIGHT_GRID = tuple(round(0.05 * i, 2) for i in range(21))  # w = 0, 0.05, ..., 1


def median_words(texts: Sequence[str]) -> float:
    """The median whitespace-separated words per text (of at most 50,000 evenly spaced texts)."""
    step = max(1, len(texts) // 50_000)
    return float(np.median([len(text.split()) for text in texts[::step]])) if len(texts) else 0.0


def feature_plan(texts: Sequence[str], classes: int,
                 word_ngrams: int = WORD_NGRAMS[1]) -> list[tuple[str, tuple[int, int], int]]:
    """``[(analyzer, ngrams, max_features)]`` for these training texts and this many classes:
    word 1-``word_ngrams`` grams, plus char_wb 2-5 grams for short texts; each block at most its
    cap and an equal share of :data:`MAX_COEFFICIENTS` / classes."""
    plan = [("word", (WORD_NGRAMS[0], word_ngrams), WORD_FEATURES)]
    if median_words(texts) <= SHORT_TEXT_WORDS:
        plan.append(("char_wb", CHAR_NGRAMS, CHAR_FEATURES))
    share = MAX_COEFFICIENTS // max(classes, 2) // len(plan)
    return [(analyzer, ngrams, min(cap, share)) for analyzer, ngrams, cap in plan]


def fit(texts: Sequence[str], labels: Sequence[str], label_order: Sequence[str], *,
        class_weights: bool = False, valid: tuple[Sequence[str], Sequence[str]] | None = None,
        word_ngrams: int = WORD_NGRAMS[1], c: float | None = None) -> WidePart | None:
    """Fit the wide part on training ``texts`` and ``labels``; outputs in ``label_order`` (every
    training label must be in it). With two classes the features are scaled by their naive-Bayes
    log-count ratios (:func:`nb_ratios`) and, given ``valid`` (texts, labels), ``C`` is the value
    of :data:`C_GRID` with the lowest validation log-loss (liblinear fits take seconds; on IMDB C
    30-100 beat 10 by 0.4 points); else :data:`C` (one lbfgs fit: on HWU64 and the IT tickets a
    grid of C changed the mixed model's accuracy by nothing and ~0.1 points, for 3x the fit time,
    a minute a fit on the tickets). ``word_ngrams``: the longest word n-gram (3 on IMDB: the part
    alone 91.1 % vs 90.9 % with 2, in twice the fit time). ``c`` fixes ``C`` (no grid, ``valid``
    unused). None when no n-gram occurs in the texts at all. The part's :attr:`WidePart.about`
    says what was chosen."""
    from scipy import sparse

    texts, label_order = clip_texts(texts), [str(label) for label in label_order]
    blocks, matrices, vectorizers = [], [], []
    for analyzer, ngrams, max_features in feature_plan(texts, len(label_order), word_ngrams):
        fitted = _fit_block(texts, analyzer, ngrams, max_features)
        if fitted is not None:
            blocks.append(fitted[0])
            matrices.append(fitted[1])
            vectorizers.append(fitted[2])
    if not blocks:
        return None
    x = sparse.hstack(matrices, format="csr", dtype="float32")
    labels = [str(label) for label in labels]
    scale = nb_ratios(x, labels) if len(set(labels)) == 2 else None
    if scale is not None:
        x = x.multiply(scale).tocsr()
    held = None  # C is chosen on validation for two classes only (below: why)
    if scale is not None and valid is not None and len(valid[0]) and c is None:
        seen = set(labels)
        known = [i for i, label in enumerate(valid[1]) if str(label) in seen]
        if known:
            v_texts = clip_texts([valid[0][i] for i in known])
            xv = sparse.hstack([v.transform(v_texts) for v in vectorizers], format="csr", dtype="float32")
            held = (xv.multiply(scale).tocsr(), [str(valid[1][i]) for i in known])
    model, about = _fit_linear(x, labels, class_weights, held, C if c is None else float(c))
    coef, intercept = _in_order(model, label_order, x.shape[1])
    if scale is not None:  # folded into the weights: the saved part applies plain TF-IDF features
        coef *= scale
    about["naive_bayes"] = scale is not None
    return WidePart(label_order, blocks, coef, intercept, about)


def nb_ratios(x, labels: Sequence[str]) -> np.ndarray:
    """Naive-Bayes log-count ratios ``(features,)`` float32 of two classes (NBSVM, Wang & Manning
    2012): ``log(p / |p|_1) - log(q / |q|_1)`` with ``p``, ``q`` the feature sums ``x``
    ``(n, features)`` over each class's rows plus :data:`NB_ALPHA`. Scaling the features by them
    lets the linear model start from what each n-gram says about the classes."""
    classes = sorted(set(labels))
    second = np.array([label == classes[1] for label in labels])
    p = NB_ALPHA + np.asarray(x[second].sum(axis=0), dtype="float64").ravel()
    q = NB_ALPHA + np.asarray(x[~second].sum(axis=0), dtype="float64").ravel()
    return (np.log(p / p.sum()) - np.log(q / q.sum())).astype("float32")


def _fit_linear(x, labels: list[str], class_weights: bool, held, c: float = C) -> tuple[Any, dict[str, Any]]:
    """The logistic regression on ``x`` ``(n, features)``: ``c``, or with ``held`` (validation
    features and labels) each of :data:`C_GRID`, keeping the lowest validation log-loss. Returns
    the model and ``{"C", "valid_by_c"}``."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    two = len(set(labels)) == 2  # liblinear: seconds on two classes
    model = LogisticRegression(C=c, max_iter=MAX_ITER, class_weight="balanced" if class_weights else None,
                               solver="liblinear" if two else "lbfgs")
    if held is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(x, labels)
        return model, {"C": c, "valid_by_c": None}
    scores, best = {}, None
    for value in sorted(C_GRID):
        model.set_params(C=value)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(x, labels)
        probs = model.predict_proba(held[0])
        truth = np.searchsorted(model.classes_, np.asarray(held[1], dtype=model.classes_.dtype))
        loss = log_loss(probs, truth)
        scores[f"{value:g}"] = {"log_loss": round(loss, 5), "accuracy": float(np.mean(probs.argmax(axis=1) == truth))}
        if best is None or loss < best[0]:
            best = (loss, value, model.coef_.copy(), model.intercept_.copy())
    model.coef_, model.intercept_ = best[2], best[3]
    return model, {"C": best[1], "valid_by_c": scores}


def _in_order(model, label_order: list[str], width: int) -> tuple[np.ndarray, np.ndarray]:
    """``(coef (classes, width), intercept (classes,))`` float32 of ``model`` in ``label_order``
    (a class the training labels lack keeps zeros)."""
    classes = [str(c) for c in model.classes_]
    coef = np.zeros((len(label_order), width), dtype="float32")
    intercept = np.zeros(len(label_order), dtype="float32")
    if len(classes) == 2:  # one weight row, for classes[1]: logits (0, s) give the same sigmoid
        coef[label_order.index(classes[1])], intercept[label_order.index(classes[1])] = model.coef_[0], model.intercept_[0]
    else:
        for row, label in enumerate(classes):
            coef[label_order.index(label)], intercept[label_order.index(label)] = model.coef_[row], model.intercept_[row]
    return coef, intercept


def _fit_block(texts: list[str], analyzer: str, ngrams: tuple[int, int], max_features: int):
    """``(Block, features (n, columns), fitted vectorizer)`` of one analyzer, or None when it
    finds no n-gram."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    for min_df in (MIN_DF, 1):
        vectorizer = TfidfVectorizer(**vectorizer_settings(analyzer, ngrams), min_df=min_df, max_features=max_features)
        try:
            x = vectorizer.fit_transform(texts)
        except ValueError:  # "empty vocabulary" / "no terms remain": too few or too short texts
            continue
        terms = [""] * len(vectorizer.vocabulary_)
        for term, column in vectorizer.vocabulary_.items():
            terms[column] = term
        block = Block(analyzer, tuple(ngrams), tuple(terms), vectorizer.idf_.astype("float32"))
        return block, x, vectorizer
    return None


def log_loss(probs: np.ndarray, truth: np.ndarray) -> float:
    """Mean ``-log p(true class)`` of ``probs`` ``(n, classes)`` for ``truth`` ``(n,)`` class
    indices (probabilities below :data:`TINY` count as it)."""
    truth = np.asarray(truth)
    picked = np.asarray(probs, dtype="float64")[np.arange(len(truth)), truth]
    return float(-np.mean(np.log(np.maximum(picked, TINY)))) if len(truth) else 0.0


def choose_weight(deep: np.ndarray, wide: np.ndarray, truth: np.ndarray) -> tuple[float, dict[str, dict[str, float]]]:
    """``(w, {"0.00": {"correct": rows, "log_loss": x}, ...})``: the :data:`WEIGHT_GRID` value
    whose geometric :func:`mix` has the lowest validation log-loss (``truth``: ``(n,)`` class
    indices; equal losses: the smaller ``w``). The log-loss moves smoothly with ``w`` where the
    count of right rows jumps: on HWU64 the most right rows tied from w = 0.5 up, and the tie
    rule's 0.5 scored 0.5 points under the wide part alone on the test set."""
    truth = np.asarray(truth)
    table = {}
    for w in WEIGHT_GRID:
        mixed = mix(deep, wide, w)
        table[w] = {"correct": int((mixed.argmax(axis=1) == truth).sum()), "log_loss": round(log_loss(mixed, truth), 6)}
    weight = min(WEIGHT_GRID, key=lambda w: (table[w]["log_loss"], w))
    return weight, {f"{w:.2f}": item for w, item in table.items()}


# --- in a training run -----------------------------------------------------------------------------


def _accuracy(probs: np.ndarray, labels: Sequence[str], index: dict[str, int]) -> float:
    """Share of rows whose argmax is their label (a label outside ``index`` is always wrong)."""
    truth = np.array([index.get(label, -1) for label in labels])
    return float((probs.argmax(axis=1) == truth).mean()) if len(truth) else 0.0


def fit_timed(train, label_order: Sequence[str], *, class_weights: bool = False,
              valid=None, word_ngrams: int = WORD_NGRAMS[1]) -> tuple[WidePart | None, float]:
    """:func:`fit` on ``train`` (LabelledTexts; ``C`` chosen on ``valid`` when given) ->
    ``(part or None, seconds it took)``. A run fits it before the network, so ``max_minutes`` can
    count it (:class:`kformer.tasks.classify.train.ClassifyRun`)."""
    start = time.perf_counter()
    held = None if valid is None else (valid.texts, valid.labels)
    part = fit(train.texts, train.labels, label_order, class_weights=class_weights, valid=held,
               word_ngrams=word_ngrams)
    return part, time.perf_counter() - start


def choose_mix(classifier, part: WidePart | None, fit_seconds: float, valid, *,
               batch_size: int = 64) -> tuple[Mix | None, dict[str, Any]]:
    """The :class:`Mix` of the fitted wide ``part`` with ``classifier``'s network (a
    :class:`~kformer.tasks.classify.Classifier`), its weight chosen on ``valid``, and
    metrics.json's ``"wide"``: ``weight``, ``valid_accuracy`` (``transformer``, ``wide``,
    ``mixed``), ``test_accuracy`` (None: :func:`part_accuracies` gives it), ``rule``,
    ``features``, the fit's ``C`` and ``naive_bayes`` (:attr:`WidePart.about`), ``fit_seconds``
    and the validation rows right and log-loss at each grid weight. ``(None, {"weight": None,
    ...})`` when there is no part."""
    if part is None:
        return None, {"weight": None, "skipped": "the training texts hold no word or character n-gram"}
    index = {label: i for i, label in enumerate(classifier.labels)}
    deep_valid = classifier.network_probabilities(valid.texts, batch_size)
    wide_valid = part.probabilities(valid.texts)
    weight, grid = choose_weight(deep_valid, wide_valid, np.array([index[label] for label in valid.labels]))
    chosen = Mix(part, weight)
    summary: dict[str, Any] = {
        "weight": weight,
        "rule": chosen.rule,
        "why": "of 0, 0.05, ..., 1 the weight whose geometric mix has the lowest validation log-loss",
        "valid_accuracy": _parts(deep_valid, wide_valid, weight, valid.labels, index),
        "test_accuracy": None,
        "features": part.features,
        **part.about,
        "fit_seconds": round(fit_seconds, 2),
        "valid_by_weight": grid,
    }
    return chosen, summary


def refit(chosen: Mix, train, valid, *, class_weights: bool = False,
          word_ngrams: int = WORD_NGRAMS[1]) -> tuple[Mix, dict[str, Any]]:
    """``chosen``'s part fitted again on the ``train`` and ``valid`` texts together, with the ``C``
    it was fitted with, at the same weight: once the weight is chosen the validation texts are
    more training data for the part the folder saves (BANKING77: the mix's test accuracy rose
    with the part fitted on all 10,003 training texts instead of 90 % of them). Everything
    measured on validation was measured before. Returns the new mix (``chosen`` when no n-gram
    is found) and metrics.json's ``wide["refit"]``: ``rows`` and ``seconds``."""
    start = time.perf_counter()
    part = fit([*train.texts, *valid.texts], [*train.labels, *valid.labels], chosen.part.labels,
               class_weights=class_weights, word_ngrams=word_ngrams, c=chosen.part.about["C"])
    refitted = chosen if part is None else Mix(part, chosen.weight, chosen.rule)
    return refitted, {"rows": len(train) + len(valid), "seconds": round(time.perf_counter() - start, 2)}


def part_accuracies(classifier, test, batch_size: int = 64) -> dict[str, float]:
    """metrics.json's ``wide["test_accuracy"]``: the Transformer's, the wide part's and the mix's
    accuracy on ``test`` (LabelledTexts) of a classifier with a wide part."""
    index = {label: i for i, label in enumerate(classifier.labels)}
    deep = classifier.network_probabilities(test.texts, batch_size)
    wide = classifier.wide
    return _parts(deep, wide.part.probabilities(test.texts), wide.weight, test.labels, index)


def _parts(deep: np.ndarray, wide: np.ndarray, weight: float, labels: Sequence[str], index: dict[str, int]) -> dict:
    return {"transformer": _accuracy(deep, labels, index), "wide": _accuracy(wide, labels, index),
            "mixed": _accuracy(mix(deep, wide, weight), labels, index)}
