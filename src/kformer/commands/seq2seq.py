"""``kformer train arithmetic``, ``kformer demo`` and the arithmetic side of ``evaluate``/``attention``.

Argument parsing lives in the ``register``/``_run_*`` functions; training is the plain function
:func:`train_arithmetic`, and using a trained model (:func:`~kformer.models.arithmetic.load_arithmetic`,
``solve_problems``, ``draw_attention``) lives in :mod:`kformer.models.arithmetic`. Keras is imported inside functions so
``kformer --help`` stays instant.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kformer.errors import KformerError
from kformer.models.arithmetic import (
    MODEL_FILE,
    TASK,
    draw_attention,
    load_arithmetic,
    solve_problems,
)

METRICS_FILE = "metrics.json"
TRAINING_DIR = "training"  # checkpoints and logs of the run
DEFAULT_RECIPE = "arithmetic"
DEMO_PROBLEM = "1234+4567"

# Settings a recipe TOML may set (flat keys); command-line flags override them.
DEFAULTS: dict[str, Any] = {
    "digits": 4,
    "ops": "+-",
    "pad_operands": True,
    "reverse_answer": True,
    "source_style": "columns",
    "dim": 64,
    "heads": 4,
    "ff_dim": 256,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "dropout": 0.0,
    "positions": "learned",
    "norm_first": True,
    "tie_embeddings": False,
    "batch_size": 128,
    "steps_per_epoch": 200,
    "epochs": 50,
    "learning_rate": 3e-3,
    "warmup_steps": 100,
    "final_lr_ratio": 0.02,
    "label_smoothing": 0.0,
    "weight_decay": 0.0,
    "jit_compile": True,
    "max_minutes": None,
    "held_out_size": 10000,
    "seed": 0,
}


# --- argument parsing ----------------------------------------------------------------------------


def register(commands, train_tasks) -> None:
    """Add ``train arithmetic`` and ``demo`` to the CLI."""
    train = train_tasks.add_parser(
        "arithmetic",
        help="learn multi-digit addition/subtraction from generated problems",
        description="Train a sequence-to-sequence Transformer on problems like 1234+4567 (answer "
        "=5801) generated on the fly, then report exact-match and per-character accuracy on held-out "
        "problems that training never sees (also written to OUT/metrics.json). Settings come from "
        "--recipe, then the flags below.",
    )
    _add_training_flags(train)
    train.add_argument("--out", required=True, metavar="DIR", help="model folder to write")
    train.add_argument("--digits", type=int, default=None, metavar="N", help="digits per operand (default 4)")
    train.add_argument("--ops", default=None, metavar="OPS", help="operators to use, from '+-' (default '+-')")
    train.add_argument("--epochs", type=int, default=None, metavar="N", help="most epochs (each --steps-per-epoch batches)")
    train.add_argument("--steps-per-epoch", type=int, default=None, metavar="N", help="batches of fresh problems per epoch")
    train.add_argument("--batch-size", type=int, default=None, metavar="N", help="problems per batch")
    train.add_argument("--held-out-size", type=int, default=None, metavar="N", help="held-out problems to score (default 10000)")
    train.set_defaults(handler=_run_train)

    demo = commands.add_parser(
        "demo",
        help="learn 4-digit addition/subtraction in about two minutes, then show it",
        description="Train the arithmetic model for about two minutes on this CPU with a progress "
        "bar, print its held-out accuracy and a few solved problems, and draw its attention maps "
        f"for {DEMO_PROBLEM}.",
    )
    demo.add_argument("--minutes", type=float, default=2.0, metavar="M", help="training time (default 2)")
    demo.add_argument("--out", default="runs/demo", metavar="DIR", help="where to put the model and pictures (default runs/demo)")
    demo.add_argument("--seed", type=int, default=0, metavar="N", help="random seed (default 0)")
    demo.set_defaults(handler=_run_demo)


def _add_training_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-minutes", type=float, default=None, metavar="M", help="stop training after M minutes")
    parser.add_argument("--seed", type=int, default=None, metavar="N", help="random seed (default 0)")
    parser.add_argument(
        "--recipe", default=DEFAULT_RECIPE, metavar="NAME|PATH",
        help=f"settings: a shipped recipe name or a TOML file (default {DEFAULT_RECIPE})",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def settings_from(recipe: str | None, overrides: dict[str, Any]) -> dict[str, Any]:
    """DEFAULTS, then the recipe's keys, then the non-None ``overrides``; unknown keys are errors."""
    from kformer.training import load_recipe

    settings = dict(DEFAULTS)
    loaded = load_recipe(recipe) if recipe else {}
    unknown = sorted(set(loaded) - set(DEFAULTS))
    if unknown:
        raise KformerError(f"recipe {recipe} has unknown settings {unknown}; known: {sorted(DEFAULTS)}")
    settings.update(loaded)
    settings.update({k: v for k, v in overrides.items() if v is not None})
    for key in ("batch_size", "steps_per_epoch", "epochs", "held_out_size"):
        if int(settings[key]) < 1:
            raise KformerError(f"{key.replace('_', '-')} must be at least 1, not {settings[key]}")
    if settings["max_minutes"] is not None and float(settings["max_minutes"]) <= 0:
        raise KformerError(f"--max-minutes must be positive, not {settings['max_minutes']}")
    return settings


