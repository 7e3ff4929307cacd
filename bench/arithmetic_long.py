"""Arithmetic that generalises (issue 25): trained on short numbers, right on longer ones.

One table. Each row trains kformer for ``--minutes`` on generated problems and scores held-out
problems of every operand length (both operands exactly that many digits; addition and
subtraction, negative answers included; ``--held-out`` per length, all of the held-out slice where
it is smaller, as it is for 1- and 2-digit operands):

- trained on operands of at most 10 digits (the ``arithmetic-long`` recipe: each problem written
  at its own width, every length 1..10 in every batch, the model accepting 100 digits), once per
  position scheme (``--schemes``; ``learned``, today's, is the baseline row; the last row is
  abacus without the recipe's local attention), scored at 1..100 digits. Targets: >= 99 % at 20 digits, >= 90 % at 30
  and at 60 (100 measured), in at most 10 minutes;
- trained on operands of at most 4 digits (``arithmetic``: the task's defaults, the demo's, accepting 8),
  once per scheme for ``--short-minutes`` (the demo's 2), scored at 1..8 digits. Target: >= 99 %
  at 8 digits.

Everything else is the recipe's: the rows differ in the ``positions`` setting only (and the last
in ``attention_window``). The recipes
were chosen by exploration judged on generated held-out problems (``by_length`` of a training run:
the same slice, other draws), which were validation for that choice; this table's problems are
drawn afresh (``seed``) and scored once. ``--seeds 3`` reports each row as the mean of three
training seeds (the spread in ``exact_20_min`` / ``exact_30_min``).

With ``--products`` it records products instead (issue 35, section 1): the ``multiplication``
recipe (long multiplication written out, operands of at most 5 digits, accepting 7) beside the
same settings writing the product directly (``op_columns``), each trained ``--product-minutes``
(default: the recipe's), scored on ``--held-out`` held-out products at 3x3 and 5x5 digits (targets
>= 99 % and >= 95 %) and ``--held-out-others`` at the other lengths, 6x6 and 7x7 included
(no target: what long multiplication learned on <= 5 digits does past them).

    python -m bench.arithmetic_long [--minutes 10] [--short-minutes 2] [--held-out 10000] [--held-out-others N] [--no-record]
    python -m bench.arithmetic_long --minutes 0.3 --short-minutes 0.2 --held-out 50 --schemes learned abacus --no-record
    python -m bench.arithmetic_long --products [--product-minutes M] [--held-out 10000] [--held-out-others 1000]
    python -m bench.arithmetic_long --setups arithmetic-long --seeds 3 --steps 15000 --rows runs.jsonl   # issue 35, section 3

``--rows FILE`` keeps each finished training run there, and a rerun with the same file skips the
runs it holds, so a long table can be made over several sittings; ``--only-seeds`` shares the runs
between processes (``taskset -c 0`` and ``-c 1``, one rows file each: concatenate them for the table).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
from pathlib import Path

from bench.harness import append_rows, read_rows, record_or_print
from bench.headlines import Headline
from kformer.config import make_config
from kformer.tasks import arithmetic

# This benchmark's rows in BENCHMARKS.md's summary (bench/headlines.py says how they are read)
HEADLINES = (
    Headline("arithmetic", "Arithmetic beyond the lesson", "exact_match", name="10-digit addition/subtraction, 3 minutes",
             kformer={"system": "digits = 10"}, target=">= 0.99"),
    Headline("arithmetic", "Arithmetic that generalises", "30", name="Trained on <= 10 digits, scored at 30",
             metric_name="exact match at 30 digits", percent=True,
             kformer={"system": "^kformer arithmetic-long, abacus positions$"},
             baseline={"system": "^kformer arithmetic-long, learned positions$"}, target=">= 0.90"),
    Headline("arithmetic", "Arithmetic that generalises", "60", name="Trained on <= 10 digits, scored at 60",
             metric_name="exact match at 60 digits", percent=True,
             kformer={"system": "^kformer arithmetic-long, abacus positions$"},
             baseline={"system": "^kformer arithmetic-long, learned positions$"}, target=">= 0.90"),
    Headline("arithmetic", "What each part of arithmetic-long is worth", "30",
             name="Abacus positions with vs without the local window, scored at 30 digits (3 seeds)",
             metric_name="exact match at 30 digits", percent=True,
             kformer={"system": "^kformer arithmetic-long, abacus positions$"},
             baseline={"system": "^kformer arithmetic-long, abacus, attention everywhere positions$"}),
    Headline("arithmetic", "Multiplication", "3", name="Products of 3-digit operands (trained <= 5 digits)",
             metric_name="exact match at 3x3 digits", percent=True,
             kformer={"system": "long multiplication"}, baseline={"system": "written directly"}, target=">= 0.99"),
    Headline("arithmetic", "Multiplication", "5", name="Products of 5-digit operands (trained <= 5 digits)",
             metric_name="exact match at 5x5 digits", percent=True,
             kformer={"system": "long multiplication"}, baseline={"system": "written directly"}, target=">= 0.95"),
)

SCHEMES = {  # row name -> the settings it changes in the recipe
    "learned": {"positions": "learned"},
    "sinusoidal": {"positions": "sinusoidal"},
    "randomized": {"positions": "randomized"},
    "abacus": {"positions": "abacus"},
    "abacus, attention everywhere": {"positions": "abacus", "attention_window": 0},  # what the window adds
}
RECIPES = {"arithmetic-long": "arithmetic-long", "arithmetic": None, "multiplication": "multiplication"}  # a row's name -> its recipe (None: the defaults)
SETUPS = (  # recipe, what it trains on, longest length scored, the lengths a target is set at
    ("arithmetic-long", "operands <= 10 digits", 100, (20, 30, 60, 100)),
    ("arithmetic", "operands <= 4 digits", 8, (8,)),
)
PRODUCT_FORMATS = {  # row name -> the settings it changes in the multiplication recipe
    "long multiplication (the recipe)": {},
    "the product written directly": {"source_style": "op_columns", "mixed_lengths": True},
}
PRODUCT_TARGETS = (3, 5)  # operand lengths with a target
PRODUCT_LONGEST = 7
BUDGET = "fit start to last step: XLA compile + checkpoint every epoch; scoring outside"
STEPS_PER_EPOCH = 200  # the task's default; with --steps, the epochs are steps / this
SCORE_SEED = 31  # problems unlike those of a training run's by_length (seed 2026)


def train_and_score(recipe: str, scheme: dict, minutes: float | None, longest: int, held_out: int, seed: int, *,
                    targets: tuple, held_out_others: int, keep: str | None = None, steps: int | None = None) -> dict:
    """Train ``recipe`` changed by ``scheme`` for ``minutes`` (None: the recipe's), or for
    ``steps`` training steps without a clock (the learning rate then decays over the steps, as it
    decays over the minutes of a timed run); exact match per length 1..``longest`` on ``held_out``
    problems per length (``held_out_others`` at lengths not in ``targets``). The model folder is
    temporary, or ``keep``."""
    budget = {"epochs": 10**6} if minutes is None else {"epochs": 10**6, "max_minutes": minutes}
    if steps is not None:
        budget = {"epochs": max(steps // STEPS_PER_EPOCH, 1), "steps_per_epoch": STEPS_PER_EPOCH}
    overrides = {**scheme, **budget, "seed": seed, "digits": longest,
                 "held_out_size": min(held_out, 2000), "held_out_per_length": 0}
    config = make_config(arithmetic.ArithmeticConfig, "arithmetic", RECIPES[recipe], overrides)
    if steps is not None:  # no clock: the recipe's max_minutes off (an override of None means "not given")
        config = dataclasses.replace(config, max_minutes=None)
    with tempfile.TemporaryDirectory(prefix="kformer-arith-long-") as scratch:
        out = keep or scratch
        metrics = arithmetic.train(config, None, out).metrics
        if steps is not None and metrics["steps"] != config.epochs * config.steps_per_epoch:
            raise SystemExit(f"trained {metrics['steps']} steps, not the {config.epochs * config.steps_per_epoch} asked")
        model = arithmetic.load(out)
        by_length = {}
        for length in range(1, longest + 1):
            per_length = held_out if length in targets else held_out_others
            by_length.update(model.score_lengths([length], per_length, seed=SCORE_SEED))
    return {"metrics": metrics, "by_length": by_length}


def row(recipe: str, trained_on: str, name: str, runs: list[dict]) -> dict:
    """One table row: the mean over ``runs`` (seeds) of each length's exact match."""
    first = runs[0]
    out = {"system": f"kformer {recipe}, {name} positions", "trained_on": trained_on,
           "seeds": len(runs), "train_s": statistics.mean(r["metrics"]["train_seconds"] for r in runs),
           "steps": statistics.mean(r["metrics"]["steps"] for r in runs),
           "trained_lengths": statistics.mean(r["metrics"]["exact_match"] for r in runs)}
    for length in first["by_length"]:
        values = [r["by_length"][length]["exact_match"] for r in runs]
        out[length] = "" if values[0] is None else statistics.mean(values)
    for length in ("20", "30", "60", "100"):
        if length in first["by_length"] and len(runs) > 1:
            out[f"exact_{length}_min"] = min(r["by_length"][length]["exact_match"] for r in runs)
    out["n_per_length"] = f"{min(s['n'] for s in first['by_length'].values())}-" \
                          f"{max(s['n'] for s in first['by_length'].values())}"
    out["budget_includes"] = BUDGET if not first.get("steps") else f"{first['steps']:,} steps, no clock: train_s is wall time"
    return out


def product_rows(minutes: float | None, held_out: int, others: int, seeds: int, keep: str | None = None) -> list[dict]:
    """The products table (``--products``): one row per :data:`PRODUCT_FORMATS` entry; ``keep``:
    where the recipe's first model folder stays (for its attention pictures)."""
    rows = []
    for index, (name, settings) in enumerate(PRODUCT_FORMATS.items()):
        runs = [train_and_score("multiplication", settings, minutes, PRODUCT_LONGEST, held_out, seed,
                                targets=PRODUCT_TARGETS, held_out_others=others,
                                keep=keep if index == seed == 0 else None) for seed in range(seeds)]
        out = row("multiplication", "operands <= 5 digits", "learned", runs)
        out["system"] = f"kformer multiplication, {name}"
        out["train_minutes"] = round(out["train_s"] / 60, 1)
        rows.append(out)
        print({k: v for k, v in out.items() if k in ("system", "train_s", "3", "5", "6", "7")}, flush=True)
    return rows


def record_products(args, others: int) -> None:
    rows = product_rows(args.product_minutes, args.held_out, others, args.seeds, args.keep)
    record_or_print(
        "Multiplication: products of operands up to 5 digits, trained on 2 CPU cores",
        rows,
        notes="Columns 1-7: exact match on held-out products whose two operands both have that many digits "
        f"(up to {args.held_out:,} at 3 and 5, {others:,} at the others; n_per_length: fewest-most, fewer "
        "where the held-out slice of short numbers is small); trained_lengths: exact match on held-out products "
        "drawn as training draws them (operands of 1-5 digits). Both rows are the `multiplication` recipe "
        "(abacus positions, attention everywhere, 2 decoder blocks, operands of up to 5 digits, accepting 7); "
        "the second writes the product's digits directly (op_columns) instead of the rows of long "
        "multiplication. The format was chosen on validation products (fresh problems outside the held-out "
        "slice; docs/arithmetic.md), this table's problems drawn afresh. Targets (issue 35): >= 99 % at 3x3 and "
        ">= 95 % at 5x5 after <= 20 minutes of training; 6x6 and 7x7 measured.",
        record=not args.no_record,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0, help="training budget of each <= 10-digit model")
    parser.add_argument("--short-minutes", type=float, default=2.0, help="training budget of each <= 4-digit model")
    parser.add_argument("--held-out", type=int, default=10_000, help="held-out problems per length")
    parser.add_argument("--held-out-others", type=int, default=None,
                        help="held-out problems per length at lengths without a target (default: --held-out)")
    parser.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=list(SCHEMES),
                        help="the rows to train (default: all)")
    parser.add_argument("--setups", nargs="+", default=[recipe for recipe, *_ in SETUPS],
                        choices=[recipe for recipe, *_ in SETUPS], help="the tables' halves to train (default: both)")
    parser.add_argument("--rows", default=None, help="JSONL file of finished training runs: kept, and skipped on a rerun")
    parser.add_argument("--steps", type=int, default=None,
                        help="instead of minutes, train each model this many steps (the result does not depend on "
                        "what else runs on the machine; 15,000 is what 10 minutes give alone on 2 cores)")
    parser.add_argument("--seeds", type=int, default=1, help="training seeds per row (the mean is reported)")
    parser.add_argument("--only-seeds", type=int, nargs="+", default=None,
                        help="with --rows: train only these seeds' runs and make no table (processes sharing the "
                        "work, one core each; then rerun without it for the table)")
    parser.add_argument("--products", action="store_true", help="record the products table instead (see above)")
    parser.add_argument("--product-minutes", type=float, default=None,
                        help="training budget of each product model (default: the multiplication recipe's)")
    parser.add_argument("--keep", default=None, help="with --products: keep the recipe's model folder here")
    parser.add_argument("--no-record", action="store_true", help="print the table without adding it to BENCHMARKS.md")
    args = parser.parse_args()
    others = args.held_out if args.held_out_others is None else args.held_out_others
    if args.products:
        return record_products(args, others)
    if args.only_seeds is not None and args.rows is None:
        parser.error("--only-seeds keeps its runs for a later table: give --rows")
    target_lengths = sorted(length for recipe, *_, targets in SETUPS if recipe in args.setups for length in targets)
    rows = []
    rows_file = None if args.rows is None else Path(args.rows)
    done = {(run["recipe"], run["scheme"], run["seed"], run["minutes"], run.get("steps"), run["held_out"],
             run["others"]): run for run in read_rows(rows_file)}
    for recipe, trained_on, longest, targets in SETUPS:
        if recipe not in args.setups:
            continue
        minutes = None if args.steps else args.minutes if longest > 8 else args.short_minutes
        for name in args.schemes:
            runs = []
            for seed in range(args.seeds) if args.only_seeds is None else args.only_seeds:
                key = (recipe, name, seed, minutes, args.steps, args.held_out, others)
                if key not in done:
                    done[key] = {"recipe": recipe, "scheme": name, "seed": seed, "minutes": minutes, "steps": args.steps,
                                 "held_out": args.held_out, "others": others,
                                 **train_and_score(recipe, SCHEMES[name], minutes, longest, args.held_out, seed,
                                                   targets=targets, held_out_others=others, steps=args.steps)}
                    append_rows(rows_file, [done[key]])
                runs.append(done[key])
            if args.only_seeds is not None:
                continue
            rows.append(row(recipe, trained_on, name, runs))
            print({k: v for k, v in rows[-1].items() if k in ("system", "train_s", "8", "10", "20", "30", "60", "100")},
                  flush=True)
    if args.only_seeds is not None:
        return print(f"seeds {args.only_seeds} trained into {args.rows}; rerun without --only-seeds for the table")
    budget = f"{args.steps:,} training steps" if args.steps else f"{args.minutes:g} minutes of CPU training"
    title = (f"What each part of arithmetic-long is worth: position schemes and the window, mean of {args.seeds} seeds, "
             f"{budget} per model" if args.seeds > 1 else
             f"Arithmetic that generalises: trained on short numbers, scored up to 100 digits, {args.minutes:g} minutes "
             f"of CPU training per model (<= 4 digits: {args.short_minutes:g})")
    record_or_print(
        title,
        rows,
        notes="Columns 1-100: exact match on held-out problems whose two operands both have that many digits "
        f"(up to {args.held_out:,} at the target lengths {', '.join(map(str, target_lengths))}, "
        f"{others:,} at the others; n_per_length: fewest-most, fewer where the held-out slice of short "
        "numbers is small, none of 1 digit), addition and subtraction alike, negative answers included; "
        "trained_lengths: exact match on held-out problems drawn as training draws them. Each row is one recipe "
        "with one `positions` setting; the recipes (op_columns problems at their own width, every operand length "
        "in every batch, attention_window 2) were chosen on generated held-out problems (validation), this "
        "table's problems drawn afresh. Targets: trained on <= 10 digits in <= 10 minutes, >= 99 % at 20 digits and "
        ">= 90 % at 30 (issue 25), >= 90 % at 60, 100 measured (issue 35); trained on <= 4 digits, >= 99 % at 8."
        + (f" Each row is the mean of {args.seeds} training seeds scored on the same problems; exact_N_min: the "
           "worst seed at N digits." if args.seeds > 1 else "")
        + (f" Every model trained {args.steps:,} steps, the learning rate decaying over them as a timed run's decays "
           "over its minutes, so a row does not depend on what else ran on the machine (train_s: its wall time)."
           if args.steps else ""),
        record=not args.no_record,
    )


if __name__ == "__main__":
    main()
