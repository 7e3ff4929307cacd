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
    user_command,
    worker_line,
)
from kformer.cli.settings_flags import add_train_flags, config_from_args
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
    train.add_argument("--data", required=True, metavar="PAIRS.tsv", help="training pairs, source<TAB>target per line; "
                       "several corpora as A.tsv,B.tsv (comma-separated), a folder (every *.tsv/*.txt, .gz fine, under it, "
                       "but *.meta.tsv and original/ folders), or a corpora.toml/.csv manifest giving each corpus's "
                       "path, name, weight and tag (docs/translation.md, \"Several corpora\")")
    train.add_argument("--valid", metavar="FILE", help="validation pairs for early stopping (default: up to --valid-size "
                       "pairs held out of the training pairs by source sentence, as --test's)")
    train.add_argument("--test", metavar="FILE", help="test pairs scored after training (default: up to --holdout pairs held "
                       "out by source sentence: one pair of each held-out source, and every other pair of it left out of "
                       "training)")
    add_train_flags(train, TranslateConfig, out_help="model folder to write (default: runs/<name of PAIRS>)")
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
    translate.add_argument("--domain", metavar="TAG", help="a model trained with --corpus-tags: translate as the "
                           "corpus of this tag does (default: neutral)")
    add_retrieval_switch(translate)
    translate.set_defaults(handler=translate_command)
    _register_retrieval(commands)


def add_retrieval_switch(parser) -> None:
    """``--retrieval on|off``: decode with the folder's kNN-MT datastore (when it has one) or without."""
    parser.add_argument("--retrieval", choices=("on", "off"), default="on",
                        help="translation models: decode with the folder's retrieval datastore (kNN-MT; when it has "
                        "one) or without it, to compare on the same model (default on)")


def _register_retrieval(commands) -> None:
    retrieval = commands.add_parser(
        "retrieval", help="add or remove a translator's retrieval datastore (kNN-MT)",
        description="kNN-MT (Khandelwal et al. 2021) for a trained translator, no retraining: `build` stores the "
        "decoder state at every target token of the training pairs in MODEL_DIR/retrieval and chooses the mixing "
        "weights (lambda, temperature, k) by greedy chrF on the validation pairs; `remove` takes it out.")
    actions = retrieval.add_subparsers(dest="action", metavar="ACTION", required=True)
    build = actions.add_parser("build", help="build the datastore and tune it on the validation pairs",
                               description="Build MODEL_DIR's datastore from its training pairs (by default the "
                               "--data/--valid/--test files its `kformer train` command recorded, split as training "
                               "split them) and choose its weights on the validation pairs; the test pairs are never read.")
    build.add_argument("model_dir", metavar="MODEL_DIR", help="folder written by `kformer train translate`")
    build.add_argument("--data", metavar="PAIRS.tsv", help="the training pairs (default: the ones the folder's training "
                       "command names)")
    build.add_argument("--valid", metavar="FILE", help="validation pairs (default: as training chose them)")
    build.add_argument("--test", metavar="FILE", help="the test pairs training was given, so they are left out of --data "
                       "as training left them (never scored)")
    build.add_argument("--limit", type=int, default=150, metavar="N", help="validation pairs the weights are chosen on")
    build.add_argument("--lambda", dest="lam", type=float, default=None, metavar="X",
                       help="skip tuning: use this weight of the neighbours (0..1) with --temperature and --k")
    build.add_argument("--temperature", type=float, default=None, metavar="T", help="with --lambda: the softmax "
                       "temperature on squared L2 distances (default: the typical distance to the k-th neighbour)")
    build.add_argument("--k", type=int, default=None, metavar="N", help="with --lambda: neighbours per step (default 8)")
    build.add_argument("--search", choices=("auto", "exact", "ivf"), default="auto",
                       help="how decoding finds the neighbours: exact (every key), ivf (an inverted-file index: "
                       "the nearest lists' keys only) or auto (ivf for a large datastore; default)")
    build.add_argument("--nprobe", type=int, default=None, metavar="N", help="with ivf: lists searched per step "
                       "(default: the fewest whose neighbours agree with an exact search's, measured when building)")
    build.add_argument("--quiet", action="store_true", help="no line per tuning step")
    build.set_defaults(handler=retrieval_build_command)
    remove = actions.add_parser("remove", help="take the datastore out of a model folder",
                                description="Delete MODEL_DIR/retrieval and its entry in kformer.json (e.g. to decode or "
                                "export the network alone).")
    remove.add_argument("model_dir", metavar="MODEL_DIR", help="folder written by `kformer train translate`")
    remove.set_defaults(handler=retrieval_remove_command)


