"""Out-of-scope scores that read the text's wording, beside the network's (:mod:`.ood`):

* ``tfidf`` -- the wide n-gram part's own novelty: a text's TF-IDF vector (the folder's wide part's
  vectoriser, :meth:`~kformer.tasks.classify.wide.WidePart.transform`, rows scaled to unit length)
  against a bank of training texts' vectors, the cosine distance ``1 - cos`` to its
  :data:`TFIDF_K`-th nearest (a text of words training never had is at distance 1 from all of
  them). The bank holds at most :data:`TFIDF_ROWS` training texts (an evenly seeded sample), kept
  sparse: ``tfidf_data``, ``tfidf_indices``, ``tfidf_indptr`` (CSR, float32 / int32) under ``ood/``;
* ``combined`` -- ``(1 - w) * z(network score) + w * z(tfidf)``: the network score validation
  picked (probability, mahalanobis, knn or mahalanobis_layers) and the TF-IDF novelty, each
  standardised by its mean and standard deviation over the training texts (a bank text is scored
  without itself), ``w`` the value of :data:`COMBINED_WEIGHTS` with the highest validation AUROC
  (ties: the smaller ``w``). ``kformer.json["ood"]`` records ``w``, the two standardisations and
  the network score's own entry.

Both are oriented as every score is (higher = more in scope). They need the texts and a wide part:
a model folder computes them in NumPy/SciPy beside the network on every runtime, and an export in
its graph, from the texts it then takes (:mod:`kformer.tasks.classify.ood_text_graph`).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kformer.errors import CorruptModel
from kformer.tasks.classify.ood import (
    MIN_SCALE,
    PROBABILITY,
    OodScore,
    array_files,
    in_scope_scores,
    load_score,
    read_array,
    save_arrays,
)

TFIDF, COMBINED = "tfidf", "combined"
SCORES = (TFIDF, COMBINED)
TFIDF_K = 5  # the k-th nearest training text (a few: one near-duplicate should not make a text familiar)
TFIDF_ROWS = 20_000  # training texts in the bank at most (bounds the folder and each (rows, bank) product)
TFIDF_CHUNK = 256  # texts scored at a time: a (256, 20,000) float32 similarity block is 20 MB
COMBINED_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
FALLBACK_WEIGHT = 0.5  # combined without out-of-scope validation texts to choose on
TFIDF_FILES = ("tfidf_data", "tfidf_indices", "tfidf_indptr")
UNITS = {
    TFIDF: "minus the cosine distance of the text's TF-IDF vector (the wide n-gram part's) to its k-th nearest "
           "training text's (0..-1; -1: no n-gram in common with them)",
    COMBINED: "(1 - weight) x the network score and weight x the TF-IDF novelty, each standardised by its mean and "
              "standard deviation over the training texts (about 0 for a typical training text, lower = further)",
}


def unit_rows(matrix):
    """A SciPy CSR ``(n, F)`` with each row scaled to unit length (an empty row stays empty), float32."""
    from scipy import sparse

    matrix = sparse.csr_matrix(matrix, dtype="float32")
    norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=1), dtype="float64")).ravel()
    return sparse.csr_matrix(sparse.diags((1.0 / np.maximum(norms, MIN_SCALE)).astype("float32")) @ matrix)


def kth_cosine_distance(queries, bank, k: int, chunk: int = TFIDF_CHUNK) -> np.ndarray:
    """``(n,)`` float64: ``1 - cos`` of each unit row of ``queries`` ``(n, F)`` to its ``k``-th most
    similar unit row of ``bank`` ``(N, F)`` (both sparse CSR; ``k`` capped at N)."""
    kth = min(int(k), bank.shape[0]) - 1
    parts = []
    for start in range(0, queries.shape[0], chunk):
        similarity = np.asarray((queries[start:start + chunk] @ bank.T).toarray(), dtype="float64")  # (rows, N)
        parts.append(1.0 + np.partition(-similarity, kth, axis=1)[:, kth])  # 1 - the k-th largest cosine
    return np.concatenate(parts) if parts else np.zeros(0)


@dataclass(frozen=True)
class TfidfNovelty:
    """The wide ``part``'s TF-IDF novelty (see the module): ``bank`` ``(N, F)`` SciPy CSR of unit
    rows, F the part's feature columns; ``k`` the neighbour it measures to."""

    part: Any  # the folder's WidePart (saved with the wide part, not here)
    bank: Any
    k: int = TFIDF_K
    kind = TFIDF
    vectors = None  # reads no network vectors

    def features(self, texts) -> Any:
        """Unit-length TF-IDF rows ``(len(texts), F)`` (SciPy CSR) of the wide part."""
        return unit_rows(self.part.transform(list(texts)))

    def of(self, probabilities, vectors, texts) -> np.ndarray:
        """Scores ``(len(texts),)`` float64, minus the cosine distance (only ``texts`` are read)."""
        return -kth_cosine_distance(self.features(texts), self.bank, self.k)

    def training_scores(self) -> np.ndarray:
        """``(N,)``: each bank text's score against the others (itself left out: the ``k + 1``-th)."""
        return -kth_cosine_distance(self.bank, self.bank, self.k + 1)

    def arrays(self) -> dict[str, np.ndarray]:
        return dict(zip(TFIDF_FILES, (self.bank.data.astype("float32"), self.bank.indices.astype("int32"),
                                      self.bank.indptr.astype("int64")), strict=True))

    def manifest(self) -> dict[str, Any]:
        return {"score": TFIDF, "units": UNITS[TFIDF], "files": array_files(self.arrays()), "k": self.k,
                "rows": int(self.bank.shape[0]), "features": int(self.bank.shape[1])}

    def save(self, folder: Path) -> None:
        save_arrays(folder, self.arrays())


