"""IT helpdesk tickets (8 queues): TF-IDF 1-2 grams + linear SVM vs kformer's `tickets` recipe.

    flock /tmp/kformer-bench.lock python -m bench.tickets [--recipe tickets] [--extra NAME=VALUE ...]

A recipe with a wide n-gram part (``wide = true``, or ``--extra wide=true``) gets columns for each
part's test accuracy alone, the mix weight and the wide part's fitting seconds. ``--limit N`` keeps
N rows of each file (smoke runs); ``--no-record`` prints instead of appending to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench import baselines as base
from bench.harness import require_shared_data
from bench.headlines import Headline

# This benchmark's rows in BENCHMARKS.md's summary (bench/headlines.py says how they are read)
HEADLINES = (
    Headline("classification", "IT helpdesk tickets", "accuracy", command=r"^(?!.*--(recipe|extra|limit))",
             kformer={"system": "^kformer"}, baseline={"system": "^TF-IDF"}, target=">= 0.88"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="tickets", help="kformer recipe (default: tickets)")
    parser.add_argument("--extra", nargs="*", default=[], metavar="NAME=VALUE", help="extra settings for kformer's run")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="N rows of each file (smoke runs)")
    parser.add_argument("--no-record", action="store_true", help="print the table, do not append to BENCHMARKS.md")
    args = parser.parse_args()
    folder = require_shared_data("it-service-tickets")
    with tempfile.TemporaryDirectory(prefix="kformer-tickets-") as scratch:
        train_path, test_path = (base.limited_copy(folder / name, args.limit, Path(scratch))
                                 for name in ("train.csv.gz", "test.csv.gz"))
        rows = [base.linear_baseline("TF-IDF 1-2 grams + linear SVM", base.load(train_path), base.load(test_path), "word", (1, 2),
                                "svm")]
        out_dir = Path(scratch) / "kformer"
        row = base.kformer_run(f"kformer `{args.recipe}` recipe (scratch)", train_path, test_path, args.recipe,
                          base.parse_settings(args.extra), out_dir=out_dir)
        row.update(base.wide_columns(out_dir))
        rows.append(row)
    limited = f" Smoke run on {args.limit} rows of each file." if args.limit else ""
    notes = (
        "Accuracy/macro-F1 on the 9,567-ticket test split (ours, stratified; see ../shared/data); "
        "texts_per_s = prediction throughput after loading the saved model folder. With a wide part: "
        "train_s = the network's fit, wide_fit_s = the wide part's (fitted first, both inside max_minutes); "
        "'transformer alone' and 'wide alone' = each part's test accuracy, the row's own is their mix. "
        f"Targets: TF-IDF+SVM 86.1 %, kformer >= 88 %.{limited}"
    )
    base.report("IT helpdesk tickets", rows, notes, record=not args.no_record)


if __name__ == "__main__":
    main()
