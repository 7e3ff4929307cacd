"""``kformer train classify``, ``kformer predict`` and the classify report of ``kformer evaluate``.

Parsing and printing only: the work is :mod:`kformer.tasks.classify`, imported inside the
handlers so that ``kformer --help`` stays instant.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from kformer.cli.distribute import (
    distribute_config,
    job_progress,
    user_command,
    worker_line,
)
from kformer.cli.settings_flags import add_train_flags, config_from_args
from kformer.errors import BadInput
from kformer.tasks.classify.settings import ClassifyConfig

PREDICT_CHUNK = 4096  # texts read, labelled and written at a time by `kformer predict`


def register(commands, train_tasks) -> None:
    """Add ``train classify`` and ``predict`` to the CLI."""
    train = train_tasks.add_parser(
        "classify",
        help="train a text classifier from a labelled file",
        description="Train a text classifier (kformer's encoder, a small BERT, or pretrained MiniLM) "
        "on CSV/TSV/JSONL (optionally .gz) or a folder of label folders (pos/, neg/ of .txt files). "
        "Settings come from --recipe, then the flags below; what neither sets is chosen from the training data "
        "(auto: printed before training, with reasons in metrics.json; docs/settings.md lists the rules).",
    )
    train.add_argument("--data", required=True, metavar="TRAIN", help="labelled training file or folder")
    train.add_argument("--valid", metavar="FILE", help="validation file (default: a stratified hold-out of TRAIN)")
    train.add_argument("--test", metavar="FILE", help="test file, scored once after training and written to metrics.json")
    add_train_flags(train, ClassifyConfig, out_help="model folder to write (default: runs/<name of TRAIN>)")
    train.set_defaults(handler=train_command)

    predict = commands.add_parser(
        "predict",
        help="label texts with a trained classifier",
        description="Print label, probability and top-k for each text (arguments, --data FILE, or "
        "lines on stdin) as JSONL or CSV. With --threshold, texts whose in-scope score is below it get --unknown-label.",
    )
    predict.add_argument("model_dir", metavar="MODEL_DIR", help="folder written by `kformer train classify`")
    predict.add_argument("texts", nargs="*", metavar="TEXT", help="texts to classify (default: --data or stdin lines)")
    predict.add_argument("--data", metavar="FILE", help="file of texts: .csv/.tsv/.jsonl (text column) or .txt (one per line)")
    predict.add_argument("--text-column", default=None, help="text column of --data (default: the model's)")
    predict.add_argument("--format", choices=("jsonl", "csv"), default="jsonl", help="output format (default jsonl)")
    predict.add_argument("--top-k", type=int, default=1, metavar="K", help="also list the K most likely labels")
    predict.add_argument("--threshold", type=float, metavar="X",
                         help="below this in-scope score, answer --unknown-label: the best probability, or for a "
                         "model trained with a distance --ood-score minus the distance (kformer.json \"ood\" names "
                         "its units) (default: the folder's calibrated threshold from train --calibrate, else none; "
                         "for the probability, 0 turns it off)")
    predict.add_argument("--unknown-label", default="unknown", metavar="NAME", help="label for low-confidence texts (default: unknown)")
    predict.add_argument("--batch-size", type=int, default=64, metavar="N", help="texts per prediction batch")
    predict.set_defaults(handler=predict_command)


# --- train classify --------------------------------------------------------------------------------


def _out_dir(args: argparse.Namespace) -> Path:
    return Path(args.out) if args.out else Path("runs") / Path(args.data).name.split(".")[0]


def train_command(args: argparse.Namespace) -> int:
    from kformer.tasks.classify import train

    distribute = distribute_config(args)
    progress = job_progress(args, distribute)
    config = config_from_args(args, ClassifyConfig, "classify", progress)
    out = _out_dir(args)
    result = train(config, args.data, out, valid=args.valid, test=args.test, resume=args.resume,
                   progress=progress, command=user_command(sys.argv[1:]), distribute=distribute)
    print(_summary_line(result.metrics, out) if result.folder == out else worker_line(distribute, result.folder))
    return 0


def _summary_line(metrics: dict, out: Path) -> str:
    """``valid accuracy ..., macro-F1 ...; test ...; wide part ...; trained N s; model written to OUT``."""
    line = f"valid accuracy {metrics['valid']['accuracy']:.4f}, macro-F1 {metrics['valid']['macro_f1']:.4f}"
    if metrics["test"]:
        line += f"; test accuracy {metrics['test']['accuracy']:.4f}, macro-F1 {metrics['test']['macro_f1']:.4f}"
    wide = metrics.get("wide") or {}
    if wide.get("weight") is not None:  # what each part scores alone on validation
        parts = wide["valid_accuracy"]
        line += (f"; wide part weight {wide['weight']:g} (valid accuracy: transformer {parts['transformer']:.4f}, "
                 f"wide {parts['wide']:.4f}, mixed {parts['mixed']:.4f})")
    budget = " (stopped by --max-minutes)" if metrics["stopped_by_time_budget"] else ""
    return f"{line}; trained {metrics['train_seconds']:.0f} s{budget}; model written to {out}"


# --- predict -----------------------------------------------------------------------------------------


def _text_chunks(args: argparse.Namespace, manifest: dict) -> Iterator[list[str]]:
    """The texts to label, :data:`PREDICT_CHUNK` at a time: from ``--data`` (streamed, so a file
    of any size fits in memory), the arguments, or stdin lines."""
    from kformer.data.readers import iter_texts

    if args.texts and args.data:
        raise BadInput("give texts as arguments or {field} FILE, not both", field="data")
    if args.data:
        return iter_texts(args.data, args.text_column or manifest.get("text_column") or "text", PREDICT_CHUNK)
    if args.texts:
        return iter([list(args.texts)])
    if sys.stdin is None or sys.stdin.isatty():
        raise BadInput("no texts: pass TEXT arguments, {field} FILE, or pipe lines on stdin", field="data")
    return _chunks(line.rstrip("\r\n") for line in sys.stdin)


def _chunks(lines: Iterable[str]) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == PREDICT_CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def predict_command(args: argparse.Namespace) -> int:
    """Label each chunk of texts and write its lines before reading the next (bounded memory)."""
    from tqdm import tqdm

    from kformer.folders import read_manifest

    manifest = read_manifest(args.model_dir, task="classify")
    chunks = _text_chunks(args, manifest)
    first = next(chunks, [])  # before the model loads: a bad file or column fails fast
    if not first:
        raise BadInput("no texts to classify", field="texts")

    from kformer.tasks.classify import load

    classifier = load(args.model_dir)
    writer = csv.writer(sys.stdout) if args.format == "csv" else None
    if writer is not None:
        writer.writerow(["text", "label", "probability", "unknown", "top_k"])
    with tqdm(desc="predicting", unit=" texts", disable=None, leave=False) as bar:  # only on a terminal
        for texts in itertools.chain([first], chunks):
            results = classifier.predict(texts, top_k=args.top_k, threshold=args.threshold,
                                         unknown_label=args.unknown_label, batch_size=args.batch_size)
            _write_results(texts, results, writer)
            bar.update(len(texts))
    return 0


def _write_results(texts: list[str], results: list[dict], writer) -> None:
    """JSONL lines (``writer`` None) or CSV rows of one chunk's predictions."""
    for text, result in zip(texts, results, strict=True):
        if writer is None:
            sys.stdout.write(json.dumps({"text": text, **result}, ensure_ascii=False) + "\n")
        else:
            top = ";".join(f"{t['label']}:{t['probability']:.4f}" for t in result["top_k"])
            writer.writerow([text, result["label"], f"{result['probability']:.6f}", result["unknown"], top])


