"""Retrieval search at scale (issue 32): the kNN-MT datastore searched by brute force vs through
its inverted-file index (IVF, :mod:`kformer.models.ivf`) at a few ``nprobe`` values.

The datastore is either a translator's (``--model DIR``: the folder's own datastore, else one built
from the training pairs its ``kformer train`` command recorded, weights untuned: lambda 0.3) or
``--entries N`` synthetic float16 keys of ``--dim`` dimensions drawn around ``--clusters`` random
centres in ``--intrinsic`` dimensions (a mixture of Gaussians projected up: how well IVF does on
it says little about real decoder states; the model's numbers are the ones that count).
The index is built as ``kformer retrieval build --search ivf`` builds it (k-means lists, nprobe
chosen by recall on the datastore's own keys), timed. Then, for brute force and IVF at each of
``--nprobes`` (and the chosen one):

- ``recall``: the share of brute force's ``k`` nearest keys each search finds, on held-out
  queries (``--model``: the decoder states of the validation pairs, teacher-forced; synthetic:
  fresh points of the same mixture);
- ``search_ms``: one compiled (XLA) search of a batch of ``--batch`` queries, what one decoding
  step of that many rows costs (median of ``--repeats`` interleaved calls after a warm-up);
- ``--model`` only: greedy decoding time per validation sentence
  (``Translator.translate``, batches of 64, warm: median of ``--repeats`` interleaved calls), and
  its ratio to greedy without retrieval (``greedy_ms``: milliseconds per sentence). The issue's target: at most 2x.

    python -m bench.retrieval_search --entries 1000000 [--dim 128] [--nprobes 4,8,16,32]
    python -m bench.retrieval_search --model runs/en-ta [--sentences 200]
    python -m bench.retrieval_search --entries 20000 --no-record     # a smoke
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from bench.harness import Timer, interleaved_medians, record_or_print
from bench.headlines import Headline

STEPS = 8  # searches per timed call, in one compiled loop

HEADLINES = (
    Headline("speed, serving and memory", "Retrieval search: translator", "greedy_ms",
             name="Greedy with kNN-MT retrieval (IVF, chosen nprobe) vs greedy without", command="--model",
             kformer={"system": r"^IVF .*\(chosen\)$"}, baseline={"system": "^greedy without retrieval$"},
             target="<= 2x baseline", lower_is_better=True,
             why="each step also searches nprobe lists of the datastore: what retrieval costs, bounded by the target"),
    Headline("speed, serving and memory", "Retrieval search: synthetic", "search_ms",
             name="kNN search of 64 queries: IVF (chosen nprobe) vs brute force, synthetic keys", command="--entries",
             kformer={"system": r"^IVF .*\(chosen\)$"}, baseline={"system": "^brute force$"}, target="<= 1x baseline"),
)


def synthetic(entries: int, queries: int, dim: int, clusters: int, intrinsic: int, noise: float, seed: int = 0):
    """``(keys (entries, dim) float16, queries (queries, dim) float32)``: points of a mixture of
    ``clusters`` Gaussians (spread ``noise``) in ``intrinsic`` dimensions, projected at random to
    ``dim`` dimensions, plus a little noise in all of them (decoder states, too, fill few of their
    dimensions; isotropic noise in all 128 would leave no neighbourhood for any index to find)."""
    rng = np.random.default_rng(seed)
    centres = 2.0 * rng.standard_normal((clusters, intrinsic), dtype=np.float32)
    projection = rng.standard_normal((intrinsic, dim), dtype=np.float32) / np.sqrt(intrinsic)

    def points(count: int, dtype: str) -> np.ndarray:
        out = np.empty((count, dim), dtype=dtype)
        for start in range(0, count, 65536):
            rows = min(65536, count - start)
            latent = centres[rng.integers(0, clusters, rows)] + noise * rng.standard_normal((rows, intrinsic),
                                                                                            dtype=np.float32)
            out[start : start + rows] = latent @ projection + 0.05 * rng.standard_normal((rows, dim), dtype=np.float32)
        return out

    return points(entries, "float16"), points(queries, "float32")


def model_datastore(folder: Path, args):
    """``(translator without retrieval, its datastore, query states (rows, dim), validation
    sources)``: the folder's datastore (else one built from its recorded training pairs)."""
    from kformer.tasks import translate
    from kformer.tasks.translate.retrieval import fitting_entries, recorded_pairs

    metrics_path = folder / "metrics.json"
    metrics = json.loads(metrics_path.read_text(encoding="utf-8")) if metrics_path.is_file() else {}
    train, valid = recorded_pairs(folder, metrics, args.data, args.valid, args.test)
    translator = translate.load(folder)
    store = translator.retrieval
    if store is None:
        print(f"+ building a datastore of {len(train)} training pairs", flush=True)
        store = translator.build_retrieval(train, lam=0.3, search="exact", write=False).retrieval
    queries = fitting_entries(translator.model, *translator.encode_pairs(valid))[0][: args.queries]
    return translator.with_retrieval(None), store, np.asarray(queries, "float32"), [p.source for p in valid]


