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
    user_command,
    worker_line,
)
from kformer.cli.progress import add_log_flags, progress_for
from kformer.cli.settings_flags import add_train_flags, config_from_args
from kformer.errors import BadInput
from kformer.tasks.arithmetic.settings import ArithmeticConfig

DEMO_PROBLEM = "1234+4567"


def register(commands, train_tasks) -> None:
    """Add ``train arithmetic`` and ``demo`` to the CLI."""
    train = train_tasks.add_parser(
        "arithmetic",
        help="learn multi-digit addition/subtraction (or multiplication: --ops '*') from generated problems",
        description="Train a sequence-to-sequence Transformer on problems like 1234+4567 (answer "
        "=5801) generated on the fly, then report exact-match and per-character accuracy on held-out "
        "problems that training never sees (also written to OUT/metrics.json). Settings come from "
        "the defaults below (what `kformer demo` trains), then --recipe, then the flags; a flag narrows "
        "what depends on it (a smaller --digits lowers --train-digits when that is not given).",
    )
    add_train_flags(train, ArithmeticConfig, out_help="model folder to write", out_required=True)
    train.set_defaults(handler=_train)

    demo = commands.add_parser(
        "demo",
        help="learn 4-digit addition/subtraction in about two minutes, then show it",
        description="Train the arithmetic model for about two minutes on this CPU with a progress "
        "bar, print its held-out accuracy (also per operand length) and a few solved problems, some "
        f"twice as long as any it trained on, and draw its attention maps for {DEMO_PROBLEM}.",
    )
    demo.add_argument("--minutes", type=float, default=2.0, metavar="M", help="training time (default 2)")
    demo.add_argument("--out", default="runs/demo", metavar="DIR", help="where to put the model and pictures (default runs/demo)")
    demo.add_argument("--seed", type=int, default=0, metavar="N", help="random seed (default 0)")
    add_log_flags(demo)
    demo.set_defaults(handler=_demo)


def _train(args: argparse.Namespace) -> int:
    from kformer.tasks import arithmetic

    distribute = distribute_config(args)
    progress = job_progress(args, distribute)
    config = config_from_args(args, ArithmeticConfig, "arithmetic", progress)
    result = arithmetic.train(config, None, args.out, resume=args.resume, progress=progress,
                              command=user_command(sys.argv[1:]), distribute=distribute)
    if result.folder != Path(args.out):
        print(worker_line(distribute, result.folder))
        return 0
    _print_metrics(result.metrics)
    print(f"model folder: {args.out}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from kformer.config import make_config
    from kformer.tasks import arithmetic

    if args.minutes <= 0:
        raise BadInput(f"{{field}} must be positive, not {args.minutes}", field="minutes")
    config = make_config(arithmetic.ArithmeticConfig, "arithmetic", None,
                         {"max_minutes": args.minutes, "seed": args.seed, "epochs": 10**6})
    out = Path(args.out)
    trained = config.answer_format().most_trained
    longer = f", then asking it up to {config.digits}" if config.digits > trained else ""
    print(f"kformer demo: teaching a Transformer addition and subtraction of numbers of up to {trained} digits "
          f"for {args.minutes:g} minute{'' if args.minutes == 1 else 's'} on this machine{longer} ...")
    result = arithmetic.train(config, None, out, progress=progress_for(args), command=["kformer", *sys.argv[1:]])
    _print_metrics(result.metrics)
    model = arithmetic.load(out)
    _show(model, "a few problems:", [(1234, "+", 4567), (9999, "+", 1), (2026, "-", 4011), (5, "-", 5), (8713, "-", 299)])
    trained, longest = model.format.most_trained, model.format.digits
    if longest > trained:
        wide = min(2 * trained, longest)
        _show(model, f"problems {wide} digits long ({'twice as long as' if wide == 2 * trained else 'longer than'} "
              f"any it trained on):", [_long_problem(wide, seed) for seed in range(4)])
    pictures = model.attention_maps(DEMO_PROBLEM).draw(out / "attention")
    print(f"\nmodel folder:        {out}  (kformer.json, model.keras, metrics.json)")
    print(f"attention pictures:  {out / 'attention'}  ({len(pictures)} PNGs for {DEMO_PROBLEM})")
    print(f"training logs:       {out / 'training'}")
    print(f"next: kformer attention {out} \"4321-9876\"   or   kformer train arithmetic --out runs/arith")
    return 0


def _show(model, title: str, problems) -> None:
    from kformer.data.arithmetic import solve

    print(title)
    width = max(len(model.format.problem_text(*p)) for p in problems)
    for problem, answer in zip(problems, model.solve(problems), strict=True):
        truth = solve(*problem)
        mark = "right" if answer == truth else f"wrong, it is {truth}"
        print(f"  {model.format.problem_text(*problem):>{width}} = {answer if answer is not None else '?'}   ({mark})")


def _long_problem(digits: int, seed: int) -> tuple[int, str, int]:
    """A fixed problem of two ``digits``-digit operands (the first ones subtract, carrying far)."""
    import random

    rng = random.Random(seed)
    low, high = 10 ** (digits - 1), 10**digits - 1
    return rng.randint(low, high), "-+"[seed % 2], rng.randint(low, high)


def _print_metrics(metrics: dict) -> None:
    print(
        f"held-out problems: {metrics['held_out_size']:,}  exact match {100 * metrics['exact_match']:.2f}%  "
        f"per-character {100 * metrics['char_accuracy']:.2f}%  "
        f"(trained {metrics['train_seconds']:.0f} s on {metrics['examples_seen']:,} problems)"
    )
    by_length = {k: v for k, v in (metrics.get("by_length") or {}).items() if v["n"]}
    if by_length:
        print("exact match by digits per operand: " + "  ".join(
            f"{k}: {100 * v['exact_match']:.1f}%" for k, v in by_length.items()))


def evaluate(args: argparse.Namespace, model) -> int:
    """``kformer evaluate MODEL_DIR --data FILE`` (or ``--digits N``) for arithmetic models."""
    report = model.evaluate(args.data, digits=args.digits, beam=args.beam, batch_size=max(args.batch_size, 1),
                            limit=args.limit, out=args.out)
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print(f"problems: {report['n']:,} ({report['data']})  exact match {100 * report['exact_match']:.2f}%  "
              f"per-character {100 * report['char_accuracy']:.2f}%")
        for item in report["wrong_examples"][:5]:
            print(f"  wrong: {item['problem']} = {item['predicted']} (expected {item['expected']})")
    return 0
