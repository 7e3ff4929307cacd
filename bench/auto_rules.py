"""The ``auto`` rules re-derived on validation data only: each rule's choice beside alternatives.

    flock /tmp/kformer-bench.lock python -m bench.auto_rules [--datasets banking77,hwu64,tickets,imdb]
        [--alternatives "blocks +1,refit"] [--seeds 3] [--minutes 5] [--no-record]

Every row is scored on an OUTER validation set that no run trains or chooses on: HWU64's
DialoGLUE val.csv, else the seed's stratified 10 % hold-out of the training file (the same texts
``bench.auto_classify`` and the tuned linear baseline choose on). Each kformer run gets the rest of
the training file, holds out its own 10 % to choose its epoch (and, with ``refit``, then trains
again on all of it): a nested check, so that ``refit`` can be compared with the others on texts
none of them saw. No test file is read.

The alternatives, each one setting changed from ``auto``'s own choice (a row whose settings equal
auto's is skipped: it would be auto again):

* ``steps x0.5``, ``steps x1.5``: the epochs the rule gives with ``TARGET_STEPS`` halved or
  half as large again (binds on the small intent sets);
* ``texts seen x0.5``, ``texts seen x2``: the same for ``TARGET_TEXTS_SEEN`` (binds on tickets);
* ``blocks +1``: one more encoder block;
* ``refit on`` / ``refit off``: the other side of the ``refit`` rule.

Steps and texts alternatives are skipped where ``max_minutes`` cut auto's epochs (the budget,
not the rule, decided them). Reported per dataset: the outer-validation accuracy of auto and of
each alternative, mean over seeds, and the mean ± sd of the per-seed difference (points); a rule
changes where an alternative wins beyond noise on at least two data sets.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
from pathlib import Path

from bench.auto_classify import DATASETS
from bench.harness import (
    add_rule_check_args,
    append_rows,
    mark_best_alternative,
    read_rows,
    record_or_print,
    require_shared_data,
    rule_check_plan,
    sd,
    seed_groups,
)
from bench.headlines import Headline

# This benchmark's rows in BENCHMARKS.md's summary (bench/headlines.py says how they are read)
HEADLINES = (
    Headline("classification", "Classification auto rules", "valid_accuracy", split="dataset",
             name="Auto rules vs their best alternative (validation)", kformer={"role": "^auto$"},
             baseline={"role": "^best alternative$"},
             why={"banking77": "the best of six alternatives, picked after the fact, within one sd of auto",
                  "hwu64": "`refit on` wins here alone; a rule changes only where an alternative wins on two data sets",
                  "tickets": "`refit on` gains 0.3 points (2 seeds, sd 0.3): within noise of auto"}),
)


def _epochs(auto: dict, rows: int, steps_scale: float = 1.0, texts_scale: float = 1.0) -> int | None:
    """The epochs rule's value with its targets scaled, or None where the time budget cut auto's."""
    from kformer.tasks.classify import auto as rules

    if "cut to" in auto["epochs"]["why"]:
        return None
    steps = math.ceil(rows / auto["batch_size"]["value"])
    low, high = rules.EPOCH_RANGE
    by_steps = math.ceil(rules.TARGET_STEPS * steps_scale / steps)
    by_texts = math.ceil(rules.TARGET_TEXTS_SEEN * texts_scale / rows)
    return min(high, max(low, min(by_steps, by_texts)))


def _epochs_change(steps_scale: float = 1.0, texts_scale: float = 1.0):
    def change(auto: dict, rows: int) -> dict | None:
        if not auto:
            raise SystemExit("this alternative needs auto's choices: rerun auto (a fresh --rows file)")
        epochs = _epochs(auto, rows, steps_scale, texts_scale)
        return None if epochs is None or epochs == auto["epochs"]["value"] else {"epochs": epochs}
    return change


ALTERNATIVES = {  # name: (auto's choices, inner training rows) -> the settings it changes, or None (= auto)
    "steps x0.5": _epochs_change(steps_scale=0.5),
    "steps x1.5": _epochs_change(steps_scale=1.5),
    "texts seen x0.5": _epochs_change(texts_scale=0.5),
    "texts seen x2": _epochs_change(texts_scale=2.0),
    "blocks +1": lambda auto, rows: {"blocks": auto["blocks"]["value"] + 1},
    "refit on": lambda auto, rows: None if auto.get("refit", {}).get("value") else {"refit": True},
    "refit off": lambda auto, rows: {"refit": False} if auto.get("refit", {}).get("value") else None,
}


def outer_split(name: str, seed: int):
    """``(train, outer_valid)`` LabelledTexts of dataset ``name`` for ``seed``."""
    from kformer.data.readers import read_labelled
    from kformer.tasks.classify.data import split
    from kformer.tasks.classify.settings import ClassifyConfig

    folder_name, train_file, valid_file, _test_file, _baseline = DATASETS[name]
    folder = require_shared_data(folder_name)
    given = None if valid_file is None else read_labelled(folder / valid_file)
    return split(ClassifyConfig().valid_fraction, seed, read_labelled(folder / train_file), given)


def _run(train, outer_valid, settings: dict, out: Path) -> dict:
    from kformer.config import make_config
    from kformer.tasks import classify

    config = make_config(classify.ClassifyConfig, "classify", None, settings)
    metrics = classify.train(config, train, out).metrics
    scores = classify.load(out).scores(outer_valid, 256)
    return {"metrics": metrics, "accuracy": scores["accuracy"], "macro_f1": scores["macro_f1"]}


def _row(name: str, seed: int, system: str, run: dict) -> dict:
    metrics = run["metrics"]
    recipe = metrics["recipe"]
    return {"dataset": name, "seed": seed, "system": system, "valid_accuracy": run["accuracy"],
            "valid_macro_f1": run["macro_f1"], "inner_valid_accuracy": metrics["valid"]["accuracy"],
            "epochs": recipe["epochs"], "best_epoch": metrics["best_epoch"],
            "settings": ", ".join(f"{k}={recipe.get(k)}" for k in ("max_length", "vocab_size", "dim", "blocks",
                                                                    "batch_size", "dropout", "refit")),
            "train_s": metrics["train_seconds"], "auto": metrics["auto"], "inner_train_rows": metrics["splits"]["train"]}


def check(name: str, seed: int, minutes: float, alternatives: list[str], scratch: Path,
          recorded: dict | None = None) -> list[dict]:
    """The rows of one dataset and seed: auto's (unless ``recorded`` holds it: that run's row), then
    each alternative's that differs from it."""
    train, outer_valid = outer_split(name, seed)
    base = {"max_minutes": minutes, "seed": seed}
    rows = []
    if recorded is None:
        auto = _run(train, outer_valid, base, scratch / f"{name}-{seed}-auto")
        rows.append(_row(name, seed, "auto", auto))
        recorded = rows[-1]
        print(rows[-1], flush=True)
    for alternative in alternatives:
        # rows recorded before they kept auto's choices serve only alternatives that need none (refit)
        change = ALTERNATIVES[alternative](recorded.get("auto") or {}, recorded.get("inner_train_rows", 0))
        if change is None:
            continue
        run = _run(train, outer_valid, {**base, **change}, scratch / f"{name}-{seed}-{alternative}")
        rows.append(_row(name, seed, alternative, run))
        print(rows[-1], flush=True)
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """Per dataset and system: mean outer-validation accuracy over the seeds, and the mean ± sd of
    the per-seed difference from auto (points)."""
    out: list[dict] = []
    for name, system, runs, diff in seed_groups(rows, "dataset", "auto", "valid_accuracy"):
        out.append({"dataset": name, "system": system, "role": "auto" if system == "auto" else "alternative",
                    "seeds": len(runs), "valid_accuracy": statistics.mean(row["valid_accuracy"] for row in runs),
                    "− auto (points)": 100 * statistics.mean(diff), "sd (points)": 100 * sd(diff),
                    "per seed": ", ".join(f"{100 * row['valid_accuracy']:.2f}" for row in runs),
                    "inner_valid_accuracy": statistics.mean(row["inner_valid_accuracy"] for row in runs),
                    "epochs": " | ".join(dict.fromkeys(str(row["epochs"]) for row in runs)),
                    "settings": " | ".join(dict.fromkeys(row["settings"] for row in runs)),
                    "train_s": statistics.mean(row["train_s"] for row in runs)})
    names = dict.fromkeys(row["dataset"] for row in out)
    return [row for name in names for row in mark_best_alternative([r for r in out if r["dataset"] == name],
                                                                  "− auto (points)")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_rule_check_args(parser, "datasets", DATASETS, ALTERNATIVES, minutes=5.0)
    args = parser.parse_args()
    names, alternatives, seeds = rule_check_plan(parser, args, "datasets", DATASETS, ALTERNATIVES)
    rows = read_rows(args.rows)
    with tempfile.TemporaryDirectory(prefix="kformer-rules-") as scratch:
        for name in names:
            for seed in seeds:
                done = [row for row in rows if (row["dataset"], row["seed"], row["system"]) == (name, seed, "auto")]
                new = check(name, seed, args.minutes, alternatives, Path(scratch), done[-1] if done else None)
                append_rows(args.rows, new)
                rows += new
    seeds = sorted({row["seed"] for row in rows})
    notes = ("Validation only (no test file read). Each row is scored on an outer validation set no run trains or "
             "chooses on (HWU64: val.csv; else the seed's stratified 10 % hold-out of the training file); every run "
             "trains on the rest and holds out its own 10 % to choose its epoch (with refit, then trains again on all "
             f"of it). max_minutes {args.minutes:g}, seeds {', '.join(map(str, seeds))}. 'auto' is every setting "
             "auto; each other row changes one setting from auto's choice (rows equal to auto are skipped). "
             "'− auto', 'sd': mean and standard deviation of the per-seed difference in outer-validation accuracy (paired by "
             "seed); 'best alternative' has the highest mean difference. train_s: wall clock beside other jobs, not a "
             "speed measurement." + (f" {args.note}" if args.note else ""))
    record_or_print("Classification auto rules checked on validation (issue 33)", summary(rows), notes,
                    record=not args.no_record)


if __name__ == "__main__":
    main()
