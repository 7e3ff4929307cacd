"""kformer with no recipe (every setting ``auto``) vs a tuned linear baseline, on four datasets.

    flock /tmp/kformer-bench.lock python -m bench.auto_classify [--datasets banking77,tickets,imdb,hwu64]
        [--minutes 10] [--seeds 3] [--limit N] [--refit-both] [--no-record]

For each dataset and seed, in the same run: the TF-IDF + linear model of that dataset's own
benchmark with its fixed settings (bench/banking77.py, bench/tickets.py, bench/imdb.py; HWU64 like
banking77), the linear baseline tuned on kformer's validation texts
(:func:`bench.baselines.tuned_linear_baseline`), then
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

from bench.baselines import (
    kformer_run,
    limited_copy,
    linear_baseline,
    load,
    tuned_linear_baseline,
    wide_columns,
)
from bench.harness import record_or_print, require_shared_data, sd, seed_groups
from bench.headlines import Headline

# This benchmark's rows in BENCHMARKS.md's summary (bench/headlines.py says how they are read)
HEADLINES = (
    Headline("classification", "Classification with auto settings vs a tuned", "accuracy", split="dataset",
             name="No recipe (auto) vs a tuned linear baseline", kformer={"system": "^kformer"},
             baseline={"system": "^tuned linear baseline$"}, target=">= baseline + 0.01"),
    Headline("classification", "Classification: auto with refit on and off", "accuracy", split="dataset",
             name="Auto with refit on vs a tuned linear baseline (report)", kformer={"system": "refit on"},
             baseline={"system": "^tuned linear baseline$"}, target=">= baseline + 0.01"),
)
TITLE = "Classification with auto settings vs a tuned linear baseline (issue 26)"
# --refit-both runs are their own section: they report both sides of auto's refit choice
REFIT_TITLE = "Classification: auto with refit on and off vs a tuned linear baseline (issue 33)"

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
              "learning_rate", "refit", "epochs", "patience", "wide")


def _auto_summary(out_dir: Path) -> str:
    chosen = json.loads((out_dir / "metrics.json").read_text(encoding="utf-8"))["auto"]
    return " ".join(f"{name}={chosen[name]['value']}" for name in SHOWN_AUTO if name in chosen)


def _valid_split(train_path: Path, valid_path: Path | None, seed: int):
    """``(train, valid)`` (texts, labels) pairs: the validation texts kformer's run of ``seed``
    holds out (its stratified ``valid_fraction`` split, or the given validation file)."""
    from kformer.data.readers import read_labelled
    from kformer.tasks.classify.data import split
    from kformer.tasks.classify.settings import ClassifyConfig

    train, valid = split(ClassifyConfig().valid_fraction, seed, read_labelled(train_path),
                         None if valid_path is None else read_labelled(valid_path))
    return (train.texts, train.labels), (valid.texts, valid.labels)


def run_dataset(name: str, minutes: float, limit: int | None, scratch: Path, seed: int = 0,
                refit_both: bool = False) -> list[dict]:
    """The fixed baseline's row, the tuned baseline's row and kformer auto's row for one dataset
    and seed (the seed of kformer's run and of the validation split both kformer and the tuned
    baseline choose on)."""
    folder_name, train_file, valid_file, test_file, (base_name, analyzer, ngrams, model) = DATASETS[name]
    folder = require_shared_data(folder_name)
    work = scratch / f"{name}-{seed}"
    work.mkdir()
    train_path = limited_copy(folder / train_file, limit, work)
    valid_path = None if valid_file is None else limited_copy(folder / valid_file, limit, work)
    test_path = limited_copy(folder / test_file, limit, work)
    test = load(test_path)
    baseline = linear_baseline(f"fixed: {base_name}", load(train_path), test, analyzer, ngrams, model)
    tuned = tuned_linear_baseline(*_valid_split(train_path, valid_path, seed), test)
    out_dir = work / "auto"
    kformer = kformer_run("kformer auto (no recipe)", train_path, test_path, settings={"max_minutes": minutes, "seed": seed},
                          out_dir=out_dir, valid_path=valid_path, throughput_texts=2000)
    kformer.update(wide_columns(out_dir))
    metrics = json.loads((out_dir / "metrics.json").read_text(encoding="utf-8"))
    kformer["valid_accuracy"] = metrics["valid"]["accuracy"]
    valid_parts = (metrics.get("wide") or {}).get("valid_accuracy") or {}
    if valid_parts:
        kformer["valid: transformer / wide / mix"] = " / ".join(f"{valid_parts[k]:.4f}" for k in ("transformer", "wide", "mixed")
                                                               if k in valid_parts)
    kformer["auto settings"] = _auto_summary(out_dir)
    rows = [baseline, tuned, kformer]
    if refit_both:  # the other side of auto's refit choice, for the report (nothing is chosen on it)
        other = not metrics["recipe"]["refit"]
        rows.append(kformer_run(f"kformer auto, refit {'on' if other else 'off'}", train_path, test_path,
                                settings={"max_minutes": minutes, "seed": seed, "refit": other},
                                out_dir=work / "other", valid_path=valid_path, throughput_texts=2000))
    return [{"dataset": name, "seed": seed, **row} for row in rows]


def seed_summary(rows: list[dict]) -> list[dict]:
    """Per dataset and system: mean and standard deviation (points) of test accuracy and macro-F1
    over the seeds, each seed's accuracy, and the margin over the tuned baseline (mean ± sd of the
    per-seed differences); kformer's rows also show, per seed, what each of its parts scored on
    validation (the wide rule's check) and the settings auto chose."""
    import statistics

    out = []
    for name, system, runs, diff in seed_groups(rows, "dataset", "tuned linear baseline", "accuracy"):
        margin = [100 * d for d in diff]
        summary = {"dataset": name, "system": system, "seeds": len(runs),
                   "accuracy": statistics.mean(row["accuracy"] for row in runs),
                   "accuracy_sd (points)": 100 * sd([row["accuracy"] for row in runs]),
                   "macro_f1": statistics.mean(row["macro_f1"] for row in runs),
                   "− tuned baseline (points)": f"{statistics.mean(margin):+.2f} ± {sd(margin):.2f}",
                   "accuracy per seed": ", ".join(f"{100 * row['accuracy']:.2f}" for row in runs),
                   "train_s": statistics.mean(row["train_s"] for row in runs)}
        for column in ("chosen", "valid: transformer / wide / mix", "auto settings"):
            values = [str(row[column]) for row in runs if column in row]
            if values:
                summary[column] = " | ".join(dict.fromkeys(values))
        out.append(summary)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=",".join(DATASETS), help=f"comma-separated, of {', '.join(DATASETS)}")
    parser.add_argument("--minutes", type=float, default=10.0, help="kformer's training budget per dataset (max_minutes)")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="N rows of each file, from each label in turn (smoke)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per dataset (default 3): the table gives mean ± sd")
    parser.add_argument("--refit-both", action="store_true",
                        help="also train kformer with the other side of auto's refit choice (a report row)")
    parser.add_argument("--no-record", action="store_true", help="print the table, do not append to BENCHMARKS.md")
    args = parser.parse_args()
    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    unknown = sorted(set(names) - set(DATASETS))
    if unknown or not names:
        parser.error(f"--datasets takes {', '.join(DATASETS)}; unknown: {', '.join(unknown) or 'none given'}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="kformer-auto-") as scratch:
        for name in names:
            for seed in range(args.seeds):
                rows += run_dataset(name, args.minutes, args.limit, Path(scratch), seed, args.refit_both)
                print(rows[-4:], flush=True)
    limited = f" Smoke run on {args.limit} rows of each file." if args.limit else ""
    notes = (
        f"kformer was given no recipe and no setting but max_minutes {args.minutes:g} and the seed (every other "
        "setting `auto`, chosen from the training data: docs/classification.md). Three systems per dataset and seed, "
        "in the same process: 'fixed' is the linear baseline of the dataset's own benchmark with its fixed settings; "
        "'tuned linear baseline' chose its features (TF-IDF word 1-2 or char 2-5 grams), model (logistic regression "
        "or linear SVM) and C (SVM 0.1-3, logistic regression 1-100) by accuracy on the same validation texts kformer chooses on (the seed's "
        "stratified 10 % hold-out of the training file; HWU64: the DialoGLUE val.csv), then was fitted again on "
        "training + validation texts. Test accuracy/macro-F1 on the official test sets (tickets: our split), scored "
        "once per run; no setting of kformer's or the baselines' was chosen on them. kformer keeps its best epoch by "
        "validation macro-F1; train_s = model.fit's wall clock (the tuned baseline: its search and final fit); "
        "'transformer alone' and 'wide alone' = test accuracy of each part of kformer's model (their geometric mix "
        "with 'wide weight' chosen on validation by log-loss); 'valid: transformer / wide / mix' = the same on "
        "validation, which is what the wide rule is checked on; texts_per_s = prediction after loading the saved "
        f"folder. Target: kformer auto >= the tuned baseline + 1 point on every dataset. 'refit' (auto settings): the "
        "network trained again on training + validation texts once validation chose its epoch (auto's rule: "
        f"docs/settings.md).{limited}"
    )
    notes += (f" Seeds 0..{args.seeds - 1}: accuracy and macro_f1 are means over them, accuracy_sd their standard "
              "deviation; '− tuned baseline' is the mean ± sd of kformer's per-seed margin (seed by seed, the same "
              "validation split). Columns with several values list them per distinct value, | between.")
    if args.refit_both:
        notes += (" With --refit-both each dataset and seed has a fourth row, kformer with the other side of auto's "
                  "refit choice and the same seed and validation split: a report of what refit does on test texts; "
                  "auto's rule was chosen on validation alone (bench/auto_rules.py).")
    record_or_print(REFIT_TITLE if args.refit_both else TITLE, seed_summary(rows), notes, record=not args.no_record)

if __name__ == "__main__":
    main()
