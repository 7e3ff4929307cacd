"""Retrieval-augmented decoding (kNN-MT) for a translator: its datastore, the datastore's place in
the model folder, and the choice of its weights on the validation pairs.

In the folder: ``retrieval/keys.npy`` (float16 ``(entries, dim)``: the decoder's final state at
every target position of the training pairs, teacher-forced) and ``retrieval/values.npy`` (int32
``(entries,)``: the target token that came next), read with ``allow_pickle=False``;
``kformer.json["retrieval"]`` names them and holds ``k``, ``temperature``, ``lambda``, the
``scale`` the temperatures were chosen against and what tuning measured. The mixing itself is
:mod:`kformer.models.retrieval`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from kformer.errors import BadInput, CorruptModel

RETRIEVAL_DIR = "retrieval"
KEYS_FILE = f"{RETRIEVAL_DIR}/keys.npy"
VALUES_FILE = f"{RETRIEVAL_DIR}/values.npy"
# The grid tuning searches (temperatures as multiples of the datastore's typical distance).
LAMBDAS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)  # 0.6 was chosen on a weak 3-minute model: room above it
TEMPERATURE_SCALES = (0.1, 1.0, 10.0)
KS = (8, 16)
TUNE_PAIRS = 150  # validation pairs tuning decodes, at most


@dataclass(frozen=True)
class Datastore:
    """Keys ``(entries, dim)`` float16 and values ``(entries,)`` int32 of a translator's training
    targets, with the mixing weights: ``k`` neighbours, ``temperature`` (on squared L2 distances),
    ``lam`` (the share of p_knn), ``scale`` (the typical distance to the ``k``-th neighbour) and
    ``tuning`` (what :func:`tune` measured)."""

    keys: np.ndarray
    values: np.ndarray
    k: int = 8
    temperature: float = 1.0
    lam: float = 0.3
    scale: float = 1.0
    tuning: dict = field(default_factory=dict)
    _tensors: dict = field(default_factory=dict, repr=False, compare=False)  # shared by with_settings copies

    def __post_init__(self):
        check_settings(self.lam, self.temperature, self.k, len(self.values))

    @property
    def entries(self) -> int:
        return int(len(self.values))

    def with_settings(self, *, lam: float | None = None, temperature: float | None = None,
                      k: int | None = None) -> Datastore:
        """The same datastore with other weights (the key tensors are shared, not copied)."""
        return replace(self, lam=self.lam if lam is None else lam, k=self.k if k is None else k,
                       temperature=self.temperature if temperature is None else temperature)

    def knn(self):
        """The :class:`~kformer.models.retrieval.Knn` tensors the decode loops take."""
        from keras import ops

        from kformer.models.retrieval import knn_tensors

        if "base" not in self._tensors:
            self._tensors["base"] = knn_tensors(self.keys, self.values, 0.0, 1.0)
        return self._tensors["base"]._replace(lam=ops.convert_to_tensor(float(self.lam), "float32"),
                                              temperature=ops.convert_to_tensor(float(self.temperature), "float32"))

    def manifest_entry(self) -> dict[str, Any]:
        return {"keys": KEYS_FILE, "values": VALUES_FILE, "entries": self.entries, "dim": int(self.keys.shape[1]),
                "k": self.k, "temperature": self.temperature, "lambda": self.lam, "scale": self.scale,
                "tuning": self.tuning}


def check_settings(lam, temperature, k, entries: int) -> None:
    """BadInput unless ``lam`` is in [0, 1], ``temperature`` above 0 and ``k`` in 1..``entries``."""
    if isinstance(lam, bool) or not isinstance(lam, int | float) or not 0.0 <= lam <= 1.0:
        raise BadInput(f"{{field}} must be between 0 and 1, not {lam!r}", field="lam")
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not temperature > 0:
        raise BadInput(f"{{field}} must be above 0, not {temperature!r}", field="temperature")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= entries:
        raise BadInput(f"{{field}} must be between 1 and the datastore's {entries} entries, not {k!r}", field="k")


# --- building ---------------------------------------------------------------------------------------


def datastore_entries(model, sources: Sequence[list[int]], targets: Sequence[list[int]],
                      batch_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Teacher-force ``model`` over the encoded pairs: ``(keys (entries, dim) float16, values
    (entries,) int32)``, one entry per token of each ``target + [END]`` (the decoder reads
    ``[START] + target``), pairs in length order within batches."""
    from kformer.data.batching import pad_batch
    from kformer.text.specials import END_ID, START_ID

    order = sorted(range(len(sources)), key=lambda i: (len(targets[i]), len(sources[i])))
    keys, values = [], []
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        source = pad_batch([sources[i] for i in rows], limit=model.max_source_length)
        target_in = pad_batch([[START_ID, *targets[i]] for i in rows], limit=model.max_target_length)
        target_out = pad_batch([[*targets[i], END_ID] for i in rows], limit=model.max_target_length)
        states = np.asarray(model.decoder_states(source, target_in), dtype="float32")
        real = target_out != 0
        keys.append(states[real].astype("float16"))
        values.append(target_out[real].astype("int32"))
    return np.concatenate(keys), np.concatenate(values)


