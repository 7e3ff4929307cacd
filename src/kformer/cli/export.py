"""``kformer export``: write a model folder as a TensorFlow SavedModel or ONNX files.

Parsing and printing only; the work is :mod:`kformer.export`.
"""

from __future__ import annotations

import argparse
import json


def register(commands, train_tasks) -> None:
    """Add ``export`` to the CLI."""
    from kformer.export import FORMATS

    export = commands.add_parser(
        "export",
        help="export a model for TensorFlow Serving (SavedModel) or ONNX Runtime",
        description="Write MODEL_DIR as a TensorFlow SavedModel (in OUT/1, ready for "
        "tensorflow_model_server --model_base_path=OUT) or as ONNX files, with the vocabulary, the "
        "labels, metadata.json and README.txt saying what every signature takes and returns. "
        "Classifiers: token ids (and the texts, for the wide n-gram part) -> probabilities and labels "
        "(and, SavedModel, raw strings -> probabilities and labels); translators and arithmetic models: "
        "the encoder and a decoder step with a key/value cache (and, SavedModel, greedy decoding). OUT "
        "is replaced whole only if it holds an earlier export.",
        epilog="example: kformer export runs/tickets --format onnx --out exports/tickets-onnx",
    )
    export.add_argument("model_dir", metavar="MODEL_DIR", help="folder written by `kformer train`")
    export.add_argument("--format", choices=FORMATS, default="saved_model",
                        help="saved_model (default; TensorFlow Serving) or onnx (ONNX Runtime)")
    export.add_argument("--out", required=True, metavar="DIR",
                        help="folder to write (must be new, empty, or an earlier export)")
    export.add_argument("--json", action="store_true", help="print metadata.json instead of a summary")
    export.set_defaults(handler=_export)


def _export(args: argparse.Namespace) -> int:
    from kformer.export import export

    result = export(args.model_dir, args.out, args.format)
    if args.json:
        print(json.dumps(result.metadata, indent=2, ensure_ascii=False))
        return 0
    print(f"exported {args.model_dir} ({result.metadata['task']}) as {result.format} to {result.folder}")
    for name, signature in result.metadata["signatures"].items():
        inputs = ", ".join(signature["inputs"])
        outputs = ", ".join(signature["outputs"])
        print(f"  {name}: {inputs} -> {outputs}")
    print(f"details: {result.folder / 'README.txt'}")
    return 0