def _run_train(args: argparse.Namespace) -> int:
    settings = settings_from(
        args.recipe,
        {
            "digits": args.digits, "ops": args.ops, "epochs": args.epochs, "steps_per_epoch": args.steps_per_epoch,
            "batch_size": args.batch_size, "held_out_size": args.held_out_size, "max_minutes": args.max_minutes,
            "seed": args.seed,
        },
    )
    metrics = train_arithmetic(settings, args.out, progress=not args.quiet)
    _print_metrics(metrics)
    print(f"model folder: {args.out}")
    return 0


def _run_demo(args: argparse.Namespace) -> int:
    if args.minutes <= 0:
        raise KformerError(f"--minutes must be positive, not {args.minutes}")
    settings = settings_from(DEFAULT_RECIPE, {"max_minutes": args.minutes, "seed": args.seed, "epochs": 10**6})
    out = Path(args.out)
    print(f"kformer demo: teaching a Transformer {settings['digits']}-digit addition and subtraction "
          f"for {args.minutes:g} minute{'' if args.minutes == 1 else 's'} on this machine ...")
    metrics = train_arithmetic(settings, out, progress=True)
    _print_metrics(metrics)
    model, fmt, _ = load_arithmetic(out)
    from kformer.data.arithmetic import solve

    examples = [(1234, "+", 4567), (9999, "+", 1), (2026, "-", 4011), (5, "-", 5), (8713, "-", 299)]
    answers = solve_problems(model, fmt, examples)
    print("a few problems:")
    for (a, op, b), answer in zip(examples, answers, strict=True):
        truth = solve(a, op, b)
        mark = "right" if answer == truth else f"wrong, it is {truth}"
        print(f"  {fmt.problem_text(a, op, b):>11} = {answer if answer is not None else '?'}   ({mark})")
    pictures = draw_attention(model, fmt, DEMO_PROBLEM, out / "attention")
    print(f"\nmodel folder:        {out}  (kformer.json, {MODEL_FILE}, {METRICS_FILE})")
    print(f"attention pictures:  {out / 'attention'}  ({len(pictures)} PNGs for {DEMO_PROBLEM})")
    print(f"training logs:       {out / TRAINING_DIR}")
    print(f"next: kformer attention {out} \"4321-9876\"   or   kformer train arithmetic --out runs/arith")
    return 0


def _print_metrics(metrics: dict) -> None:
    print(
        f"held-out problems: {metrics['held_out_size']:,}  exact match {100 * metrics['exact_match']:.2f}%  "
        f"per-character {100 * metrics['char_accuracy']:.2f}%  "
        f"(trained {metrics['train_seconds']:.0f} s on {metrics['examples_seen']:,} problems)"
    )