def build_datastore(model, sources: Sequence[list[int]], targets: Sequence[list[int]]) -> Datastore:
    """A :class:`Datastore` over encoded training pairs for ``model`` (pairs whose ``target + [END]``
    is longer than the model's longest target are skipped, as training skipped them), with untuned
    weights (:func:`tune` chooses them)."""
    from kformer.models.retrieval import typical_distance

    kept = [i for i, t in enumerate(targets) if len(t) + 1 <= model.max_target_length
            and len(sources[i]) <= model.max_source_length]
    if not kept:
        raise BadInput("no training pair fits the model's longest source and target; nothing to remember",
                       field="data")
    keys, values = datastore_entries(model, [sources[i] for i in kept], [targets[i] for i in kept])
    k = min(KS[0], len(values))
    scale = typical_distance(keys, k)
    return Datastore(keys, values, k=k, temperature=scale, lam=0.3, scale=scale)


def recorded_pairs(folder: Path, metrics: dict, data=None, valid=None, test=None):
    """``(train, valid)`` pairs for a datastore of an existing folder: ``data``/``valid``/``test``
    when given, else the files its ``kformer train`` command recorded (``metrics.json["command"]``),
    split as training split them (the recipe's ``holdout``, ``valid_size`` and ``seed``), so the
    validation pairs are the ones training held out and the test pairs stay unseen."""
    from types import SimpleNamespace

    from kformer.tasks.translate.pairs import read_pair_data, read_training_data, split_pairs

    command = metrics.get("command") or []
    recorded = {flag: command[i + 1] for i, flag in enumerate(command[:-1]) if flag in ("--data", "--valid", "--test")}
    data = data if data is not None else recorded.get("--data")
    if data is None:
        raise BadInput(f"{folder} records no training data (trained from Python?); pass {{field}} PAIRS", field="data")
    valid = valid if valid is not None else recorded.get("--valid")
    test = test if test is not None else recorded.get("--test")
    recipe = metrics.get("recipe") or {}
    config = SimpleNamespace(holdout=recipe.get("holdout", 2000), valid_size=recipe.get("valid_size", 500),
                             seed=recipe.get("seed", 0))
    train, valid_pairs, _ = split_pairs(config, read_training_data(data, "data")[0],
                                        None if valid is None else read_pair_data(valid, "valid"),
                                        None if test is None else read_pair_data(test, "test"))
    return train, valid_pairs


# --- choosing the weights on the validation pairs ----------------------------------------------------


