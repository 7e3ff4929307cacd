"""Fitting a training run's out-of-scope score (``ood_score``) once the network is trained: the
statistics of the TRAINING texts (:mod:`.ood`, :mod:`.ood_text`), and -- with ``auto`` and
out-of-scope validation texts -- which score separates them best on validation.

The scores a classifier can have: ``probability``, ``mahalanobis``, ``knn``, for kformer's own
encoder ``mahalanobis_layers``, and where it has a wide n-gram part ``tfidf`` and ``combined``
(:func:`available`). Every score is computed from one pass of the network over each text set
(:class:`Seen`), so comparing them costs one pass over the validation texts, not one per score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kformer.errors import BadInput
from kformer.tasks.base import check_texts
from kformer.tasks.classify.calibration import auroc
from kformer.tasks.classify.ood import LAYERS, PROBABILITY, OodScore, fit_score, in_scope_scores
from kformer.tasks.classify.ood_text import COMBINED, TFIDF, combine, fit_tfidf

NETWORK_SCORES = (PROBABILITY, "mahalanobis", "knn", LAYERS)  # read the network's outputs only
COMBINED_FALLBACK = "mahalanobis"  # combined's network score without out-of-scope validation texts to choose on


@dataclass(frozen=True)
class Seen:
    """What the scores read of ``texts`` ``(n,)``: the mixed ``probabilities`` ``(n, classes)`` and
    the network ``vectors`` ``(n, L * D)`` (every encoder block's pooled vector where the network
    has blocks, else the text vector: L = 1)."""

    texts: list[str]
    probabilities: np.ndarray
    vectors: np.ndarray


def available(classifier) -> tuple[str, ...]:
    """The scores ``classifier`` (a network with its wide part, if any) can have, in tie-break order."""
    kinds = [PROBABILITY, "mahalanobis", "knn"]
    if classifier.kind == "encoder":
        kinds.append(LAYERS)
    if classifier.wide is not None:
        kinds += [TFIDF, COMBINED]
    return tuple(kinds)


def blocks(classifier) -> int:
    """L: the encoder blocks whose vectors :func:`seen` gives (1: only the text vector)."""
    if classifier.kind != "encoder":
        return 1
    from kformer.models.classifier import encoder_blocks

    return len(encoder_blocks(classifier.model))


def seen(classifier, texts, batch_size: int) -> Seen:
    """One pass of ``classifier``'s network (on Keras) over ``texts``: :class:`Seen`."""
    texts = check_texts(texts)
    reader = classifier.with_vectors(layers=classifier.kind == "encoder")
    probabilities, vectors = reader.mixed_outputs(texts, batch_size)
    return Seen(texts, probabilities, vectors)


def values(score, rows: Seen) -> np.ndarray:
    """``(n,)``: ``score``'s in-scope scores (None: the best probability) of ``rows``."""
    return in_scope_scores(score, rows.probabilities, rows.vectors, rows.texts)


def training_values(score, rows: Seen) -> np.ndarray:
    """``score``'s values on its own training ``rows``, a bank's rows scored without themselves
    (knn: the ``k + 1``-th neighbour): what the combined rule standardises by."""
    if score is not None and score.kind == "knn":
        score = OodScore("knn", score.arrays, score.k + 1)
    return values(score, rows)


def fit_network_scores(kinds, rows: Seen, label_ids: np.ndarray, classes: int, layers: int) -> dict[str, OodScore]:
    """``{kind: OodScore}`` of the network distance ``kinds`` fitted on training ``rows``
    (``label_ids`` ``(n,)``; ``layers`` blocks in ``rows.vectors``: a distance of the text
    vector reads the last block's columns)."""
    dim = rows.vectors.shape[1] // layers
    return {kind: fit_score(kind, rows.vectors if kind == LAYERS else rows.vectors[:, -dim:], label_ids, classes,
                            layers=layers)
            for kind in kinds if kind in NETWORK_SCORES and kind != PROBABILITY}


