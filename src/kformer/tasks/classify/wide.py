"""The wide part of a classifier: sparse n-gram features beside the Transformer ("wide and deep").

A classify run with ``wide`` on (the ``auto`` choice for networks learned from scratch; see
:mod:`kformer.tasks.classify_auto`) also fits, on the TRAINING split only, a TF-IDF +
multinomial logistic regression (scikit-learn; no Keras here):

=================  ==========================================================================
features           word 1-2 grams (1-3 with the run's ``wide_ngrams = 3``; sublinear tf, at
                   least :data:`MIN_DF` training texts); for
                   short texts -- the training texts' median is at most :data:`SHORT_TEXT_WORDS`
                   words -- also character 2-5 grams within word boundaries (``char_wb``),
                   which catch misspellings and word pieces a short text has few words for.
                   Each block is L2-normalised on its own; a text is read up to
                   :data:`MAX_CHARS` characters
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

The classifier's probabilities are then ``softmax((1 - w) * log transformer + w * log wide)``
(:func:`mix`, geometric; folders written before it mix linearly, ``(1 - w) * transformer + w *
wide``) with ``w`` chosen on the validation split (:func:`choose_weight`: of the grid 0, 0.05,
..., 1 the lowest validation log-loss of the mix). ``metrics.json``
records under ``"wide"`` the validation (and test) accuracy of the Transformer alone, the wide
part alone and the mix: what each part contributes.

Files (no pickle): ``wide.npz`` (``coef`` float16 ``(classes, features)``, ``intercept``
float32 ``(classes,)``, ``idf_<i>`` float32 per feature block) and ``wide_vocab.json`` (label
order, and per block the analyzer, n-gram range and its n-grams in column order). Loading
rebuilds each ``TfidfVectorizer`` from its fixed vocabulary and ``idf_``. The part saved and the
part used right after training are the same numbers (coefficients are rounded to float16 before
either uses them), so a loaded folder predicts exactly what its metrics were measured with.

What the wide part does not reach: attention maps show the Transformer alone, and
``kformer export`` refuses a folder with a wide part (:class:`~kformer.errors.Unsupported`).
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kformer.errors import CorruptModel

WIDE_FILE = "wide.npz"
WIDE_VOCAB_FILE = "wide_vocab.json"
FORMAT = 1
SHORT_TEXT_WORDS = 32  # median words per training text at or below which char n-grams are added
WORD_NGRAMS, CHAR_NGRAMS = (1, 2), (2, 5)
MIN_DF = 2  # an n-gram must occur in this many training texts (1 when that leaves none)
WORD_FEATURES, CHAR_FEATURES = 400_000, 200_000
MAX_COEFFICIENTS = 12_000_000  # classes x features: 24 MB of float16 at most
MAX_CHARS = 20_000  # characters of each text the wide part reads
C = 10.0  # inverse L2 strength of the logistic regression (more than two classes, or no validation split)
C_GRID = (10.0, 30.0, 100.0)  # two classes with a validation split: the values tried (lowest log-loss wins)
NB_ALPHA = 1.0  # added to each class's feature sums in the naive-Bayes ratios (two classes)
MAX_ITER = 1000
WEIGHT_GRID = tuple(round(0.05 * i, 2) for i in range(21))  # w = 0, 0.05, ..., 1
MIX_RULES = ("geometric", "linear")  # how the parts' probabilities combine (:func:`mix`)
TINY = 1e-12  # the least probability a log is taken of
ANALYZERS = {"word": "word {0}-{1} grams", "char_wb": "char_wb {0}-{1} grams"}


# --- the wide part --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """One feature block: ``analyzer`` (word or char_wb), ``ngrams`` ``(low, high)``, its
    ``terms`` (column ``i`` is ``terms[i]``) and ``idf`` ``(len(terms),)`` float32."""

    analyzer: str
    ngrams: tuple[int, int]
    terms: tuple[str, ...]
    idf: np.ndarray

    @property
    def name(self) -> str:
        return ANALYZERS[self.analyzer].format(*self.ngrams)

    def vectorizer(self):
        """A ``TfidfVectorizer`` with this block's fixed vocabulary and ``idf_`` (ready to transform)."""
        from sklearn.feature_extraction.text import TfidfVectorizer

        vectorizer = TfidfVectorizer(**_vectorizer_settings(self.analyzer, self.ngrams),
                                     vocabulary={term: i for i, term in enumerate(self.terms)})
        vectorizer.idf_ = self.idf.astype("float64")
        return vectorizer