def grid(datastore: Datastore) -> dict[str, list]:
    """The values tuning tries: ``lam``, ``temperature`` (multiples of the scale) and ``k``."""
    ks = [k for k in KS if k <= datastore.entries] or [datastore.entries]
    return {"lam": list(LAMBDAS), "temperature": [round(s * datastore.scale, 6) for s in TEMPERATURE_SCALES],
            "k": ks}


def tune(datastore: Datastore, score: Callable[[Datastore | None], float], progress=None) -> Datastore:
    """The datastore with the weights of :func:`grid` that score best, by coordinate ascent: every
    ``lam`` (at the middle temperature and the smallest ``k``), then every temperature, then every
    ``k``, then ``lam`` again if either moved. ``score(datastore)`` is the greedy chrF of the
    validation pairs decoded with it (``score(None)``: without retrieval); ties keep the earlier
    value. ``tuning`` records every score, the one without, and the seconds it took."""
    started = time.monotonic()
    values = grid(datastore)
    scores: dict[tuple, float] = {}

    def measured(settings: dict) -> float:
        key = (settings["lam"], settings["temperature"], settings["k"])
        if key not in scores:
            scores[key] = float(score(datastore.with_settings(**settings)))
            if progress is not None:
                progress(f"retrieval: lambda {key[0]}, temperature {key[1]:.4g}, k {key[2]}: chrF {scores[key]:.2f}")
        return scores[key]

    best = {"lam": values["lam"][len(values["lam"]) // 2], "temperature": values["temperature"][1 % len(
        values["temperature"])], "k": values["k"][0]}
    for name in ("lam", "temperature", "k", "lam"):
        best[name] = max(values[name], key=lambda v, name=name: (measured({**best, name: v}), -values[name].index(v)))
    without = float(score(None))
    tuning = {"chrf_with": measured(best), "chrf_without": without, "grid": values, "search": "coordinate ascent",
              "scores": [{"lambda": lam, "temperature": t, "k": k, "chrf": s} for (lam, t, k), s in scores.items()],
              "seconds": round(time.monotonic() - started, 2)}
    return replace(datastore.with_settings(**best), tuning=tuning)


def tune_on_pairs(translator, datastore: Datastore, valid_pairs, limit: int = TUNE_PAIRS,
                  progress=None) -> Datastore:
    """:func:`tune` by greedy chrF of the first ``limit`` validation pairs (only those: the caller
    passes the validation split, never the test pairs); records ``valid_pairs`` in the tuning."""
    pairs = list(valid_pairs)[:limit]
    if not pairs:
        raise BadInput("{field} holds no pairs to choose the retrieval weights on", field="valid")

    def score(store: Datastore | None) -> float:
        return translator.with_retrieval(store).score(pairs, beam=1)[0]["chrf"]

    tuned = tune(datastore, score, progress)
    return replace(tuned, tuning={**tuned.tuning, "valid_pairs": len(pairs)})


def datastore_for(translator, sources: Sequence[list[int]], targets: Sequence[list[int]], valid_pairs=(),
                  limit: int = TUNE_PAIRS, progress=None, lam: float | None = None,
                  temperature: float | None = None, k: int | None = None) -> Datastore:
    """The datastore of ``translator``'s encoded training pairs with its weights tuned on
    ``valid_pairs`` (:func:`tune_on_pairs`), or set when ``lam`` is given; its build seconds are
    recorded in ``tuning`` (what training's ``retrieval = "on"`` and ``build_retrieval`` both do)."""
    started = time.monotonic()
    store = build_datastore(translator.model, sources, targets)
    built = time.monotonic() - started
    if lam is None:
        store = tune_on_pairs(translator.with_retrieval(None), store, valid_pairs, limit, progress)
    else:
        store = store.with_settings(lam=lam, temperature=temperature, k=k)
    return replace(store, tuning={**store.tuning, "build_seconds": round(built, 2)})


# --- the folder -------------------------------------------------------------------------------------