def retrieval_build_command(args: argparse.Namespace) -> int:
    from kformer.tasks import translate

    progress = None if args.quiet else print
    translator = translate.build_retrieval(args.model_dir, data=args.data, valid=args.valid, test=args.test,
                                           limit=args.limit, lam=args.lam, temperature=args.temperature, k=args.k,
                                           search=args.search, nprobe=args.nprobe, progress=progress)
    store, tuning = translator.retrieval, translator.retrieval.tuning
    size = (store.keys.nbytes + store.values.nbytes) / 1e6
    print(f"retrieval: {store.entries} entries ({size:.1f} MB) built in {tuning.get('build_seconds', 0):.1f} s; "
          f"lambda {store.lam}, temperature {store.temperature:.4g}, k {store.k}")
    if store.index is not None:
        recall = store.index.recall.get(store.nprobe)
        print(f"search: ivf, {store.index.lists} lists of at most {store.index.capacity} entries, nprobe "
              f"{store.nprobe}" + ("" if recall is None else f" (recall@{store.index.recall_k} {recall:.3f} on the "
                                                             f"datastore's own keys)"))
    if "chrf_without" in tuning:
        print(f"validation chrF {tuning['chrf_with']:.2f} with retrieval, {tuning['chrf_without']:.2f} without "
              f"({tuning['valid_pairs']} pairs, greedy; tuning {tuning['seconds']:.0f} s)")
    print(f"written to {args.model_dir}")
    return 0


def retrieval_remove_command(args: argparse.Namespace) -> int:
    from kformer.tasks import translate

    translate.remove_retrieval(args.model_dir)
    print(f"retrieval removed from {args.model_dir}")
    return 0


def default_out(data: str) -> Path:
    """``runs/<name of the (first) pairs file or folder without extensions>``."""
    return Path("runs") / Path(data.split(",")[0].strip().rstrip("/\\")).name.split(".")[0]


def train_command(args: argparse.Namespace) -> int:
    from kformer.tasks import translate

    distribute = distribute_config(args)
    progress = job_progress(args, distribute)
    config = config_from_args(args, TranslateConfig, "translate", progress)
    out = Path(args.out) if args.out else default_out(args.data)
    result = translate.train(config, args.data, out, valid=args.valid, test=args.test, resume=args.resume,
                             progress=progress, command=user_command(sys.argv[1:]), distribute=distribute)
    if result.folder != out:
        print(worker_line(distribute, result.folder))
        return 0
    metrics, test = result.metrics, result.metrics["test"]
    budget = " (stopped by --max-minutes)" if metrics["stopped_by_time_budget"] else ""
    scored = (f"{test['n']} of {test['held_out']} pairs (--max-minutes left no time for the rest)"
              if test.get("cut_by_budget") else f"{test['n']} pairs")
    print(
        f"test BLEU {test['bleu']:.2f}, chrF {test['chrf']:.2f}, exact match {test['exact_match']:.3f}, "
        f"repetition {test['repetition']:.1%} on {scored}; trained {metrics['train_seconds']:.0f} s{budget}; "
        f"model written to {out}"
    )
    cuts = [f"{phase['name']}: {phase['cut']}" for phase in metrics.get("phases", [])
            if phase.get("cut") and phase["name"] in ("datastore", "tuning")]
    if cuts:
        print(f"cut to fit --max-minutes: {'; '.join(cuts)} (metrics.json \"phases\")")
    return 0


def translate_command(args: argparse.Namespace) -> int:
    from kformer.folders import read_manifest
    from kformer.tasks import translate

    manifest = read_manifest(args.model_dir, task="translate")  # the wrong folder, bad flags: before stdin and loading
    translate.check_decoding(args.beam, args.batch_size, _max_repeat(args))
    translate.domain_names(manifest, args.domain, 1)
    if args.texts:
        texts = list(args.texts)
    elif sys.stdin is None or sys.stdin.isatty():
        raise BadInput("no text: pass TEXT arguments or pipe lines on stdin", field="texts")
    else:
        texts = [line.rstrip("\r\n") for line in sys.stdin]
    translator = translate.load(args.model_dir)
    for answer in translator.predict(texts, beam=args.beam, batch_size=args.batch_size, max_repeat=_max_repeat(args),
                                     retrieval=args.retrieval != "off", domain=args.domain):
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
                            max_repeat=_max_repeat(args), retrieval=getattr(args, "retrieval", "on") != "off",
                            domain=getattr(args, "domain", None))
    if args.json:
        print(json.dumps(scores))
    else:
        print(f"BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}  exact match {scores['exact_match']:.3f}  "
              f"repetition {scores['repetition']:.1%}  n {scores['n']}  "
              f"({'greedy' if args.beam == 1 else f'beam {args.beam}'}{', retrieval' if scores['retrieval'] else ''})")
        print(f"translations: {out / 'translations.json'}")
    return 0