# --- training ------------------------------------------------------------------------------------


def arithmetic_format(settings: dict):
    from kformer.data.arithmetic import ArithmeticFormat

    return ArithmeticFormat(
        digits=int(settings["digits"]), ops=str(settings["ops"]),
        pad_operands=bool(settings["pad_operands"]), reverse_answer=bool(settings["reverse_answer"]),
        source_style=str(settings["source_style"]),
    )


def build_arithmetic_model(settings: dict, fmt):
    from kformer.models.seq2seq import Seq2SeqTransformer

    vocab_size = len(fmt.vocabulary)
    return Seq2SeqTransformer(
        vocab_size, vocab_size, fmt.source_length, fmt.target_length,
        dim=int(settings["dim"]), heads=int(settings["heads"]), ff_dim=int(settings["ff_dim"]),
        encoder_layers=int(settings["encoder_layers"]), decoder_layers=int(settings["decoder_layers"]),
        dropout=float(settings["dropout"]), positions=settings["positions"],
        tie_embeddings=bool(settings["tie_embeddings"]), norm_first=bool(settings["norm_first"]),
    )


def train_arithmetic(settings: dict, out_dir, progress: bool = True, command: list[str] | None = None) -> dict:
    """Train on fresh generated problems, score the held-out set, write the model folder.

    Returns the metrics written to ``out_dir/metrics.json`` (``exact_match``, ``char_accuracy``,
    sizes, seconds, the command and the settings).
    """

    from kformer import training
    from kformer.artifacts import MANIFEST_NAME, save_keras_atomic, staged_folder, write_json_atomic
    from kformer.models.seq2seq import compile_seq2seq

    out_dir = Path(out_dir)
    fmt = arithmetic_format(settings)
    training.set_seed(int(settings["seed"]))
    held_out = fmt.held_out_problems(int(settings["held_out_size"]), seed=2026)

    model = build_arithmetic_model(settings, fmt)
    max_minutes = settings["max_minutes"]
    epochs = int(settings["epochs"])
    steps = int(settings["steps_per_epoch"])
    compile_seq2seq(
        model, float(settings["learning_rate"]), int(settings["warmup_steps"]), None,
        label_smoothing=float(settings["label_smoothing"]), weight_decay=float(settings["weight_decay"]),
        jit_compile=bool(settings["jit_compile"]),
    )
    schedule = training.budget_schedule(
        float(settings["learning_rate"]), int(settings["warmup_steps"]), epochs * steps,
        None if max_minutes is None else float(max_minutes) * 60.0, float(settings["final_lr_ratio"]),
    )
    callbacks: list = [schedule]
    if progress:
        callbacks.append(training.progress_bar(epochs * steps, None if max_minutes is None else float(max_minutes) * 60.0))
    batches = problem_batches(fmt, int(settings["batch_size"]), steps, seed=int(settings["seed"]) + 2)
    # Every batch is fresh problems, so the training loss already measures generalisation: no
    # separate validation set (and no second XLA compilation for it).
    result = training.fit(
        model, batches, None,
        epochs=epochs, out_dir=out_dir / TRAINING_DIR, patience=None, max_minutes=max_minutes, verbose=0,
        callbacks=callbacks,
    )
    steps_done = schedule.steps
    answers = solve_problems(model, fmt, held_out)
    from kformer.data.arithmetic import score_answers, solve

    scores = score_answers(answers, [solve(*p) for p in held_out])
    metrics = {
        "exact_match": scores["exact_match"],
        "char_accuracy": scores["char_accuracy"],
        "held_out_size": scores["n"],
        "train_seconds": round(result.seconds, 2),
        "steps": steps_done,
        "epochs": result.epochs_run,
        "examples_seen": steps_done * int(settings["batch_size"]),
        "stopped_by_budget": result.stopped_by_budget,
        "parameters": int(model.count_params()),
        "command": list(sys.argv if command is None else command),
        "recipe": settings,
    }
    manifest = {
        "task": TASK,
        "model_file": MODEL_FILE,
        "vocabulary": fmt.vocabulary.to_json(),
        "format": fmt.to_json(),
        "recipe": settings,
        "metrics": {k: metrics[k] for k in ("exact_match", "char_accuracy", "held_out_size", "train_seconds")},
        "answer_order": (
            "digits least-significant first (negative answers in ten's complement), then the sign"
            if fmt.reverse_answer else "as written"
        ),
    }
    with staged_folder(out_dir) as staging:
        save_keras_atomic(model, staging / MODEL_FILE)
        write_json_atomic(staging / METRICS_FILE, metrics)
        write_json_atomic(staging / MANIFEST_NAME, manifest)
    return metrics