def write_datastore(folder: Path, datastore: Datastore) -> dict[str, Any]:
    """``retrieval/keys.npy`` and ``retrieval/values.npy`` into ``folder`` (a staging folder or the
    model folder: the subfolder is written under a temporary name, then swapped in); returns the
    manifest entry."""
    from kformer.artifacts import staged_folder

    with staged_folder(Path(folder) / RETRIEVAL_DIR) as stage:
        np.save(stage / Path(KEYS_FILE).name, np.asarray(datastore.keys, dtype="float16"), allow_pickle=False)
        np.save(stage / Path(VALUES_FILE).name, np.asarray(datastore.values, dtype="int32"), allow_pickle=False)
    return datastore.manifest_entry()


def read_datastore(folder: Path, entry: dict[str, Any]) -> Datastore:
    """The datastore a manifest's ``retrieval`` entry names (no pickles); CorruptModel if its files
    are missing or disagree with it."""
    try:
        keys = np.load(Path(folder) / entry.get("keys", KEYS_FILE), allow_pickle=False)
        values = np.load(Path(folder) / entry.get("values", VALUES_FILE), allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise CorruptModel(f"{folder}'s retrieval datastore is unreadable ({exc}); build it again: kformer retrieval "
                           f"build {folder}", field="model_dir") from None
    if keys.ndim != 2 or values.shape != (keys.shape[0],) or keys.shape[0] != entry.get("entries", keys.shape[0]):
        raise CorruptModel(f"{folder}'s retrieval keys {keys.shape} and values {values.shape} disagree; build it "
                           f"again", field="model_dir")
    return Datastore(keys, values.astype("int32"), k=int(entry["k"]), temperature=float(entry["temperature"]),
                     lam=float(entry["lambda"]), scale=float(entry.get("scale", 1.0)), tuning=entry.get("tuning", {}))


def add_to_folder(folder: Path, datastore: Datastore | None) -> None:
    """Put ``datastore`` into an existing model folder (None: take retrieval out of it): the files
    first, then ``kformer.json`` rewritten atomically."""
    import shutil

    from kformer.artifacts import MANIFEST_NAME, write_json_atomic
    from kformer.folders import read_manifest

    manifest = read_manifest(folder, task="translate")
    if datastore is None:
        manifest.pop("retrieval", None)
        write_json_atomic(Path(folder) / MANIFEST_NAME, manifest)
        shutil.rmtree(Path(folder) / RETRIEVAL_DIR, ignore_errors=True)
        return
    manifest["retrieval"] = write_datastore(folder, datastore)
    write_json_atomic(Path(folder) / MANIFEST_NAME, manifest)



def build_retrieval(folder, *, data=None, valid=None, test=None, limit: int = TUNE_PAIRS, lam: float | None = None,
                    temperature: float | None = None, k: int | None = None, progress=None):
    """Add a datastore to the translator folder ``folder`` and return the translator loaded from it:
    the training pairs and validation pairs those of :func:`recorded_pairs` (``data``, ``valid``,
    ``test`` override what its training recorded), weights as
    :meth:`~kformer.tasks.translate.Translator.build_retrieval` chooses them."""
    import json

    from kformer.folders import METRICS_FILE, read_manifest
    from kformer.tasks.translate.model import load

    folder = Path(folder)
    read_manifest(folder, task="translate")
    if lam is not None:
        check_settings(lam, 1.0 if temperature is None else temperature, 1 if k is None else k, entries=2**62)
    metrics_path = folder / METRICS_FILE
    metrics = json.loads(metrics_path.read_text(encoding="utf-8")) if metrics_path.is_file() else {}
    train, valid_pairs = recorded_pairs(folder, metrics, data, valid, test)
    translator = load(folder).with_retrieval(None)
    return translator.build_retrieval(train, valid=valid_pairs, limit=limit, lam=lam, temperature=temperature, k=k,
                                      progress=progress)


def remove_retrieval(folder) -> None:
    """Take the datastore out of the translator folder ``folder`` (nothing happens without one)."""
    add_to_folder(Path(folder), None)