class WidePart:
    """A fitted wide part: ``labels`` (output order), feature ``blocks``, ``coef``
    ``(classes, features)`` float32 (float16-exact) and ``intercept`` ``(classes,)`` float32."""

    def __init__(self, labels: Sequence[str], blocks: Sequence[Block], coef: np.ndarray, intercept: np.ndarray,
                 about: dict[str, Any] | None = None):
        self.about = dict(about or {})  # how it was fitted (C, naive_bayes, ...): metrics.json, not saved
        self.labels = [str(label) for label in labels]
        self.blocks = tuple(blocks)
        finite = np.finfo("float16").max
        self.coef = np.clip(np.asarray(coef, dtype="float32"), -finite, finite).astype("float16").astype("float32")
        self.intercept = np.asarray(intercept, dtype="float32")
        self._vectorizers = [block.vectorizer() for block in self.blocks]

    @property
    def features(self) -> dict[str, int]:
        """Columns per block, e.g. ``{"word 1-2 grams": 12000, "char_wb 2-5 grams": 30000}``."""
        return {block.name: len(block.terms) for block in self.blocks}

    def transform(self, texts: Sequence[str]):
        """TF-IDF features ``(len(texts), features)``, a SciPy CSR matrix (float32)."""
        from scipy import sparse

        clipped = _clip(texts)
        return sparse.hstack([v.transform(clipped) for v in self._vectorizers], format="csr", dtype="float32")

    def probabilities(self, texts: Sequence[str]) -> np.ndarray:
        """Class probabilities ``(len(texts), len(labels))`` float32, columns in :attr:`labels` order."""
        if not len(texts):
            return np.zeros((0, len(self.labels)), dtype="float32")
        logits = np.asarray(self.transform(texts) @ self.coef.T, dtype="float64") + self.intercept
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        return (probs / probs.sum(axis=1, keepdims=True)).astype("float32")

    def save(self, folder: str | os.PathLike) -> list[str]:
        """Write :data:`WIDE_FILE` and :data:`WIDE_VOCAB_FILE` into ``folder`` (a staging folder of
        :func:`kformer.folders.write_model_folder`; each file through a temporary name); returns
        their names."""
        from kformer.artifacts import write_json_atomic

        folder = Path(folder)
        arrays = {"coef": self.coef.astype("float16"), "intercept": self.intercept}
        arrays.update({f"idf_{i}": block.idf.astype("float32") for i, block in enumerate(self.blocks)})
        partial = folder / f".{WIDE_FILE}.partial.npz"
        try:
            np.savez_compressed(partial, **arrays)
            os.replace(partial, folder / WIDE_FILE)
        finally:
            partial.unlink(missing_ok=True)
        write_json_atomic(folder / WIDE_VOCAB_FILE, {
            "format": FORMAT, "labels": self.labels,
            "blocks": [{"analyzer": b.analyzer, "ngram_range": list(b.ngrams), "terms": list(b.terms)}
                       for b in self.blocks],
        })
        return [WIDE_FILE, WIDE_VOCAB_FILE]

    @classmethod
    def load(cls, folder: str | os.PathLike, labels: Sequence[str] | None = None) -> WidePart:
        """The part saved in ``folder``; CorruptModel when its files are missing, damaged, or hold
        other ``labels`` than the classifier's (when given)."""
        folder = Path(folder)
        try:
            spec = json.loads((folder / WIDE_VOCAB_FILE).read_text(encoding="utf-8"))
            with np.load(folder / WIDE_FILE, allow_pickle=False) as arrays:
                coef, intercept = np.asarray(arrays["coef"]), np.asarray(arrays["intercept"])
                blocks = [_block(item, np.asarray(arrays[f"idf_{i}"])) for i, item in enumerate(spec["blocks"])]
            part = cls(spec["labels"], blocks, coef, intercept)
        except FileNotFoundError as exc:
            raise CorruptModel(f"{folder} lacks {Path(exc.filename or WIDE_FILE).name} of its wide part; retrain or "
                               "restore the folder", field="model_dir") from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptModel(f"{folder}: the wide part ({WIDE_FILE}, {WIDE_VOCAB_FILE}) is corrupt ({exc}); retrain "
                               "or restore the folder", field="model_dir") from None
        width = sum(len(block.terms) for block in part.blocks)
        if part.coef.shape != (len(part.labels), width) or part.intercept.shape != (len(part.labels),):
            raise CorruptModel(f"{folder}: the wide part's weights do not match its {width} n-grams and "
                               f"{len(part.labels)} labels; retrain the model", field="model_dir")
        if labels is not None and list(labels) != part.labels:
            raise CorruptModel(f"{folder}: the wide part's labels differ from kformer.json's; retrain the model",
                               field="model_dir")
        return part


