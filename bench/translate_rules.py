"""The translation ``auto`` batch and rate rules re-derived on validation pairs only.

    flock /tmp/kformer-bench.lock python -m bench.translate_rules [--corpora en-ta,en-es] [--minutes 4]
        [--epochs N] [--seeds 1 | --seed-list 1,2] [--alternatives ...] [--rows rows.jsonl [--table-only]]
        [--no-record]

The batch rule (``batch_tokens``: a power of two giving at least ``MIN_UPDATES`` updates) and the
per-size peak rates of :mod:`kformer.tasks.translate.auto` were placed by test chrF; here they
are checked where settings must be chosen. For each corpus, ``kformer.tasks.translate.train`` runs
with every setting ``auto`` (retrieval off: it decodes, it does not train, and it would cost more
than the run) and once per alternative with one setting changed from auto's choice, all on the
same training pairs, for ``--minutes`` each, scored by greedy chrF on validation pairs that
training never sees and nothing else chooses on:

* English->Tamil: ``bench/en_ta_levers.py``'s split (TICO-19 documents; Tatoeba joins training);
  its validation documents (about 150 pairs). Its test documents are not decoded.
* English->Spanish: ``bench/en_es.py``'s training side (2,000 English sentences held out for test,
  seed 0, never decoded here); 500 further English sentences held out of it (seed 1) validate.

No test pair is read.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

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
    Headline("translation", "Translation batch and rate rules", "valid_chrf", split="corpus",
             name="Translation auto rules vs their best alternative (validation)", kformer={"role": "^auto$"},
             baseline={"role": "^best alternative$"},
             why={"en-ta": "half auto's batch wins here (2 seeds) but not on English->Spanish; a rule changes only "
                  "where an alternative wins on two corpora"}),
)

ALTERNATIVES = {  # name: auto's choices -> the settings it changes
    "batch_tokens x2": lambda auto: {"batch_tokens": 2 * auto["batch_tokens"]["value"]},
    "batch_tokens /2": lambda auto: {"batch_tokens": auto["batch_tokens"]["value"] // 2},
    "learning_rate x2": lambda auto: {"learning_rate": 2 * auto["learning_rate"]["value"]},
    "learning_rate /2": lambda auto: {"learning_rate": auto["learning_rate"]["value"] / 2},
}


def en_ta_pairs():
    """``(train, valid)``: en_ta_levers' training and validation documents (test left out)."""
    from bench.en_ta_levers import split

    train, valid, _test, _documents = split()
    return train, valid


def en_es_pairs():
    """``(train, valid)``: 500 English sentences held out of bench.en_es's training side."""
    from kformer.data.pairs import read_pairs, source_holdout

    pairs = read_pairs(require_shared_data("en-es-anki", "spa.txt.gz"))
    train, _test = source_holdout(pairs, 2000, seed=0)
    return source_holdout(train, 500, seed=1)


CORPORA = {"en-ta": en_ta_pairs, "en-es": en_es_pairs}


def _run(train, valid, settings: dict, out: Path) -> dict:
    from kformer.config import make_config
    from kformer.tasks import translate

    config = make_config(translate.TranslateConfig, "translate", None, {"retrieval": "off", **settings})
    metrics = translate.train(config, train, out, valid=valid).metrics
    scores = translate.load(out).evaluate(valid, beam=1)
    return {"metrics": metrics, "chrf": scores["chrf"], "bleu": scores["bleu"]}


def _row(corpus: str, seed: int, system: str, run: dict) -> dict:
    metrics, auto = run["metrics"], run["metrics"]["auto"]
    recipe = metrics["recipe"]
    budget = f"{recipe['epochs']} epochs (early stopping on)" if recipe.get("max_minutes") is None \
        else f"{recipe['max_minutes']:g} minutes (max_minutes)"
    return {"corpus": corpus, "seed": seed, "system": system, "budget": budget, "valid_chrf": run["chrf"], "valid_bleu": run["bleu"],
            "batch_tokens": recipe["batch_tokens"], "learning_rate": recipe["learning_rate"], "dim": recipe["dim"],
            "encoder": recipe["encoder"], "epochs_run": metrics.get("epochs_run"),
            "auto": {name: auto[name] for name in ("batch_tokens", "learning_rate") if name in auto}}