def fit_tfidf(part, texts, k: int = TFIDF_K, rows: int = TFIDF_ROWS, seed: int = 0) -> TfidfNovelty:
    """The :class:`TfidfNovelty` of wide ``part`` over training ``texts`` (at most ``rows`` of them,
    a seeded sample in their order)."""
    texts = list(texts)
    if len(texts) > rows:
        keep = np.sort(np.random.default_rng(seed).choice(len(texts), rows, replace=False))
        texts = [texts[i] for i in keep]
    return TfidfNovelty(part, unit_rows(part.transform(texts)), int(k))


@dataclass(frozen=True)
class Combined:
    """``(1 - weight) * z(network) + weight * z(tfidf)`` (see the module): ``network`` an
    :class:`~kformer.tasks.classify.ood.OodScore` or None (the best probability), ``centre`` and
    ``scale`` ``(2,)``: the network score's and the novelty's mean and standard deviation over
    the training texts."""

    network: OodScore | None
    tfidf: TfidfNovelty
    weight: float
    centre: tuple[float, float]
    scale: tuple[float, float]
    kind = COMBINED

    @property
    def vectors(self) -> str | None:
        return None if self.network is None else self.network.vectors

    @property
    def network_kind(self) -> str:
        return PROBABILITY if self.network is None else self.network.kind

    def of(self, probabilities, vectors, texts) -> np.ndarray:
        """Scores ``(n,)`` float64 of rows with mixed ``probabilities`` ``(n, classes)``, network
        ``vectors`` and ``texts``."""
        total = np.zeros(len(texts))
        if self.weight < 1.0:
            total += (1.0 - self.weight) * (in_scope_scores(self.network, probabilities, vectors, texts)
                                            - self.centre[0]) / self.scale[0]
        if self.weight > 0.0:
            total += self.weight * (self.tfidf.of(probabilities, vectors, texts) - self.centre[1]) / self.scale[1]
        return total

    def manifest(self) -> dict[str, Any]:
        network = {"score": PROBABILITY} if self.network is None else self.network.manifest()
        tfidf = self.tfidf.manifest()
        return {"score": COMBINED, "units": UNITS[COMBINED], "weight": self.weight, "network": network, "tfidf": tfidf,
                "standardise": {"network": [self.centre[0], self.scale[0]], "tfidf": [self.centre[1], self.scale[1]]},
                "files": {**network.get("files", {}), **tfidf["files"]}}

    def save(self, folder: Path) -> None:
        if self.network is not None:
            self.network.save(folder)
        self.tfidf.save(folder)


def standardise(values: np.ndarray) -> tuple[float, float]:
    """``(mean, standard deviation)`` of ``values`` ``(n,)`` (the deviation at least :data:`MIN_SCALE`)."""
    values = np.asarray(values, dtype="float64")
    return float(values.mean()), float(max(values.std(), MIN_SCALE))


def choose_weight(network: tuple[np.ndarray, np.ndarray], tfidf: tuple[np.ndarray, np.ndarray],
                  centre: tuple[float, float], scale: tuple[float, float]) -> tuple[float, dict[str, float | None]]:
    """``(w, {"0.25": AUROC, ...})``: of :data:`COMBINED_WEIGHTS`, the weight whose combined score
    best separates in-scope from out-of-scope validation rows by AUROC (ties: the smaller).
    ``network`` and ``tfidf``: each score's ``(in-scope (n,), out-of-scope (m,))`` validation values."""
    from kformer.tasks.classify.calibration import auroc

    def combined(w: float, i: int) -> np.ndarray:
        return ((1.0 - w) * (network[i] - centre[0]) / scale[0]) + w * (tfidf[i] - centre[1]) / scale[1]

    table = {w: auroc(combined(w, 0), combined(w, 1)) for w in COMBINED_WEIGHTS}
    weight = max(COMBINED_WEIGHTS, key=lambda w: (table[w] if table[w] is not None else -1.0, -w))
    return weight, {f"{w:g}": value for w, value in table.items()}


