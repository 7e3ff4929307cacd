"""MiniLM (all-MiniLM-L6-v2) on BANKING77: kformer's prediction speed beside plain KerasHub, and the
fine-tuning run behind the >= 94 % target.

    flock /tmp/kformer-bench.lock python -m bench.minilm                      # speed, then <= 14.5 min of training
    python -m bench.minilm --skip-train                                        # speed only (a few minutes)
    python -m bench.minilm --skip-train --skip-speed --folder runs/banking77   # a trained folder on each runtime
    python -m bench.minilm --skip-train --freeze banking77,hwu64,tickets       # speed + frozen-backbone runs
    python -m bench.minilm --skip-speed --no-wide --seeds 3                    # network alone, 3 seeds (~45 min)
    python -m bench.minilm --texts 128 --train-rows 400 --test-rows 200 --minutes 0.5 --no-record   # smoke run

Speed (issue 9, target >= 500 texts/s): the official test texts, the same sequence length
(``--max-length`` 64), batch size (``--batch-size`` 64) and warm-up (one untimed pass over all the
texts each, after kformer's ``warmup()``, which traces its graph once), then ``--repeats`` timed
passes, alternating systems; tokenising is inside every timed pass.

- kformer: ``Classifier.probabilities`` on a MiniLM mean-pooling classifier: tokenise all texts in
  one traced TensorFlow Text function, sort by length, cut each batch of 64 to exactly its longest
  row, run the network as one TensorFlow graph that takes every shape (no XLA, nothing compiled
  per shape).
- kformer with ``runtime onnx-int8``: the same, its network converted to ONNX Runtime with 8-bit
  weights (``kformer serve --runtime onnx-int8``; conversion counted in its warm-up).
- KerasHub: ``BertTextClassifier.predict(texts)``, its preprocessor padding every text to max length.

Training (``banking77-minilm`` recipe, bounded by ``--minutes``): linear TF-IDF + SVM baseline and
kformer fine-tuning MiniLM, test accuracy on the 3,080 official test texts; kformer's model is
chosen on a stratified 10 % hold-out of the training file, as every kformer run without ``--valid``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from bench.baselines import kformer_run, linear_baseline, load
from bench.harness import interleaved_medians, record_or_print, require_shared_data
from bench.headlines import Headline

# This benchmark's rows in BENCHMARKS.md's summary (bench/headlines.py says how they are read)
HEADLINES = (
    Headline("classification", "BANKING77 MiniLM fine-tuning", "accuracy", name="BANKING77 intents, fine-tuned MiniLM",
             command=r"^(?!.*--(no-wide|recipe|train-rows|test-rows))",
             kformer={"system": r"^kformer(?!.*, seed \d)"}, baseline={"system": "^TF-IDF"}, target=">= 0.94"),
    Headline("classification", "MiniLM --freeze per dataset", "accuracy", split="dataset",
             name="Frozen MiniLM + a trained head", command=r"^(?!.*--(train-rows|test-rows))",
             kformer={"system": "kformer"}, baseline={"system": "TF-IDF"},
             why={"tickets": "only a head is trained on a general-purpose sentence encoder; the tickets recipe "
                             "from scratch passes the baseline"}),
    Headline("speed, serving and memory", "MiniLM prediction speed", "texts_per_s", kformer={"system": "^kformer Classifier"},
             baseline={"system": "^KerasHub"}, target=">= 500"),
    Headline("speed, serving and memory", "BANKING77 classifier on each runtime", "texts_per_s", kformer={"system": "onnx-int8"},
             baseline={"system": "^runtime keras$"}),
)

N_INTENTS = 77


def _speed(texts: list[str], max_length: int, batch_size: int, repeats: int) -> list[dict]:
    """texts/s of kformer's MiniLM prediction (Keras, and ONNX Runtime with 8-bit weights) and of
    plain KerasHub on the same texts."""
    from kformer.models.pretrained import build_bert_classifier
    from kformer.tasks.classify import Classifier

    labels = [f"intent_{i}" for i in range(N_INTENTS)]  # speed does not depend on the head's training
    network = build_bert_classifier("minilm", N_INTENTS, max_length, pooling="mean")
    manifest = {"labels": labels, "kind": "bert"}
    kformer = Classifier(Path(tempfile.mkdtemp(prefix="kformer-minilm-")), manifest, network)
    int8 = None  # converted to ONNX Runtime with 8-bit weights in its warm-up

    def convert():
        nonlocal int8
        int8 = Classifier(Path(tempfile.mkdtemp(prefix="kformer-minilm-")), manifest, network, runtime="onnx-int8")

    hub = build_bert_classifier("minilm", N_INTENTS, max_length, pooling="cls")  # keras_hub.models.BertTextClassifier
    warmups = {}
    for name, ready, run in (("kformer", kformer.warmup, lambda: kformer.probabilities(texts, batch_size=batch_size)),
                             ("int8", convert, lambda: int8.probabilities(texts, batch_size=batch_size)),
                             ("keras_hub", lambda: None, lambda: hub.predict(texts, batch_size=batch_size, verbose=0))):
        started = time.perf_counter()
        ready()
        run()
        warmups[name] = time.perf_counter() - started

    def timed(run):
        def measure() -> float:
            began = time.perf_counter()
            run()
            return len(texts) / (time.perf_counter() - began)
        return measure

    values = interleaved_medians({
        "kformer": timed(lambda: kformer.probabilities(texts, batch_size=batch_size)),
        "int8": timed(lambda: int8.probabilities(texts, batch_size=batch_size)),
        "keras_hub": timed(lambda: hub.predict(texts, batch_size=batch_size, verbose=0)),
    }, repeats)
    began = time.perf_counter()
    ids = kformer.features(texts)
    tokenise = len(texts) / (time.perf_counter() - began)
    mean_pieces = float((ids != 0).sum(axis=1).mean())
    rows = []
    for name, system in (("kformer", "kformer Classifier.probabilities (length-sorted, exact widths, graph)"),
                         ("int8", "kformer, runtime onnx-int8 (ONNX Runtime, 8-bit weights; conversion in warmup_s)"),
                         ("keras_hub", "KerasHub BertTextClassifier.predict (padded to max length)")):
        ordered = sorted(values[name])
        rows.append({"system": system, "texts_per_s": ordered[len(ordered) // 2], "min_texts_per_s": ordered[0],
                     "max_texts_per_s": ordered[-1], "warmup_s": warmups[name]})
    rows[0]["tokenise_texts_per_s"] = tokenise
    rows[0]["mean_word_pieces"] = mean_pieces
    for row in rows[:2]:
        row["speedup"] = f"{row['texts_per_s'] / rows[-1]['texts_per_s']:.2f}x"
    return rows


def _runtimes(folder: Path, test_path: Path, batch_size: int, repeats: int) -> list[dict]:
    """Test accuracy and texts/s of a trained classifier folder on each runtime (its wide part, if
    any, mixed in as always; the runtime changes only the network's part)."""
    from kformer.tasks import classify
    from kformer.tasks.classify.runtimes import RUNTIMES

    texts, labels = load(test_path)[:2]
    rows = []
    for runtime in RUNTIMES:
        classifier = classify.load(folder, runtime=runtime)
        classifier.warmup()
        classifier.probabilities(texts, batch_size=batch_size)
        speeds = []
        for _ in range(repeats):
            began = time.perf_counter()
            probs = classifier.probabilities(texts, batch_size=batch_size)
            speeds.append(len(texts) / (time.perf_counter() - began))
        alone = classifier.network_probabilities(texts, batch_size=batch_size)  # the network's part alone
        truth = [classifier.labels.index(label) for label in labels]
        rows.append({"system": f"runtime {runtime}", "accuracy": float((probs.argmax(axis=1) == truth).mean()),
                     "network_alone_accuracy": float((alone.argmax(axis=1) == truth).mean()),
                     "texts_per_s": sorted(speeds)[len(speeds) // 2]})
    return rows


def _write_csv(path: Path, rows) -> Path:
    import csv

    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    return path


def _sample_csv(path: Path, rows: int | None, seed: int = 0) -> Path:
    """``path`` itself, or a CSV of about ``rows`` of its rows drawn at random, the same number of
    each label and at least 2 (a stratified hold-out needs them; smoke runs)."""
    if rows is None:
        return path
    texts, labels = load(path)
    order = list(range(len(texts)))
    random.Random(seed).shuffle(order)
    per_label = max(2, rows // len(set(labels)))
    taken: dict[str, int] = {}
    picked = []
    for i in order:
        if taken.get(labels[i], 0) < per_label:
            taken[labels[i]] = taken.get(labels[i], 0) + 1
            picked.append(i)
    name = path.name.removesuffix(".gz")  # written as plain CSV
    return _write_csv(Path(tempfile.mkdtemp(prefix="kformer-minilm-data-")) / name,
                      [(texts[i], labels[i]) for i in picked])


def _train(train_path: Path, test_path: Path, recipe: str, minutes: float, wide: bool = True,
           seeds: int = 1) -> list[dict]:
    """The linear baseline and kformer's MiniLM fine-tuning (``recipe``, at most ``minutes``;
    ``wide=False``: the network alone, the recipe's n-gram part off), once per seed 0..seeds-1;
    with several seeds a last row gives the mean and standard deviation of kformer's runs."""
    rows = [linear_baseline("TF-IDF char 2-5 grams + linear SVM", load(train_path), load(test_path), "char_wb", (2, 5),
                            "svm")]
    name = f"kformer `{recipe}` recipe" + ("" if wide else ", network alone (--no-wide)")
    runs = [{**kformer_run(f"{name}, seed {seed}", train_path, test_path, recipe,
                           {"max_minutes": minutes, "seed": seed, **({} if wide else {"wide": False})},
                           throughput_texts=3080), "seed": seed} for seed in range(seeds)]
    rows += runs
    if seeds > 1:
        accuracies = [run["accuracy"] for run in runs]
        rows.append({"system": f"{name}, mean of seeds 0-{seeds - 1}", "accuracy": statistics.mean(accuracies),
                     "accuracy_sd": statistics.stdev(accuracies),
                     "macro_f1": statistics.mean(run["macro_f1"] for run in runs),
                     "train_s": statistics.mean(run["train_s"] for run in runs),
                     "run_wall_s": max(run["run_wall_s"] for run in runs)})
    return rows


# --freeze datasets: (shared-data folder, train, validation or None, test, max_length)
FREEZE_DATASETS = {
    "banking77": ("banking77", "train.csv", None, "test.csv", 64),
    "hwu64": ("hwu64", "train.csv", "val.csv", "test.csv", 64),
    "tickets": ("it-service-tickets", "train.csv.gz", None, "test.csv.gz", 128),
    "imdb": ("imdb", "train.csv.gz", None, "test.csv.gz", 256),  # truncated to 256 word pieces
}
FREEZE_SETTINGS = {"backbone": "minilm", "freeze": True, "pooling": "mean", "batch_size": 64, "learning_rate": 2e-3,
                   "warmup": 0.06, "decay": "linear", "epochs": 30, "patience": 6, "dropout": 0.1,
                   "label_smoothing": 0.0, "weight_decay": 0.01}


def _freeze(names: list[str], minutes: float, train_rows: int | None, test_rows: int | None) -> list[dict]:
    """Per dataset: the linear baseline and ``--backbone minilm --freeze`` (text vectors computed
    once, then a head trained for at most ``minutes``)."""
    rows = []
    for name in names:
        folder_name, train_name, valid_name, test_name, max_length = FREEZE_DATASETS[name]
        folder = require_shared_data(folder_name)
        train_path, test_path = _sample_csv(folder / train_name, train_rows), _sample_csv(folder / test_name, test_rows)
        valid_path = None if valid_name is None else _sample_csv(folder / valid_name, test_rows)
        rows.append({**linear_baseline(f"{name}: TF-IDF word 1-2 grams + logistic regression", load(train_path),
                                       load(test_path)), "dataset": name})
        row = kformer_run(f"{name}: kformer --backbone minilm --freeze", train_path, test_path, None,
                          {**FREEZE_SETTINGS, "max_length": max_length, "max_minutes": minutes},
                          throughput_texts=2000, valid_path=valid_path)
        rows.append({**row, "dataset": name})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-length", type=int, default=64, help="word pieces per text, both systems (default 64)")
    parser.add_argument("--batch-size", type=int, default=64, help="prediction batch size, both systems (default 64)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per system, alternating (default 3)")
    parser.add_argument("--texts", type=int, default=None, help="time only the first N test texts (default: all)")
    parser.add_argument("--skip-train", action="store_true", help="no banking77-minilm fine-tuning run")
    parser.add_argument("--skip-speed", action="store_true", help="no prediction-speed comparison")
    parser.add_argument("--recipe", default="banking77-minilm", help="recipe of the training run")
    parser.add_argument("--minutes", type=float, default=14.5,
                        help="training-time bound of the run (default 14.5: validation of the cut epoch still fits 15)")
    parser.add_argument("--train-rows", type=int, default=None,
                        help="train on about N random training rows, at least 2 per intent (smoke runs)")
    parser.add_argument("--test-rows", type=int, default=None, help="test on about N random test rows (smoke runs)")
    parser.add_argument("--freeze", default="",
                        help="comma-separated datasets for --backbone minilm --freeze runs beside the linear baseline: "
                        "banking77, hwu64, tickets, imdb (imdb: 50,000 texts of up to 256 pieces through MiniLM, "
                        "slow on a CPU); default none")
    parser.add_argument("--folder", type=Path, default=None,
                        help="also score a trained BANKING77 classifier folder (e.g. a banking77-minilm run) on every "
                        "runtime (keras, onnx, onnx-int8): test accuracy and texts/s")
    parser.add_argument("--no-wide", action="store_true", help="train the network alone (the recipe's wide part off)")
    parser.add_argument("--seeds", type=int, default=1,
                        help="training runs with seeds 0..N-1 (default 1); with several, a mean ± sd row")
    parser.add_argument("--no-record", action="store_true", help="print the tables; do not append to BENCHMARKS.md")
    args = parser.parse_args()
    frozen = [name.strip() for name in args.freeze.split(",") if name.strip()]
    if sorted(set(frozen) - set(FREEZE_DATASETS)):
        parser.error(f"--freeze takes {', '.join(FREEZE_DATASETS)}")
    folder = require_shared_data("banking77")
    texts = load(folder / "test.csv")[0][: args.texts]
    speed = [] if args.skip_speed else _speed(texts, args.max_length, args.batch_size, args.repeats)
    notes = (f"{len(texts):,} BANKING77 test texts, max_length {args.max_length}, batch size {args.batch_size}, "
             f"median of {args.repeats} alternating timed passes after one untimed warm-up pass each (kformer's "
             "warmup() before it traces its one graph); tokenising inside every pass. Target >= 500 texts/s.")
    if speed:
        record_or_print("MiniLM prediction speed: kformer vs plain KerasHub (issue 9)", speed, notes,
                        record=not args.no_record)
    if args.folder is not None:
        rows = _runtimes(args.folder, folder / "test.csv", args.batch_size, args.repeats)
        notes = (f"Folder {args.folder} (a trained classifier) loaded once per runtime; accuracy on the 3,080 official "
                 "test texts; network_alone_accuracy: the network's probabilities without the folder's wide part; "
                 f"texts_per_s: median of {args.repeats} passes over all test texts (batch size {args.batch_size}, "
                 "tokenising and the wide part included) after warmup() and one untimed pass.")
        record_or_print("BANKING77 classifier on each runtime (issue 9)", rows, notes, record=not args.no_record)
    if frozen:
        rows = _freeze(frozen, args.minutes, args.train_rows, args.test_rows)
        notes = ("Frozen all-MiniLM-L6-v2: each text's mean-pooled vector computed once (run_wall_s includes it and "
                 "the test set's prediction), then only the dropout + dense head trained (train_s: model.fit of the "
                 f"head, at most {args.minutes:g} minutes). Test accuracy on each dataset's test file"
                 + ("" if args.train_rows is None and args.test_rows is None else " (SUBSAMPLED: a smoke run)") + ".")
        record_or_print("MiniLM --freeze per dataset (issue 9)", rows, notes, record=not args.no_record)
    if not args.skip_train:
        rows = _train(_sample_csv(folder / "train.csv", args.train_rows),
                      _sample_csv(folder / "test.csv", args.test_rows), args.recipe, args.minutes, not args.no_wide,
                      args.seeds)
        notes = (f"Training bounded by {args.minutes:g} minutes (train_s: model.fit's wall clock, validation and "
                 "checkpoints included); accuracy on the official test texts"
                 + ("" if args.train_rows is None and args.test_rows is None else " (SUBSAMPLED: a smoke run)")
                 + "; texts_per_s: the saved folder's prediction after warmup. Target: kformer >= 94 % in <= 15 "
                 "minutes.")
        record_or_print("BANKING77 MiniLM fine-tuning (issue 9)", rows, notes, record=not args.no_record)


if __name__ == "__main__":
    main()
