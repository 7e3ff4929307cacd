"""The ``kformer`` command: argument parsing and dispatch only.

Each task's commands live in ``kformer.commands.<task>``; every such module exposes
``register(commands, train_tasks)`` to add its sub-commands, and may expose
``evaluate(args, manifest)`` and ``attention(args, manifest)``, which ``kformer evaluate`` and
``kformer attention`` call for model folders of that task. Command modules import Keras lazily
so that ``kformer --help`` answers at once.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from kformer import __version__
from kformer.errors import KformerError

COMMAND_MODULES = (
    "kformer.commands.classify",
    "kformer.commands.seq2seq",
    "kformer.commands.translate",
)
# Which command module evaluates / draws attention for a model folder, by its manifest's task.
TASK_MODULES = {
    "classify": "kformer.commands.classify",
    "arithmetic": "kformer.commands.seq2seq",
    "translate": "kformer.commands.translate",
}

DESCRIPTION = """\
Build, train, inspect and serve small Transformer models with Keras 3.

Every `kformer train ...` writes one model folder (--out DIR) that carries its vocabulary,
labels, recipe and metrics; `evaluate`, `predict`, `translate` and `attention` take that folder.
"""

EXAMPLES = """\
examples:
  kformer demo                                   learn 4-digit addition/subtraction (~2 min)
  kformer train classify --data tickets.csv --out runs/tickets
  kformer predict runs/tickets "my laptop will not boot"
  kformer evaluate runs/tickets --data test.csv
  kformer train translate --data en-es.tsv --out runs/en-es
  kformer translate runs/en-es "How are you?"
  kformer attention runs/arith "1234+4567"

Run `kformer COMMAND --help` for a command's options.
"""


def _add_shared_commands(commands) -> None:
    evaluate = commands.add_parser(
        "evaluate",
        help="score a trained model on a labelled file",
        description="Score a model folder on held-out data. Classifiers report accuracy, macro-F1, a "
        "per-class report and a confusion-matrix PNG; translators report BLEU, chrF and exact match.",
    )
    evaluate.add_argument("model_dir", metavar="MODEL_DIR", help="folder written by `kformer train`")
    evaluate.add_argument("--data", required=True, metavar="FILE", help="labelled test file (same formats as training)")
    evaluate.add_argument("--json", action="store_true", help="print one JSON object instead of a report")
    evaluate.add_argument("--out", metavar="DIR", help="where to write plots and reports (default: MODEL_DIR/eval)")
    evaluate.add_argument("--text-column", default=None, help="text column of a table file (default: the model's)")
    evaluate.add_argument("--label-column", default=None, help="label column of a table file (default: the model's)")
    evaluate.add_argument("--beam", type=int, default=1, metavar="N", help="beam width for translation models (1 = greedy)")
    evaluate.add_argument("--batch-size", type=int, default=64, metavar="N", help="texts per prediction batch")
    evaluate.add_argument("--limit", type=int, default=None, metavar="N", help="score only the first N examples")
    evaluate.set_defaults(handler=_by_task("evaluate"))

    attention = commands.add_parser(
        "attention",
        help="draw a model's attention maps for one input",
        description="Write PNG heat maps with token labels: per layer the head-averaged map and a grid "
        "of every layer x head, for encoder self-attention and (seq2seq) decoder self- and "
        "cross-attention.",
    )
    attention.add_argument("model_dir", metavar="MODEL_DIR", help="folder written by `kformer train`")
    attention.add_argument("input", metavar="INPUT", help='the text to look at, e.g. "1234+4567"')
    attention.add_argument("--out", metavar="DIR", help="where to write the PNGs (default: MODEL_DIR/attention)")
    attention.set_defaults(handler=_by_task("attention"))


def _by_task(action: str):
    def run(args: argparse.Namespace) -> int | None:
        from kformer.artifacts import read_manifest

        manifest = read_manifest(args.model_dir)
        module_name = TASK_MODULES.get(manifest["task"])
        if module_name is None:
            raise KformerError(f"{args.model_dir} holds a '{manifest['task']}' model, which `kformer {action}` does not know")
        handler = getattr(importlib.import_module(module_name), action, None)
        if handler is None:
            raise KformerError(f"`kformer {action}` does not support '{manifest['task']}' models")
        return handler(args, manifest)

    return run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kformer",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"kformer {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    train = commands.add_parser(
        "train",
        help="train a model (classify, arithmetic, translate)",
        description="Train a model and write it, with its vocabulary and metrics, to --out DIR.",
    )
    train_tasks = train.add_subparsers(dest="task", metavar="TASK", required=True)
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue  # a task whose commands are not installed in this build
        module.register(commands, train_tasks)
    _add_shared_commands(commands)
    return parser


def _silence_native_stderr() -> None:
    """Send C++ log lines (TensorFlow/XLA start-up notices such as "Could not find cuda drivers")
    to /dev/null while Python's own stderr (warnings, errors) keeps the terminal.

    TF_CPP_MIN_LOG_LEVEL no longer silences them: they are written before logging is set up.
    KFORMER_DEBUG=1 keeps them.
    """
    if os.environ.get("KFORMER_DEBUG"):
        return
    try:
        sys.stderr.flush()
        python_stderr = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
        sys.stderr = os.fdopen(python_stderr, "w", buffering=1, encoding="utf-8", errors="replace")
    except (OSError, ValueError):  # no real file descriptor 2 (embedded use): leave it be
        pass


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        # argparse ends a `TEXT...` positional at the first option, so in
        # `kformer translate DIR --beam 4 "text"` the text after the option is left over.
        texts = getattr(args, "texts", None)
        if texts is None or any(extra.startswith("-") for extra in extras):
            parser.error(f"unrecognized arguments: {' '.join(extras)}")
        args.texts = [*texts, *extras]
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 0
    try:
        return int(handler(args) or 0)
    except KformerError as exc:
        print(f"kformer: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kformer: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug, not bad input: one line unless the user asks for more
        if os.environ.get("KFORMER_DEBUG"):
            raise
        first_line = (str(exc).strip().splitlines() or [""])[0][:300]
        print(
            f"kformer: internal error: {type(exc).__name__}: {first_line} "
            "(set KFORMER_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1


def run() -> None:
    """Entry point of the ``kformer`` command and ``python -m kformer``."""
    _silence_native_stderr()
    sys.exit(main())


if __name__ == "__main__":
    run()
