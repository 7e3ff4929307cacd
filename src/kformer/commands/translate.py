"""``kformer train translate``, ``kformer translate`` and the translate side of ``evaluate``/``attention``.

Argument parsing lives at the top and bottom of this module; training is the plain function
:func:`train_translator`, and using a trained model (``load_translator``, ``translate_texts``,
``score_pairs``) lives in :mod:`kformer.models.translator`, which a server can call without
argparse. Keras is imported inside functions so ``kformer --help`` stays instant.

A translate model folder holds ``kformer.json``, ``model.keras`` (a
:class:`~kformer.models.seq2seq.Seq2SeqTransformer`), the SentencePiece vocabularies
(``vocab.spm`` when shared, else ``source.spm`` and ``target.spm``) and ``metrics.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from kformer.errors import KformerError
from kformer.models.translator import (
    Translator,
    encode_sources,
    load_translator,
    save_translator,
    score_pairs,
    translate_texts,
)

TRAINING_DIR = "training"  # checkpoints and logs written while training

# Settings a recipe TOML may set (flat keys); command-line flags override them.
DEFAULTS: dict[str, Any] = {
    "vocab_size": 8000,
    "shared_vocab": True,
    "max_length": 0,  # subword tokens per side; 0 = the 99th percentile of the training pairs
    "dim": 256,
    "heads": 4,
    "ff_dim": 1024,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "dropout": 0.1,
    "positions": "learned",
    "tie_embeddings": False,
    "norm_first": False,
    "epochs": 20,
    "batch_size": 64,
    "learning_rate": 1e-3,
    "warmup_steps": 1000,
    "label_smoothing": 0.1,
    "weight_decay": 0.0,
    "patience": 3,
    "holdout": 2000,  # test pairs held out at random when --test is not given (at most 10%)
    "valid_size": 500,  # validation pairs held out of training when --valid is not given (at most 5%)
    "curriculum": False,
    "curriculum_levels": 3,
    "beam": 1,  # decoding for the test scores in metrics.json
    "seed": 0,
}
MAX_AUTO_LENGTH = 128


# --- argument parsing ----------------------------------------------------------------------------


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
    train.add_argument("--out", metavar="DIR", help="model folder to write (default: runs/<name of PAIRS>)")
    train.add_argument("--recipe", metavar="NAME|PATH", help="named recipe (en-es, en-ta) or a TOML file of settings")
    train.add_argument("--max-minutes", type=float, metavar="M", help="stop training after M minutes, keeping the best weights")
    train.add_argument("--epochs", type=int, metavar="N", help="maximum epochs (early stopping may end sooner)")
    train.add_argument("--seed", type=int, metavar="N", help="random seed for splits, shuffling and weights (default 0)")
    train.add_argument("--curriculum", action="store_true", default=None, help="train on short pairs first, adding longer ones epoch by epoch")
    train.add_argument("--shared-vocab", action=argparse.BooleanOptionalAction, default=None,
                       help="one subword vocabulary for both languages (default: on)")
    train.add_argument("--vocab-size", type=int, metavar="N", help="subword vocabulary size (per vocabulary)")
    train.add_argument("--max-length", type=int, metavar="N", help="subword tokens per sentence; longer training pairs are skipped (default: automatic)")
    train.add_argument("--batch-size", type=int, metavar="N", help="sentence pairs per training step")
    train.add_argument("--learning-rate", type=float, metavar="LR", help="peak learning rate (after warmup)")
    train.add_argument("--beam", type=int, metavar="N", help="beam width for the test scores in metrics.json (1 = greedy)")
    train.add_argument("--quiet", action="store_true", help="no progress bars")
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
    translate.set_defaults(handler=translate_command)


def resolve_settings(args: argparse.Namespace) -> dict[str, Any]:
    """DEFAULTS, then the recipe, then flags given on the command line."""
    settings = dict(DEFAULTS)
    if getattr(args, "recipe", None):
        from kformer.training import load_recipe  # imports Keras: only when a recipe is asked for

        recipe = load_recipe(args.recipe)
        unknown = sorted(set(recipe) - set(DEFAULTS))
        if unknown:
            raise KformerError(f"recipe {args.recipe}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(DEFAULTS)}")
        settings.update(recipe)
    for key in ("epochs", "seed", "curriculum", "shared_vocab", "vocab_size", "max_length", "batch_size",
                "learning_rate", "beam"):
        value = getattr(args, key, None)
        if value is not None:
            settings[key] = value
    for key in ("epochs", "batch_size", "vocab_size", "beam", "holdout", "valid_size", "dim", "heads"):
        if int(settings[key]) < 1:
            raise KformerError(f"setting {key} must be at least 1, not {settings[key]}")
    if int(settings["max_length"]) < 0 or (0 < int(settings["max_length"]) < 2):
        raise KformerError("--max-length must be at least 2 (or 0 for automatic)")
    if int(settings["dim"]) % int(settings["heads"]):
        raise KformerError(f"dim {settings['dim']} must be a multiple of heads {settings['heads']}")
    return settings


# --- plain functions: load a model folder, translate ----------------------------------------------


# --- training ------------------------------------------------------------------------------------


def _load_splits(args, settings):
    """Train / valid / test pairs; every input file is read (and rejected) before anything is written."""
    from kformer.data.pairs import random_holdout, read_pairs

    train = read_pairs(args.data)
    valid = read_pairs(args.valid) if args.valid else None
    test = read_pairs(args.test) if args.test else None
    seed = int(settings["seed"])
    if test is None:
        size = min(int(settings["holdout"]), len(train) // 10)
        if size < 1:
            raise KformerError(f"{args.data} has only {len(train)} pairs; pass --test FILE or give at least 10 pairs")
        train, test = random_holdout(train, size, seed=seed)
    if valid is None:
        size = min(int(settings["valid_size"]), len(train) // 20)
        if size < 1:
            raise KformerError(f"{args.data} has too few pairs to hold out validation pairs; pass --valid FILE")
        train, valid = random_holdout(train, size, seed=seed + 1)
    return train, valid, test


def _auto_length(lengths, requested: int) -> int:
    import numpy as np

    if requested:
        return int(requested)
    return int(min(MAX_AUTO_LENGTH, max(8, math.ceil(np.percentile(lengths, 99)))))


def _encode_pairs(source_vocab, target_vocab, pairs, max_source: int, max_target: int):
    """Subword ids of pairs that fit ``max_source`` / ``max_target`` tokens, and how many did not."""
    sources = source_vocab.encode([p.source for p in pairs])
    targets = target_vocab.encode([p.target for p in pairs])
    kept = [(s, t) for s, t in zip(sources, targets, strict=True) if 0 < len(s) <= max_source and 0 < len(t) <= max_target]
    return [s for s, _ in kept], [t for _, t in kept], len(pairs) - len(kept)


def _dataset(sources, targets, batch_size: int, seed: int, shuffle: bool, levels=None, limits=(None, None)):
    """A ``tf.data`` pipeline of length-bucketed teacher-forcing batches, reshuffled every epoch.

    Yields ``({"source": (batch, S), "target_in": (batch, T)}, target_out (batch, T))`` with
    ``target_in = [START] + target`` and ``target_out = target + [END]``. With curriculum
    ``levels`` (index arrays, short pairs first) epoch ``k`` draws from level ``k`` (the last
    level from then on), cycling through it so every epoch has the same number of batches.
    """
    import numpy as np
    import tensorflow as tf  # input pipeline only, outside the model

    from kformer.data.pairs import length_bucketed_batches, pad_batch
    from kformer.text.specials import END_ID, START_ID

    rng = np.random.default_rng(seed)
    lengths = np.array([max(len(s), len(t) + 1) for s, t in zip(sources, targets, strict=True)])
    epoch = {"n": 0}
    steps = math.ceil(len(sources) / batch_size)

    def batches():
        subset = np.arange(len(sources)) if not levels else levels[min(epoch["n"], len(levels) - 1)]
        epoch["n"] += 1
        while True:
            for batch in length_bucketed_batches(lengths[subset], batch_size, rng if shuffle else None):
                yield subset[batch]

    def generate():
        for rows in itertools.islice(batches(), steps):
            source = pad_batch([sources[i] for i in rows], limit=limits[0])
            target_in = pad_batch([[START_ID, *targets[i]] for i in rows], limit=limits[1])
            target_out = pad_batch([[*targets[i], END_ID] for i in rows], limit=limits[1])
            yield {"source": source, "target_in": target_in}, target_out

    spec = tf.TensorSpec((None, None), tf.int32)
    dataset = tf.data.Dataset.from_generator(generate, output_signature=({"source": spec, "target_in": spec}, spec))
    return dataset.apply(tf.data.experimental.assert_cardinality(steps)).prefetch(2)


def _default_out(data: str) -> Path:
    return Path("runs") / Path(data).name.split(".")[0]


def train_translator(args: argparse.Namespace) -> dict:
    """Train, score and write a translate model folder; returns the metrics written to metrics.json."""
    settings = resolve_settings(args)
    out = Path(args.out) if args.out else _default_out(args.data)
    train, valid, test = _load_splits(args, settings)  # bad input fails before anything is written

    from kformer.artifacts import MANIFEST_NAME
    from kformer.data.pairs import curriculum_levels
    from kformer.models.seq2seq import Seq2SeqTransformer, compile_seq2seq
    from kformer.text.subword import learn_vocabularies
    from kformer.training import budget_schedule, fit, set_seed

    set_seed(int(settings["seed"]))
    created = not out.exists()
    state_dir = out / TRAINING_DIR
    try:
        started = time.monotonic()
        shared = bool(settings["shared_vocab"])
        source_vocab, target_vocab = learn_vocabularies(
            [p.source for p in train], [p.target for p in train], int(settings["vocab_size"]), shared
        )
        vocab_seconds = time.monotonic() - started
        lengths_s = [len(s) for s in source_vocab.encode([p.source for p in train])]
        lengths_t = [len(t) for t in target_vocab.encode([p.target for p in train])]
        max_source = _auto_length(lengths_s, int(settings["max_length"]))
        max_target = _auto_length(lengths_t, int(settings["max_length"]))
        # the decoder reads [START] + target and writes target + [END]: one more position
        train_s, train_t, dropped = _encode_pairs(source_vocab, target_vocab, train, max_source, max_target)
        valid_s, valid_t, _ = _encode_pairs(source_vocab, target_vocab, valid, max_source, max_target)
        if not train_s or not valid_s:
            raise KformerError(f"no pair fits --max-length {max_source}; raise it")
        model = Seq2SeqTransformer(
            source_vocab.vocab_size, target_vocab.vocab_size, max_source, max_target + 1,
            dim=int(settings["dim"]), heads=int(settings["heads"]), ff_dim=int(settings["ff_dim"]),
            encoder_layers=int(settings["encoder_layers"]), decoder_layers=int(settings["decoder_layers"]),
            dropout=float(settings["dropout"]), positions=settings["positions"],
            tie_embeddings=bool(settings["tie_embeddings"]), norm_first=bool(settings["norm_first"]),
        )
        batch_size, epochs = int(settings["batch_size"]), int(settings["epochs"])
        levels = None
        if settings["curriculum"]:
            levels = curriculum_levels([max(len(s), len(t)) for s, t in zip(train_s, train_t, strict=True)],
                                       int(settings["curriculum_levels"]))
        total_steps = epochs * math.ceil(len(train_s) / batch_size)
        peak, warmup = float(settings["learning_rate"]), min(int(settings["warmup_steps"]), total_steps // 4 or 1)
        # constant rate in the optimizer; the callback warms up, then decays over the steps or the
        # time budget, whichever ends first, so a run cut by --max-minutes still ends at a low rate
        compile_seq2seq(model, peak, warmup, None, label_smoothing=float(settings["label_smoothing"]),
                        weight_decay=float(settings["weight_decay"]))
        schedule = budget_schedule(peak, warmup, total_steps, None if args.max_minutes is None else args.max_minutes * 60.0)
        limits = (max_source, max_target + 1)
        seed = int(settings["seed"])
        if state_dir.exists():
            shutil.rmtree(state_dir)  # a fresh run must not mix with an older run's checkpoints
        with warnings.catch_warnings():
            # Keras warns that its default shuffle=True is ignored; _dataset shuffles every epoch
            warnings.filterwarnings("ignore", message=".*shuffle=True.*was passed")
            result = fit(
                model,
                _dataset(train_s, train_t, batch_size, seed, shuffle=True, levels=levels, limits=limits),
                _dataset(valid_s, valid_t, max(batch_size, 64), seed, shuffle=False, limits=limits),
                epochs=epochs, out_dir=state_dir, patience=int(settings["patience"]),
                max_minutes=args.max_minutes, verbose=0 if args.quiet else "auto", callbacks=[schedule],
            )
        train_seconds = time.monotonic() - started
        # an unbuilt optimizer: the saved model carries no optimizer state
        compile_seq2seq(model, peak, 1, None)
        translator = Translator(model, source_vocab, target_vocab, {})
        test_scores, hypotheses = score_pairs(translator, test, beam=int(settings["beam"]))
        history = result.history
        metrics = {
            "test": test_scores,
            "valid_loss": min(history.get("val_loss", [float("nan")])),
            "valid_token_accuracy": max(history.get("val_accuracy", [float("nan")])),
            "train_seconds": round(train_seconds, 2),
            "vocab_seconds": round(vocab_seconds, 2),
            "epochs_run": result.epochs_run,
            "steps": schedule.steps,
            "best_epoch": None if result.best_epoch is None else result.best_epoch + 1,
            "stopped_by_time_budget": result.stopped_by_budget,
            "splits": {"train": len(train), "train_used": len(train_s), "skipped_too_long": dropped,
                       "valid": len(valid), "test": len(test)},
            "lengths": {"max_source": max_source, "max_target": max_target},
            "vocab": {"shared": shared, "source_size": source_vocab.vocab_size, "target_size": target_vocab.vocab_size},
            "parameters": int(model.count_params()),
            "command": ["kformer", *sys.argv[1:]],
            "recipe": settings,
        }
        save_translator(translator, out, settings, metrics,
                        extra_files={"test_translations.json": _examples(test, hypotheses)})
    except BaseException:
        if created and not (out / MANIFEST_NAME).exists():
            shutil.rmtree(out, ignore_errors=True)  # leave no half-made folder
        raise
    return metrics


def _examples(pairs, hypotheses) -> list[dict]:
    return [{"source": p.source, "reference": p.target, "translation": h} for p, h in zip(pairs, hypotheses, strict=True)]


def train_command(args: argparse.Namespace) -> int:
    metrics = train_translator(args)
    test = metrics["test"]
    budget = " (stopped by --max-minutes)" if metrics["stopped_by_time_budget"] else ""
    out = args.out or str(_default_out(args.data))
    print(
        f"test BLEU {test['bleu']:.2f}, chrF {test['chrf']:.2f}, exact match {test['exact_match']:.3f} "
        f"on {test['n']} pairs; trained {metrics['train_seconds']:.0f} s{budget}; model written to {out}"
    )
    return 0


# --- translate / evaluate / attention ------------------------------------------------------------


def _check_decoding_args(args: argparse.Namespace) -> None:
    """Reject bad --beam / --batch-size before the model is loaded."""
    if args.beam < 1:
        raise KformerError(f"--beam must be at least 1, not {args.beam}")
    if args.batch_size < 1:
        raise KformerError(f"--batch-size must be at least 1, not {args.batch_size}")


def translate_command(args: argparse.Namespace) -> int:
    from kformer.artifacts import read_manifest

    manifest = read_manifest(args.model_dir)
    if manifest["task"] != "translate":
        raise KformerError(f"{args.model_dir} holds a '{manifest['task']}' model; `kformer translate` needs a translation model")
    _check_decoding_args(args)
    if args.texts:
        texts = list(args.texts)
    elif sys.stdin is None or sys.stdin.isatty():
        raise KformerError("no text: pass TEXT arguments or pipe lines on stdin")
    else:
        texts = [line.rstrip("\r\n") for line in sys.stdin]
    translator = load_translator(args.model_dir)
    for line in translate_texts(translator, texts, beam=args.beam, batch_size=args.batch_size):
        print(line)
    return 0


def evaluate(args: argparse.Namespace, manifest: dict) -> int:
    """BLEU, chrF and exact match of the model's translations of ``--data`` pairs."""
    from kformer.data.pairs import read_pairs

    _check_decoding_args(args)
    pairs = read_pairs(args.data)
    if args.limit:
        pairs = pairs[: args.limit]

    from kformer.artifacts import staged_folder, write_json_atomic

    translator = load_translator(args.model_dir)
    scores, hypotheses = score_pairs(translator, pairs, beam=args.beam, batch_size=args.batch_size)
    out = Path(args.out) if args.out else Path(args.model_dir) / "eval"
    with staged_folder(out) as stage:
        write_json_atomic(stage / "scores.json", scores)
        write_json_atomic(stage / "translations.json", _examples(pairs, hypotheses))
    if args.json:
        print(json.dumps(scores))
    else:
        print(f"BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}  exact match {scores['exact_match']:.3f}  "
              f"n {scores['n']}  ({'greedy' if args.beam == 1 else f'beam {args.beam}'})")
        print(f"translations: {out / 'translations.json'}")
    return 0


