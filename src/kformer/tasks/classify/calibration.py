"""Choosing the unknown route's threshold on validation data (``calibrate`` of a classify run).

A classifier answers ``unknown`` when its best probability is below the threshold
(:meth:`kformer.tasks.classify.Classifier.predict`). :func:`choose_threshold` picks it from
validation predictions (:func:`calibrate`: those of a trained classifier):

- with out-of-scope rows (validation texts whose labels the training data lacks, which should be
  routed to ``unknown``): the threshold maximising accuracy over in- and out-of-scope rows together
  (an in-scope row is right when its prediction is correct and at or above the threshold, an
  out-of-scope row when it is below);
- without them: the largest threshold that keeps ``keep`` (95 %) of the correctly predicted
  in-scope rows at or above it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

KEEP = 0.95


def choose_threshold(best: np.ndarray, correct: np.ndarray, best_out_of_scope: np.ndarray | None = None,
                     keep: float = KEEP) -> dict[str, Any]:
    """``{"threshold", "method", ...}`` from validation predictions.

    ``best``: ``(n,)`` the best class probability of each in-scope row; ``correct``: ``(n,)`` bool,
    whether its prediction was right; ``best_out_of_scope``: ``(m,)`` best probabilities of the
    out-of-scope rows, or None/empty. The summary also gives in-scope accuracy (a row routed to
    unknown counts as wrong) and out-of-scope recall (share routed to unknown) at the threshold.
    """
    best = np.asarray(best, dtype="float64")
    correct = np.asarray(correct, dtype=bool)
    oos = np.zeros(0) if best_out_of_scope is None else np.asarray(best_out_of_scope, dtype="float64")
    if len(best) == 0:
        raise ValueError("calibration needs in-scope validation rows")
    if len(oos):
        candidates = np.unique(np.concatenate([[0.0], best, oos, [np.nextafter(max(best.max(), oos.max()), 2.0)]]))
        kept = (best[None, :] >= candidates[:, None]) & correct[None, :]  # (k, n)
        routed = oos[None, :] < candidates[:, None]  # (k, m)
        accuracy = (kept.sum(axis=1) + routed.sum(axis=1)) / (len(best) + len(oos))
        threshold = float(candidates[int(np.argmax(accuracy))])  # ties: the lowest threshold
        method = "out_of_scope"
    else:
        right = best[correct]
        threshold = float(np.quantile(right, 1.0 - keep, method="lower")) if len(right) else 0.0
        method = f"keep {keep:.0%} of correct"
    summary = {
        "threshold": round(threshold, 6),
        "method": method,
        "valid_in_scope": int(len(best)),
        "valid_out_of_scope": int(len(oos)),
        "in_scope_accuracy": float(((best >= threshold) & correct).mean()),
        "in_scope_accuracy_without": float(correct.mean()),
    }
    if len(oos):
        summary["out_of_scope_recall"] = float((oos < threshold).mean())
    return summary


def calibrate(classifier, valid, out_of_scope=None, batch_size: int = 64) -> dict[str, Any]:
    """metrics.json's ``calibration``: :func:`choose_threshold` on ``classifier``'s predictions of
    ``valid`` (LabelledTexts of its labels) and ``out_of_scope`` (LabelledTexts of other labels,
    or None), and what the threshold does there."""
    probs = classifier.probabilities(valid.texts, batch_size)
    index = {label: i for i, label in enumerate(classifier.labels)}
    correct = probs.argmax(axis=1) == np.array([index[label] for label in valid.labels])
    oos = None if out_of_scope is None else classifier.probabilities(out_of_scope.texts, batch_size).max(axis=1)
    summary = choose_threshold(probs.max(axis=1), correct, oos)
    if out_of_scope is not None:
        summary["labels_out_of_scope"] = sorted(set(out_of_scope.labels))
    return summary