def problem_batches(fmt, batch_size: int, steps: int, seed: int):
    """A ``keras.utils.PyDataset`` of ``steps`` batches of fresh training problems per epoch."""
    import keras
    import numpy as np

    class ProblemBatches(keras.utils.PyDataset):
        def __init__(self):
            super().__init__()
            self.rng = np.random.default_rng(seed)

        def __len__(self):
            return steps

        def __getitem__(self, index):
            source, target_in, target_out = fmt.encode(*fmt.sample_training(self.rng, batch_size))
            return {"source": source, "target_in": target_in}, target_out

    return ProblemBatches()


# --- using a trained model -----------------------------------------------------------------------


# --- kformer evaluate / kformer attention for arithmetic folders -----------------------------------


def read_problems(path) -> list[tuple[tuple[int, str, int], int]]:
    """Lines ``1234+4567=5801`` or ``1234+4567<TAB>5801`` (blank lines skipped)."""
    from kformer.data.arithmetic import parse_problem_line
    from kformer.data.io import read_text_lines

    rows = []
    for line_no, line in read_text_lines(path):
        if not line.strip():
            continue
        try:
            rows.append(parse_problem_line(line))
        except KformerError as exc:
            raise KformerError(f"{path}, line {line_no}: {exc}") from None
    if not rows:
        raise KformerError(f"{path} has no problems; write lines like 1234+4567=5801")
    return rows


def evaluate(args: argparse.Namespace, manifest: dict) -> int:
    """``kformer evaluate MODEL_DIR --data FILE`` for arithmetic models."""
    from kformer.data.arithmetic import score_answers

    rows = read_problems(args.data)
    if args.limit is not None:
        rows = rows[: max(args.limit, 0)] or rows[:1]
    model, fmt, _ = load_arithmetic(args.model_dir)
    problems = [problem for problem, _ in rows]
    answers = solve_problems(model, fmt, problems, beam=args.beam, batch_size=max(args.batch_size, 1))
    expected = [value for _, value in rows]
    scores = score_answers(answers, expected)
    wrong = [
        {"problem": fmt.problem_text(*p), "expected": e, "predicted": a}
        for p, e, a in zip(problems, expected, answers, strict=True) if a != e
    ]
    report = {**scores, "wrong_examples": wrong[:10], "data": str(args.data), "beam": args.beam}
    if args.out:
        from kformer.artifacts import write_json_atomic

        write_json_atomic(Path(args.out) / "evaluation.json", report)
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print(f"problems: {scores['n']:,}  exact match {100 * scores['exact_match']:.2f}%  "
              f"per-character {100 * scores['char_accuracy']:.2f}%")
        for item in wrong[:5]:
            print(f"  wrong: {item['problem']} = {item['predicted']} (expected {item['expected']})")
    return 0


def attention(args: argparse.Namespace, manifest: dict) -> int:
    """``kformer attention MODEL_DIR "1234+4567"`` for arithmetic models."""
    model, fmt, _ = load_arithmetic(args.model_dir)
    out = Path(args.out) if args.out else Path(args.model_dir) / "attention"
    paths = draw_attention(model, fmt, args.input, out)
    print(f"wrote {len(paths)} PNGs to {out}:")
    for path in paths:
        print(f"  {path}")
    return 0
