"""BANKING77 intents: TF-IDF char 2-5 grams + linear SVM vs kformer's `banking77` recipe.

    flock /tmp/kformer-bench.lock python -m bench.banking77 [--minilm-minutes M]

``--minilm-minutes`` adds a run of the pretrained all-MiniLM-L6-v2 backbone, stopped by the time
budget (fine-tuning it fully takes far longer than a few minutes on a 2-core CPU).
"""

from __future__ import annotations

import argparse

from bench.baselines import kformer_run, linear_baseline, load, report
from bench.harness import require_shared_data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="banking77", help="kformer recipe (default: banking77)")
    parser.add_argument("--minilm-minutes", type=float, default=None, help="also fine-tune MiniLM for this many minutes")
    args = parser.parse_args()
    folder = require_shared_data("banking77")
    train_path, test_path = folder / "train.csv", folder / "test.csv"
    rows = [linear_baseline("TF-IDF char 2-5 grams + linear SVM", load(train_path), load(test_path), "char_wb", (2, 5), "svm")]
    rows.append(kformer_run(f"kformer `{args.recipe}` recipe (scratch)", train_path, test_path, ["--recipe", args.recipe]))
    if args.minilm_minutes:
        rows.append(kformer_run("kformer MiniLM backbone (time-boxed)", train_path, test_path,
                                ["--backbone", "minilm", "--max-length", "32", "--batch-size", "32", "--epochs", "3",
                                 "--learning-rate", "1e-4", "--max-minutes", str(args.minilm_minutes)],
                                throughput_texts=500))
    notes = (
        "Accuracy/macro-F1 on the official 3,080-text test set; texts_per_s = prediction throughput after "
        "loading the saved model folder. Targets: TF-IDF+SVM 90.6 %, kformer from scratch >= 88 %, "
        "pretrained backbone >= 94 %."
    )
    report("BANKING77 intents", rows, notes)


if __name__ == "__main__":
    main()
