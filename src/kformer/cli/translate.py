"""``kformer train translate``, ``kformer translate`` and the translation report of ``kformer evaluate``.

Parsing and printing only; the work is :mod:`kformer.tasks.translate` (imported lazily but for
its settings, so ``kformer --help`` stays instant).
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
from kformer.cli.settings_flags import add_train_flags, settings_from_args
from kformer.errors import BadInput
from kformer.tasks.translate.settings import TranslateConfig


def register(commands, train_tasks) -> None:
    """Add ``train translate`` and ``translate`` to the CLI."""
    train = train_tasks.add_parser(
        "translate",
        help="train a translation model from sentence pairs",
        description="Train an encoder-decoder Transformer on source<TAB>target lines (extra columns are "
        "ignored; .gz is fine). Text is NFC-normalised; SentencePiece subword vocabularies are learned "
        "from the training side only. Settings come from --recipe, then the flags below.",
    )
    train.add_argument("--data", required=True, metavar="PAIRS.tsv", help="training pairs, source<TAB>target per line")
    train.add_argument("--valid", metavar="FILE", help="validation pairs for early stopping (default: a random hold-out of the training pairs)")
    train.add_argument("--test", metavar="FILE", help="test pairs scored after training (default: hold out up to 2,000 random training pairs)")
    add_train_flags(train, TranslateConfig, out_help="model folder to write (default: runs/<name of PAIRS>)",
                    recipe_help="named recipe (en-es, en-ta) or a TOML file of settings")
    train.set_defaults(handler=train_command)

    translate = commands.add_parser(
        "translate",
        help="translate text with a trained translation model",
        description="Translate each TEXT argument, or each line of standard input, and print one "
        "translation per line.",
    )
    translate.add_argument("model_dir", metavar="MODEL_DIR", help="folder written by `kformer train translate`")
    translate.add_argument("texts", nargs="*", metavar="TEXT", help="sentences to translate (default: read lines from stdin)")
    translate.add_argument("--beam", type=int, default=1, metavar="N", help="beam width (1 = greedy decoding)")
    translate.add_argument("--batch-size", type=int, default=64, metavar="N", help="sentences per decoding batch")
    translate.add_argument("--max-repeat", type=int, default=None, metavar="N",
                           help="most copies of a word or of a span of up to 8 subwords in a row in a translation: "
                           "stops an undertrained model's loops (0 = no limit; default 3)")
    translate.set_defaults(handler=translate_command)


def default_out(data: str) -> Path:
    """``runs/<name of the pairs file without extensions>``."""
    return Path("runs") / Path(data).name.split(".")[0]


def train_command(args: argparse.Namespace) -> int:
    from kformer.config import make_config
    from kformer.tasks import translate

    config = make_config(translate.TranslateConfig, "translate", args.recipe, settings_from_args(args, args.settings))
    out = Path(args.out) if args.out else default_out(args.data)
    distribute = distribute_config(args)
    result = translate.train(config, args.data, out, valid=args.valid, test=args.test, resume=args.resume,
                             progress=job_progress(args, distribute), command=["kformer", *sys.argv[1:]],
                             distribute=distribute)
    if result.folder != out:
        print(worker_line(distribute, result.folder))
        return 0
    metrics, test = result.metrics, result.metrics["test"]
    budget = " (stopped by --max-minutes)" if metrics["stopped_by_time_budget"] else ""
    print(
        f"test BLEU {test['bleu']:.2f}, chrF {test['chrf']:.2f}, exact match {test['exact_match']:.3f}, "
        f"repetition {test['repetition']:.1%} on {test['n']} pairs; trained {metrics['train_seconds']:.0f} s{budget}; "
        f"model written to {out}"
    )
    return 0


def translate_command(args: argparse.Namespace) -> int:
    from kformer.folders import read_manifest
    from kformer.tasks import translate

    read_manifest(args.model_dir, task="translate")  # the wrong folder, bad flags: before stdin and loading
    translate.check_decoding(args.beam, args.batch_size, _max_repeat(args))
    if args.texts:
        texts = list(args.texts)
    elif sys.stdin is None or sys.stdin.isatty():
        raise BadInput("no text: pass TEXT arguments or pipe lines on stdin", field="texts")
    else:
        texts = [line.rstrip("\r\n") for line in sys.stdin]
    translator = translate.load(args.model_dir)
    for answer in translator.predict(texts, beam=args.beam, batch_size=args.batch_size, max_repeat=_max_repeat(args)):
        print(answer["translation"])
    return 0


def _max_repeat(args: argparse.Namespace) -> int:
    """``--max-repeat``, or the task's default when it is not given."""
    from kformer.tasks.translate import MAX_REPEAT

    return MAX_REPEAT if args.max_repeat is None else args.max_repeat


def evaluate(args: argparse.Namespace, model) -> int:
    """``kformer evaluate MODEL_DIR --data PAIRS``: BLEU, chrF and exact match of the translations."""
    out = Path(args.out) if args.out else model.folder / "eval"
    scores = model.evaluate(args.data, beam=args.beam, batch_size=args.batch_size, out=out, limit=args.limit or None,
                            max_repeat=_max_repeat(args))
    if args.json:
        print(json.dumps(scores))
    else:
        print(f"BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}  exact match {scores['exact_match']:.3f}  "
              f"repetition {scores['repetition']:.1%}  n {scores['n']}  "
              f"({'greedy' if args.beam == 1 else f'beam {args.beam}'})")
        print(f"translations: {out / 'translations.json'}")
    return 0
