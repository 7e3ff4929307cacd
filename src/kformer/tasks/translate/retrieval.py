"""Retrieval-augmented decoding (kNN-MT) for a translator: its datastore, the datastore's place in
the model folder, and the choice of its weights on the validation pairs.

In the folder: ``retrieval/keys.npy`` (float16 ``(entries, dim)``: the decoder's final state at
every target position of the training pairs, teacher-forced) and ``retrieval/values.npy`` (int32
``(entries,)``: the target token that came next), read with ``allow_pickle=False``;
``kformer.json["retrieval"]`` names them and holds ``k``, ``temperature``, ``lambda``, the
``scale`` the temperatures were chosen against and what tuning measured. The mixing itself is
:mod:`kformer.models.retrieval`.

The search: ``"exact"`` (brute force over every key) or ``"ivf"`` (an inverted-file index,
:mod:`kformer.models.ivf`: the keys sorted by k-means list, ``retrieval/centroids.npy`` float32
``(lists, dim)`` and ``retrieval/offsets.npy`` int64 ``(lists + 1,)``, searched through the
``nprobe`` nearest lists). ``"auto"`` builds an index from :data:`IVF_FROM` entries. A folder
written before the index existed has neither ``search`` nor the files and searches exactly.
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
CENTROIDS_FILE = f"{RETRIEVAL_DIR}/centroids.npy"
OFFSETS_FILE = f"{RETRIEVAL_DIR}/offsets.npy"
SEARCHES = ("auto", "exact", "ivf")
# "auto" searches an index from this many entries on, exactly below: there brute force costs at
# most about 15 ms per decoding step of 64 rows (dim 128, compiled, on this 2-core CPU: 7.2 ms at
# 20,000 entries against 2.4 ms through an index at nprobe 16; 33.8 against 2.7 ms at 100,000),
# and it finds the exact neighbours.
IVF_FROM = 50_000
# The grid tuning searches (temperatures as multiples of the datastore's typical distance).
# Re-derived on validation (2026-12-07): the en-ta recipe's three seeds all chose lambda 0.8 and
# temperature 0.1, both the old grid's edges (0.1 ... 0.8; 0.1, 1, 10). Over the 318 validation
# pairs each scored 0.7-1.2 chrF more at 0.01-0.03 (lambda 0.6-0.9 within 0.4 of each other)
# and less at 0.3 (BENCHMARKS.md, "the retrieval grid past its edges").
LAMBDAS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
TEMPERATURE_SCALES = (0.01, 0.03, 0.1, 1.0)  # lambda is swept first at the second, 0.03
KS = (8, 16)
# The grid when time is short (budget.tune_size): three lambdas at the best temperature and the smallest k.
COARSE_LAMBDAS, COARSE_TEMPERATURE_SCALES, COARSE_KS = (0.4, 0.6, 0.8), (0.03,), (8,)
TUNE_PAIRS = 150  # validation pairs tuning decodes, at most
ENTRY_BLOCK = 2048  # pairs the datastore pass sorts by length at a time (and may stop after, on a budget)


@dataclass(frozen=True)
class Datastore:
    """Keys ``(entries, dim)`` float16 and values ``(entries,)`` int32 of a translator's training
    targets, with the mixing weights: ``k`` neighbours, ``temperature`` (on squared L2 distances),
    ``lam`` (the share of p_knn), ``scale`` (the typical distance to the ``k``-th neighbour) and
    ``tuning`` (what :func:`tune` measured). ``search`` is ``"exact"`` or ``"ivf"``: the keys
    are then sorted by the lists of ``index`` (an :class:`~kformer.models.ivf.IvfLayout`) and
    each query scores the entries of its ``nprobe`` nearest lists."""

    keys: np.ndarray
    values: np.ndarray
    k: int = 8
    temperature: float = 1.0
    lam: float = 0.3
    scale: float = 1.0
    tuning: dict = field(default_factory=dict)
    search: str = "exact"
    nprobe: int = 0
    index: Any = None
    _tensors: dict = field(default_factory=dict, repr=False, compare=False)  # shared by with_settings copies

    def __post_init__(self):
        check_settings(self.lam, self.temperature, self.k, len(self.values))
        check_search(self.search, self.nprobe, self.index)

    @property
    def entries(self) -> int:
        return int(len(self.values))

    def with_settings(self, *, lam: float | None = None, temperature: float | None = None,
                      k: int | None = None, search: str | None = None, nprobe: int | None = None) -> Datastore:
        """The same datastore with other weights or search (the key tensors are shared, not
        copied); ``search="exact"`` on an indexed datastore searches every key, keeping the index."""
        return replace(self, lam=self.lam if lam is None else lam, k=self.k if k is None else k,
                       temperature=self.temperature if temperature is None else temperature,
                       search=self.search if search is None else search, nprobe=self.nprobe if nprobe is None else nprobe)

    def knn(self):
        """The :class:`~kformer.models.retrieval.Knn` tensors the decode loops take."""
        from keras import ops

        from kformer.models.retrieval import knn_tensors

        if self.search not in self._tensors:  # exact: the keys; ivf: padded, with the index
            self._tensors[self.search] = knn_tensors(self.keys, self.values, 0.0, 1.0, *(
                (self.index, self.nprobe) if self.search == "ivf" else ()))
        base = self._tensors[self.search]
        return base._replace(lam=ops.convert_to_tensor(float(self.lam), "float32"),
                             temperature=ops.convert_to_tensor(float(self.temperature), "float32"),
                             ivf=None if base.ivf is None else base.ivf._replace(nprobe=self.nprobe))

    def manifest_entry(self) -> dict[str, Any]:
        index = {} if self.index is None else {"ivf": {
            "centroids": CENTROIDS_FILE, "offsets": OFFSETS_FILE, "lists": self.index.lists,
            "capacity": self.index.capacity, "recall_k": self.index.recall_k,
            "recall": {str(n): r for n, r in self.index.recall.items()}}}
        return {"keys": KEYS_FILE, "values": VALUES_FILE, "entries": self.entries, "dim": int(self.keys.shape[1]),
                "k": self.k, "temperature": self.temperature, "lambda": self.lam, "scale": self.scale,
                "search": self.search, "nprobe": self.nprobe, **index, "tuning": self.tuning}


def check_settings(lam, temperature, k, entries: int) -> None:
    """BadInput unless ``lam`` is in [0, 1], ``temperature`` above 0 and ``k`` in 1..``entries``."""
    if isinstance(lam, bool) or not isinstance(lam, int | float) or not 0.0 <= lam <= 1.0:
        raise BadInput(f"{{field}} must be between 0 and 1, not {lam!r}", field="lam")
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not temperature > 0:
        raise BadInput(f"{{field}} must be above 0, not {temperature!r}", field="temperature")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= entries:
        raise BadInput(f"{{field}} must be between 1 and the datastore's {entries} entries, not {k!r}", field="k")


def check_search(search, nprobe, index) -> None:
    """BadInput unless ``search`` is ``"exact"``, or ``"ivf"`` with an index and ``nprobe`` in
    1..its lists."""
    if search not in ("exact", "ivf"):
        raise BadInput(f"{{field}} must be exact or ivf, not {search!r}", field="search")
    if search == "ivf":
        if index is None:
            raise BadInput("{field} ivf needs an index: build the datastore with search ivf", field="search")
        lists = index.lists
        if isinstance(nprobe, bool) or not isinstance(nprobe, int) or not 1 <= nprobe <= lists:
            raise BadInput(f"{{field}} must be between 1 and the index's {lists} lists, not {nprobe!r}",
                           field="nprobe")


def check_search_request(search, nprobe) -> None:
    """BadInput unless ``search`` is one of :data:`SEARCHES` and ``nprobe`` None or (not with
    ``"exact"``) a whole number from 1 (checked against the lists once they are built)."""
    if search not in SEARCHES:
        raise BadInput(f"{{field}} must be one of {', '.join(SEARCHES)}, not {search!r}", field="search")
    if nprobe is not None:
        if isinstance(nprobe, bool) or not isinstance(nprobe, int) or nprobe < 1:
            raise BadInput(f"{{field}} must be a whole number from 1, not {nprobe!r}", field="nprobe")
        if search == "exact":
            raise BadInput("{field} is for search ivf or auto (an exact search reads every key)", field="nprobe")


# --- building ---------------------------------------------------------------------------------------


def datastore_entries(model, sources: Sequence[list[int]], targets: Sequence[list[int]],
                      batch_size: int = 64, on_batch: Callable[[int], None] | None = None,
                      stop: Callable[[int], bool] | None = None,
                      encoder_states: Sequence[np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Teacher-force ``model`` over the encoded pairs: ``(keys (entries, dim) float16, values
    (entries,) int32)``, one entry per token of each ``target + [END]`` (the decoder reads
    ``[START] + target``); ``on_batch(pairs)`` after each batch. The pairs go in their order, by
    blocks of :data:`ENTRY_BLOCK` (each in length order, so batches pad little); ``stop(entries so
    far)`` True before a block ends the pass there (a time budget: the first blocks are kept).
    ``encoder_states`` (a frozen pretrained encoder's outputs per source, ``(len(source), hidden)``,
    as training cached them) are read instead of running the encoder again: most of the pass's
    time with a BERT-sized encoder."""
    from kformer.data.batching import pad_batch
    from kformer.tasks.translate.batches import padded_states
    from kformer.text.specials import END_ID, START_ID

    keys, values, entries = [], [], 0
    for block in range(0, len(sources), ENTRY_BLOCK):
        if stop is not None and keys and stop(entries):
            break
        span = range(block, min(block + ENTRY_BLOCK, len(sources)))
        order = sorted(span, key=lambda i: (len(targets[i]), len(sources[i])))
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            source = pad_batch([sources[i] for i in rows], limit=model.max_source_length)
            target_in = pad_batch([[START_ID, *targets[i]] for i in rows], limit=model.max_target_length)
            target_out = pad_batch([[*targets[i], END_ID] for i in rows], limit=model.max_target_length)
            if encoder_states is None:
                states = model.decoder_states(source, target_in)
            else:
                read = padded_states([encoder_states[i] for i in rows], source.shape[1])
                states = model.decoder_states(source, target_in, encoder_states=read)
            states = np.asarray(states, dtype="float32")
            real = target_out != 0
            keys.append(states[real].astype("float16"))
            values.append(target_out[real].astype("int32"))
            entries += int(real.sum())
            if on_batch is not None:
                on_batch(len(rows))
    return np.concatenate(keys), np.concatenate(values)


