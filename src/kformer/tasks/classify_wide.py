"""The wide part of a classifier: sparse n-gram features beside the Transformer ("wide and deep").

A classify run with ``wide`` on (the ``auto`` choice for networks learned from scratch; see
:mod:`kformer.tasks.classify_auto`) also fits, on the TRAINING split only, a TF-IDF +
multinomial logistic regression (scikit-learn; no Keras here):

=================  ==========================================================================
features           word 1-2 grams (sublinear tf, at least :data:`MIN_DF` training texts); for
                   short texts -- the training texts' median is at most :data:`SHORT_TEXT_WORDS`
                   words -- also character 2-5 grams within word boundaries (``char_wb``),
                   which catch misspellings and word pieces a short text has few words for.
                   Each block is L2-normalised on its own; a text is read up to
                   :data:`MAX_CHARS` characters
size caps          at most :data:`WORD_FEATURES` word and :data:`CHAR_FEATURES` char n-grams
                   (the most frequent), and at most :data:`MAX_COEFFICIENTS` weights in all
                   (classes x features), so the saved part stays under ~25 MB
model              logistic regression, ``C`` = :data:`C` (L2), lbfgs; balanced class weights
                   when the run has ``class_weights``
=================  ==========================================================================

The classifier's probabilities are then ``(1 - w) * transformer + w * wide`` (:func:`mix`) with
``w`` chosen on the validation split (:func:`choose_weight`: the grid 0, 0.05, ..., 1, the best
validation accuracy; ties go to the ``w`` closest to 0.5, then the smaller). ``metrics.json``
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
C = 10.0  # inverse L2 strength of the logistic regression
MAX_ITER = 1000
WEIGHT_GRID = tuple(round(0.05 * i, 2) for i in range(21))  # w = 0, 0.05, ..., 1
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

    def __init__(self, labels: Sequence[str], blocks: Sequence[Block], coef: np.ndarray, intercept: np.ndarray):
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


def feature_plan(texts: Sequence[str], classes: int) -> list[tuple[str, tuple[int, int], int]]:
    """``[(analyzer, ngrams, max_features)]`` for these training texts and this many classes:
    word 1-2 grams, plus char_wb 2-5 grams for short texts; each block at most its cap and an
    equal share of :data:`MAX_COEFFICIENTS` / classes."""
    plan = [("word", WORD_NGRAMS, WORD_FEATURES)]
    if median_words(texts) <= SHORT_TEXT_WORDS:
        plan.append(("char_wb", CHAR_NGRAMS, CHAR_FEATURES))
    share = MAX_COEFFICIENTS // max(classes, 2) // len(plan)
    return [(analyzer, ngrams, min(cap, share)) for analyzer, ngrams, cap in plan]


def fit(texts: Sequence[str], labels: Sequence[str], label_order: Sequence[str], *,
        class_weights: bool = False) -> WidePart | None:
    """Fit the wide part on training ``texts`` and ``labels``; outputs in ``label_order`` (every
    training label must be in it). None when no n-gram occurs in the texts at all."""
    from scipy import sparse
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    texts, label_order = _clip(texts), [str(label) for label in label_order]
    blocks, matrices = [], []
    for analyzer, ngrams, max_features in feature_plan(texts, len(label_order)):
        fitted = _fit_block(texts, analyzer, ngrams, max_features)
        if fitted is not None:
            blocks.append(fitted[0])
            matrices.append(fitted[1])
    if not blocks:
        return None
    x = sparse.hstack(matrices, format="csr", dtype="float32")
    model = LogisticRegression(C=C, max_iter=MAX_ITER, class_weight="balanced" if class_weights else None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(x, list(labels))
    classes = [str(c) for c in model.classes_]
    coef = np.zeros((len(label_order), x.shape[1]), dtype="float32")
    intercept = np.zeros(len(label_order), dtype="float32")
    if len(classes) == 2:  # one weight row, for classes[1]: logits (0, s) give the same sigmoid
        coef[label_order.index(classes[1])], intercept[label_order.index(classes[1])] = model.coef_[0], model.intercept_[0]
    else:
        for row, label in enumerate(classes):
            coef[label_order.index(label)], intercept[label_order.index(label)] = model.coef_[row], model.intercept_[row]
    return WidePart(label_order, blocks, coef, intercept)


def _fit_block(texts: list[str], analyzer: str, ngrams: tuple[int, int], max_features: int):
    """``(Block, features (n, columns))`` of one analyzer, or None when it finds no n-gram."""
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
        return block, x
    return None


# --- mixing with the Transformer ------------------------------------------------------------------


def mix(deep: np.ndarray, wide: np.ndarray, weight: float) -> np.ndarray:
    """``(1 - weight) * deep + weight * wide``: both ``(n, classes)``; float32."""
    return ((1.0 - weight) * np.asarray(deep, dtype="float32") + weight * np.asarray(wide, dtype="float32")).astype(
        "float32")


def choose_weight(deep: np.ndarray, wide: np.ndarray, truth: np.ndarray) -> tuple[float, dict[str, int]]:
    """``(w, {"0.00": correct rows, ...})``: the :data:`WEIGHT_GRID` value whose mix is right on
    the most validation rows (``truth``: ``(n,)`` class indices); ties go to the ``w`` closest
    to 0.5, then the smaller."""
    truth = np.asarray(truth)
    correct = {w: int((mix(deep, wide, w).argmax(axis=1) == truth).sum()) for w in WEIGHT_GRID}
    best = max(correct.values())
    weight = min((w for w, n in correct.items() if n == best), key=lambda w: (abs(w - 0.5), w))
    return weight, {f"{w:.2f}": n for w, n in correct.items()}


@dataclass(frozen=True)
class Mix:
    """A fitted wide part and its ``weight`` in the classifier's probabilities."""

    part: WidePart
    weight: float

    def __call__(self, deep: np.ndarray, texts: Sequence[str]) -> np.ndarray:
        """The Transformer's probabilities ``deep`` ``(len(texts), classes)`` mixed with the wide part's."""
        if self.weight == 0.0:
            return np.asarray(deep, dtype="float32")
        return mix(deep, self.part.probabilities(texts), self.weight)

    def manifest(self) -> dict[str, Any]:
        """kformer.json's ``"wide"`` entry."""
        return {"weight": self.weight, "file": WIDE_FILE, "vocab_file": WIDE_VOCAB_FILE,
                "features": self.part.features}