def attention(args: argparse.Namespace, manifest: dict) -> int:
    """Translate ``args.input`` greedily and draw encoder, decoder-self and cross attention PNGs."""
    import numpy as np

    from kformer.artifacts import staged_folder
    from kformer.models.generation import greedy_decode, strip_special
    from kformer.text.specials import START, START_ID
    from kformer.viz import plot_attention

    if not args.input.strip():
        raise KformerError("give a non-empty sentence to look at")
    translator = load_translator(args.model_dir)
    source = np.array(encode_sources(translator, [args.input]), dtype="int32")
    # room for START in front: target_in may be at most max_target_length long
    output = strip_special(greedy_decode(translator.model, source, translator.max_target_length - 1)[0])
    target_in = np.array([[START_ID, *output]], dtype="int32")
    maps = {name: stack[0] for name, stack in translator.model.attention_maps(source, target_in).items()}
    source_pieces = translator.source_vocab.pieces(source[0])
    target_pieces = [START, *translator.target_vocab.pieces(output)]
    rows = {"encoder": source_pieces, "decoder_self": target_pieces, "cross": target_pieces}
    cols = {"encoder": source_pieces, "decoder_self": target_pieces, "cross": source_pieces}
    out = Path(args.out) if args.out else Path(args.model_dir) / "attention"
    with staged_folder(out) as stage:
        written = plot_attention(maps, rows, cols, stage)
    print(f"translation: {translator.target_vocab.decode([output])[0]}")
    print(f"wrote {len(written)} PNGs to {out}")
    return 0