# --- evaluate (called by kformer.cli for classify folders) -------------------------------------------


def route_line(route: dict) -> str:
    """One line: what the unknown route did at the folder's threshold (``scores["unknown_route"]``)."""
    def percent(share):
        return "n/a" if share is None else f"{100 * share:.1f} %"

    return (f"unknown route at threshold {route['threshold']:g} ({route['ood_score']}): in-scope accuracy "
            f"{percent(route['in_scope_accuracy'])} (route off {percent(route['in_scope_accuracy_without'])}, "
            f"{route['in_scope']} texts), out-of-scope recall {percent(route['out_of_scope_recall'])} and precision "
            f"{percent(route['out_of_scope_precision'])} ({route['out_of_scope']} texts of labels the model never saw)")


def evaluate(args: argparse.Namespace, model) -> int:
    """Print accuracy, macro-F1 and the per-class report (or ``--json``); write the confusion PNG."""
    from kformer.metrics import format_classification_report

    out = Path(args.out) if args.out else Path(args.model_dir) / "eval"
    scores = model.evaluate(args.data, batch_size=args.batch_size, out=out, limit=args.limit,
                            text_column=args.text_column, label_column=args.label_column)
    if args.json:
        print(json.dumps({**scores, "confusion_png": str(out / "confusion.png")}, ensure_ascii=False))
        return 0
    print(format_classification_report(scores))
    if scores["unseen_labels"]:
        print(f"labels the model never saw (always wrong): {', '.join(scores['unseen_labels'])}")
    if "unknown_route" in scores:
        print(route_line(scores["unknown_route"]))
    print(f"confusion matrix: {out / 'confusion.png'}")
    return 0