def load_mix(folder: str | os.PathLike, entry: Any, labels: Sequence[str]) -> Mix:
    """The :class:`Mix` of a model folder from its kformer.json ``"wide"`` ``entry``."""
    if not isinstance(entry, dict) or not isinstance(entry.get("weight"), int | float) or not 0 <= entry["weight"] <= 1:
        raise CorruptModel(f"{folder}/kformer.json has a bad \"wide\" entry ({entry!r}); retrain the model",
                           field="model_dir")
    return Mix(WidePart.load(folder, labels), float(entry["weight"]))


def _accuracy(probs: np.ndarray, labels: Sequence[str], index: dict[str, int]) -> float:
    """Share of rows whose argmax is their label (a label outside ``index`` is always wrong)."""
    truth = np.array([index.get(label, -1) for label in labels])
    return float((probs.argmax(axis=1) == truth).mean()) if len(truth) else 0.0


def fit_timed(train, label_order: Sequence[str], *, class_weights: bool = False) -> tuple[WidePart | None, float]:
    """:func:`fit` on ``train`` (LabelledTexts) -> ``(part or None, seconds it took)``. A run fits
    it before the network, so ``max_minutes`` can count it (:func:`kformer.tasks.classify.train`)."""
    start = time.perf_counter()
    part = fit(train.texts, train.labels, label_order, class_weights=class_weights)
    return part, time.perf_counter() - start


def add_wide(classifier, part: WidePart | None, fit_seconds: float, valid, test=None, *,
             batch_size: int = 64) -> dict[str, Any]:
    """Attach the fitted wide ``part`` to ``classifier`` (a :class:`~kformer.tasks.classify.Classifier`;
    a wide part it already has is replaced) with its weight chosen on ``valid``. Returns
    metrics.json's ``"wide"``: ``weight``, ``valid_accuracy`` and ``test_accuracy``
    (``transformer``, ``wide``, ``mixed``), ``features``, ``fit_seconds`` and the validation rows
    right at each grid weight."""
    if part is None:
        return {"weight": None, "skipped": "the training texts hold no word or character n-gram"}
    index = {label: i for i, label in enumerate(classifier.labels)}
    deep_valid = _deep(classifier, valid.texts, batch_size)
    wide_valid = part.probabilities(valid.texts)
    weight, grid = choose_weight(deep_valid, wide_valid, np.array([index[label] for label in valid.labels]))
    classifier.wide = Mix(part, weight)
    summary: dict[str, Any] = {
        "weight": weight,
        "why": "of 0, 0.05, ..., 1 the weight with the best validation accuracy (ties: closest to 0.5)",
        "valid_accuracy": _parts(deep_valid, wide_valid, weight, valid.labels, index),
        "test_accuracy": None,
        "features": part.features,
        "fit_seconds": round(fit_seconds, 2),
        "valid_correct_by_weight": grid,
    }
    if test is not None:
        deep_test = _deep(classifier, test.texts, batch_size)
        summary["test_accuracy"] = _parts(deep_test, part.probabilities(test.texts), weight, test.labels, index)
    return summary


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
