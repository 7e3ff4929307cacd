"""The ``kformer`` command: argument parsing, calls into the task API, printing. Nothing else.

Each task's commands live in ``kformer.cli.<task>``; every such module exposes
``register(commands, train_tasks)`` to add its sub-commands and ``evaluate(args, model)``, which
``kformer evaluate`` calls for model folders of that task. ``kformer attention`` is the same for
every task (:meth:`~kformer.tasks.base.TaskModel.attention_maps`, then PNGs). The work itself is
done by :mod:`kformer.tasks`, imported lazily so that ``kformer --help`` answers at once. Before
a command runs, :func:`main` calls :func:`kformer.setup` (Keras backend, TensorFlow's log level and
thread pools; JAX for ``--distribute``).

Errors: a :class:`~kformer.errors.KformerError` is printed as one line, with the argument it
names shown as this command's flag (``max_length`` -> ``--max-length``), and the exit status of
its class (:data:`kformer.errors.ERROR_TABLE`). Ctrl-C exits with status 130 and one line; during
training it says what the checkpoint holds and the command that resumes
(:class:`kformer.training.TrainingInterrupted`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from kformer import __version__
from kformer.cli.distribute import local_job
from kformer.environment import setup, silence_native_stderr
from kformer.errors import KformerError
from kformer.tasks.arithmetic.settings import ArithmeticConfig

COMMAND_MODULES = (
    "kformer.cli.classify",
    "kformer.cli.arithmetic",
    "kformer.cli.translate",
    "kformer.cli.serve",
    "kformer.cli.export",
)

DESCRIPTION = """\
Build, train, inspect and serve small Transformer models with Keras 3.

Every `kformer train ...` writes one model folder (--out DIR) that carries its vocabulary,
labels, recipe and metrics; `evaluate`, `predict`, `translate` and `attention` take that folder.
"""

EXAMPLES = f"""\
examples:
  kformer demo                                   learn 4-digit addition/subtraction (~2 min)
  kformer train classify --data tickets.csv --out runs/tickets
  kformer predict runs/tickets "my laptop will not boot"
  kformer evaluate runs/tickets --data test.csv
  kformer evaluate runs/arith --digits {ArithmeticConfig.digits}
  kformer train translate --data en-es.tsv --out runs/en-es
  kformer translate runs/en-es "How are you?"
  kformer attention runs/arith "1234+4567"

