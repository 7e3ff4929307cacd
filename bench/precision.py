"""mixed_bfloat16 vs float32 on this CPU: training speed, prediction speed and accuracy, same run.

Two models, each trained a short fixed number of steps in both precisions (alternating), from the
same seed: the tickets classifier (`tickets` recipe on a slice of the tickets training split,
scored on the test split) and the arithmetic model (its default settings, held-out exact match).
Prediction is timed on the saved folder. bfloat16 pays on CPUs with AVX512-BF16 / AMX; elsewhere
it is emulated and may be slower -- which is what this measures.

    flock /tmp/kformer-bench.lock python -m bench.precision
    python -m bench.precision --rows 300 --epochs 1 --steps 5 --no-record   # a smoke run
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench.harness import Timer, record_results, require_shared_data, results_table
from bench.headlines import Headline

# This benchmark's rows in BENCHMARKS.md's summary (bench/headlines.py says how they are read)
HEADLINES = (
    Headline("speed, serving and memory", "Precision", "train_ms_per_step", name="mixed_bfloat16 vs float32 training step",
             kformer={"system": "^tickets classifier, mixed_bfloat16$"},
             baseline={"system": "^tickets classifier, float32$"}, lower_is_better=True,
             why="bfloat16 pays only on CPUs with AVX-512 BF16 or AMX (see the run's machine)"),
)

PRECISIONS = ("float32", "mixed_bfloat16")


def classifier_row(precision: str, args, work: Path) -> dict:
    from kformer.config import make_config
    from kformer.data.readers import read_labelled
    from kformer.tasks import classify

    folder = require_shared_data("it-service-tickets")
    train = read_labelled(folder / "train.csv.gz")
    test = read_labelled(folder / "test.csv.gz")
    data = (train.texts[: args.rows], train.labels[: args.rows])
    config = make_config(classify.ClassifyConfig, "classify", "tickets",
                         {"epochs": args.epochs, "patience": args.epochs, "max_minutes": None, "precision": precision})
    result = classify.train(config, data, work / f"tickets-{precision}")
    model = result.load()
    texts = test.texts[: args.rows]
    model.warmup()
    with Timer() as timer:
        scores = model.scores(type(test)(texts, test.labels[: args.rows], test.source))
    steps = args.epochs * -(-result.metrics["splits"]["train"] // config.batch_size)
    return {"system": f"tickets classifier, {precision}", "train_steps": steps,
            "train_ms_per_step": 1000 * result.metrics["train_seconds"] / steps,
            "predict_texts_per_s": len(texts) / timer.seconds, "accuracy": scores["accuracy"]}


def arithmetic_row(precision: str, args, work: Path) -> dict:
    from kformer.config import make_config
    from kformer.tasks import arithmetic

    config = make_config(arithmetic.ArithmeticConfig, "arithmetic", None,
                         {"epochs": 1, "steps_per_epoch": args.steps, "max_minutes": None, "precision": precision,
                          "held_out_size": args.held_out})
    result = arithmetic.train(config, out=work / f"arith-{precision}")
    model = result.load()
    problems = model.format.held_out_problems(args.held_out)
    model.warmup()
    with Timer() as timer:
        model.solve(problems)
    return {"system": f"arithmetic, {precision}", "train_steps": args.steps,
            "train_ms_per_step": 1000 * result.metrics["train_seconds"] / args.steps,
            "predict_texts_per_s": len(problems) / timer.seconds, "accuracy": result.metrics["exact_match"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8000, help="tickets training rows (and test rows) (default 8000)")
    parser.add_argument("--epochs", type=int, default=2, help="classifier epochs (default 2)")
    parser.add_argument("--steps", type=int, default=600, help="arithmetic training steps (default 600)")
    parser.add_argument("--held-out", type=int, default=2000, help="arithmetic held-out problems (default 2000)")
    parser.add_argument("--no-record", action="store_true", help="print only; do not append to BENCHMARKS.md")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="kformer-bench-precision-") as work:
        for make in (classifier_row, arithmetic_row):
            for precision in PRECISIONS:
                rows.append(make(precision, args, Path(work)))
    notes = (f"Same seed, same data, one process; classifier: {args.rows} training rows, {args.epochs} epochs "
             f"(accuracy on {args.rows} test texts); arithmetic: {args.steps} steps (exact match on {args.held_out} "
             "held-out problems). ms/step includes the first step's graph compilation. The recipe option "
             "`precision = \"mixed_bfloat16\"` pays only where its rows beat float32 on both speed and accuracy.")
    if args.no_record:
        print(results_table(rows) + "\n\n" + notes)
    else:
        record_results("Precision: mixed_bfloat16 vs float32", rows, notes)


if __name__ == "__main__":
    main()