def check(corpus: str, seed: int, minutes: float | None, epochs: int | None, alternatives: list[str],
          scratch: Path, recorded: dict | None = None, rows_file: Path | None = None) -> list[dict]:
    """The rows of one corpus and seed: auto's (unless ``recorded`` holds that run's row), then one per
    alternative, each appended to ``rows_file`` (``--rows``) as it finishes."""
    train, valid = CORPORA[corpus]()
    base = {"seed": seed, **({"epochs": epochs} if epochs else {"max_minutes": minutes})}
    rows = []
    if recorded is None:
        auto = _run(train, valid, base, scratch / f"{corpus}-{seed}-auto")
        rows.append(_row(corpus, seed, "auto", auto))
        recorded = rows[-1]
        append_rows(rows_file, rows[-1:])
        print(rows[-1], flush=True)
    for name in alternatives:
        run = _run(train, valid, {**base, **ALTERNATIVES[name](recorded["auto"])}, scratch / f"{corpus}-{seed}-{name}")
        rows.append(_row(corpus, seed, name, run))
        append_rows(rows_file, rows[-1:])
        print(rows[-1], flush=True)
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """Per corpus and system: mean validation chrF over the seeds and the difference from auto."""
    out: list[dict] = []
    for corpus, system, runs, diff in seed_groups(rows, "corpus", "auto", "valid_chrf"):
        out.append({"corpus": corpus, "system": system, "role": "auto" if system == "auto" else "alternative",
                    "seeds": len(runs), "valid_chrf": statistics.mean(row["valid_chrf"] for row in runs),
                    "− auto (chrF)": statistics.mean(diff), "sd (chrF)": sd(diff),
                    "per seed": ", ".join(f"{row['valid_chrf']:.2f}" for row in runs),
                    "valid_bleu": statistics.mean(row["valid_bleu"] for row in runs),
                    "batch_tokens": " | ".join(dict.fromkeys(str(row["batch_tokens"]) for row in runs)),
                    "learning_rate": " | ".join(dict.fromkeys(f"{row['learning_rate']:g}" for row in runs)),
                    "model": " | ".join(dict.fromkeys(f"dim {row['dim']}, encoder {row['encoder']}" for row in runs)),
                    "epochs_run": " | ".join(dict.fromkeys(str(row["epochs_run"]) for row in runs))})
    corpora = dict.fromkeys(row["corpus"] for row in out)
    return [row for corpus in corpora for row in mark_best_alternative([r for r in out if r["corpus"] == corpus],
                                                                      "− auto (chrF)")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_rule_check_args(parser, "corpora", CORPORA, ALTERNATIVES, minutes=4.0)
    parser.add_argument("--epochs", type=int, default=None,
                        help="train every run for this many epochs instead of --minutes (the runs then do the same "
                        "work whatever else the machine is doing)")
    args = parser.parse_args()
    names, alternatives, seeds = rule_check_plan(parser, args, "corpora", CORPORA, ALTERNATIVES)
    rows = read_rows(args.rows)
    with tempfile.TemporaryDirectory(prefix="kformer-translate-rules-") as scratch:
        for corpus in names:
            for seed in seeds:
                done = [row for row in rows if (row["corpus"], row["seed"], row["system"]) == (corpus, seed, "auto")]
                rows += check(corpus, seed, args.minutes, args.epochs, alternatives, Path(scratch),
                              done[-1] if done else None, args.rows)
    budget = " | ".join(dict.fromkeys(row.get("budget", "?") for row in rows))
    notes = (f"Validation pairs only (no test pair read): every run on the same training pairs for {budget}, retrieval off, greedy chrF on validation pairs training never sees. 'auto' is every "
             "setting auto; each other row changes one setting from auto's choice. en-ta: TICO-19 validation documents "
             "(bench/en_ta_levers.py's split); en-es: 500 English sentences held out of bench/en_es.py's training side."
             + (f" {args.note}" if args.note else ""))
    record_or_print("Translation batch and rate rules re-derived on validation (issue 33)", summary(rows), notes,
                    record=not args.no_record)


if __name__ == "__main__":
    main()