Run `kformer COMMAND --help` for a command's options.
"""  # --digits: the most the default arithmetic model accepts


def _add_shared_commands(commands) -> None:
    evaluate = commands.add_parser(
        "evaluate",
        help="score a trained model on a labelled file",
        description="Score a model folder on held-out data. Classifiers report accuracy, macro-F1, a "
        "per-class report and a confusion-matrix PNG; translators report BLEU, chrF and exact match; "
        "arithmetic models exact match, on --data or on generated held-out problems of --digits digits.",
    )
    evaluate.add_argument("model_dir", metavar="MODEL_DIR", help="folder written by `kformer train`")
    evaluate.add_argument("--data", metavar="FILE", help="labelled test file (same formats as training); required "
                          "unless --digits")
    evaluate.add_argument("--digits", type=int, default=None, metavar="N",
                          help="arithmetic models: instead of --data, score held-out problems whose operands both have "
                          "exactly N digits (up to the model's longest; --limit of them, default 1000)")
    evaluate.add_argument("--json", action="store_true", help="print one JSON object instead of a report")
    evaluate.add_argument("--out", metavar="DIR", help="where to write plots and reports (default: MODEL_DIR/eval)")
    evaluate.add_argument("--text-column", default=None, help="text column of a table file (default: the model's)")
    evaluate.add_argument("--label-column", default=None, help="label column of a table file (default: the model's)")
    evaluate.add_argument("--beam", type=int, default=1, metavar="N", help="beam width for translation models (1 = greedy)")
    evaluate.add_argument("--max-repeat", type=int, default=None, metavar="N",
                          help="translation models: most copies of a word or subword span in a row in a "
                          "translation (0 = no limit; default 3)")
    evaluate.add_argument("--retrieval", choices=("on", "off"), default="on",
                          help="translation models: decode with the folder's retrieval datastore (kNN-MT; when it has "
                          "one) or without it, to compare on the same model (default on)")
    evaluate.add_argument("--domain", metavar="TAG", help="translation models trained with --corpus-tags: translate "
                          "as the corpus of this tag does (default: neutral)")
    evaluate.add_argument("--batch-size", type=int, default=64, metavar="N", help="texts per prediction batch")
    evaluate.add_argument("--limit", type=int, default=None, metavar="N", help="score only the first N examples")
    evaluate.set_defaults(handler=_evaluate)

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
    attention.set_defaults(handler=_attention)


def _evaluate(args: argparse.Namespace) -> int:
    from kformer.errors import BadInput
    from kformer.tasks import load

    if args.data is None and args.digits is None:
        raise BadInput("{field} FILE is required (or --digits N, for an arithmetic model)", field="data")
    model = load(args.model_dir)
    if args.digits is not None and model.task != "arithmetic":
        raise BadInput(f"{{field}} is for arithmetic models; {args.model_dir} is a {model.task} model", field="digits")
    return importlib.import_module(f"kformer.cli.{model.task}").evaluate(args, model)


def _attention(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kformer.tasks import load

    model = load(args.model_dir)
    maps = model.attention_maps(args.input)
    out = Path(args.out) if args.out else Path(args.model_dir) / "attention"
    written = maps.draw(out)
    if maps.output is not None:
        print(f"model output: {maps.output}")
    print(f"wrote {len(written)} PNGs to {out}:")
    for path in written:
        print(f"  {path}")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse with kformer's one-line errors: ``kformer: error: ...`` and exit status 2."""

    def error(self, message: str):
        self.exit(2, f"kformer: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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
    _remember_parsers(parser)
    return parser


def _remember_parsers(parser: argparse.ArgumentParser) -> None:
    """Give every command's arguments a reference to its parser (for naming flags in errors)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub.set_defaults(_parser=sub)
                _remember_parsers(sub)


def flag_for(parser: argparse.ArgumentParser | None, field: str | None) -> str | None:
    """The flag (``--max-length``) or argument (``MODEL_DIR``) of ``parser`` behind an error's
    ``field`` (``max_length``, ``training.max_length``, ``parameters.top_k``), if it has one."""
    if parser is None or not field:
        return None
    name = field.rsplit(".", 1)[-1].split("[", 1)[0]
    for action in parser._actions:
        if action.dest == name:
            return action.option_strings[-1] if action.option_strings else (action.metavar or name.upper())
    return None


def error_line(exc: KformerError, parser: argparse.ArgumentParser | None = None) -> str:
    """``kformer: error: <message>``, the field shown as the command's flag where it has one."""
    flag = flag_for(parser, exc.field)
    return f"kformer: error: {exc.message_for(flag) if flag else exc}"


def interrupted_line(exc: KeyboardInterrupt, argv: list[str]) -> str:
    """The one line for Ctrl-C: with a training checkpoint, what is kept and how to resume."""
    import shlex

    epochs_done = getattr(exc, "epochs_done", None)  # kformer.training.TrainingInterrupted
    if epochs_done is None:
        return "kformer: interrupted"
    where = f"during epoch {epochs_done + 1} ({exc.batches_lost} batches of it lost)"
    if epochs_done == 0:
        return f"kformer: interrupted {where}; no epoch was complete, so there is nothing to resume: run it again"
    command = shlex.join(["kformer", *argv, *([] if "--resume" in argv else ["--resume"])])
    return f"kformer: interrupted {where}; the checkpoint after epoch {epochs_done} is kept; resume with: {command}"


def _backend_for(args: argparse.Namespace) -> str | None:
    """``--distribute`` trains on Keras' JAX backend: chosen unless the user set ``KERAS_BACKEND``
    (read before :func:`kformer.setup` writes it) or Keras is already imported;
    :func:`kformer.parallel.check_backend` refuses a backend other than JAX with a reason."""
    if not getattr(args, "distribute", False):
        return None
    from kformer.extras import require

    require("--distribute", "jax", field="distribute")
    return "jax" if "KERAS_BACKEND" not in os.environ and "keras" not in sys.modules else None


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
        job = local_job(args)
        if job is not None:  # --distribute --num-processes N alone: N processes here, restarted when one is lost
            from kformer.launcher import launch

            return launch(list(sys.argv[1:] if argv is None else argv), *job)
        setup(_backend_for(args))  # a bad KFORMER_THREADS is one line and exit status 2
        return int(handler(args) or 0)
    except KformerError as exc:
        print(error_line(exc, getattr(args, "_parser", None)), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        print(interrupted_line(exc, list(sys.argv[1:] if argv is None else argv)), file=sys.stderr)
        return 130
    except Exception as exc:  # a bug, not bad input: one line unless the user asks for more
        from kformer.artifacts import write_error

        refused = write_error(exc) if isinstance(exc, OSError) else None  # read-only or full disk
        if refused is not None:
            print(error_line(refused), file=sys.stderr)
            return refused.exit_code
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
    silence_native_stderr()
    sys.exit(main())


if __name__ == "__main__":
    run()
