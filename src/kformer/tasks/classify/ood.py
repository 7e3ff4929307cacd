"""Out-of-scope scores: how far a text's pooled vector lies from what the classifier was trained on
(the ``ood_score`` of a classify run; the unknown route thresholds it).

``probability`` -- the best class probability -- needs nothing here. The distance scores are
computed from the network's pooled text vector (the input of its last dense layer, in inference
mode) and statistics of the TRAINING texts' vectors, fitted once after training:

* ``mahalanobis`` (Podolskiy et al. 2021): the squared Mahalanobis distance to the nearest class
  mean under one covariance shared by all classes (the within-class scatter of the training
  vectors, Ledoit-Wolf shrunk so it is invertible); statistics ``means`` ``(C, D)`` and
  ``precision`` ``(D, D)``;
* ``knn`` (Sun et al. 2022): the Euclidean distance of the L2-normalised vector to its ``k``-th
  nearest L2-normalised training vector; statistics ``bank`` ``(N, D)``.

Every score is oriented so that HIGHER means MORE IN SCOPE: a distance score is minus the distance
(:meth:`OodScore.__call__`), so one threshold rule serves all of them (below it: unknown).
The statistics are saved as ``.npy`` files under ``ood/`` of the model folder (read with
``allow_pickle=False``); :mod:`kformer.tasks.classify.model` names them in ``kformer.json["ood"]``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kformer.errors import CorruptModel

PROBABILITY = "probability"
DISTANCE_SCORES = ("mahalanobis", "knn")
SCORES = (PROBABILITY, *DISTANCE_SCORES)
OOD_DIR = "ood"
KNN_K = 10  # the k-th neighbour (Sun et al. used 1-1000 by data size; 10 suits a few thousand rows)
CHUNK = 1024  # rows scored at a time (bounds the (rows, N) distance matrix of knn)
UNITS = {
    PROBABILITY: "the best class probability (0..1)",
    "mahalanobis": "minus the squared Mahalanobis distance of the pooled text vector to the nearest training class "
                   "mean (0 at a mean, more negative further away)",
    "knn": "minus the Euclidean distance of the L2-normalised pooled text vector to its k-th nearest L2-normalised "
           "training vector (0..-2)",
}


@dataclass(frozen=True)
class OodScore:
    """A fitted distance score: ``kind`` (one of :data:`DISTANCE_SCORES`), its ``arrays``
    (mahalanobis: ``means`` ``(C, D)`` and ``precision`` ``(D, D)`` float64; knn: ``bank``
    ``(N, D)`` float32, rows of unit length) and ``k`` (knn)."""

    kind: str
    arrays: dict[str, np.ndarray]
    k: int = KNN_K

    @property
    def dim(self) -> int:
        """D, the width of the pooled vectors it scores."""
        return int(next(iter(self.arrays.values())).shape[1])

    def __call__(self, vectors: np.ndarray) -> np.ndarray:
        """Pooled vectors ``(n, D)`` -> scores ``(n,)`` float64, higher = more in scope."""
        vectors = np.asarray(vectors, dtype="float64")
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(f"expected vectors of shape (n, {self.dim}), got {vectors.shape}")
        parts = [self._score(vectors[i:i + CHUNK]) for i in range(0, len(vectors), CHUNK)]
        return np.concatenate(parts) if parts else np.zeros(0)

    def _score(self, vectors: np.ndarray) -> np.ndarray:
        if self.kind == "mahalanobis":
            return -mahalanobis_distances(vectors, self.arrays["means"], self.arrays["precision"]).min(axis=1)
        return -knn_distance(vectors, self.arrays["bank"], self.k)

    def manifest(self) -> dict[str, Any]:
        """``kformer.json["ood"]``: the score, its units, its files and shapes."""
        files = {name: f"{OOD_DIR}/{name}.npy" for name in self.arrays}
        entry = {"score": self.kind, "units": UNITS[self.kind], "files": files, "dim": self.dim}
        if self.kind == "knn":
            entry.update(k=self.k, rows=int(self.arrays["bank"].shape[0]))
        else:
            entry["classes"] = int(self.arrays["means"].shape[0])
        return entry

    def save(self, folder: Path) -> None:
        """Write the arrays as ``folder/ood/<name>.npy`` (no pickle)."""
        (Path(folder) / OOD_DIR).mkdir(parents=True, exist_ok=True)
        for name, array in self.arrays.items():
            np.save(Path(folder) / OOD_DIR / f"{name}.npy", array, allow_pickle=False)


def mahalanobis_stats(vectors: np.ndarray, label_ids: np.ndarray, classes: int) -> dict[str, np.ndarray]:
    """``{"means": (C, D), "precision": (D, D)}`` float64 from training ``vectors`` ``(n, D)`` and
    their class indices ``label_ids`` ``(n,)``: class means, and the inverse of the shared
    covariance of the vectors around their class means (Ledoit-Wolf shrinkage: invertible even
    with fewer rows than dimensions). A class without rows (never, for the training labels) gets
    the overall mean."""
    from sklearn.covariance import LedoitWolf

    vectors = np.asarray(vectors, dtype="float64")
    label_ids = np.asarray(label_ids)
    means = np.tile(vectors.mean(axis=0), (classes, 1))
    for c in np.unique(label_ids):
        means[c] = vectors[label_ids == c].mean(axis=0)
    centered = vectors - means[label_ids]
    precision = LedoitWolf(assume_centered=True).fit(centered).precision_
    return {"means": means, "precision": (precision + precision.T) / 2.0}


def mahalanobis_distances(vectors: np.ndarray, means: np.ndarray, precision: np.ndarray) -> np.ndarray:
    """Squared Mahalanobis distances ``(n, C)`` of ``vectors`` ``(n, D)`` to each of ``means``
    ``(C, D)`` under ``precision`` ``(D, D)``: ``(x - m)^T P (x - m)``, expanded so no ``(n, C, D)``
    array is made; clipped at 0 (rounding)."""
    vectors = np.asarray(vectors, dtype="float64")
    projected = vectors @ precision  # (n, D)
    squared = (np.einsum("nd,nd->n", projected, vectors)[:, None] - 2.0 * projected @ means.T
               + np.einsum("cd,cd->c", means @ precision, means)[None, :])
    return np.maximum(squared, 0.0)


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows of ``vectors`` ``(n, D)`` scaled to unit length (a zero row stays zero)."""
    vectors = np.asarray(vectors, dtype="float64")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def knn_distance(vectors: np.ndarray, bank: np.ndarray, k: int) -> np.ndarray:
    """``(n,)`` Euclidean distance of each normalised row of ``vectors`` ``(n, D)`` to its ``k``-th
    nearest row of ``bank`` ``(N, D)`` (unit rows); ``k`` is capped at N."""
    unit = normalise(vectors)
    squared = np.maximum(2.0 - 2.0 * unit @ np.asarray(bank, dtype="float64").T, 0.0)  # (n, N)
    kth = min(int(k), bank.shape[0]) - 1
    return np.sqrt(np.partition(squared, kth, axis=1)[:, kth])


