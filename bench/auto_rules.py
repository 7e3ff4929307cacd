"""The ``auto`` rules checked on validation data only: each rule's choice beside an alternative.

    flock /tmp/kformer-bench.lock python -m bench.auto_rules [--datasets banking77,hwu64]
        [--minutes 10] [--no-record]

For each dataset, ``kformer.tasks.classify.train`` runs with every setting ``auto`` (seed 0), then
once per alternative below with one setting changed, on the same training split, scored on the
same validation texts (the stratified 10 % hold-out of the training file; HWU64: DialoGLUE's
val.csv). No test file is read: the rules are checked where they were chosen.

* ``epochs x1.5``: half as many epochs again as the ``epochs`` rule planned (the rule caps the
  optimizer steps and the texts seen; the claim is that more overfits or is not worth its time);
* ``learning_rate /2``: half the scratch rate;
* ``max_length x2``: twice the 95th-percentile width (the claim: longer rows cost time, add little);
* ``vocab_size x2``: twice the words kept (words seen once included, up to that many);
* ``dim x2``, ``dim /2``: a wider or narrower network (heads and ff_dim follow their own rules);
* ``blocks +1``: one more encoder block;
* ``batch_size x2``: twice the batch (the epochs rule then plans from the new step count);
* ``label_smoothing 0``: hard targets (the rule smooths from 10 classes);
* ``dropout /2``, ``dropout x1.5``: less or more dropout than the rows-per-class rule chose.

The ``wide`` rule is checked by every run's own numbers: ``valid_transformer_alone`` beside the
whole model's validation accuracy (bench/auto_classify.py reports the same per seed).

Reported: validation accuracy and macro-F1 of the whole model, of the Transformer alone, training
seconds. A rule holds when its row is at least as good on validation as the alternative (within
noise, ~0.5 point on these validation sets; one seed).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench.auto_classify import DATASETS
from bench.harness import record_or_print, require_shared_data

ALTERNATIVES = {  # name: what it changes, given auto's own choices
    "epochs x1.5": lambda auto: {"epochs": round(1.5 * auto["epochs"]["value"])},
    "learning_rate /2": lambda auto: {"learning_rate": auto["learning_rate"]["value"] / 2},
    "max_length x2": lambda auto: {"max_length": 2 * auto["max_length"]["value"]},
    "vocab_size x2": lambda auto: {"vocab_size": 2 * auto["vocab_size"]["value"]},
    "dim x2": lambda auto: {"dim": 2 * auto["dim"]["value"]},
    "dim /2": lambda auto: {"dim": auto["dim"]["value"] // 2},
    "blocks +1": lambda auto: {"blocks": auto["blocks"]["value"] + 1},
    "batch_size x2": lambda auto: {"batch_size": 2 * auto["batch_size"]["value"]},
    "label_smoothing 0": lambda auto: {"label_smoothing": 0.0},
    "dropout /2": lambda auto: {"dropout": auto["dropout"]["value"] / 2},
    "dropout x1.5": lambda auto: {"dropout": round(1.5 * auto["dropout"]["value"], 3)},
}


def _run(train_path: Path, valid_path: Path | None, settings: dict, out: Path) -> dict:
    from kformer.config import make_config
    from kformer.tasks import classify

    config = make_config(classify.ClassifyConfig, "classify", None, settings)
    classify.train(config, train_path, out, valid=valid_path)
    return json.loads((out / "metrics.json").read_text(encoding="utf-8"))


def _row(name: str, system: str, metrics: dict) -> dict:
    parts = (metrics.get("wide") or {}).get("valid_accuracy") or {}
    return {"dataset": name, "system": system, "valid_accuracy": metrics["valid"]["accuracy"],
            "valid_macro_f1": metrics["valid"]["macro_f1"],
            "valid_transformer_alone": parts.get("transformer", metrics["valid"]["accuracy"]),
            "epochs": metrics["recipe"]["epochs"], "best_epoch": metrics["best_epoch"],
            "learning_rate": metrics["recipe"]["learning_rate"], "wide": metrics["recipe"]["wide"],
            "settings": ", ".join(f"{k}={metrics['recipe'][k]}" for k in ("max_length", "vocab_size", "dim", "blocks",
                                                                         "batch_size", "label_smoothing", "dropout")),
            "train_s": metrics["train_seconds"]}


def check(name: str, minutes: float, scratch: Path) -> list[dict]:
    folder_name, train_file, valid_file, _test_file, _baseline = DATASETS[name]
    folder = require_shared_data(folder_name)
    train_path, valid_path = folder / train_file, None if valid_file is None else folder / valid_file
    base = {"max_minutes": minutes, "seed": 0}
    auto = _run(train_path, valid_path, base, scratch / f"{name}-auto")
    rows = [_row(name, "auto", auto)]
    for alternative, change in ALTERNATIVES.items():
        metrics = _run(train_path, valid_path, {**base, **change(auto["auto"])}, scratch / f"{name}-{alternative}")
        rows.append(_row(name, alternative, metrics))
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="banking77,hwu64", help=f"comma-separated, of {', '.join(DATASETS)}")
    parser.add_argument("--minutes", type=float, default=10.0, help="max_minutes of every run")
    parser.add_argument("--no-record", action="store_true", help="print the table, do not append to BENCHMARKS.md")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="kformer-rules-") as scratch:
        for name in args.datasets.split(","):
            rows += check(name, args.minutes, Path(scratch))
    notes = ("Validation only (no test file read): every run on the same training split and validation texts, seed 0, "
             f"max_minutes {args.minutes:g}. 'auto' is every setting auto; each other row changes one setting from "
             "auto's choice. valid_transformer_alone: the Transformer without the n-gram part, on the same texts.")
    record_or_print("Classification auto rules checked on validation (issue 26)", rows, notes,
                    record=not args.no_record)


if __name__ == "__main__":
    main()