def _block(item: dict, idf: np.ndarray) -> Block:
    """A :class:`Block` from its ``wide_vocab.json`` entry (checked: only known analyzers)."""
    analyzer, ngrams, terms = item["analyzer"], tuple(int(n) for n in item["ngram_range"]), item["terms"]
    if analyzer not in ANALYZERS or len(ngrams) != 2 or not 1 <= ngrams[0] <= ngrams[1] <= 10:
        raise ValueError(f"unknown feature block {analyzer!r} {ngrams}")
    if not isinstance(terms, list) or len(terms) != len(idf) or not all(isinstance(t, str) for t in terms):
        raise ValueError(f"block {analyzer} has {len(terms)} n-grams but {len(idf)} idf values")
    return Block(analyzer, ngrams, tuple(terms), idf.astype("float32"))


def _vectorizer_settings(analyzer: str, ngrams: tuple[int, int]) -> dict[str, Any]:
    """What fitting and loading share: the analyzer, n-gram range, lowercasing, sublinear tf."""
    return {"analyzer": analyzer, "ngram_range": tuple(ngrams), "lowercase": True, "sublinear_tf": True,
            "dtype": np.float32}


def _clip(texts: Sequence[str]) -> list[str]:
    return [text[:MAX_CHARS] for text in texts]


# --- fitting --------------------------------------------------------------------------------------


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

    texts, label_order = _clip(texts), [str(label) for label in label_order]
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
            v_texts = _clip([valid[0][i] for i in known])
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
        vectorizer = TfidfVectorizer(**_vectorizer_settings(analyzer, ngrams), min_df=min_df, max_features=max_features)
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


# --- mixing with the Transformer ------------------------------------------------------------------


def mix(deep: np.ndarray, wide: np.ndarray, weight: float, rule: str = "geometric") -> np.ndarray:
    """The two parts' probabilities ``deep`` and ``wide`` (both ``(n, classes)``) mixed with
    ``weight`` on the wide part; float32 ``(n, classes)``. ``geometric`` (what runs now choose):
    ``softmax((1 - weight) * log deep + weight * log wide)``, a weighted product of the two, so a
    part that is confident and right outvotes one that is unsure; ``linear`` (folders written
    before it): ``(1 - weight) * deep + weight * wide``."""
    deep, wide = np.asarray(deep, dtype="float64"), np.asarray(wide, dtype="float64")
    if rule == "linear":
        return ((1.0 - weight) * deep + weight * wide).astype("float32")
    if rule != "geometric":
        raise ValueError(f"unknown mix rule {rule!r}; use one of {', '.join(MIX_RULES)}")
    logits = (1.0 - weight) * np.log(np.maximum(deep, TINY)) + weight * np.log(np.maximum(wide, TINY))
    logits -= logits.max(axis=1, keepdims=True) if len(logits) else 0.0
    probs = np.exp(logits)
    return (probs / probs.sum(axis=1, keepdims=True)).astype("float32")


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


@dataclass(frozen=True)
class Mix:
    """A fitted wide part, its ``weight`` in the classifier's probabilities and the mix ``rule``
    (:func:`mix`)."""

    part: WidePart
    weight: float
    rule: str = "geometric"

    def __call__(self, deep: np.ndarray, texts: Sequence[str]) -> np.ndarray:
        """The Transformer's probabilities ``deep`` ``(len(texts), classes)`` mixed with the wide part's."""
        if self.weight == 0.0:
            return np.asarray(deep, dtype="float32")
        return mix(deep, self.part.probabilities(texts), self.weight, self.rule)

    def manifest(self) -> dict[str, Any]:
        """kformer.json's ``"wide"`` entry."""
        return {"weight": self.weight, "rule": self.rule, "file": WIDE_FILE, "vocab_file": WIDE_VOCAB_FILE,
                "features": self.part.features}


def load_mix(folder: str | os.PathLike, entry: Any, labels: Sequence[str]) -> Mix:
    """The :class:`Mix` of a model folder from its kformer.json ``"wide"`` ``entry`` (no ``rule``:
    ``linear``, as folders were written before the geometric mix)."""
    if (not isinstance(entry, dict) or not isinstance(entry.get("weight"), int | float) or not 0 <= entry["weight"] <= 1
            or entry.get("rule", "linear") not in MIX_RULES):
        raise CorruptModel(f"{folder}/kformer.json has a bad \"wide\" entry ({entry!r}); retrain the model",
                           field="model_dir")
    return Mix(WidePart.load(folder, labels), float(entry["weight"]), entry.get("rule", "linear"))


def _accuracy(probs: np.ndarray, labels: Sequence[str], index: dict[str, int]) -> float:
    """Share of rows whose argmax is their label (a label outside ``index`` is always wrong)."""
    truth = np.array([index.get(label, -1) for label in labels])
    return float((probs.argmax(axis=1) == truth).mean()) if len(truth) else 0.0


