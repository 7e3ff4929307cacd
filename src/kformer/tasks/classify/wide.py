"""The wide part of a classifier: sparse n-gram features beside the Transformer ("wide and deep").

A classify run with ``wide`` on (the ``auto`` choice for networks learned from scratch) also fits,
on the training split only, a TF-IDF + logistic regression part (scikit-learn, no Keras;
how: :mod:`kformer.tasks.classify.wide_fit`). This module is the part as a folder holds it and
a loaded classifier uses it: :class:`WidePart` (features -> probabilities), its files, and
:class:`Mix`, its weight in the classifier's probabilities.

The classifier's probabilities are ``softmax((1 - w) * log transformer + w * log wide)``
(:func:`mix`, geometric; folders written before it mix linearly, ``(1 - w) * transformer + w *
wide``) with ``w`` chosen on the validation split.

Files (no pickle): ``wide.npz`` (``coef`` float16 ``(classes, features)``, ``intercept``
float32 ``(classes,)``, ``idf_<i>`` float32 per feature block) and ``wide_vocab.json`` (label
order, and per block the analyzer, n-gram range and its n-grams in column order). Loading
rebuilds each ``TfidfVectorizer`` from its fixed vocabulary and ``idf_``. The part saved and the
part used right after training are the same numbers (coefficients are rounded to float16 before
either uses them), so a loaded folder predicts exactly what its metrics were measured with.

What the wide part does not reach: attention maps show the Transformer alone. An export carries it
as graph operations (:mod:`kformer.tasks.classify.wide_graph`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kformer.errors import CorruptModel

WIDE_FILE = "wide.npz"
WIDE_VOCAB_FILE = "wide_vocab.json"
FORMAT = 1
MAX_CHARS = 20_000  # characters of each text the wide part reads
MIX_RULES = ("geometric", "linear")  # how the parts' probabilities combine (:func:`mix`)
TINY = 1e-12  # the least probability a log is taken of
ANALYZERS = {"word": "word {0}-{1} grams", "char_wb": "char_wb {0}-{1} grams"}


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

        vectorizer = TfidfVectorizer(**vectorizer_settings(self.analyzer, self.ngrams),
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

        clipped = clip_texts(texts)
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


def vectorizer_settings(analyzer: str, ngrams: tuple[int, int]) -> dict[str, Any]:
    """What fitting and loading share: the analyzer, n-gram range, lowercasing, sublinear tf."""
    return {"analyzer": analyzer, "ngram_range": tuple(ngrams), "lowercase": True, "sublinear_tf": True,
            "dtype": np.float32}


def clip_texts(texts: Sequence[str]) -> list[str]:
    return [text[:MAX_CHARS] for text in texts]


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
