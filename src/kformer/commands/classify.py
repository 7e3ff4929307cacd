"""``kformer train classify``, ``kformer predict`` and the classify side of ``evaluate``/``attention``.

Argument parsing lives here; the work is done by plain functions (:func:`train_classifier`,
:func:`kformer.models.classifier.load_classifier`, :func:`~kformer.models.classifier.predict_texts`)
that do not need argparse. Keras is imported inside functions so ``kformer --help`` stays instant.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any

from kformer.errors import KformerError

# Settings a recipe TOML may set (flat keys); command-line flags override them.
DEFAULTS: dict[str, Any] = {
    "backbone": "scratch",  # scratch | bert-scratch | minilm | a preset folder
    "tokenizer": "word",  # word | wordpiece (scratch backbones only)
    "truncation": "head",  # head | tail | head_tail (word tokenizer): which part of a long text to keep
    "ngrams": 1,  # 2: the word vocabulary also holds word bigrams, appended after the words (fastText-style)
    "vocab_size": 8000,
    "max_length": 128,
    "epochs": 10,
    "batch_size": 32,
    "learning_rate": None,  # None: 1e-3 from scratch, 5e-5 for pretrained backbones
    "warmup": 0.1,  # fraction of all steps spent warming up
    "decay": "cosine",  # cosine | linear | none (constant rate, no warmup)
    "weight_decay": 0.01,
    "label_smoothing": 0.0,
    "class_weights": False,
    "patience": 2,
    "valid_fraction": 0.1,
    "seed": 0,
    "dim": 64,
    "heads": 2,
    "ff_dim": 128,
    "blocks": 1,
    "dropout": 0.1,
    "positions": "learned",
    "window": 0,  # > 0: local self-attention within windows of this many tokens (long documents)
}
SCRATCH_BACKBONES = ("scratch", "bert-scratch")
TRAINING_DIR = "training"  # checkpoints, logs and the vocabulary needed to --resume


# --- argument parsing ----------------------------------------------------------------------------


def register(commands, train_tasks) -> None:
    """Add ``train classify`` and ``predict`` to the CLI."""
    train = train_tasks.add_parser(
        "classify",
        help="train a text classifier from a labelled file",
        description="Train a text classifier (kformer's encoder, a small BERT, or pretrained MiniLM) "
        "on CSV/TSV/JSONL (optionally .gz) or a folder of label folders (pos/, neg/ of .txt files). "
        "Settings come from --recipe, then the flags below.",
    )
    train.add_argument("--data", required=True, metavar="TRAIN", help="labelled training file or folder")
    train.add_argument("--valid", metavar="FILE", help="validation file (default: a stratified hold-out of TRAIN)")
    train.add_argument("--test", metavar="FILE", help="test file, scored once after training and written to metrics.json")
    train.add_argument("--text-column", default="text", help="column holding the text (default: text)")
    train.add_argument("--label-column", default="label", help="column holding the label (default: label)")
    train.add_argument("--recipe", metavar="NAME|PATH", help="named recipe (imdb, banking77, tickets) or a TOML file")
    train.add_argument("--backbone", help="scratch (kformer encoder, default), bert-scratch, minilm, or a KerasHub/Hugging Face BERT folder")
    train.add_argument("--epochs", type=int, metavar="N", help="maximum epochs (early stopping may end sooner)")
    train.add_argument("--max-length", type=int, metavar="N", help="tokens per text; longer texts are truncated")
    train.add_argument("--batch-size", type=int, metavar="N", help="texts per training step")
    train.add_argument("--learning-rate", type=float, metavar="LR", help="peak learning rate (after warmup)")
    train.add_argument("--label-smoothing", type=float, metavar="EPS", help="label smoothing (0 = off)")
    train.add_argument("--class-weights", action="store_true", default=None, help="weight classes inversely to their frequency")
    train.add_argument("--vocab-size", type=int, metavar="N", help="vocabulary size learned from the training text")
    train.add_argument("--patience", type=int, metavar="N", help="epochs without validation improvement before stopping")
    train.add_argument("--out", metavar="DIR", help="model folder to write (default: runs/<name of TRAIN>)")
    train.add_argument("--seed", type=int, metavar="N", help="random seed (default 0)")
    train.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --out")
    train.add_argument("--max-minutes", type=float, metavar="M", help="stop training after M minutes, keeping the best weights")
    train.add_argument("--quiet", action="store_true", help="no progress bars")
    train.set_defaults(handler=train_command)

    predict = commands.add_parser(
        "predict",
        help="label texts with a trained classifier",
        description="Print label, probability and top-k for each text (arguments, --data FILE, or "
        "lines on stdin) as JSONL or CSV. With --threshold, low-confidence texts get --unknown-label.",
    )
    predict.add_argument("model_dir", metavar="MODEL_DIR", help="folder written by `kformer train classify`")
    predict.add_argument("texts", nargs="*", metavar="TEXT", help="texts to classify (default: --data or stdin lines)")
    predict.add_argument("--data", metavar="FILE", help="file of texts: .csv/.tsv/.jsonl (text column) or .txt (one per line)")
    predict.add_argument("--text-column", default=None, help="text column of --data (default: the model's)")
    predict.add_argument("--format", choices=("jsonl", "csv"), default="jsonl", help="output format (default jsonl)")
    predict.add_argument("--top-k", type=int, default=1, metavar="K", help="also list the K most likely labels")
    predict.add_argument("--threshold", type=float, metavar="P", help="below this probability, answer --unknown-label")
    predict.add_argument("--unknown-label", default="unknown", metavar="NAME", help="label for low-confidence texts (default: unknown)")
    predict.add_argument("--batch-size", type=int, default=64, metavar="N", help="texts per prediction batch")
    predict.set_defaults(handler=predict_command)


def resolve_settings(args: argparse.Namespace) -> dict[str, Any]:
    """DEFAULTS, then the recipe, then flags given on the command line."""
    settings = dict(DEFAULTS)
    if args.recipe:
        from kformer.training import load_recipe

        recipe = load_recipe(args.recipe)
        unknown = sorted(set(recipe) - set(DEFAULTS))
        if unknown:
            raise KformerError(f"recipe {args.recipe}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(DEFAULTS)}")
        settings.update(recipe)
    for key in ("backbone", "epochs", "max_length", "batch_size", "learning_rate", "label_smoothing",
                "class_weights", "vocab_size", "patience", "seed"):
        value = getattr(args, key, None)
        if value is not None:
            settings[key] = value
    numbers = {"vocab_size": int, "max_length": int, "epochs": int, "batch_size": int, "patience": int, "seed": int,
               "dim": int, "heads": int, "ff_dim": int, "blocks": int, "warmup": float, "weight_decay": float,
               "label_smoothing": float, "valid_fraction": float, "dropout": float,
               "ngrams": int, "window": int}
    for key, kind in numbers.items():
        try:
            settings[key] = kind(settings[key])
        except (TypeError, ValueError):
            raise KformerError(f"setting {key} = {settings[key]!r} is not a number") from None
    for key in ("epochs", "max_length", "batch_size", "vocab_size"):
        if settings[key] < 1:
            raise KformerError(f"--{key.replace('_', '-')} must be at least 1")
    choices = {"tokenizer": ("word", "wordpiece"), "truncation": ("head", "tail", "head_tail"),
               "decay": ("cosine", "linear", "none"), "positions": ("learned", "sinusoidal")}
    for key, allowed in choices.items():
        if settings[key] not in allowed:
            raise KformerError(f"setting {key} = {settings[key]!r} is not one of {', '.join(allowed)}")
    if settings["ngrams"] not in (1, 2) or (settings["ngrams"] == 2 and settings["tokenizer"] != "word"):
        raise KformerError(f"setting ngrams = {settings['ngrams']!r}: use 1, or 2 with tokenizer = \"word\"")
    if settings["window"] < 0:
        raise KformerError(f"setting window = {settings['window']} must be 0 (full attention) or a window length")
    if settings["backbone"] not in SCRATCH_BACKBONES:
        from kformer.models.pretrained import backbone_source

        backbone_source(str(settings["backbone"]))  # a missing package or folder fails before any writing
    if settings["learning_rate"] is None:
        settings["learning_rate"] = 1e-3 if settings["backbone"] in SCRATCH_BACKBONES else 5e-5
    return settings


# --- training ------------------------------------------------------------------------------------


def _read_files(args):
    """Train/valid/test data as given (no Keras import, so bad input fails fast)."""
    from kformer.data.readers import read_labelled
    from kformer.data.splits import check_label_counts

    train = read_labelled(args.data, args.text_column, args.label_column)
    valid = read_labelled(args.valid, args.text_column, args.label_column) if args.valid else None
    if len(set(train.labels)) < 2:
        raise KformerError(f"{args.data} has a single label '{train.labels[0]}'; a classifier needs at least two")
    if valid is None:
        check_label_counts(train.labels, 2, "a stratified hold-out needs")
    test = read_labelled(args.test, args.text_column, args.label_column) if args.test else None
    return train, valid, test


def _load_splits(args, files, settings):
    from kformer.data.splits import stratified_split

    train, valid, test = files
    if valid is None:
        keep, held = stratified_split(train.labels, settings["valid_fraction"], settings["seed"])
        valid = type(train)([train.texts[i] for i in held], [train.labels[i] for i in held], f"{train.source} (hold-out)")
        train = type(train)([train.texts[i] for i in keep], [train.labels[i] for i in keep], train.source, train.dropped)
    labels = sorted(set(train.labels))
    unseen = sorted(set(valid.labels) - set(labels))
    if unseen:
        raise KformerError(f"validation label(s) {', '.join(repr(u) for u in unseen[:5])} never occur in the training data; fix --valid")
    return train, valid, test, labels


def _one_hot(labels, index):
    import numpy as np

    y = np.zeros((len(labels), len(index)), dtype="float32")
    y[np.arange(len(labels)), [index[label] for label in labels]] = 1.0
    return y


def _prepare_training_dir(out: Path, resume: bool) -> Path:
    state_dir = out / TRAINING_DIR
    if resume:
        if not (state_dir / "state.json").is_file():
            raise KformerError(f"nothing to resume in {out}: no {TRAINING_DIR}/state.json; train without --resume first")
    elif state_dir.exists():
        shutil.rmtree(state_dir)  # a fresh run must not mix with an older one's checkpoints
    state_dir.mkdir(parents=True, exist_ok=True)
    return state_dir


def _build(settings, labels, train_texts, state_dir: Path, resume: bool):
    """The (uncompiled) model, its vocabulary (None for pretrained backbones) and its kind."""
    from kformer.artifacts import write_json_atomic
    from kformer.models.classifier import build_encoder_classifier
    from kformer.models.pretrained import build_bert_classifier
    from kformer.text.vocabulary import (
        RESERVED_TOKENS,
        learn_vocabulary,
        load_vocabulary,
        save_vocabulary,
    )
    from kformer.text.words import bigram_vocabulary

    backbone = settings["backbone"]
    vocabulary = None
    if backbone in SCRATCH_BACKBONES:
        vocab_path = state_dir / "vocab.txt"
        if resume:
            vocabulary = load_vocabulary(vocab_path)
        elif settings["ngrams"] == 2:
            vocabulary = bigram_vocabulary(train_texts, int(settings["vocab_size"]), RESERVED_TOKENS)
        else:
            vocabulary = learn_vocabulary(train_texts, int(settings["vocab_size"]), settings["tokenizer"])
            save_vocabulary(vocabulary, vocab_path)
    if not resume:
        write_json_atomic(state_dir / "state.json", {"labels": labels, "settings": settings})
    if backbone == "scratch":
        model = build_encoder_classifier(
            len(vocabulary), len(labels), int(settings["max_length"]), dim=int(settings["dim"]),
            heads=int(settings["heads"]), ff_dim=int(settings["ff_dim"]), blocks=int(settings["blocks"]),
            dropout=float(settings["dropout"]), positions=settings["positions"], window=int(settings["window"]),
        )
        kind = "encoder"
    else:
        model = build_bert_classifier(
            backbone, len(labels), int(settings["max_length"]), vocabulary=vocabulary, layers=int(settings["blocks"]),
            heads=int(settings["heads"]), dim=int(settings["dim"]), ff_dim=int(settings["ff_dim"]),
            dropout=float(settings["dropout"]),
        )
        kind = "bert"
    return model, vocabulary, kind


def _compile(model, settings, steps_per_epoch: int) -> None:
    import keras

    from kformer.training import WarmupDecay

    total = max(1, steps_per_epoch * int(settings["epochs"]))
    if settings["decay"] == "none":  # a constant rate, as in the reference lesson
        schedule = float(settings["learning_rate"])
    else:
        schedule = WarmupDecay(float(settings["learning_rate"]), int(total * float(settings["warmup"])), total, settings["decay"])
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=float(settings["weight_decay"]), clipnorm=1.0),
        loss=keras.losses.CategoricalCrossentropy(label_smoothing=float(settings["label_smoothing"])),
        metrics=["accuracy"],
    )


def _strip_optimizer(model) -> None:
    """Recompile with an unbuilt optimizer so the saved model carries no optimizer state."""
    import keras

    model.compile(optimizer=keras.optimizers.SGD(), loss=keras.losses.CategoricalCrossentropy(), metrics=["accuracy"])


def _read_history(path: Path) -> dict[str, list[float]]:
    history: dict[str, list[float]] = {}
    if not path.is_file():
        return history
    with open(path, encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            for key, value in row.items():
                if key != "epoch" and value not in (None, ""):
                    history.setdefault(key, []).append(float(value))
    return history


def _score(classifier, data, batch_size: int) -> dict:
    from kformer.metrics import classification_scores

    probs = classifier.probabilities(data.texts, batch_size=batch_size)
    predicted = [classifier.labels[i] for i in probs.argmax(axis=1)]
    labels = classifier.labels + sorted(set(data.labels) - set(classifier.labels))
    return classification_scores(data.labels, predicted, labels=labels)


def _summary(scores: dict) -> dict:
    return {"accuracy": scores["accuracy"], "macro_f1": scores["macro_f1"], "n": scores["n"]}


def train_classifier(args: argparse.Namespace) -> dict:
    """Train, score and write a classify model folder; returns the metrics written to metrics.json."""
    files = _read_files(args)  # bad input fails before anything is written
    settings = resolve_settings(args)
    out = Path(args.out) if args.out else Path("runs") / Path(args.data).name.split(".")[0]
    train, valid, test, labels = _load_splits(args, files, settings)

    import numpy as np

    from kformer.artifacts import MANIFEST_NAME, save_keras_atomic, staged_folder, write_json_atomic
    from kformer.models.classifier import MODEL_FILE, Classifier
    from kformer.text.vocabulary import (
        VOCAB_FILE,
        clean_text,
        encode,
        make_tokenizer,
        save_vocabulary,
    )
    from kformer.training import BucketedBatches, fit, set_seed
    from kformer.viz import plot_confusion_matrix, plot_training_curves

    set_seed(int(settings["seed"]))
    created = not out.exists()
    state_dir = _prepare_training_dir(out, args.resume)
    try:
        if args.resume:
            saved = json.loads((state_dir / "state.json").read_text(encoding="utf-8"))
            if saved["labels"] != labels:
                raise KformerError(f"--resume: the labels in {args.data} differ from the checkpoint's; use the same data or a new --out")
            settings = {**saved["settings"], "epochs": settings["epochs"]}
        model, vocabulary, kind = _build(settings, labels, train.texts, state_dir, args.resume)
        index = {label: i for i, label in enumerate(labels)}
        y_train, y_valid = _one_hot(train.labels, index), _one_hot(valid.labels, index)
        tokenizer = None
        if kind == "encoder":
            tokenizer = make_tokenizer(vocabulary, int(settings["max_length"]), settings["tokenizer"], settings["truncation"])
        if kind == "encoder":
            x_train = encode(tokenizer, train.texts, progress=not args.quiet)
            x_valid = encode(tokenizer, valid.texts)
        else:
            limit = int(settings["max_length"]) * 16
            x_train = np.array([clean_text(t, limit) for t in train.texts])
            x_valid = np.array([clean_text(t, limit) for t in valid.texts])
        batch_size = int(settings["batch_size"])
        _compile(model, settings, math.ceil(len(train) / batch_size))
        class_weight = None
        if settings["class_weights"]:
            from sklearn.utils.class_weight import compute_class_weight

            weights = compute_class_weight("balanced", classes=np.array(labels), y=np.array(train.labels))
            class_weight = {i: float(w) for i, w in enumerate(weights)}
        if kind == "encoder":  # batches of similar length, cut to their longest text
            weights = None if class_weight is None else np.array([class_weight[index[lb]] for lb in train.labels], "float32")
            train_data = BucketedBatches(x_train, y_train, batch_size, shuffle=True, seed=int(settings["seed"]),
                                         sample_weight=weights).dataset()
            valid_data = BucketedBatches(x_valid, y_valid, max(batch_size, 64), shuffle=False).dataset()
        else:  # tokenized once, then length-bucketed like the encoder path (short texts, short batches)
            from kformer.models.pretrained import bert_inputs, bert_token_ids

            weights = None if class_weight is None else np.array([class_weight[index[lb]] for lb in train.labels], "float32")
            train_data = BucketedBatches(bert_token_ids(model, x_train), y_train, batch_size, shuffle=True,
                                         seed=int(settings["seed"]), sample_weight=weights).dataset().map(bert_inputs)
            valid_data = BucketedBatches(bert_token_ids(model, x_valid), y_valid, max(batch_size, 64),
                                         shuffle=False).dataset().map(bert_inputs)
        class_weight = None
        preprocessor = getattr(model, "preprocessor", None)
        if kind == "bert":
            model.preprocessor = None  # batches are already token ids; the saved model keeps its preprocessor
        try:
            result = fit(
                model, train_data, valid_data, epochs=int(settings["epochs"]), out_dir=state_dir,
                patience=int(settings["patience"]), max_minutes=args.max_minutes, resume=args.resume,
                verbose=0 if args.quiet else "auto", batch_size=batch_size, class_weight=class_weight,
            )
        finally:
            if kind == "bert":
                model.preprocessor = preprocessor
        _strip_optimizer(model)
        classifier = Classifier(model=model, labels=labels, kind=kind, tokenizer=tokenizer)
        valid_scores = _score(classifier, valid, batch_size=max(batch_size, 64))
        test_scores = _score(classifier, test, batch_size=max(batch_size, 64)) if test is not None else None
        metrics = {
            "valid": _summary(valid_scores),
            "test": _summary(test_scores) if test_scores else None,
            "train_seconds": round(result.seconds, 2),
            "epochs_run": result.initial_epoch + result.epochs_run,
            "best_epoch": None if result.best_epoch is None else result.best_epoch + 1,
            "stopped_by_time_budget": result.stopped_by_budget,
            "splits": {"train": len(train), "valid": len(valid), "test": len(test) if test else 0,
                       "dropped_empty": train.dropped},
            "command": ["kformer", *sys.argv[1:]],
            "recipe": settings,
        }
        manifest = {
            "task": "classify",
            "kind": kind,
            "backbone": settings["backbone"],
            "model_file": MODEL_FILE,
            "vocab_file": VOCAB_FILE if vocabulary else None,
            "labels": labels,
            "max_length": int(settings["max_length"]),
            "tokenizer": settings["tokenizer"],
            "truncation": settings["truncation"],
            "text_column": args.text_column,
            "label_column": args.label_column,
            "recipe": settings,
            "metrics": metrics,
        }
        with staged_folder(out) as stage:
            save_keras_atomic(model, stage / MODEL_FILE)
            if vocabulary:
                save_vocabulary(vocabulary, stage / VOCAB_FILE)
            plot_training_curves(_read_history(state_dir / "history.csv"), stage / "curves.png")
            plot_confusion_matrix(valid_scores["confusion"], valid_scores["labels"], stage / "confusion_valid.png")
            write_json_atomic(stage / "metrics.json", metrics)
            write_json_atomic(stage / MANIFEST_NAME, manifest)
    except BaseException:
        if created and not (out / MANIFEST_NAME).exists() and not (state_dir / "checkpoint.json").exists():
            shutil.rmtree(out, ignore_errors=True)  # nothing worth keeping: leave no half-made folder
        raise
    return metrics


def train_command(args: argparse.Namespace) -> int:
    metrics = train_classifier(args)
    line = f"valid accuracy {metrics['valid']['accuracy']:.4f}, macro-F1 {metrics['valid']['macro_f1']:.4f}"
    if metrics["test"]:
        line += f"; test accuracy {metrics['test']['accuracy']:.4f}, macro-F1 {metrics['test']['macro_f1']:.4f}"
    budget = " (stopped by --max-minutes)" if metrics["stopped_by_time_budget"] else ""
    out = args.out or str(Path("runs") / Path(args.data).name.split(".")[0])
    print(f"{line}; trained {metrics['train_seconds']:.0f} s{budget}; model written to {out}")
    return 0


# --- prediction ----------------------------------------------------------------------------------


def _texts_for_predict(args, manifest) -> list[str]:
    from kformer.data.readers import read_unlabelled

    if args.texts and args.data:
        raise KformerError("give texts as arguments or --data FILE, not both")
    if args.data:
        return read_unlabelled(args.data, args.text_column or manifest.get("text_column") or "text")
    if args.texts:
        return list(args.texts)
    if sys.stdin is None or sys.stdin.isatty():
        raise KformerError("no texts: pass TEXT arguments, --data FILE, or pipe lines on stdin")
    return [line.rstrip("\r\n") for line in sys.stdin]


def predict_command(args: argparse.Namespace) -> int:
    from kformer.artifacts import read_manifest

    manifest = read_manifest(args.model_dir)
    if manifest["task"] != "classify":
        raise KformerError(f"{args.model_dir} holds a '{manifest['task']}' model; `kformer predict` is for classifiers")
    texts = _texts_for_predict(args, manifest)
    if not texts:
        raise KformerError("no texts to classify")

    from kformer.models.classifier import load_classifier, predict_texts

    classifier = load_classifier(args.model_dir)
    results = predict_texts(classifier, texts, top_k=args.top_k, threshold=args.threshold,
                            unknown_label=args.unknown_label, batch_size=args.batch_size, progress=len(texts) > 256)
    out = sys.stdout
    if args.format == "jsonl":
        for text, result in zip(texts, results, strict=True):
            out.write(json.dumps({"text": text, **result}, ensure_ascii=False) + "\n")
    else:
        writer = csv.writer(out)
        writer.writerow(["text", "label", "probability", "unknown", "top_k"])
        for text, result in zip(texts, results, strict=True):
            top = ";".join(f"{t['label']}:{t['probability']:.4f}" for t in result["top_k"])
            writer.writerow([text, result["label"], f"{result['probability']:.6f}", result["unknown"], top])
    return 0


# --- evaluate / attention (called by cli.py for classify folders) --------------------------------


def evaluate(args: argparse.Namespace, manifest: dict) -> int:
    """Accuracy, macro-F1, per-class report and a confusion-matrix PNG for ``--data``."""
    from kformer.data.readers import read_labelled

    data = read_labelled(
        args.data,
        args.text_column or manifest.get("text_column") or "text",
        args.label_column or manifest.get("label_column") or "label",
    )
    if args.limit:
        data = type(data)(data.texts[: args.limit], data.labels[: args.limit], data.source)

    from kformer.artifacts import staged_folder, write_json_atomic
    from kformer.metrics import format_classification_report
    from kformer.models.classifier import load_classifier
    from kformer.viz import plot_confusion_matrix

    classifier = load_classifier(args.model_dir)
    scores = _score(classifier, data, args.batch_size)
    out = Path(args.out) if args.out else Path(args.model_dir) / "eval"
    with staged_folder(out) as stage:
        plot_confusion_matrix(scores["confusion"], scores["labels"], stage / "confusion.png")
        write_json_atomic(stage / "report.json", scores)
    unseen = sorted(set(data.labels) - set(classifier.labels))
    if args.json:
        print(json.dumps({**scores, "confusion_png": str(out / "confusion.png"), "unseen_labels": unseen}, ensure_ascii=False))
    else:
        print(format_classification_report(scores))
        if unseen:
            print(f"labels the model never saw (always wrong): {', '.join(unseen)}")
        print(f"confusion matrix: {out / 'confusion.png'}")
    return 0


def attention(args: argparse.Namespace, manifest: dict) -> int:
    """Encoder self-attention maps of a kformer encoder classifier for one text, as PNGs."""
    import numpy as np

    from kformer.models.classifier import encoder_attention_maps, load_classifier

    if manifest.get("kind", "encoder") != "encoder":
        raise KformerError("attention maps are drawn for kformer's own encoder classifiers (--backbone scratch)")
    from kformer.artifacts import staged_folder
    from kformer.viz import plot_attention

    classifier = load_classifier(args.model_dir)
    ids = classifier.features([args.input])
    length = max(int((ids[0] != 0).sum()), 1)
    ids = ids[:, :length]
    vocabulary = classifier.tokenizer.get_vocabulary()
    tokens = [vocabulary[i] for i in ids[0]]
    stack = np.stack([m[0] for m in encoder_attention_maps(classifier.model, ids)])  # (layers, heads, L, L)
    out = Path(args.out) if args.out else Path(args.model_dir) / "attention"
    with staged_folder(out) as stage:
        written = plot_attention({"encoder": stack}, tokens, tokens, stage)
    for path in written:
        print(out / Path(path).name)
    return 0