def search_rows(store, queries: np.ndarray, k: int, nprobes: list[int], batch: int, repeats: int):
    """``(rows, the datastore with its index, index build seconds)``: recall and search time of
    brute force and of IVF at each ``nprobes`` value and the chosen one."""
    import tensorflow as tf
    from keras import ops

    from kformer.models.ivf import recall_at_k
    from kformer.models.retrieval import search
    from kformer.tasks.translate.retrieval import with_search

    with Timer() as built:
        indexed = store if store.index is not None else with_search(store, "ivf")
    chosen, lists = indexed.nprobe, indexed.index.lists
    stores = {"brute force": indexed.with_settings(search="exact")}
    for nprobe in sorted({n for n in nprobes if n <= lists} | {chosen}):
        stores[f"IVF nprobe {nprobe}" + (" (chosen)" if nprobe == chosen else "")] = indexed.with_settings(nprobe=nprobe)
    knns = {name: variant.knn() for name, variant in stores.items()}
    eager = {name: knn if knn.ivf is None else knn._replace(ivf=knn.ivf._replace(loop=False))
             for name, knn in knns.items()}  # the same search by one gather: no compilation per batch
    found = {name: np.concatenate([np.asarray(search(queries[i : i + batch], knn, k)[1])
                                   for i in range(0, len(queries), batch)]) for name, knn in eager.items()}

    def steps(rows, knn):  # STEPS searches in a loop, as in decoding (queries a constant would be folded)
        def body(i, state):
            rows, total = state
            indices = search(rows, knn, k)[1]
            return rows * 1.0000001, total + ops.sum(ops.cast(indices, "float32"))
        return ops.fori_loop(0, STEPS, body, (rows, ops.zeros(())))[1]

    compiled = tf.function(steps, jit_compile=True)
    timed = tf.constant(np.resize(queries, (batch, queries.shape[1])))

    def timer(knn):
        def measure() -> float:
            with Timer() as t:
                np.asarray(compiled(timed, knn))
            return t.seconds / STEPS
        return measure

    for measure in map(timer, knns.values()):
        measure()  # compiled for this batch shape
    times = interleaved_medians({name: timer(knn) for name, knn in knns.items()}, repeats)
    brute_ms = float(np.median(times["brute force"])) * 1e3
    rows = []
    for name, variant in stores.items():
        ms = float(np.median(times[name])) * 1e3
        rows.append({"system": name, "nprobe": variant.nprobe if variant.search == "ivf" else "",
                     "recall": round(recall_at_k(found[name], found["brute force"]), 4), "search_ms": round(ms, 3),
                     "search_vs_brute": f"{ms / brute_ms:.2f}×"})
    return rows, stores, built.seconds