def fit_ood(classifier, config, train, batch_size: int, valid, out_of_scope, *,
            auto: bool) -> tuple[Any, dict[str, Any] | None]:
    """The score of ``config.ood_score`` fitted on the TRAINING texts ``train`` (LabelledTexts),
    or None for the best probability (also a run resumed from before the setting, whose "auto"
    stays unresolved); and, where validation chose something (``auto`` with ``out_of_scope``
    validation texts: every available score's validation AUROC, the best one kept; or a combined
    score's network score and weight), ``{"score", "auroc", "why"[, "combined"]}`` -- else None.
    ``classifier``: the network with its wide part, no ood score."""
    kinds = available(classifier)
    compare = auto and out_of_scope is not None and len(out_of_scope) > 0
    wanted = config.ood_score
    if not compare and wanted not in kinds[1:]:  # the best probability, or "auto" a resumed run left unresolved
        if wanted in (*NETWORK_SCORES[1:], TFIDF, COMBINED):
            raise BadInput(f"setting {{field}} = {wanted!r} is not available to this classifier (it can have "
                           f"{', '.join(kinds)})", field="ood_score")
        return None, None
    layers = blocks(classifier)
    rows = seen(classifier, train.texts, batch_size)
    index = {label: i for i, label in enumerate(classifier.labels)}
    label_ids = np.array([index[label] for label in train.labels])
    # auto compares the network scores only: the TF-IDF novelty and combined are fitted when asked for
    # by name (the choice made when exports could not carry them, kept until benchmarked for auto)
    fitting = tuple(k for k in kinds if k not in (TFIDF, COMBINED)) if compare else (
        kinds if wanted == COMBINED else (wanted,))
    fitted: dict[str, Any] = {PROBABILITY: None,
                              **fit_network_scores(fitting, rows, label_ids, len(classifier.labels), layers)}
    tfidf = fit_tfidf(classifier.wide.part, train.texts) if TFIDF in fitting else None
    if not compare and (wanted != COMBINED or out_of_scope is None or not len(out_of_scope)):
        if wanted != COMBINED:
            return (tfidf if wanted == TFIDF else fitted[wanted]), None
        network = fitted[COMBINED_FALLBACK]
        return combine(network, training_values(network, rows), tfidf), None
    return _pick(fitted, tfidf, rows, seen(classifier, valid.texts, batch_size),
                 seen(classifier, out_of_scope.texts, batch_size), None if compare else wanted)


def _pick(fitted: dict[str, Any], tfidf, rows: Seen, inside: Seen, outside: Seen,
          wanted: str | None) -> tuple[Any, dict[str, Any]]:
    """``(score, choice)``: of the ``fitted`` network scores (``{kind: score or None}``), the
    ``tfidf`` novelty (or None) and their combination, the one of highest validation AUROC
    (``inside`` in-scope, ``outside`` out-of-scope rows; ties: the earlier), or ``wanted``."""
    scores, separated = dict(fitted), {}
    for kind, score in fitted.items():
        separated[kind] = (values(score, inside), values(score, outside))
    aurocs = {kind: auroc(*pair) for kind, pair in separated.items()}
    network = max(aurocs, key=lambda kind: -1.0 if aurocs[kind] is None else aurocs[kind])
    extra = {}
    if tfidf is not None:
        separated[TFIDF] = (values(tfidf, inside), values(tfidf, outside))
        scores[TFIDF], aurocs[TFIDF] = tfidf, auroc(*separated[TFIDF])
        combined, table = combine(fitted[network], training_values(fitted[network], rows), tfidf,
                                  (separated[network], separated[TFIDF]))
        scores[COMBINED], aurocs[COMBINED] = combined, table[f"{combined.weight:g}"]
        extra["combined"] = {"network": network, "weight": combined.weight, "auroc_by_weight": table,
                             "why": "of 0, 0.25, 0.5, 0.75, 1 the weight on the TF-IDF novelty whose combination has "
                                    "the highest validation AUROC (ties: the smaller)"}
    best = wanted or max(aurocs, key=lambda kind: -1.0 if aurocs[kind] is None else aurocs[kind])
    shown = ", ".join(f"{kind} {value:.3f}" for kind, value in aurocs.items() if value is not None)
    why = (f"highest validation AUROC of in- vs out-of-scope texts ({aurocs[best]:.3f}) among " if wanted is None else
           "the setting; the validation AUROCs of in- vs out-of-scope texts: ")
    return scores[best], {"score": best, "auroc": aurocs, **extra, "why": why + shown}
