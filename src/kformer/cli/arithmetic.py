"""``kformer train arithmetic``, ``kformer demo`` and the arithmetic report of ``kformer evaluate``.

Parsing and printing only; the work is :mod:`kformer.tasks.arithmetic`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kformer.cli.distribute import (
    distribute_config,
    job_progress,
    worker_line,
)
from kformer.cli.progress import add_log_flags, progress_for
from kformer.cli.settings_flags import add_train_flags, settings_from_args
from kformer.errors import BadInput
from kformer.tasks.arithmetic.settings import ArithmeticConfig

DEFAULT_RECIPE = "arithmetic"
DEMO_PROBLEM = "1234+4567"


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
    add_train_flags(train, ArithmeticConfig, out_help="model folder to write", out_required=True,
                    default_recipe=DEFAULT_RECIPE,
                    recipe_help=f"settings: a shipped recipe name or a TOML file (default {DEFAULT_RECIPE})")
    train.set_defaults(handler=_train)

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
    add_log_flags(demo)
    demo.set_defaults(handler=_demo)


def _train(args: argparse.Namespace) -> int:
    from kformer.config import make_config
    from kformer.tasks import arithmetic

    config = make_config(arithmetic.ArithmeticConfig, "arithmetic", args.recipe, settings_from_args(args, args.settings))
    distribute = distribute_config(args)
    result = arithmetic.train(config, None, args.out, resume=args.resume, progress=job_progress(args, distribute),
                              command=["kformer", *sys.argv[1:]], distribute=distribute)
    if result.folder != Path(args.out):
        print(worker_line(distribute, result.folder))
        return 0
    _print_metrics(result.metrics)
    print(f"model folder: {args.out}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from kformer.config import make_config
    from kformer.data.arithmetic import solve
    from kformer.tasks import arithmetic

    if args.minutes <= 0:
        raise BadInput(f"{{field}} must be positive, not {args.minutes}", field="minutes")
    config = make_config(arithmetic.ArithmeticConfig, "arithmetic", DEFAULT_RECIPE,
                         {"max_minutes": args.minutes, "seed": args.seed, "epochs": 10**6})
    out = Path(args.out)
    print(f"kformer demo: teaching a Transformer {config.digits}-digit addition and subtraction "
          f"for {args.minutes:g} minute{'' if args.minutes == 1 else 's'} on this machine ...")
    result = arithmetic.train(config, None, out, progress=progress_for(args), command=["kformer", *sys.argv[1:]])
    _print_metrics(result.metrics)
    model = arithmetic.load(out)
    examples = [(1234, "+", 4567), (9999, "+", 1), (2026, "-", 4011), (5, "-", 5), (8713, "-", 299)]
    print("a few problems:")
    answers = model.predict([model.format.problem_text(*problem) for problem in examples])
    for problem, answer in zip(examples, answers, strict=True):
        truth = solve(*problem)
        mark = "right" if answer["answer"] == truth else f"wrong, it is {truth}"
        print(f"  {answer['problem']:>11} = {'?' if answer['answer'] is None else answer['answer']}   ({mark})")
    pictures = model.attention_maps(DEMO_PROBLEM).draw(out / "attention")
    print(f"\nmodel folder:        {out}  (kformer.json, model.keras, metrics.json)")
    print(f"attention pictures:  {out / 'attention'}  ({len(pictures)} PNGs for {DEMO_PROBLEM})")
    print(f"training logs:       {out / 'training'}")
    print(f"next: kformer attention {out} \"4321-9876\"   or   kformer train arithmetic --out runs/arith")
    return 0


def _print_metrics(metrics: dict) -> None:
    print(
        f"held-out problems: {metrics['held_out_size']:,}  exact match {100 * metrics['exact_match']:.2f}%  "
        f"per-character {100 * metrics['char_accuracy']:.2f}%  "
        f"(trained {metrics['train_seconds']:.0f} s on {metrics['examples_seen']:,} problems)"
    )


def evaluate(args: argparse.Namespace, model) -> int:
    """``kformer evaluate MODEL_DIR --data FILE`` for arithmetic models."""
    report = model.evaluate(args.data, beam=args.beam, batch_size=max(args.batch_size, 1), limit=args.limit,
                            out=args.out)
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print(f"problems: {report['n']:,}  exact match {100 * report['exact_match']:.2f}%  "
              f"per-character {100 * report['char_accuracy']:.2f}%")
        for item in report["wrong_examples"][:5]:
            print(f"  wrong: {item['problem']} = {item['predicted']} (expected {item['expected']})")
    return 0