def combine(network, network_training: np.ndarray, tfidf: TfidfNovelty,
            validation: tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None
            ) -> tuple[Combined, dict[str, float | None]] | Combined:
    """The :class:`Combined` of ``network`` (an OodScore, or None: the best probability) and
    ``tfidf``, standardised by ``network_training`` ``(n,)`` (the network score on the training
    texts) and the novelty of the bank's texts. With ``validation`` (the network score's and the
    novelty's ``(in-scope, out-of-scope)`` validation values) the weight is chosen on them
    (:func:`choose_weight`) and ``(score, AUROC by weight)`` is returned; without,
    :data:`FALLBACK_WEIGHT` and the score alone."""
    (c0, s0), (c1, s1) = standardise(network_training), standardise(tfidf.training_scores())
    centre, scale = (c0, c1), (s0, s1)
    if validation is None:
        return Combined(network, tfidf, FALLBACK_WEIGHT, centre, scale)
    weight, table = choose_weight(validation[0], validation[1], centre, scale)
    return Combined(network, tfidf, weight, centre, scale), table


def refit_tfidf(score, part, texts):
    """``score`` with its TF-IDF novelty fitted again with the wide ``part`` (refitted: other
    columns) over training ``texts`` (a combined score keeps its network score and weight, its
    novelty restandardised); any other score as it is. A threshold calibrated before keeps its
    value: the novelty of the refitted part's n-grams is near the one it was set on, as the
    refitted part's probabilities are near those a probability threshold was set on."""
    if getattr(score, "kind", None) == TFIDF:
        return fit_tfidf(part, texts, score.k)
    if getattr(score, "kind", None) != COMBINED:
        return score
    tfidf = fit_tfidf(part, texts, score.tfidf.k)
    centre, scale = standardise(tfidf.training_scores())
    return dataclasses.replace(score, tfidf=tfidf, centre=(score.centre[0], centre), scale=(score.scale[0], scale))


def load_ood(folder: str | os.PathLike, entry: Any, wide=None):
    """The out-of-scope score of a model folder from its ``kformer.json["ood"]`` ``entry``: an
    :class:`~kformer.tasks.classify.ood.OodScore`, :class:`TfidfNovelty` or :class:`Combined`
    (``wide``: the folder's :class:`~kformer.tasks.classify.wide.Mix`, whose part they read)."""
    kind = entry.get("score") if isinstance(entry, dict) else None
    if kind not in SCORES:
        return load_score(folder, entry)
    bad = CorruptModel(f"{folder}/kformer.json has a bad \"ood\" entry ({kind}); retrain the model", field="model_dir")
    if wide is None:
        raise CorruptModel(f"{folder}: the out-of-scope score {kind} needs the folder's wide part, which it lacks; "
                           "retrain the model", field="model_dir")
    try:
        tfidf_entry = entry if kind == TFIDF else entry["tfidf"]
        tfidf = _load_tfidf(folder, tfidf_entry, wide.part)
        if kind == TFIDF:
            return tfidf
        network = None if entry["network"].get("score") == PROBABILITY else load_score(folder, entry["network"])
        (c0, s0), (c1, s1) = entry["standardise"]["network"], entry["standardise"]["tfidf"]
        return Combined(network, tfidf, float(entry["weight"]), (float(c0), float(c1)), (float(s0), float(s1)))
    except (KeyError, TypeError, ValueError, AttributeError):
        raise bad from None


def _load_tfidf(folder, entry: dict, part) -> TfidfNovelty:
    from scipy import sparse

    data, indices, indptr = (read_array(folder, entry["files"][name]) for name in TFIDF_FILES)
    width = sum(len(block.terms) for block in part.blocks)
    if int(entry["features"]) != width:
        raise CorruptModel(f"{folder}: the TF-IDF novelty's bank has {entry['features']} columns but the wide part "
                           f"{width}; retrain the model", field="model_dir")
    bank = sparse.csr_matrix((data, indices, indptr), shape=(int(entry["rows"]), width))
    return TfidfNovelty(part, bank, int(entry["k"]))

