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
  nearest L2-normalised training vector; statistics ``bank`` ``(N, D)``;
* ``mahalanobis_layers`` (layer-wise aggregation, Darrin et al. 2023; kformer's own encoder): the
  same nearest-class Mahalanobis distance on the pooled output of EVERY encoder block (``L``
  blocks, each pooled as the text vector is: :func:`~kformer.models.classifier.layer_vectors`),
  each layer's distance standardised by its mean and standard deviation over the training texts,
  and the ``L`` standardised distances averaged (the mean: every layer weighs alike, with no
  weight fitted on validation that could overfit a few out-of-scope texts); statistics
  ``layer_means`` ``(L, C, D)``, ``layer_precisions`` ``(L, D, D)``, ``layer_centre`` and
  ``layer_scale`` ``(L,)``.

The scores that read the text itself (the wide part's TF-IDF novelty, and the combined rule) are
:mod:`kformer.tasks.classify.ood_text`.

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
LAYERS = "mahalanobis_layers"
DISTANCE_SCORES = ("mahalanobis", "knn", LAYERS)
SCORES = (PROBABILITY, *DISTANCE_SCORES)  # the text-reading ones: kformer.tasks.classify.ood_text.SCORES
OOD_DIR = "ood"
KNN_K = 10  # the k-th neighbour (Sun et al. used 1-1000 by data size; 10 suits a few thousand rows)
CHUNK = 1024  # rows scored at a time (bounds the (rows, N) distance matrix of knn)
UNITS = {
    PROBABILITY: "the best class probability (0..1)",
    "mahalanobis": "minus the squared Mahalanobis distance of the pooled text vector to the nearest training class "
                   "mean (0 at a mean, more negative further away)",
    "knn": "minus the Euclidean distance of the L2-normalised pooled text vector to its k-th nearest L2-normalised "
           "training vector (0..-2)",
    LAYERS: "minus the mean over the encoder blocks of each block's squared Mahalanobis distance of its pooled output "
            "to the nearest training class mean, standardised by that block's mean and standard deviation over the "
            "training texts (about 0 for a typical training text, more negative further away)",
}
ARRAYS = {"mahalanobis": ("means", "precision"), "knn": ("bank",),
          LAYERS: ("layer_means", "layer_precisions", "layer_centre", "layer_scale")}
MIN_SCALE = 1e-12  # the least standard deviation a score is divided by


@dataclass(frozen=True)
class OodScore:
    """A fitted distance score: ``kind`` (one of :data:`DISTANCE_SCORES`), its ``arrays``
    (mahalanobis: ``means`` ``(C, D)`` and ``precision`` ``(D, D)`` float64; knn: ``bank``
    ``(N, D)`` float32, rows of unit length; mahalanobis_layers: see the module) and ``k`` (knn).

    Every out-of-scope score answers :meth:`of` (probabilities, network vectors, texts) and says
    which network vectors it reads (:attr:`vectors`)."""

    kind: str
    arrays: dict[str, np.ndarray]
    k: int = KNN_K

    @property
    def layers(self) -> int:
        """L, the encoder blocks it reads (1 but for mahalanobis_layers)."""
        return int(self.arrays["layer_means"].shape[0]) if self.kind == LAYERS else 1

    @property
    def dim(self) -> int:
        """The width of the vectors it scores: D, or L * D for mahalanobis_layers."""
        return int(self.arrays[ARRAYS[self.kind][0]].shape[-1]) * self.layers

    @property
    def vectors(self) -> str:
        """The network vectors it reads: ``"last"`` (the text vector) or ``"layers"`` (every block's)."""
        return "layers" if self.kind == LAYERS else "last"

    def of(self, probabilities: np.ndarray, vectors: np.ndarray, texts) -> np.ndarray:
        """Scores ``(n,)`` of rows of network ``vectors`` ``(n, >= dim)``: a ``"last"`` score reads
        the last D columns (where every block's vectors are given, the last block's are the text
        vector). ``probabilities`` and ``texts`` are not read."""
        return self(np.asarray(vectors)[:, -self.dim:])

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
        if self.kind == LAYERS:
            return -layer_distances(vectors, self.arrays).mean(axis=1)
        return -knn_distance(vectors, self.arrays["bank"], self.k)

    def manifest(self) -> dict[str, Any]:
        """``kformer.json["ood"]``: the score, its units, its files and shapes."""
        entry = {"score": self.kind, "units": UNITS[self.kind], "files": array_files(self.arrays), "dim": self.dim}
        if self.kind == "knn":
            entry.update(k=self.k, rows=int(self.arrays["bank"].shape[0]))
        else:
            entry["classes"] = int(self.arrays[ARRAYS[self.kind][0]].shape[-2])
        if self.kind == LAYERS:
            entry.update(layers=self.layers, aggregate="mean of the standardised per-block distances")
        return entry

    def save(self, folder: Path) -> None:
        """Write the arrays as ``folder/ood/<name>.npy`` (no pickle)."""
        save_arrays(folder, self.arrays)


def array_files(arrays: dict[str, np.ndarray]) -> dict[str, str]:
    """``{name: "ood/<name>.npy"}``: where :func:`save_arrays` writes each array, relative to the folder."""
    return {name: f"{OOD_DIR}/{name}.npy" for name in arrays}


def save_arrays(folder: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` as ``folder/ood/<name>.npy`` (no pickle)."""
    (Path(folder) / OOD_DIR).mkdir(parents=True, exist_ok=True)
    for name, array in arrays.items():
        np.save(Path(folder) / OOD_DIR / f"{name}.npy", array, allow_pickle=False)


def in_scope_scores(score, probabilities: np.ndarray, vectors: np.ndarray | None, texts) -> np.ndarray:
    """``(n,)`` float64, higher = more in scope: with no ``score`` the best of the (mixed)
    ``probabilities`` ``(n, classes)``, else ``score.of(probabilities, vectors, texts)``."""
    if score is None:
        probabilities = np.asarray(probabilities)
        return probabilities.max(axis=1).astype("float64") if len(probabilities) else np.zeros(0)
    return score.of(probabilities, vectors, texts)


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


def layer_distances(vectors: np.ndarray, arrays: dict[str, np.ndarray]) -> np.ndarray:
    """Standardised per-block distances ``(n, L)`` of every block's pooled vectors ``(n, L * D)``
    (block ``l``: columns ``l * D .. (l + 1) * D``): each block's squared Mahalanobis distance to
    its nearest class mean, minus ``layer_centre[l]``, divided by ``layer_scale[l]``."""
    means, precisions = arrays["layer_means"], arrays["layer_precisions"]  # (L, C, D), (L, D, D)
    layers, dim = means.shape[0], means.shape[2]
    nearest = np.stack([mahalanobis_distances(vectors[:, i * dim:(i + 1) * dim], means[i], precisions[i]).min(axis=1)
                        for i in range(layers)], axis=1)  # (n, L)
    return (nearest - arrays["layer_centre"]) / arrays["layer_scale"]


def layer_stats(vectors: np.ndarray, label_ids: np.ndarray, classes: int, layers: int) -> dict[str, np.ndarray]:
    """The mahalanobis_layers arrays (see the module) from training ``vectors`` ``(n, L * D)``
    (every block's pooled vectors) and class indices ``label_ids`` ``(n,)``: per block the class
    means and shared precision (:func:`mahalanobis_stats`), then the mean and standard deviation
    of the block's nearest-class distances over these same training texts."""
    vectors = np.asarray(vectors, dtype="float64")
    if layers < 1 or vectors.ndim != 2 or vectors.shape[1] % layers:
        raise ValueError(f"vectors of shape {vectors.shape} do not split into {layers} blocks")
    dim = vectors.shape[1] // layers
    stats = [mahalanobis_stats(vectors[:, i * dim:(i + 1) * dim], label_ids, classes) for i in range(layers)]
    arrays = {"layer_means": np.stack([s["means"] for s in stats]),
              "layer_precisions": np.stack([s["precision"] for s in stats]),
              "layer_centre": np.zeros(layers), "layer_scale": np.ones(layers)}
    raw = layer_distances(vectors, arrays)  # (n, L), not yet standardised
    arrays["layer_centre"], arrays["layer_scale"] = raw.mean(axis=0), np.maximum(raw.std(axis=0), MIN_SCALE)
    return arrays


def fit_score(kind: str, vectors: np.ndarray, label_ids: np.ndarray, classes: int, k: int = KNN_K,
              layers: int = 1) -> OodScore:
    """The :class:`OodScore` of ``kind`` from the training texts' network ``vectors`` and class
    indices ``label_ids`` ``(n,)``: the pooled text vectors ``(n, D)``, or for mahalanobis_layers
    every one of the ``layers`` blocks' ``(n, layers * D)``."""
    if kind == "mahalanobis":
        return OodScore(kind, mahalanobis_stats(vectors, label_ids, classes))
    if kind == "knn":
        return OodScore(kind, {"bank": normalise(vectors).astype("float32")}, k)
    if kind == LAYERS:
        return OodScore(kind, layer_stats(vectors, label_ids, classes, layers))
    raise ValueError(f"no distance score {kind!r}; one of {', '.join(DISTANCE_SCORES)}")


def load_score(folder: str | os.PathLike, entry: Any) -> OodScore:
    """The :class:`OodScore` of a model folder from its ``kformer.json["ood"]`` ``entry``."""
    bad = CorruptModel(f"{folder}/kformer.json has a bad \"ood\" entry ({entry!r}); retrain the model",
                       field="model_dir")
    if not isinstance(entry, dict) or entry.get("score") not in DISTANCE_SCORES or not isinstance(entry.get("files"), dict):
        raise bad
    arrays = {}
    for name in ARRAYS[entry["score"]]:
        arrays[name] = read_array(folder, entry["files"].get(name, ""))
    score = OodScore(entry["score"], arrays, int(entry.get("k", KNN_K)))
    if not _consistent(score):
        raise bad
    return score


def read_array(folder: str | os.PathLike, name: str) -> np.ndarray:
    """The array saved at ``folder/name`` (no pickle); CorruptModel when it cannot be read."""
    path = Path(folder) / str(name)
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise CorruptModel(f"{path}: cannot read the out-of-scope statistics ({exc}); retrain the model",
                           field="model_dir") from exc


def _consistent(score: OodScore) -> bool:
    """True when the arrays' shapes fit together (a folder's files as :meth:`OodScore.save` wrote them)."""
    arrays = score.arrays
    if score.kind != LAYERS:
        return all(a.ndim == 2 and a.shape[1] == score.dim for a in arrays.values())
    means, precisions = arrays["layer_means"], arrays["layer_precisions"]
    layers, dim = (means.shape[0], means.shape[2]) if means.ndim == 3 else (0, 0)
    return (layers > 0 and precisions.shape == (layers, dim, dim)
            and arrays["layer_centre"].shape == arrays["layer_scale"].shape == (layers,))