def fit_timed(train, label_order: Sequence[str], *, class_weights: bool = False,
              valid=None, word_ngrams: int = WORD_NGRAMS[1]) -> tuple[WidePart | None, float]:
    """:func:`fit` on ``train`` (LabelledTexts; ``C`` chosen on ``valid`` when given) ->
    ``(part or None, seconds it took)``. A run fits it before the network, so ``max_minutes`` can
    count it (:func:`kformer.tasks.classify.train`)."""
    start = time.perf_counter()
    held = None if valid is None else (valid.texts, valid.labels)
    part = fit(train.texts, train.labels, label_order, class_weights=class_weights, valid=held,
               word_ngrams=word_ngrams)
    return part, time.perf_counter() - start


def add_wide(classifier, part: WidePart | None, fit_seconds: float, valid, *, batch_size: int = 64) -> dict[str, Any]:
    """Attach the fitted wide ``part`` to ``classifier`` (a :class:`~kformer.tasks.classify.Classifier`;
    a wide part it already has is replaced) with its weight chosen on ``valid``. Returns
    metrics.json's ``"wide"``: ``weight``, ``valid_accuracy`` (``transformer``, ``wide``,
    ``mixed``), ``test_accuracy`` (None: :func:`part_accuracies` fills it), ``rule``,
    ``features``, the fit's ``C`` and ``naive_bayes`` (:attr:`WidePart.about`), ``fit_seconds``
    and the validation rows right and log-loss at each grid weight."""
    if part is None:
        return {"weight": None, "skipped": "the training texts hold no word or character n-gram"}
    index = {label: i for i, label in enumerate(classifier.labels)}
    deep_valid = _deep(classifier, valid.texts, batch_size)
    wide_valid = part.probabilities(valid.texts)
    weight, grid = choose_weight(deep_valid, wide_valid, np.array([index[label] for label in valid.labels]))
    classifier.wide = Mix(part, weight)
    summary: dict[str, Any] = {
        "weight": weight,
        "rule": classifier.wide.rule,
        "why": "of 0, 0.05, ..., 1 the weight whose geometric mix has the lowest validation log-loss",
        "valid_accuracy": _parts(deep_valid, wide_valid, weight, valid.labels, index),
        "test_accuracy": None,
        "features": part.features,
        **part.about,
        "fit_seconds": round(fit_seconds, 2),
        "valid_by_weight": grid,
    }
    return summary


def refit(classifier, train, valid, *, class_weights: bool = False, word_ngrams: int = WORD_NGRAMS[1]) -> dict[str, Any]:
    """Fit ``classifier``'s wide part again on the ``train`` and ``valid`` texts together, with the
    ``C`` it was fitted with, and keep its weight: once the weight is chosen the validation texts
    are more training data for the part the folder saves (BANKING77: the mix's test accuracy
    rose with the part fitted on all 10,003 training texts instead of 90 % of them). Everything
    measured on validation was measured before. Returns metrics.json's ``wide["refit"]``:
    ``rows`` and ``seconds``."""
    start = time.perf_counter()
    old = classifier.wide
    part = fit([*train.texts, *valid.texts], [*train.labels, *valid.labels], old.part.labels,
               class_weights=class_weights, word_ngrams=word_ngrams, c=old.part.about["C"])
    if part is not None:
        classifier.wide = Mix(part, old.weight, old.rule)
    return {"rows": len(train) + len(valid), "seconds": round(time.perf_counter() - start, 2)}


def part_accuracies(classifier, test, batch_size: int = 64) -> dict[str, float]:
    """metrics.json's ``wide["test_accuracy"]``: the Transformer's, the wide part's and the mix's
    accuracy on ``test`` (LabelledTexts)."""
    index = {label: i for i, label in enumerate(classifier.labels)}
    deep = _deep(classifier, test.texts, batch_size)
    wide = classifier.wide
    return _parts(deep, wide.part.probabilities(test.texts), wide.weight, test.labels, index)


def _deep(classifier, texts: Sequence[str], batch_size: int) -> np.ndarray:
    """The Transformer's probabilities alone (the classifier's wide part set aside meanwhile)."""
    wide, classifier.wide = classifier.wide, None
    try:
        return classifier.probabilities(texts, batch_size)
    finally:
        classifier.wide = wide


def _parts(deep: np.ndarray, wide: np.ndarray, weight: float, labels: Sequence[str], index: dict[str, int]) -> dict:
    return {"transformer": _accuracy(deep, labels, index), "wide": _accuracy(wide, labels, index),
            "mixed": _accuracy(mix(deep, wide, weight), labels, index)}
