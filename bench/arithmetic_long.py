"""Arithmetic beyond the lesson (issue 8, part 4): 10-digit problems, and length generalisation.

Two measurements, each system trained for ``--minutes`` on fresh generated problems and scored on
held-out problems training never samples:

- ``10 digits``: kformer's ``arithmetic`` recipe with ``digits = 10`` (operands up to 9,999,999,999),
  exact match and per-character accuracy on ``--held-out`` problems (target: >= 99 % exact).
- ``length generalisation``: the model is built for 6-digit operands but trained only on operands
  of at most 4 digits (``train_digits = 4``: still written at the 6-digit width, so the two top
  columns are always ``0|0`` in training), then scored separately on held-out problems whose first
  operand has up to 4 digits (seen lengths), exactly 5 and exactly 6 digits (the second operand up
  to as many digits as the first), once per position scheme (``learned``, ``sinusoidal``).

    python -m bench.arithmetic_long [--minutes 4] [--held-out 10000] [--no-record]
    python -m bench.arithmetic_long --minutes 0.2 --held-out 200 --no-record   # smoke run
"""

from __future__ import annotations

import argparse
import tempfile

import numpy as np

from bench.harness import record_or_print
from kformer.config import make_config
from kformer.data.arithmetic import solve
from kformer.tasks import arithmetic

BUDGET = "fit start to last step: XLA compile + checkpoint every 200 steps; scoring outside"
POSITIONS = ("learned", "sinusoidal")
LENGTH_GROUPS = ((1, 4), (5, 5), (6, 6))  # first operand's digit count: (fewest, most)


def train(overrides: dict, minutes: float, held_out: int) -> tuple[arithmetic.ArithmeticModel, dict]:
    """Train the ``arithmetic`` recipe with ``overrides`` for ``minutes``; the loaded model and its metrics."""
    config = make_config(arithmetic.ArithmeticConfig, "arithmetic", "arithmetic",
                         {**overrides, "max_minutes": minutes, "held_out_size": held_out, "epochs": 10**6})
    out = tempfile.mkdtemp(prefix="kformer-arith-long-")
    metrics = arithmetic.train(config, None, out).metrics
    return arithmetic.load(out), metrics


def problems_with_length(fmt, fewest: int, most: int, n: int, seed: int) -> list[tuple[int, str, int]]:
    """``n`` distinct held-out problems of ``fmt`` whose first operand has ``fewest..most`` digits
    and whose second has at most as many digits as the first."""
    rng = np.random.default_rng(seed)
    chosen: dict[tuple[int, str, int], None] = {}
    while len(chosen) < n:
        size = rng.integers(fewest, most + 1, size=200_000)
        a = rng.integers(np.where(size > 1, 10 ** (size - 1), 0), 10**size)
        b = rng.integers(0, 10 ** rng.integers(1, size + 1))
        ops = np.array(list(fmt.ops))[rng.integers(0, len(fmt.ops), size=len(a))]
        for i in np.nonzero(fmt.is_held_out(a, ops, b))[0].tolist():
            chosen.setdefault((int(a[i]), str(ops[i]), int(b[i])), None)
            if len(chosen) >= n:
                break
    return list(chosen)


def ten_digit_row(minutes: float, held_out: int) -> dict:
    _, metrics = train({"digits": 10}, minutes, held_out)
    return {"system": "kformer arithmetic recipe, digits = 10", "trained_on": "operands <= 10 digits",
            "tested_on": f"{metrics['held_out_size']:,} held-out 10-digit-width problems",
            "exact_match": metrics["exact_match"], "char_accuracy": metrics["char_accuracy"],
            "train_s": metrics["train_seconds"], "problems_seen": metrics["examples_seen"],
            "budget_includes": BUDGET}


def length_rows(minutes: float, held_out: int) -> list[dict]:
    rows = []
    for positions in POSITIONS:
        model, metrics = train({"digits": 6, "train_digits": 4, "positions": positions}, minutes, held_out)
        for fewest, most in LENGTH_GROUPS:
            problems = problems_with_length(model.format, fewest, most, held_out, seed=2026 + most)
            scores = model.score([(p, solve(*p)) for p in problems])
            rows.append({"system": f"kformer, {positions} positions, 6-digit width",
                         "trained_on": "operands <= 4 digits",
                         "tested_on": f"{scores['n']:,} held-out, first operand "
                                      + (f"{fewest}-{most}" if fewest != most else str(most)) + " digits",
                         "exact_match": scores["exact_match"], "char_accuracy": scores["char_accuracy"],
                         "train_s": metrics["train_seconds"], "problems_seen": metrics["examples_seen"],
                         "budget_includes": BUDGET})
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=4.0, help="training budget per model (3 models)")
    parser.add_argument("--held-out", type=int, default=10_000, help="held-out problems per score")
    parser.add_argument("--no-record", action="store_true", help="print the table without adding it to BENCHMARKS.md")
    args = parser.parse_args()
    rows = [ten_digit_row(args.minutes, args.held_out)]
    print(rows[-1], flush=True)
    rows += length_rows(args.minutes, args.held_out)
    record_or_print(
        f"Arithmetic beyond the lesson: 10-digit problems and length generalisation, {args.minutes:g} minutes "
        "of CPU training per model",
        rows,
        notes="Target (issue 8, part 4, stretch): 10-digit addition/subtraction >= 99 % exact match on 10,000 "
        "held-out problems. Length generalisation: trained on operands of at most 4 digits (written at the "
        "6-digit width), scored on held-out problems by the first operand's length. Problems are read as "
        "columns of digit pairs, ones first; answers written ones first (the shipped recipe's format).",
        record=not args.no_record,
    )


if __name__ == "__main__":
    main()