def fit_score(kind: str, vectors: np.ndarray, label_ids: np.ndarray, classes: int, k: int = KNN_K) -> OodScore:
    """The :class:`OodScore` of ``kind`` from the training texts' pooled ``vectors`` ``(n, D)`` and
    class indices ``label_ids`` ``(n,)``."""
    if kind == "mahalanobis":
        return OodScore(kind, mahalanobis_stats(vectors, label_ids, classes))
    if kind == "knn":
        return OodScore(kind, {"bank": normalise(vectors).astype("float32")}, k)
    raise ValueError(f"no distance score {kind!r}; one of {', '.join(DISTANCE_SCORES)}")


def load_score(folder: str | os.PathLike, entry: Any) -> OodScore:
    """The :class:`OodScore` of a model folder from its ``kformer.json["ood"]`` ``entry``."""
    bad = CorruptModel(f"{folder}/kformer.json has a bad \"ood\" entry ({entry!r}); retrain the model",
                       field="model_dir")
    if not isinstance(entry, dict) or entry.get("score") not in DISTANCE_SCORES or not isinstance(entry.get("files"), dict):
        raise bad
    names = ("means", "precision") if entry["score"] == "mahalanobis" else ("bank",)
    arrays = {}
    for name in names:
        path = Path(folder) / str(entry["files"].get(name, ""))
        try:
            arrays[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise CorruptModel(f"{path}: cannot read the out-of-scope statistics ({exc}); retrain the model",
                               field="model_dir") from exc
    score = OodScore(entry["score"], arrays, int(entry.get("k", KNN_K)))
    if any(a.ndim != 2 or a.shape[1] != score.dim for a in arrays.values()):
        raise bad
    return score
