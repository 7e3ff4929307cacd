"""4-digit addition/subtraction: the arithmetic lesson's model vs kformer, same time budget each.

Every system trains for ``--minutes`` (default 5) on fresh generated problems outside the
held-out slice and is scored on the same ``--held-out`` problems (default 10,000) that none ever
trains on. Reported: exact match (whole answer right) and per-character accuracy (answers as
people write them, kformer's definition, the same for every row); for the lesson's model also its
own per-character accuracy over its fixed-width output (``=`` and five characters), the measure of
the lesson's 99.609 %.

Rows:

- ``lesson model`` (``bench/lesson_arithmetic.py``): encoder-only, one-hot of 13 symbols -> Dense,
  learned positions, 4 blocks x 8 heads, GELU MLP with dropout, flatten -> Dense for all six answer
  characters at once; the expression zero-padded on the left to 9 characters (``03144+259``) and
  the answer fixed width (``=03403``); batches of 256, epochs of 100 batches, early stopping after
  20 epochs without a better validation loss. Assumed where the lesson is silent: width 64, MLP
  128, dropout 0.1, pre-norm, Adam 1e-3, 2,560 validation problems; Keras' default
  ``jit_compile="auto"`` as the lesson's code (Keras turns XLA off on a CPU-only TensorFlow
  machine; the row says what it chose).
- ``kformer, lesson's format``: kformer's default arithmetic settings reading the
  characters as written and writing the answer most significant digit first
  (``source_style="chars", reverse_answer=False``), operands unpadded (``pad_operands=False``)
  and zero-padded (``pad_operands=True``): what kformer's model does with the lesson's format.
- ``kformer``: the default settings (columns of digit pairs, answer ones digit first).

Each budget is wall clock from the start of ``model.fit`` (graph tracing / XLA compile
included) to the end of the last step, with that system's per-epoch work inside it: kformer
writes a checkpoint every 200 steps, the lesson's model runs its validation every 100 steps.
Scoring the held-out problems is outside every budget.

    python -m bench.arithmetic [--minutes 5] [--held-out 10000] [--no-record]
"""

from __future__ import annotations

import argparse
import tempfile

from bench import lesson_arithmetic as lesson
from bench.harness import record_or_print
from bench.headlines import Headline
from kformer.config import make_config
from kformer.tasks import arithmetic

# This benchmark's rows in BENCHMARKS.md's summary (bench/headlines.py says how they are read)
HEADLINES = (
    Headline("arithmetic", "Arithmetic: 4-digit", "exact_match", name="4-digit addition/subtraction, 5 minutes",
             kformer={"system": "^kformer$"}, baseline={"system": "^(lesson model|reference recipe)$"}),
)

LESSON_FORMAT = {"source_style": "chars", "reverse_answer": False}
KFORMER_ROWS = (
    ("kformer, lesson's format (operands unpadded)", {**LESSON_FORMAT, "pad_operands": False}),
    ("kformer, lesson's format (operands zero-padded)", {**LESSON_FORMAT, "pad_operands": True}),
    ("kformer", {}),
)
BUDGET_NOTE = {
    "lesson model": "fit start to last step: tracing, jit_compile auto + validation every 100 steps",
    "kformer": "fit start to last step: XLA compile + checkpoint every 200 steps",
}


def lesson_row(minutes: float, held_out: list, digits: int) -> dict:
    from kformer.data.arithmetic import ArithmeticFormat

    settings = lesson.LessonSettings(digits=digits)
    fmt = ArithmeticFormat(digits=digits)  # only for sampling outside the held-out slice
    model, run = lesson.train(settings, fmt, minutes)
    scores = lesson.evaluate(model, held_out, digits)
    return {
        "system": "lesson model",
        "exact_match": scores["exact_match"],
        "char_accuracy": scores["char_accuracy"],
        "fixed_width_char_accuracy": scores["fixed_width_char_accuracy"],
        "train_s": run["train_seconds"],
        "problems_seen": run["steps"] * settings.batch_size,
        "parameters": int(model.count_params()),
        "budget_includes": BUDGET_NOTE["lesson model"] + ("" if model.jit_compile else " (Keras chose no XLA)"),
        "assumed": ", ".join(f"{name}={getattr(settings, name)}" for name in lesson.ASSUMED) + ", pre-norm",
    }


def kformer_row(system: str, overrides: dict, minutes: float, held_out_size: int, digits: int) -> dict:
    common = {"max_minutes": minutes, "held_out_size": held_out_size, "digits": digits, "epochs": 10**6}
    config = make_config(arithmetic.ArithmeticConfig, "arithmetic", None, {**overrides, **common})
    with tempfile.TemporaryDirectory() as out:
        metrics = arithmetic.train(config, None, out).metrics
    return {
        "system": system,
        "exact_match": metrics["exact_match"],
        "char_accuracy": metrics["char_accuracy"],
        "fixed_width_char_accuracy": "",
        "train_s": metrics["train_seconds"],
        "problems_seen": metrics["examples_seen"],
        "parameters": metrics["parameters"],
        "budget_includes": BUDGET_NOTE["kformer"] + ("" if config.jit_compile else " (no XLA)"),
        "assumed": "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=5.0, help="training budget per system (4 systems)")
    parser.add_argument("--held-out", type=int, default=10_000, help="held-out problems to score")
    parser.add_argument("--digits", type=int, default=4, help="digits per operand")
    parser.add_argument("--lesson-only", action="store_true", help="only the lesson model's row")
    parser.add_argument("--no-record", action="store_true", help="print the table without adding it to BENCHMARKS.md")
    args = parser.parse_args()
    from kformer.data.arithmetic import ArithmeticFormat

    # the problems kformer's train scores (same slice, same seed) for every row
    held_out = ArithmeticFormat(digits=args.digits).held_out_problems(args.held_out, seed=2026)
    rows = [lesson_row(args.minutes, held_out, args.digits)]
    print(rows[-1], flush=True)
    for system, overrides in [] if args.lesson_only else KFORMER_ROWS:
        rows.append(kformer_row(system, overrides, args.minutes, args.held_out, args.digits))
        print(rows[-1], flush=True)
    record_or_print(
        f"Arithmetic: {args.digits}-digit addition/subtraction, the lesson's model"
        f"{' alone (its row rerun)' if args.lesson_only else ' vs kformer'}, "
        f"{args.minutes:g} minutes of CPU training each",
        rows,
        notes=f"Scored on the same {len(held_out):,} held-out problems. char_accuracy: answers as people write "
        "them, position by position (every row); fixed_width_char_accuracy: the lesson's measure, over its six "
        "output characters including the constant '=' and leading zeros (its 99.609 % was this, after up to "
        "300 epochs of 25,600 problems). 'assumed': settings the lesson does not state.",
        record=not args.no_record,
    )


if __name__ == "__main__":
    main()
