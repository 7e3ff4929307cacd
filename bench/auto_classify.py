"""kformer with no recipe (every setting ``auto``) vs the linear baseline, on four datasets nobody tuned for.

    flock /tmp/kformer-bench.lock python -m bench.auto_classify [--datasets banking77,tickets,imdb,hwu64]
        [--minutes 10] [--limit N] [--no-record]

For each dataset, in the same run: the TF-IDF + linear model of that dataset's own benchmark
(bench/banking77.py, bench/tickets.py, bench/imdb.py; HWU64 like banking77), then
``kformer.tasks.classify.train`` with nothing set but ``max_minutes`` (the rules of
:mod:`kformer.tasks.classify.auto` choose the rest). Reports test accuracy, macro-F1, training
seconds, prediction throughput and the settings auto chose; with a wide n-gram part (``wide``,
auto for these from-scratch runs) also each part's test accuracy alone (from metrics.json
``"wide"``), its weight in the mix and its fitting seconds: what each part contributes. ``--limit N`` keeps N rows of
each file, taken from each label in turn (smoke runs); ``--no-record`` prints instead of appending to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench.baselines import kformer_run, limited_copy, linear_baseline, load, wide_columns
from bench.harness import record_or_print, require_shared_data

# name -> (folder, train, valid or None, test, (baseline name, analyzer, n-grams, model))
DATASETS = {
    "banking77": ("banking77", "train.csv", None, "test.csv",
                  ("TF-IDF char 2-5 grams + linear SVM", "char_wb", (2, 5), "svm")),
    "tickets": ("it-service-tickets", "train.csv.gz", None, "test.csv.gz",
                ("TF-IDF 1-2 grams + linear SVM", "word", (1, 2), "svm")),
    "imdb": ("imdb", "train.csv.gz", None, "test.csv.gz", ("TF-IDF 1-2 grams + LR", "word", (1, 2), "lr")),
    "hwu64": ("hwu64", "train.csv", "val.csv", "test.csv",
              ("TF-IDF char 2-5 grams + linear SVM", "char_wb", (2, 5), "svm")),
}
SHOWN_AUTO = ("max_length", "truncation", "vocab_size", "dim", "blocks", "dropout", "label_smoothing", "batch_size",
              "learning_rate", "epochs", "patience", "wide")


def _auto_summary(out_dir: Path) -> str:
    chosen = json.loads((out_dir / "metrics.json").read_text(encoding="utf-8"))["auto"]
    return " ".join(f"{name}={chosen[name]['value']}" for name in SHOWN_AUTO if name in chosen)


def run_dataset(name: str, minutes: float, limit: int | None, scratch: Path) -> list[dict]:
    """The baseline's row and kformer auto's row for one dataset."""
    folder_name, train_file, valid_file, test_file, (base_name, analyzer, ngrams, model) = DATASETS[name]
    folder = require_shared_data(folder_name)
    work = scratch / name
    work.mkdir()
    train_path = limited_copy(folder / train_file, limit, work)
    valid_path = None if valid_file is None else limited_copy(folder / valid_file, limit, work)
    test_path = limited_copy(folder / test_file, limit, work)
    baseline = linear_baseline(base_name, load(train_path), load(test_path), analyzer, ngrams, model)
    out_dir = work / "auto"
    kformer = kformer_run("kformer auto (no recipe)", train_path, test_path, settings={"max_minutes": minutes},
                          out_dir=out_dir, valid_path=valid_path, throughput_texts=2000)
    kformer.update(wide_columns(out_dir))
    kformer["auto settings"] = _auto_summary(out_dir)
    rows = []
    for row in (baseline, kformer):
        row = {"dataset": name, **row}
        row["accuracy − linear (points)"] = f"{100 * (row['accuracy'] - baseline['accuracy']):+.2f}"
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=",".join(DATASETS), help=f"comma-separated, of {', '.join(DATASETS)}")
    parser.add_argument("--minutes", type=float, default=10.0, help="kformer's training budget per dataset (max_minutes)")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="N rows of each file, from each label in turn (smoke)")
    parser.add_argument("--no-record", action="store_true", help="print the table, do not append to BENCHMARKS.md")
    args = parser.parse_args()
    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    unknown = sorted(set(names) - set(DATASETS))
    if unknown or not names:
        parser.error(f"--datasets takes {', '.join(DATASETS)}; unknown: {', '.join(unknown) or 'none given'}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="kformer-auto-") as scratch:
        for name in names:
            rows += run_dataset(name, args.minutes, args.limit, Path(scratch))
    limited = f" Smoke run on {args.limit} rows of each file." if args.limit else ""
    notes = (
        f"kformer was given no recipe and no setting but max_minutes {args.minutes:g} (every other setting `auto`, "
        "chosen from the training data: docs/classification.md); the linear baseline of each dataset's own "
        "benchmark ran in the same process just before. Test accuracy/macro-F1 on the official test sets "
        "(tickets: our split); kformer validates on a stratified 10 % hold-out of the training file (HWU64: the "
        "DialoGLUE val.csv) and keeps its best epoch by validation macro-F1; train_s = model.fit's wall clock (compile and validation included); wide_fit_s = fitting "
        "the wide TF-IDF + logistic regression part on the training split, before the network, plus (runs with wide_refit; auto leaves it off) its refit on training + validation texts after it, inside max_minutes (train_s + wide_fit_s <= the budget); 'transformer alone' and "
        "'wide alone' = test accuracy of each part of kformer's model, whose own accuracy is their geometric mix with "
        "'wide weight' chosen on validation by log-loss; 'wide C': the logistic regression's C (two classes: chosen "
        "on validation, NB = features scaled by naive-Bayes log-count ratios); texts_per_s = "
        f"prediction after loading the saved folder (both parts). Target: kformer auto >= the linear baseline on every dataset.{limited}"
    )
    record_or_print("Classification with auto settings vs the linear baseline (issue 9)", rows, notes,
                    record=not args.no_record)


if __name__ == "__main__":
    main()
