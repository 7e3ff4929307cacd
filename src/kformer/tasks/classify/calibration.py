"""Choosing the unknown route's threshold on validation data (``calibrate`` of a classify run).

A classifier answers ``unknown`` when its in-scope score is below the threshold
(:meth:`kformer.tasks.classify.Classifier.predict`): the best probability, or with a distance
``ood_score`` minus the distance (:mod:`kformer.tasks.classify.ood`); higher is always more in
scope. :func:`choose_threshold` picks the threshold from validation scores of any kind
(:func:`calibrate`: those of a trained classifier):

- with out-of-scope rows (validation texts whose labels the training data lacks, which should be
  routed to ``unknown``) and a target ``recall`` (``unknown_recall``): the lowest threshold that
  routes at least that share of them to unknown -- the desk says how many unknown texts it wants
  caught, and the summary says what that costs in in-scope accuracy;
- with out-of-scope rows and no target: the threshold maximising accuracy over in- and
  out-of-scope rows together (an in-scope row is right when its prediction is correct and at or
  above the threshold, an out-of-scope row when it is below);
- without them: the largest threshold that keeps ``keep`` (``unknown_keep``, 95 %) of the
  correctly predicted in-scope rows at or above it.

With out-of-scope rows, :func:`calibrate` also records how well each score separates them from
in-scope rows: the AUROC of the chosen score and of the best probability, side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

KEEP = 0.95


def choose_threshold(best: np.ndarray, correct: np.ndarray, best_out_of_scope: np.ndarray | None = None,
                     keep: float = KEEP, floor: float | None = 0.0, recall: float | None = None) -> dict[str, Any]:
    """``{"threshold", "method", ...}`` from validation scores (higher = more in scope).

    ``best``: ``(n,)`` the in-scope score of each in-scope row (the best class probability, or
    minus a distance); ``correct``: ``(n,)`` bool, whether its prediction was right;
    ``best_out_of_scope``: ``(m,)`` scores of the out-of-scope rows, or None/empty. ``floor``: the
    threshold that routes nothing (0.0 for probabilities; None: the lowest score seen). ``recall``:
    the share of out-of-scope rows to route (used when there are some). The summary also gives
    in-scope accuracy (a row routed to unknown counts as wrong) and, with out-of-scope rows,
    :func:`route_quality` at the threshold.
    """
    best = np.asarray(best, dtype="float64")
    correct = np.asarray(correct, dtype=bool)
    oos = np.zeros(0) if best_out_of_scope is None else np.asarray(best_out_of_scope, dtype="float64")
    if len(best) == 0:
        raise ValueError("calibration needs in-scope validation rows")
    if floor is None:
        floor = float(min(best.min(), oos.min() if len(oos) else np.inf))
    if len(oos) and recall is not None:
        threshold = recall_threshold(oos, recall)
        method = f"out-of-scope recall {recall:g}"
    elif len(oos):
        top = max(best.max(), oos.max())
        candidates = np.unique(np.concatenate([[floor], best, oos, [np.nextafter(top, np.inf)]]))
        kept = (best[None, :] >= candidates[:, None]) & correct[None, :]  # (k, n)
        routed = oos[None, :] < candidates[:, None]  # (k, m)
        accuracy = (kept.sum(axis=1) + routed.sum(axis=1)) / (len(best) + len(oos))
        threshold = _round_down(float(candidates[int(np.argmax(accuracy))]))  # ties: the lowest threshold
        method = "out_of_scope"
    else:
        right = best[correct]
        threshold = _round_down(float(np.quantile(right, 1.0 - keep, method="lower")) if len(right) else floor)
        method = f"keep {keep:.0%} of correct"
    summary = {
        "threshold": threshold,
        "method": method,
        "valid_in_scope": int(len(best)),
        "valid_out_of_scope": int(len(oos)),
        "in_scope_accuracy": float(((best >= threshold) & correct).mean()),
        "in_scope_accuracy_without": float(correct.mean()),
    }
    if len(oos):
        summary.update(route_quality(best, oos, threshold))
    return summary


def recall_threshold(out_of_scope: np.ndarray, recall: float) -> float:
    """The lowest threshold (to 6 decimals, as kept in kformer.json) below which at least
    ``recall`` of the ``out_of_scope`` scores ``(m,)`` fall: just above the ``ceil(recall x m)``-th
    lowest of them."""
    ranked = np.sort(np.asarray(out_of_scope, dtype="float64"))
    needed = min(max(int(np.ceil(recall * len(ranked) - 1e-9)), 1), len(ranked))
    return _round_up_above(float(ranked[needed - 1]))


def route_quality(in_scope: np.ndarray, out_of_scope: np.ndarray, threshold: float) -> dict[str, Any]:
    """``{"out_of_scope_recall", "out_of_scope_precision"}`` of the route at ``threshold``: the
    share of the ``out_of_scope`` scores ``(m,)`` below it, and the share of out-of-scope rows
    among all routed ones (``in_scope`` ``(n,)`` too; None when nothing is routed)."""
    caught = int((np.asarray(out_of_scope) < threshold).sum())
    routed = caught + int((np.asarray(in_scope) < threshold).sum())
    return {"out_of_scope_recall": caught / len(out_of_scope) if len(out_of_scope) else None,
            "out_of_scope_precision": caught / routed if routed else None}


def _round_up_above(score: float) -> float:
    """The smallest 6-decimal number above ``score``: a threshold that routes a row scoring it."""
    rounded = float(np.floor(score * 1e6) / 1e6)
    while rounded <= score:
        rounded = round(rounded + 1e-6, 6)
    return rounded


def _round_down(threshold: float) -> float:
    """``threshold`` to 6 decimals (as kept in kformer.json), never above the score it was chosen at:
    a row scoring exactly the chosen value stays at or above the rounded threshold."""
    rounded = round(threshold, 6)
    return rounded if rounded <= threshold else float(np.floor(threshold * 1e6) / 1e6)


def calibrate(classifier, valid, out_of_scope=None, batch_size: int = 64, *, recall: float | None = None,
              keep: float = KEEP) -> dict[str, Any]:
    """metrics.json's ``calibration``: :func:`choose_threshold` (``recall``, ``keep``) on ``classifier``'s in-scope scores
    (:meth:`~kformer.tasks.classify.Classifier.scored`: its ``ood`` score, else the best
    probability) of ``valid`` (LabelledTexts of its labels) and ``out_of_scope`` (LabelledTexts of
    other labels, or None), what the threshold does there, and with out-of-scope rows ``auroc``:
    how well the chosen score and the best probability each separate in- from out-of-scope rows."""
    probs, scores = classifier.scored(valid.texts, batch_size)
    index = {label: i for i, label in enumerate(classifier.labels)}
    correct = probs.argmax(axis=1) == np.array([index[label] for label in valid.labels])
    kind = "probability" if classifier.ood is None else classifier.ood.kind
    oos_probs = oos_scores = None
    if out_of_scope is not None:
        oos_probs, oos_scores = classifier.scored(out_of_scope.texts, batch_size)
    summary = {"ood_score": kind, **choose_threshold(scores, correct, oos_scores, keep=keep,
                                                     floor=0.0 if classifier.ood is None else None, recall=recall)}
    if out_of_scope is not None:
        summary["labels_out_of_scope"] = sorted(set(out_of_scope.labels))
        summary["auroc"] = {kind: auroc(scores, oos_scores),
                            "probability": auroc(probs.max(axis=1), oos_probs.max(axis=1))}
    return summary


def auroc(in_scope: np.ndarray, out_of_scope: np.ndarray) -> float | None:
    """The area under the ROC curve of a score telling ``in_scope`` ``(n,)`` rows (positives) from
    ``out_of_scope`` ``(m,)`` rows by being higher; None without rows of both."""
    from sklearn.metrics import roc_auc_score

    if not len(in_scope) or not len(out_of_scope):
        return None
    truth = np.concatenate([np.ones(len(in_scope)), np.zeros(len(out_of_scope))])
    return round(float(roc_auc_score(truth, np.concatenate([in_scope, out_of_scope]))), 6)


class RouteCounts:
    """What the unknown route did over rows seen in chunks: in-scope rows (labels the model knows)
    kept and right, and out-of-scope rows (other labels) routed to unknown."""

    def __init__(self):
        self.in_scope = self.in_scope_right = self.in_scope_kept_right = self.in_scope_routed = 0
        self.out_of_scope = self.out_of_scope_routed = 0

    def add(self, labels: Sequence[str], predicted: Sequence[str], routed: np.ndarray, known: set[str]) -> None:
        """One chunk: true ``labels``, ``predicted`` labels and ``routed`` ``(n,)`` bool (below the threshold)."""
        for label, guess, unknown in zip(labels, predicted, routed.tolist(), strict=True):
            if label in known:
                right = guess == label
                self.in_scope += 1
                self.in_scope_right += right
                self.in_scope_kept_right += right and not unknown
                self.in_scope_routed += unknown
            else:
                self.out_of_scope += 1
                self.out_of_scope_routed += unknown

    def summary(self) -> dict[str, Any]:
        """Row counts, in-scope accuracy with the route (a routed row counts as wrong) and without,
        out-of-scope recall (share routed) and precision (share of routed rows that are out of
        scope); None where there is nothing to divide by."""
        routed = self.in_scope_routed + self.out_of_scope_routed
        return {
            "in_scope": self.in_scope, "out_of_scope": self.out_of_scope,
            "in_scope_accuracy": _share(self.in_scope_kept_right, self.in_scope),
            "in_scope_accuracy_without": _share(self.in_scope_right, self.in_scope),
            "out_of_scope_recall": _share(self.out_of_scope_routed, self.out_of_scope),
            "out_of_scope_precision": _share(self.out_of_scope_routed, routed),
        }


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 6) if whole else None