def fitting_entries(model, sources: Sequence[list[int]], targets: Sequence[list[int]],
                    on_batch: Callable[[int], None] | None = None,
                    stop: Callable[[int], bool] | None = None,
                    encoder_states: Sequence[np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`datastore_entries` of the pairs that fit the model's longest source and ``target +
    [END]`` (as training skipped the others); BadInput when none does. ``on_batch``, ``stop`` and
    ``encoder_states`` as :func:`datastore_entries`."""
    kept = [i for i, t in enumerate(targets) if len(t) + 1 <= model.max_target_length
            and len(sources[i]) <= model.max_source_length]
    if not kept:
        raise BadInput("no training pair fits the model's longest source and target; nothing to remember",
                       field="data")
    states = None if encoder_states is None else [encoder_states[i] for i in kept]
    return datastore_entries(model, [sources[i] for i in kept], [targets[i] for i in kept], on_batch=on_batch,
                             stop=stop, encoder_states=states)


def build_datastore(model, sources: Sequence[list[int]], targets: Sequence[list[int]], search: str = "auto",
                    nprobe: int | None = None, on_batch: Callable[[int], None] | None = None,
                    stop: Callable[[int], bool] | None = None,
                    encoder_states: Sequence[np.ndarray] | None = None) -> Datastore:
    """A :class:`Datastore` over encoded training pairs for ``model`` (pairs whose ``target + [END]``
    is longer than the model's longest target are skipped, as training skipped them), with untuned
    weights (:func:`tune` chooses them), searched as :func:`with_search` makes it; ``on_batch``,
    ``stop`` and ``encoder_states`` as :func:`datastore_entries`."""
    from kformer.models.retrieval import typical_distance

    keys, values = fitting_entries(model, sources, targets, on_batch, stop, encoder_states)
    k = min(KS[0], len(values))
    scale = typical_distance(keys, k)
    return with_search(Datastore(keys, values, k=k, temperature=scale, lam=0.3, scale=scale), search, nprobe)


def with_search(store: Datastore, search: str = "auto", nprobe: int | None = None, seed: int = 0) -> Datastore:
    """``store`` searched exactly, or through a new inverted-file index: ``search`` ``"auto"``
    (an index from :data:`IVF_FROM` entries), ``"exact"`` or ``"ivf"``. The index clusters the
    keys (:func:`~kformer.models.ivf.build_ivf`, seeded) and sorts keys and values by its lists;
    ``nprobe`` (default: the smallest whose recall@16 against brute force reaches
    :data:`~kformer.models.ivf.RECALL_TARGET`, :func:`~kformer.models.ivf.choose_nprobe`) lists
    are searched per query. ``"auto"`` searches exactly after all when that many lists would cost
    more than brute force (:func:`~kformer.models.ivf.pays`: keys too spread for few lists)."""
    from kformer.models.ivf import build_ivf, choose_nprobe, pays

    check_search_request(search, nprobe)
    if search == "exact" or (search == "auto" and store.entries < IVF_FROM):
        return replace(store, search="exact", nprobe=0, index=None)
    order, layout = build_ivf(store.keys, seed=seed)
    keys = np.ascontiguousarray(store.keys[order])
    chosen, layout = choose_nprobe(keys, layout, min(max(KS), store.entries - 1), seed=seed)
    if search == "auto" and nprobe is None and not pays(store.entries, layout, chosen):
        return replace(store, search="exact", nprobe=0, index=None)
    return replace(store, keys=keys, values=store.values[order], search="ivf",
                   nprobe=chosen if nprobe is None else nprobe, index=layout, _tensors={})


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


def grid(datastore: Datastore | None, coarse: bool = False) -> dict[str, list]:
    """The values tuning tries: ``lam``, ``temperature`` (multiples of the scale) and ``k`` (the
    ``coarse`` grid: fewer). ``datastore`` None: the grid's shape alone (scale 1, every k)."""
    lams, scales, ks = (COARSE_LAMBDAS, COARSE_TEMPERATURE_SCALES, COARSE_KS) if coarse else (
        LAMBDAS, TEMPERATURE_SCALES, KS)
    scale, entries = (1.0, max(ks)) if datastore is None else (datastore.scale, datastore.entries)
    return {"lam": list(lams), "temperature": [round(s * scale, 6) for s in scales],
            "k": [k for k in ks if k <= entries] or [entries]}


def most_settings(values: dict[str, list]) -> int:
    """The most decodes of the validation pairs :func:`tune` makes over the grid ``values``: every
    lambda, the other temperatures and ks, lambda again when either could move, and one without."""
    others = len(values["temperature"]) - 1 + len(values["k"]) - 1
    return len(values["lam"]) + others + (len(values["lam"]) - 1 if others else 0) + 1


def tune(datastore: Datastore, score: Callable[[Datastore | None], float], progress=None, coarse: bool = False,
         stop: Callable[[], bool] | None = None) -> Datastore:
    """The datastore with the weights of :func:`grid` that score best, by coordinate ascent: every
    ``lam`` (at the grid's second temperature and the smallest ``k``), then every temperature, then every
    ``k``, then ``lam`` again if either moved. ``score(datastore)`` is the greedy chrF of the
    validation pairs decoded with it (``score(None)``: without retrieval); ties keep the earlier
    value. ``stop()`` True before a setting not yet scored ends the search there (the time left:
    the best so far is kept, and ``tuning["stopped_after"]`` says how many were scored). ``tuning``
    records every score, the one without (when there was time), and the seconds it took."""
    started = time.monotonic()
    values = grid(datastore, coarse)
    scores: dict[tuple, float] = {}

    class _Stopped(Exception):
        pass

    def measured(settings: dict) -> float:
        key = (settings["lam"], settings["temperature"], settings["k"])
        if key not in scores:
            if stop is not None and scores and stop():
                raise _Stopped
            scores[key] = float(score(datastore.with_settings(**settings)))
            if progress is not None:
                progress(f"retrieval: lambda {key[0]}, temperature {key[1]:.4g}, k {key[2]}: chrF {scores[key]:.2f}")
        return scores[key]

    best = {"lam": values["lam"][len(values["lam"]) // 2], "temperature": values["temperature"][1 % len(
        values["temperature"])], "k": values["k"][0]}
    stopped = False
    try:
        for name in ("lam", "temperature", "k", "lam"):
            best[name] = max(values[name], key=lambda v, name=name: (measured({**best, name: v}),
                                                                     -values[name].index(v)))
    except _Stopped:
        stopped = True
        lam, temperature, k = max(scores, key=lambda key: (scores[key], -list(scores).index(key)))
        best = {"lam": lam, "temperature": temperature, "k": k}
    without = {} if stop is not None and stop() else {"chrf_without": float(score(None))}
    tuning = {"chrf_with": scores[(best["lam"], best["temperature"], best["k"])], **without, "grid": values,
              "search": "coordinate ascent",
              "scores": [{"lambda": lam, "temperature": t, "k": k, "chrf": s} for (lam, t, k), s in scores.items()],
              **({"stopped_after": len(scores)} if stopped else {}), "seconds": round(time.monotonic() - started, 2)}
    return replace(datastore.with_settings(**best), tuning=tuning)


def tune_on_pairs(translator, datastore: Datastore, valid_pairs, limit: int = TUNE_PAIRS,
                  progress=None, coarse: bool = False, stop: Callable[[], bool] | None = None,
                  on_score: Callable[[int, bool], None] | None = None) -> Datastore:
    """:func:`tune` by greedy chrF of the first ``limit`` validation pairs (only those: the caller
    passes the validation split, never the test pairs); records ``valid_pairs`` in the tuning.
    ``coarse`` and ``stop`` as :func:`tune`; ``on_score(pairs, with_retrieval)`` after each decode
    of them (``with_retrieval`` False: the decode without a datastore)."""
    pairs = list(valid_pairs)[:limit]
    if not pairs:
        raise BadInput("{field} holds no pairs to choose the retrieval weights on", field="valid")

    def score(store: Datastore | None) -> float:
        chrf = translator.with_retrieval(store).score(pairs, beam=1)[0]["chrf"]
        if on_score is not None:
            on_score(len(pairs), store is not None)
        return chrf

    tuned = tune(datastore, score, progress, coarse, stop)
    return replace(tuned, tuning={**tuned.tuning, "valid_pairs": len(pairs)})


def datastore_for(translator, sources: Sequence[list[int]], targets: Sequence[list[int]], valid_pairs=(),
                  limit: int = TUNE_PAIRS, progress=None, lam: float | None = None,
                  temperature: float | None = None, k: int | None = None, search: str = "auto",
                  nprobe: int | None = None) -> Datastore:
    """The datastore of ``translator``'s encoded training pairs (searched as ``search`` and
    ``nprobe`` ask, :func:`with_search`) with its weights tuned on ``valid_pairs``
    (:func:`tune_on_pairs`), or set when ``lam`` is given; its build seconds are recorded in
    ``tuning`` (what training's ``retrieval = "on"`` and ``build_retrieval`` both do)."""
    started = time.monotonic()
    store = build_datastore(translator.model, sources, targets, search, nprobe)
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

    index = datastore.index
    with staged_folder(Path(folder) / RETRIEVAL_DIR) as stage:
        np.save(stage / Path(KEYS_FILE).name, np.asarray(datastore.keys, dtype="float16"), allow_pickle=False)
        np.save(stage / Path(VALUES_FILE).name, np.asarray(datastore.values, dtype="int32"), allow_pickle=False)
        if index is not None:
            np.save(stage / Path(CENTROIDS_FILE).name, np.asarray(index.centroids, "float32"), allow_pickle=False)
            np.save(stage / Path(OFFSETS_FILE).name, np.asarray(index.offsets, "int64"), allow_pickle=False)
    if index is None:  # an index of an earlier build the staged files did not replace
        for name in (CENTROIDS_FILE, OFFSETS_FILE):
            (Path(folder) / name).unlink(missing_ok=True)
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
    index = read_index(Path(folder), entry["ivf"], keys.shape) if entry.get("ivf") else None
    try:
        return Datastore(keys, values.astype("int32"), k=int(entry["k"]), temperature=float(entry["temperature"]),
                         lam=float(entry["lambda"]), scale=float(entry.get("scale", 1.0)),
                         tuning=entry.get("tuning", {}), search=entry.get("search", "exact"),
                         nprobe=int(entry.get("nprobe", 0)), index=index)
    except BadInput as exc:
        raise CorruptModel(f"{folder}'s retrieval settings are invalid ({exc}); build it again",
                           field="model_dir") from None


def read_index(folder: Path, entry: dict[str, Any], keys_shape: tuple) -> Any:
    """The :class:`~kformer.models.ivf.IvfLayout` a manifest's ``retrieval["ivf"]`` names (no
    pickles); CorruptModel if its files are missing or disagree with the keys (every list holds
    at least one entry, so a query always finds one)."""
    from kformer.models.ivf import IvfLayout

    try:
        centroids = np.load(folder / entry.get("centroids", CENTROIDS_FILE), allow_pickle=False)
        offsets = np.load(folder / entry.get("offsets", OFFSETS_FILE), allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise CorruptModel(f"{folder}'s retrieval index is unreadable ({exc}); build it again: kformer retrieval "
                           f"build {folder}", field="model_dir") from None
    if (centroids.ndim != 2 or centroids.shape[1] != keys_shape[1] or offsets.shape != (len(centroids) + 1,)
            or offsets[0] != 0 or offsets[-1] != keys_shape[0] or np.any(np.diff(offsets) < 1)):
        raise CorruptModel(f"{folder}'s retrieval index (centroids {centroids.shape}, offsets {offsets.shape}) "
                           f"disagrees with its {keys_shape[0]} keys; build it again", field="model_dir")
    return IvfLayout(centroids.astype("float32"), offsets.astype("int64"),
                     {int(n): float(r) for n, r in entry.get("recall", {}).items()}, int(entry.get("recall_k", 0)))


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
                    temperature: float | None = None, k: int | None = None, search: str = "auto",
                    nprobe: int | None = None, progress=None):
    """Add a datastore to the translator folder ``folder`` and return the translator loaded from it:
    the training pairs and validation pairs those of :func:`recorded_pairs` (``data``, ``valid``,
    ``test`` override what its training recorded), weights and search as
    :meth:`~kformer.tasks.translate.Translator.build_retrieval` chooses them."""
    import json

    from kformer.folders import METRICS_FILE, read_manifest
    from kformer.tasks.translate.model import load

    folder = Path(folder)
    read_manifest(folder, task="translate")
    if lam is not None:
        check_settings(lam, 1.0 if temperature is None else temperature, 1 if k is None else k, entries=2**62)
    check_search_request(search, nprobe)
    metrics_path = folder / METRICS_FILE
    metrics = json.loads(metrics_path.read_text(encoding="utf-8")) if metrics_path.is_file() else {}
    train, valid_pairs = recorded_pairs(folder, metrics, data, valid, test)
    translator = load(folder).with_retrieval(None)
    return translator.build_retrieval(train, valid=valid_pairs, limit=limit, lam=lam, temperature=temperature, k=k,
                                      search=search, nprobe=nprobe, progress=progress)


def remove_retrieval(folder) -> None:
    """Take the datastore out of the translator folder ``folder`` (nothing happens without one)."""
    add_to_folder(Path(folder), None)