def greedy_rows(translator, stores: dict, sentences: list[str], repeats: int) -> dict[str, float]:
    """Greedy seconds per sentence, warm, without retrieval and with each datastore of ``stores``."""
    translators = {"greedy without retrieval": translator, **{name: translator.with_retrieval(store)
                                                                for name, store in stores.items()}}

    def timer(system):
        def measure() -> float:
            with Timer() as t:
                system.translate(sentences)
            return t.seconds / len(sentences)
        return measure

    for system in translators.values():
        timer(system)()  # compiles the decode loop for these shapes
    times = interleaved_medians({name: timer(system) for name, system in translators.items()}, repeats)
    return {name: float(np.median(values)) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", type=Path, metavar="DIR", help="a trained kformer translate folder")
    source.add_argument("--entries", type=int, metavar="N", help="synthetic keys instead of a model's")
    parser.add_argument("--data", help="--model: training pairs, if not the ones its training recorded")
    parser.add_argument("--valid", help="--model: validation pairs, if not the ones its training held out")
    parser.add_argument("--test", help="--model: the test pairs its training was given (left out of --data)")
    parser.add_argument("--dim", type=int, default=128, help="synthetic: key dimensions")
    parser.add_argument("--clusters", type=int, default=1024, help="synthetic: mixture centres")
    parser.add_argument("--intrinsic", type=int, default=16, help="synthetic: dimensions the points vary in")
    parser.add_argument("--noise", type=float, default=1.0, help="synthetic: spread around a centre")
    parser.add_argument("--k", type=int, default=16, help="synthetic: neighbours per query (--model: the datastore's)")
    parser.add_argument("--queries", type=int, default=1024, help="held-out queries recall is measured on")
    parser.add_argument("--batch", type=int, default=64, help="queries per timed search (the decoding batch's rows)")
    parser.add_argument("--nprobes", default="4,8,16,32", help="comma-separated nprobe values (the chosen one is added)")
    parser.add_argument("--sentences", type=int, default=200, help="--model: validation sentences greedy decodes")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per system (median reported)")
    parser.add_argument("--no-record", action="store_true", help="print the table, do not append to BENCHMARKS.md")
    args = parser.parse_args()
    nprobes = [int(n) for n in args.nprobes.split(",") if n.strip()]

    from kformer.models.ivf import pays
    from kformer.tasks.translate.retrieval import Datastore

    translator = None
    if args.model is not None:
        translator, store, queries, sentences = model_datastore(args.model, args)
        k, what = store.k, f"{args.model.name}'s datastore"
    else:
        keys, queries = synthetic(args.entries, args.queries, args.dim, args.clusters, args.intrinsic, args.noise)
        store, k = Datastore(keys, np.zeros(len(keys), "int32"), k=args.k), args.k
        what = f"synthetic keys ({args.clusters} centres, spread {args.noise:g}, in {args.intrinsic} dimensions)"
    print(f"+ {store.entries:,} entries of dim {store.keys.shape[1]}, {len(queries)} queries, k {k}", flush=True)
    rows, stores, build_s = search_rows(store, queries, k, nprobes, args.batch, args.repeats)
    index = stores["brute force"].index
    chosen = next(variant.nprobe for name, variant in stores.items() if name.endswith("(chosen)"))
    auto = "keeps the index" if pays(store.entries, index, chosen) else "searches exactly (the index would cost more)"
    notes = (f"{what}: {store.entries:,} entries of dim {store.keys.shape[1]} (float16 on disk, float32 searched); "
             f"IVF index {index.lists:,} lists of at most {index.capacity} entries, built in {build_s:.1f} s "
             f"(k-means, nprobe chosen by recall@{index.recall_k} on the datastore's own keys: "
             f"{json.dumps(index.recall)}; search auto {auto}). recall: of brute force's {k} nearest keys, on {len(queries)} held-out "
             f"queries; search_ms: one search of {args.batch} queries inside a compiled loop of {STEPS} (as in "
             f"decoding), median of {args.repeats}.")
    if translator is not None:
        sentences = sentences[: args.sentences]
        greedy = greedy_rows(translator, stores, sentences, args.repeats)
        without = greedy["greedy without retrieval"]
        rows.insert(0, {"system": "greedy without retrieval"})
        for row in rows:
            row["greedy_ms"] = round(greedy[row["system"]] * 1e3, 3)
            row["greedy_vs_without"] = f"{greedy[row['system']] / without:.2f}×"
        notes += (f" greedy_ms: Translator.translate of {len(sentences)} validation sentences (batches of 64), "
                  f"milliseconds per sentence, warm, median of {args.repeats}; the issue's target is at most 2x without.")
    title = f"Retrieval search: {'translator' if translator is not None else 'synthetic'}, {store.entries:,} entries"
    record_or_print(title, rows, notes, record=not args.no_record)


if __name__ == "__main__":
    main()
