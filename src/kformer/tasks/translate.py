"""Translation: train an encoder-decoder Transformer on sentence pairs, translate, score, explain.

The model is a :class:`~kformer.models.seq2seq.Seq2SeqTransformer` over SentencePiece subwords
learned from the training pairs only (one vocabulary for both sides by default); a corpus of a
handful of pairs gets whole words instead (``tokens``, :mod:`kformer.text.word_vocab`). Both sides
are NFC-normalised (:func:`kformer.data.pairs.normalize_text`).

Life cycle::

    from kformer.tasks import translate
    pairs = [("one two", "ஒன்று இரண்டு"), ("three", "மூன்று"), ...]       # or a path to a TSV file
    result = translate.train({"epochs": 5, "dim": 32}, pairs, "runs/tiny", valid=pairs, test=pairs)
    translator = translate.load("runs/tiny")                 # or kformer.load("runs/tiny")
    translator.translate(["one two"], beam=4)                 # ["ஒன்று இரண்டு"]
    translator.evaluate("test.tsv")                           # {"bleu", "chrf", "exact_match", "n", ...}
    translator.attention_maps("one two").maps["cross"].shape  # (layers, heads, target, source)

The folder: ``kformer.json`` (task ``translate``, the vocabulary files, the longest source and
target, recipe, a metrics summary), ``model.keras``, ``vocab.spm`` (or ``source.spm`` and
``target.spm``; ``words.txt`` or ``source_words.txt`` and ``target_words.txt`` for whole
words), ``metrics.json``, ``test_translations.json`` and ``training/`` (checkpoint,
logs, and what ``resume`` needs to rebuild the same model: ``state.json`` and the vocabularies).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kformer.auto import AutoChoices
from kformer.config import AUTO, Auto, as_config, build_config, setting, to_dict
from kformer.data.pairs import Pair
from kformer.errors import BadInput, CorruptModel, KformerError
from kformer.folders import MODEL_FILE, TRAINING_DIR, read_manifest, write_model_folder
from kformer.tasks import translate_auto
from kformer.tasks.base import AttentionMaps, TaskModel, TrainResult, check_texts, write_curves
from kformer.tasks.training_folder import check_out_folder, training_folder

if TYPE_CHECKING:
    from kformer.parallel import Cluster, DistributeConfig
    from kformer.training import Progress

TASK = "translate"
SHARED_VOCAB_FILE = "vocab.spm"
SOURCE_VOCAB_FILE = "source.spm"
TARGET_VOCAB_FILE = "target.spm"
WORD_VOCAB_FILES = {"shared": "words.txt", "source": "source_words.txt", "target": "target_words.txt"}
# Below this many distinct training pairs few substrings recur and SentencePiece learns little beyond single
# characters (the Tamil lesson's five one-word pairs: 5-8 pieces per word); "auto" then takes whole words.
TINY_CORPUS_PAIRS = 10
STATE_FILE = "state.json"
TEST_TRANSLATIONS_FILE = "test_translations.json"
AUTO_LENGTH_RANGE = (8, 128)  # an automatic max_length stays within these subword counts
# Decoding never puts more than this many copies of a word or a span of subwords back to back
# (``max_repeat``; 0 turns the limit off): real sentences do not, looping models do.
MAX_REPEAT = 3

# A path to source<TAB>target lines, or (source, target) tuples / Pairs in memory.
PairData = str | os.PathLike | Sequence[Pair | tuple[str, str]]


@dataclass(frozen=True)
class TranslateConfig:
    """Settings of a translation run (recipe sections ``[data]``, ``[model]``, ``[training]``)."""

    vocab_size: int | Auto = setting(
        AUTO, "data", "subword vocabulary size (the shared one, or the source's); auto: about a quarter of the "
        "side's distinct training words, 1000..8000")
    target_vocab_size: int | Auto = setting(
        AUTO, "data", "target subword vocabulary size when not shared (auto: as vocab_size, from the target's words)")
    shared_vocab: bool | Auto = setting(
        AUTO, "data", "one subword vocabulary for both languages (auto: when both sides are in the same script)")
    tokens: Literal["subwords", "words"] | Auto = setting(
        AUTO, "data", "subwords (SentencePiece, vocab_size) or words (every training word, unknown ones [UNK]); "
        f"auto: words below {TINY_CORPUS_PAIRS} distinct training pairs")
    max_length: int | Auto = setting(
        AUTO, "data", "subwords per sentence; longer training pairs are skipped (auto: the 99th percentile, at most 128)"
    )
    holdout: int = setting(2000, "data", "test pairs held out at random when no test pairs are given (at most 10%)")
    valid_size: int = setting(500, "data", "validation pairs held out when none are given (at most 5%)")
    dim: int | Auto = setting(AUTO, "model", "model width (auto: 64, 128 or 256 from the corpus and the time budget)")
    heads: int = setting(4, "model", "attention heads")
    ff_dim: int | Auto = setting(AUTO, "model", "feed-forward width (auto: 4 x dim)")
    encoder_layers: int | Auto = setting(AUTO, "model", "encoder blocks (auto: 2, 3 for the 256-wide model)")
    decoder_layers: int | Auto = setting(AUTO, "model", "decoder blocks (auto: 2, 3 for the 256-wide model)")
    dropout: float = setting(0.1, "model", "dropout rate")
    positions: Literal["learned", "sinusoidal"] = setting("learned", "model", "position embeddings")
    tie_embeddings: bool | Auto = setting(AUTO, "model", "reuse the target embedding as the output projection "
                                          "(auto: yes)")
    norm_first: bool | Auto = setting(AUTO, "model", "pre-norm blocks (auto: yes)")
    share_embeddings: bool = setting(
        False, "model", "one token table for source and target (with tie_embeddings also the output): halves the "
        "embedding weights; needs shared_vocab")
    epochs: int = setting(20, "training", "most epochs (early stopping may end sooner)")
    batch_tokens: int | Auto = setting(
        AUTO, "training", "tokens per training batch (pairs x padded length; length-bucketed pairs are packed up to "
        "it); auto: a power of two giving at least 400 updates in the run, 64..4096")
    batch_size: int | Auto = setting(
        AUTO, "training", "sentence pairs per training step, instead of packing batches by batch_tokens (auto: packed)")
    learning_rate: float | Auto = setting(
        AUTO, "training", "peak learning rate after warmup (auto: 3e-3/2e-3/1e-3 for the 64/128/256-wide model, "
        "lower for small batches)")
    warmup_steps: int | Auto = setting(AUTO, "training", "steps of linear warmup (auto: 5% of the updates the run "
                                       "is expected to make, at most 1000)")
    label_smoothing: float = setting(0.1, "training", "label smoothing (0 = off)")
    weight_decay: float = setting(0.0, "training", "AdamW weight decay (0 = Adam)")
    patience: int = setting(3, "training", "epochs without a better validation score (early_stopping) before stopping")
    early_stopping: Literal["accuracy", "loss"] | Auto = setting(
        AUTO, "training", "what early stopping and the kept weights watch on the validation pairs: token accuracy or "
        "loss (auto: accuracy with label smoothing, whose smoothed loss rises as the model grows confident while its "
        "accuracy still climbs; else loss)")
    curriculum: bool = setting(
        False, "training", "short pairs first, as the Tamil lesson's levels: epoch k < curriculum_levels - 1 trains "
        "only on pairs up to the ((k+1)/levels) length quantile, later epochs on everything")
    curriculum_levels: int = setting(3, "training", "length levels of the curriculum")
    beam: int = setting(1, "training", "beam width for the test scores in metrics.json (1 = greedy)")
    max_minutes: float | None = setting(None, "training", "stop training after this many minutes, keeping the best weights")
    precision: Literal["float32", "mixed_bfloat16"] = setting(
        "float32", "training", "mixed_bfloat16: compute in bfloat16 (weights and outputs stay float32); see bench/precision.py")
    seed: int = setting(0, "training", "random seed for splits, shuffling and weights")

    def __post_init__(self):
        if self.max_length == 0:  # kformer 0.1 recipes wrote 0 for "automatic"
            object.__setattr__(self, "max_length", AUTO)
        for name in ("holdout", "valid_size", "heads", "epochs", "curriculum_levels", "beam"):
            _at_least(name, getattr(self, name), 1)
        for name in ("vocab_size", "target_vocab_size", "dim", "ff_dim", "encoder_layers", "decoder_layers",
                     "batch_size", "batch_tokens"):
            if getattr(self, name) != AUTO:
                _at_least(name, getattr(self, name), 1, ' (or "auto")')
        _at_least("patience", self.patience, 0)
        if self.max_length != AUTO:
            _at_least("max_length", self.max_length, 2, ' (or "auto")')
        if self.warmup_steps != AUTO:
            _at_least("warmup_steps", self.warmup_steps, 0, ' (or "auto")')
        _check_shared_table(self.share_embeddings, self.shared_vocab)
        if self.dim != AUTO and self.dim % self.heads:
            raise BadInput(f"dim {self.dim} must be a multiple of {{field}} ({self.heads})", field="heads")
        for name in ("dropout", "label_smoothing"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise BadInput(f"{{field}} must be at least 0 and below 1, not {getattr(self, name)}", field=name)
        for name in ("learning_rate", "max_minutes"):
            value = getattr(self, name)
            if value is not None and value != AUTO and value <= 0:
                raise BadInput(f"{{field}} must be positive, not {value}", field=name)


def _at_least(name: str, value, least: int, alternative: str = "") -> None:
    if value < least:
        raise BadInput(f"{{field}} must be at least {least}{alternative}, not {value}", field=name)


def _check_shared_table(share_embeddings: bool, shared_vocab) -> None:
    """One token table needs one vocabulary (``shared_vocab`` False: set, or chosen by auto)."""
    if share_embeddings and shared_vocab is False:
        raise BadInput("{field} needs one vocabulary for both sides: set shared_vocab too", field="share_embeddings")


def check_decoding(beam: int, batch_size: int, max_repeat: int = MAX_REPEAT, prefix: str = "") -> None:
    """Reject a ``beam`` or ``batch_size`` below 1 or a ``max_repeat`` below 0 (before a model is
    loaded or run); the error's field is ``prefix`` + the name (``"parameters."`` for a request)."""
    for name, value, least in (("beam", beam, 1), ("batch_size", batch_size, 1), ("max_repeat", max_repeat, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise BadInput(f"{{field}} must be at least {least}, not {value!r}", field=prefix + name)


# --- reading pairs ---------------------------------------------------------------------------------


def read_pair_data(data: PairData, name: str = "data") -> list[Pair]:
    """Pairs from a path (``source<TAB>target`` lines, ``.gz`` fine, more columns ignored) or from
    ``(source, target)`` tuples / :class:`Pair` objects, NFC-normalised; errors name ``name``."""
    from kformer.data.pairs import read_pairs

    if isinstance(data, str | os.PathLike):
        try:
            return read_pairs(data)
        except KformerError as exc:
            raise BadInput(exc.message_for(), field=name) from None
    if data is None or isinstance(data, bytes):
        raise BadInput("{field} must be a path or a list of (source, target) pairs", field=name)
    pairs = [_pair(item, f"{name}[{i}]", i + 1) for i, item in enumerate(data)]
    if not pairs:
        raise BadInput("{field} holds no sentence pairs", field=name)
    return pairs


def _pair(item, field: str, line: int) -> Pair:
    from kformer.data.pairs import normalize_text

    if isinstance(item, Pair):
        sides = (item.source, item.target)
    elif isinstance(item, Sequence) and not isinstance(item, str) and len(item) == 2:
        sides = tuple(item)
    else:
        raise BadInput("{field} must be a (source, target) pair of strings", field=field)
    if not all(isinstance(side, str) for side in sides):
        raise BadInput("{field} must be a (source, target) pair of strings", field=field)
    source, target = (normalize_text(side) for side in sides)
    if not source or not target:
        raise BadInput(f"{{field}} has an empty {'source' if not source else 'target'}", field=field)
    return Pair(source, target, line)


def _splits(config: TranslateConfig, train: list[Pair], valid, test):
    """``(train, valid, test)``: given pairs as they are, missing ones held out of ``train``."""
    from kformer.data.pairs import random_holdout

    if test is None:
        size = min(config.holdout, len(train) // 10)
        if size < 1:
            raise BadInput(f"the training data has only {len(train)} pairs, too few to hold out test pairs; "
                           "pass {field} pairs or give at least 10", field="test")
        train, test = random_holdout(train, size, seed=config.seed)
    if valid is None:
        size = min(config.valid_size, len(train) // 20)
        if size < 1:
            raise BadInput(f"the training data has only {len(train)} pairs left, too few to hold out validation "
                           "pairs; pass {field} pairs", field="valid")
        train, valid = random_holdout(train, size, seed=config.seed + 1)
    return train, valid, test


# --- vocabularies -------------------------------------------------------------------------------------


def _vocab_files(shared: bool, words: bool = False) -> dict[str, Any]:
    if words:
        names = WORD_VOCAB_FILES
        return {"shared": shared, "kind": "words", "source": names["shared" if shared else "source"],
                "target": names["shared" if shared else "target"]}
    if shared:
        return {"shared": True, "source": SHARED_VOCAB_FILE, "target": SHARED_VOCAB_FILE}
    return {"shared": False, "source": SOURCE_VOCAB_FILE, "target": TARGET_VOCAB_FILE}


def _is_words(vocab) -> bool:
    from kformer.text.word_vocab import WordVocabulary

    return isinstance(vocab, WordVocabulary)


def _save_vocabs(folder: Path, source_vocab, target_vocab) -> dict[str, Any]:
    """Write the vocabularies into ``folder``; returns their manifest entry."""
    files = _vocab_files(source_vocab is target_vocab, _is_words(source_vocab))
    source_vocab.save(folder / files["source"])
    if not files["shared"]:
        target_vocab.save(folder / files["target"])
    return files


def _load_vocabs(folder: Path, files: dict[str, Any]):
    """``(source, target)`` vocabularies named by a manifest entry (the same object when shared)."""
    from kformer.text.subword import Subwords
    from kformer.text.word_vocab import WordVocabulary

    kind = WordVocabulary if files.get("kind") == "words" else Subwords

    def read(name: str):
        try:
            return kind.load(folder / name)
        except KformerError as exc:
            raise CorruptModel(exc.message_for(), field="model_dir") from None

    source = read(files.get("source", SOURCE_VOCAB_FILE))
    return source, source if files.get("shared") else read(files.get("target", TARGET_VOCAB_FILE))


# --- training ----------------------------------------------------------------------------------------


@dataclass
class _Prepared:
    """Everything a run needs before it writes anything: settings, vocabularies, encoded pairs."""

    config: TranslateConfig  # "auto" resolved
    auto: AutoChoices
    source_vocab: Any
    target_vocab: Any
    train: tuple[list[list[int]], list[list[int]]]  # subword ids (sources, targets) that fit
    valid: tuple[list[list[int]], list[list[int]]]
    skipped: int  # training pairs longer than max_length
    vocab_seconds: float
    decode_length: dict  # the per-sentence output cap (translate_auto.decode_length_rule)


def train(
    config: TranslateConfig | dict | None = None,
    data: PairData | None = None,
    out: str | os.PathLike = "runs/translate",
    *,
    valid: PairData | None = None,
    test: PairData | None = None,
    resume: bool = False,
    progress: Progress | None = None,
    command: Sequence[str] | None = None,
    distribute: DistributeConfig | None = None,
) -> TrainResult:
    """Learn vocabularies, train, score the test pairs and write the model folder ``out``.

    Args:
        config: a :class:`TranslateConfig`, a dict of its settings, or None for the defaults.
        data: training pairs: a path (``source<TAB>target`` lines, ``.gz`` fine) or a list of
            ``(source, target)`` tuples or :class:`~kformer.data.pairs.Pair` objects.
        out: the model folder to write.
        valid: validation pairs for early stopping (default: ``valid_size`` held out of ``data``).
        test: pairs scored after training (default: ``holdout`` held out of ``data``). With both
            ``valid`` and ``test`` given, any number of training pairs will do.
        resume: continue from the last checkpoint in ``out/training``. The vocabularies and the
            settings that shape the model come from the first run; only ``epochs`` and
            ``max_minutes`` may change. Pass the same data.
        progress: called with :class:`~kformer.training.ProgressEvent` while training.
        command: recorded in ``metrics.json`` (the CLI passes its argv).
        distribute: train data-parallel as one process of that job (:mod:`kformer.parallel`; JAX
            backend). Every process reads the same pairs and learns the same vocabularies (checked),
            builds the same global batches and feeds its rows of them; ``batch_size`` is the
            global batch. Process 0 writes ``out``; the others only their checkpoints beside it
            (their result's ``folder``).

    Returns:
        :class:`TrainResult`; ``metrics`` has ``test`` (BLEU, chrF, exact match), ``splits``,
        ``lengths``, ``train_seconds``, ``auto`` and the ``recipe``. Bad input fails before
        anything is written; a failed fresh run leaves no folder behind.
    """
    started = time.monotonic()
    config = as_config(TranslateConfig, config)
    out = Path(out)
    cluster = None
    if distribute is not None:
        from kformer.parallel import start

        cluster = start(distribute)  # waits for every process of the job
        out = cluster.folder(out)
    check_out_folder(out)
    pairs = read_pair_data(data, "data")
    given_valid = None if valid is None else read_pair_data(valid, "valid")
    given_test = None if test is None else read_pair_data(test, "test")
    if resume:
        config = _resumed_config(out, config)
    train_pairs, valid_pairs, test_pairs = _splits(config, pairs, given_valid, given_test)
    prepared = _prepare(config, train_pairs, valid_pairs, out if resume else None)
    if cluster is not None:
        _check_job(cluster, prepared)
    with training_folder(out, resume) as state_dir:  # refuses a foreign or busy folder; cleans up on failure
        if not resume:
            _write_state(state_dir, prepared)
        with contextlib.nullcontext() if cluster is None else cluster.scope():
            model, fit_result, steps = _fit(prepared, state_dir, resume, progress, cluster)
        translator = Translator(model, prepared.source_vocab, prepared.target_vocab, out,
                                {"decode_length": prepared.decode_length})
        scores, hypotheses = translator.score(test_pairs, beam=prepared.config.beam)
        metrics = _metrics(prepared, model, fit_result, steps, scores, time.monotonic() - started,
                           {"train": len(train_pairs), "valid": len(valid_pairs), "test": len(test_pairs)}, command)
        if cluster is None or cluster.chief:
            save(translator, out, to_dict(prepared.config), metrics,
                 extra_files={TEST_TRANSLATIONS_FILE: _examples(test_pairs, hypotheses)})
    return TrainResult(folder=out, metrics=metrics, config=prepared.config, auto=prepared.auto.to_json())


def _read_state(out: Path) -> dict:
    path = out / TRAINING_DIR / STATE_FILE
    if not path.is_file():
        raise BadInput(f"nothing to resume in {out}: no {TRAINING_DIR}/{STATE_FILE}; train without {{field}} first",
                       field="resume")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CorruptModel(f"{path} is corrupt; train afresh into a new folder", field="resume") from None


def _resumed_config(out: Path, config: TranslateConfig) -> TranslateConfig:
    """The first run's settings ("auto" already resolved), with this call's epochs and time budget."""
    saved = build_config(TranslateConfig, _read_state(out)["settings"], sources=(f"{out}/{TRAINING_DIR}/{STATE_FILE}",))
    return replace(saved, epochs=config.epochs, max_minutes=config.max_minutes)


def _prepare(config: TranslateConfig, train: list[Pair], valid: list[Pair], resume_from: Path | None) -> _Prepared:
    """Vocabularies (learned, or the first run's when resuming), "auto" resolved, pairs encoded."""
    import numpy as np

    from kformer.text.subword import learn_vocabularies
    from kformer.text.word_vocab import learn_word_vocabularies

    started = time.monotonic()
    auto = AutoChoices()
    if resume_from is not None:
        state = _read_state(resume_from)
        source_vocab, target_vocab = _load_vocabs(resume_from / TRAINING_DIR, state["vocab"])
        auto.chosen.update(state.get("auto", {}))
    else:
        distinct = len({(p.source, p.target) for p in train})  # repeating a pair adds no new substring
        tiny = distinct < TINY_CORPUS_PAIRS
        config = auto.resolve(config, tokens=(
            "words" if tiny else "subwords",
            f"{distinct} distinct training pairs: " + (f"below {TINY_CORPUS_PAIRS}, too few for SentencePiece to "
                                                       "learn pieces beyond characters" if tiny
                                                       else f"at least {TINY_CORPUS_PAIRS}"),
        ))
        sides = [p.source for p in train], [p.target for p in train]
        config = auto.resolve(config, **translate_auto.vocab_rules(
            *(translate_auto.side_shape(side) for side in sides), words=config.tokens == "words",
            shared=None if config.shared_vocab == AUTO else config.shared_vocab))
        if config.shared_vocab and config.tokens == "subwords":  # one vocabulary: the target's is the shared one
            config = auto.resolve(config, target_vocab_size=(config.vocab_size, "the shared vocabulary"))
        if config.tokens == "words":
            source_vocab, target_vocab = learn_word_vocabularies(*sides, config.shared_vocab)
        else:
            source_vocab, target_vocab = learn_vocabularies(*sides, config.vocab_size, config.shared_vocab,
                                                            config.target_vocab_size)
    vocab_seconds = time.monotonic() - started
    sources = source_vocab.encode([p.source for p in train])
    targets = target_vocab.encode([p.target for p in train])
    p99 = [math.ceil(np.percentile([len(ids) for ids in side], 99)) for side in (sources, targets)]
    low, high = AUTO_LENGTH_RANGE
    config = auto.resolve(config, max_length=(
        int(min(high, max(low, *p99))),
        f"99th percentile of the training pairs' subword lengths (source {p99[0]}, target {p99[1]}), "
        f"kept within {low}..{high}",
    ))
    kept = _fitting(sources, targets, config.max_length)
    target_tokens = sum(len(ids) + 1 for ids in kept[1])  # [END] included
    rules = translate_auto.training_rules(target_tokens, config.epochs, config.max_minutes,
                                          None if config.dim == AUTO else config.dim)
    if config.batch_size != AUTO:
        del rules["batch_tokens"]  # batches of batch_size pairs: no token budget
    config = auto.resolve(config, **rules)
    config = auto.resolve(config, warmup_steps=_warmup(config, kept, target_tokens))
    config = auto.resolve(config, early_stopping=translate_auto.early_stopping_rule(config.label_smoothing))
    _check_shared_table(config.share_embeddings, config.shared_vocab)
    valid_ids = _fitting(source_vocab.encode([p.source for p in valid]),
                         target_vocab.encode([p.target for p in valid]), config.max_length)
    if not kept[0] or not valid_ids[0]:
        side = "training" if not kept[0] else "validation"
        raise BadInput(f"no {side} pair fits {{field}} {config.max_length} subwords; raise it", field="max_length")
    return _Prepared(config, auto, source_vocab, target_vocab, kept, valid_ids, len(sources) - len(kept[0]),
                     vocab_seconds, translate_auto.decode_length_rule(*kept))


def _warmup(config: TranslateConfig, kept, target_tokens: int) -> tuple[int, str]:
    """The auto ``warmup_steps``: a share of the updates the run is expected to make (its epochs'
    batches, or fewer where the time budget ends it first)."""
    size = translate_auto.nearest_size(config.dim)
    plan = _batch_plan(config, kept, shuffle=False)
    per_step = max(1.0, target_tokens / plan.steps)
    expected = translate_auto.run_tokens(target_tokens, config.epochs, config.max_minutes, size)
    return translate_auto.warmup_rule(int(min(config.epochs * plan.steps, math.ceil(expected / per_step))))


def _batch_plan(config: TranslateConfig, pairs, shuffle: bool, levels=None, batch_size: int | None = None):
    """The :class:`~kformer.data.pair_batches.PairBatchPlan` of encoded ``pairs`` (sources, targets):
    packed by ``batch_tokens`` unless a ``batch_size`` is set (or given)."""
    from kformer.data.pair_batches import PairBatchPlan, pair_lengths

    batch_size = batch_size or (None if config.batch_size == AUTO else config.batch_size)
    return PairBatchPlan(pair_lengths(*pairs), batch_tokens=None if batch_size else config.batch_tokens,
                         batch_size=batch_size, seed=config.seed, shuffle=shuffle, levels=levels)


def _fitting(sources: list[list[int]], targets: list[list[int]], max_length: int):
    """``(sources, targets)`` of the pairs whose sides are 1..``max_length`` subwords long."""
    kept = [(s, t) for s, t in zip(sources, targets, strict=True) if 0 < len(s) <= max_length and 0 < len(t) <= max_length]
    return [s for s, _ in kept], [t for _, t in kept]


def _write_state(state_dir: Path, prepared: _Prepared) -> None:
    """What ``resume`` needs to rebuild the same model: the settings, "auto" choices, vocabularies."""
    from kformer.artifacts import write_json_atomic

    files = _save_vocabs(state_dir, prepared.source_vocab, prepared.target_vocab)
    state = {"settings": to_dict(prepared.config), "auto": prepared.auto.to_json(), "vocab": files}
    write_json_atomic(state_dir / STATE_FILE, state)


def _build_model(config: TranslateConfig, source_vocab, target_vocab):
    from kformer.models.seq2seq import Seq2SeqTransformer

    # the decoder reads [START] + target and writes target + [END]: one more position
    return Seq2SeqTransformer(
        source_vocab.vocab_size, target_vocab.vocab_size, config.max_length, config.max_length + 1,
        dim=config.dim, heads=config.heads, ff_dim=config.ff_dim, encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers, dropout=config.dropout, positions=config.positions,
        tie_embeddings=config.tie_embeddings, norm_first=config.norm_first, share_embeddings=config.share_embeddings,
    )


def _check_job(cluster: Cluster, prepared: _Prepared) -> None:
    """A data-parallel run's checks: the global batch splits across the devices, and every
    process learned the same vocabularies (else the same ids would mean different pieces)."""
    batch_size = getattr(prepared.config, "batch_size", AUTO)
    if batch_size != AUTO:
        cluster.check_batch_size(batch_size)
    pieces = [piece for vocab in (prepared.source_vocab, prepared.target_vocab)
              for piece in vocab.pieces(range(vocab.vocab_size))]
    cluster.check_same("the vocabulary", "\n".join(pieces).encode("utf-8"))


def _fit(prepared: _Prepared, state_dir: Path, resume: bool, progress: Progress | None,
         cluster: Cluster | None = None):
    """Build, compile and train; ``(model, FitResult, steps done in all runs)``."""
    from kformer import parallel, training
    from kformer.data.pairs import curriculum_levels
    from kformer.models.seq2seq import compile_seq2seq

    config = prepared.config
    training.set_seed(config.seed)
    from kformer.precision import precision_scope

    if progress is not None:  # one line, before training: what "auto" chose
        progress(training.ProgressEvent("settings", 0.0, message=translate_auto.describe(
            len(prepared.train[0]), sum(len(ids) + 1 for ids in prepared.train[1]), prepared.auto.to_json())))
    with precision_scope(config.precision):
        model = _build_model(config, prepared.source_vocab, prepared.target_vocab)
    levels = None
    if config.curriculum:
        from kformer.data.pair_batches import pair_lengths

        levels = tuple(curriculum_levels(pair_lengths(*prepared.train), config.curriculum_levels))
    plan = _batch_plan(config, prepared.train, shuffle=True, levels=levels)
    total_steps = config.epochs * plan.steps
    warmup = min(config.warmup_steps, total_steps // 4 or 1)
    # constant rate in the optimizer; the callback warms up, then decays over the steps or the
    # time budget, whichever ends first, so a run cut by max_minutes still ends at a low rate
    # "auto": XLA on JAX (whose non-jit steps run op by op, far slower), none on TensorFlow's CPU
    compile_seq2seq(model, config.learning_rate, warmup, None, label_smoothing=config.label_smoothing,
                    weight_decay=config.weight_decay, jit_compile="auto")
    budget = None if config.max_minutes is None else config.max_minutes * 60.0
    schedule = training.budget_schedule(config.learning_rate, warmup, total_steps, budget)
    done = training.last_checkpoint(state_dir) if resume else None
    first_epoch = 0 if done is None else done[1]
    schedule.steps = first_epoch * plan.steps
    limit = (config.max_length, config.max_length + 1)
    valid_plan = _batch_plan(config, prepared.valid, shuffle=False,
                             batch_size=None if config.batch_size == AUTO else max(config.batch_size, 64))
    # with a cluster (inside its scope): each process feeds its rows of the global batches
    result = parallel.fit(
        cluster, model,
        _dataset(prepared.train, plan, limits=limit, first_epoch=first_epoch),
        _dataset(prepared.valid, valid_plan, limits=limit),
        training.FitPlan(epochs=config.epochs, out_dir=state_dir, patience=config.patience,
                         max_minutes=config.max_minutes, monitor=f"val_{config.early_stopping}", resume=resume),
        callbacks=[schedule], progress=progress,
    )
    return model, result, schedule.steps


def _dataset(pairs, plan, limits=(None, None), first_epoch: int = 0):
    """A ``tf.data`` pipeline of the teacher-forcing batches ``plan`` arranges, epoch by epoch.

    ``pairs`` is ``(sources, targets)`` of subword ids. Yields ``({"source": (batch, S),
    "target_in": (batch, T)}, target_out (batch, T))`` with ``target_in = [START] + target`` and
    ``target_out = target + [END]``, each padded to its width bucket. ``first_epoch`` is where a
    resumed run starts, so it sees the order an uninterrupted run would.
    """
    import tensorflow as tf  # input pipeline only, outside the model

    from kformer.data.batching import pad_batch
    from kformer.text.specials import END_ID, START_ID

    sources, targets = pairs
    epoch = {"n": first_epoch}

    def generate():
        batches = plan.epoch(epoch["n"])
        epoch["n"] += 1
        for rows in batches:
            source = pad_batch([sources[i] for i in rows], limit=limits[0])
            target_in = pad_batch([[START_ID, *targets[i]] for i in rows], limit=limits[1])
            target_out = pad_batch([[*targets[i], END_ID] for i in rows], limit=limits[1])
            yield {"source": source, "target_in": target_in}, target_out

    spec = tf.TensorSpec((None, None), tf.int32)
    dataset = tf.data.Dataset.from_generator(generate, output_signature=({"source": spec, "target_in": spec}, spec))
    return dataset.apply(tf.data.experimental.assert_cardinality(plan.steps)).prefetch(2)


def _metrics(prepared: _Prepared, model, fit_result, steps: int, scores: dict, seconds: float, splits: dict,
             command) -> dict:
    """What ``metrics.json`` records about a run."""
    history = fit_result.history
    config = prepared.config
    metrics = {
        "test": scores,
        "valid_loss": min(history.get("val_loss", [float("nan")])),
        "valid_token_accuracy": max(history.get("val_accuracy", [float("nan")])),
        "train_seconds": round(seconds, 2),
        "vocab_seconds": round(prepared.vocab_seconds, 2),
        "epochs_run": fit_result.epochs_run,
        "steps": steps,
        "batches_per_epoch": _batch_plan(config, prepared.train, shuffle=False).steps,
        "train_target_tokens": sum(len(ids) + 1 for ids in prepared.train[1]),  # per epoch, [END] included
        "best_epoch": None if fit_result.best_epoch is None else fit_result.best_epoch + 1,
        "stopped_by_time_budget": fit_result.stopped_by_budget,
        "splits": {**splits, "train_used": len(prepared.train[0]), "skipped_too_long": prepared.skipped},
        "lengths": {"max_source": config.max_length, "max_target": config.max_length,
                    "decode": prepared.decode_length},
        "vocab": {"shared": prepared.source_vocab is prepared.target_vocab,
                  "source_size": prepared.source_vocab.vocab_size, "target_size": prepared.target_vocab.vocab_size},
        "parameters": int(model.count_params()),
        "auto": prepared.auto.to_json(),
        "command": list(command or []),
        "recipe": to_dict(config),
    }
    if fit_result.initial_epoch:
        metrics["resumed_from_epoch"] = fit_result.initial_epoch
    return metrics


def _examples(pairs: Sequence[Pair], hypotheses: Sequence[str]) -> list[dict]:
    return [{"source": p.source, "reference": p.target, "translation": h} for p, h in zip(pairs, hypotheses, strict=True)]


def save(translator: Translator, out: str | os.PathLike, recipe: dict, metrics: dict,
         extra_files: dict[str, Any] | None = None) -> Path:
    """Write ``translator`` as a model folder, atomically: model, vocabularies, ``kformer.json``,
    ``metrics.json`` and any ``extra_files`` (name -> JSON data)."""
    from kformer.artifacts import write_json_atomic

    vocab_files = _vocab_files(translator.source_vocab is translator.target_vocab, _is_words(translator.source_vocab))
    manifest = {
        "vocab": vocab_files,
        "max_source_length": translator.max_source_length,
        "max_target_length": translator.max_target_length,
        "decode_length": translator.decode_length,
        "recipe": recipe,
        "metrics": {k: metrics[k] for k in ("test", "valid_loss", "train_seconds", "splits") if k in metrics},
    }

    def write_files(stage: Path) -> None:
        _save_vocabs(stage, translator.source_vocab, translator.target_vocab)
        for name, data in (extra_files or {}).items():
            write_json_atomic(stage / name, data)
        write_curves(Path(out) / TRAINING_DIR, stage)

    return write_model_folder(out, TASK, translator.model, manifest, metrics, write_files=write_files)


# --- using a trained model ------------------------------------------------------------------------


class Translator(TaskModel):
    """A translation model with its source and target vocabularies (the same object when shared)."""

    task = TASK
    parameters = {"beam": 1, "max_repeat": MAX_REPEAT}

    def __init__(self, model, source_vocab, target_vocab, folder: str | os.PathLike, manifest: dict | None = None):
        super().__init__(Path(folder), manifest or {})
        self.model, self.source_vocab, self.target_vocab = model, source_vocab, target_vocab

    @property
    def max_source_length(self) -> int:
        return int(self.model.max_source_length)

    @property
    def max_target_length(self) -> int:
        return int(self.model.max_target_length)

    @property
    def decode_length(self) -> dict[str, float]:
        """The output cap per sentence, ``{"per_source_token": a, "extra": b}``: a translation of a
        source of ``n`` subwords gets at most ``ceil(a * n) + b`` target tokens (``[END]``
        included), ``a`` measured on the training pairs (:func:`~kformer.tasks.translate_auto.
        decode_length_rule`); folders written before the rule get ``a = 2, b = 8``."""
        return self.manifest.get("decode_length") or dict(translate_auto.DEFAULT_DECODE_LENGTH)

    def decode_limits(self, source_lengths: Sequence[int]) -> list[int]:
        """Most target tokens for sources of these subword lengths (:attr:`decode_length`, at
        most the model's longest target)."""
        rule = self.decode_length
        return [int(min(self.max_target_length, math.ceil(rule["per_source_token"] * n) + rule["extra"]))
                for n in source_lengths]

    def metadata(self) -> dict[str, Any]:
        return {**super().metadata(), "shared_vocab": self.source_vocab is self.target_vocab,
                "max_source_length": self.max_source_length, "max_target_length": self.max_target_length}

    def encode_sources(self, texts: Sequence[str]) -> list[list[int]]:
        """NFC-normalised subword ids of each text, cut to the model's longest source."""
        from kformer.data.pairs import normalize_text
        from kformer.text.specials import UNK_ID

        ids = self.source_vocab.encode([normalize_text(t) for t in texts])
        return [seq[: self.max_source_length] or [UNK_ID] for seq in ids]

    def _decode(self, sources: list[list[int]], beam: int, batch_size: int, max_repeat: int) -> list[str]:
        """Translations of subword-id sources, in their order. Batches hold similar lengths, so
        little time goes to padding; each is ``(batch, width)`` with ``width`` a bucket."""
        import numpy as np

        from kformer.data.batching import length_bucketed_batches, pad_batch
        from kformer.models.generation import beam_search, greedy_decode

        results = [""] * len(sources)
        for batch in length_bucketed_batches([len(s) for s in sources], batch_size):
            ids = pad_batch([sources[i] for i in batch], limit=self.max_source_length)
            max_length = self._decode_length(ids)
            limits = self.decode_limits([len(sources[i]) for i in batch])
            if beam == 1:
                generated = greedy_decode(self.model, ids, max_length, row_limits=limits, max_repeat=max_repeat)
            else:
                generated = beam_search(self.model, ids, max_length, beam_width=beam, row_limits=limits,
                                        max_repeat=max_repeat)
            for row, text in zip(batch, self.target_vocab.decode(np.asarray(generated)), strict=True):
                results[row] = text
        return results

    def _decode_length(self, ids) -> int:
        """Most tokens to generate for a batch of sources ``ids (batch, width)`` (each row is
        capped further by :meth:`decode_limits`): a translation rarely needs more than twice the
        source's subwords. Computed from the decode width the source is padded to, so
        :meth:`warmup` meets every generation buffer a request can use."""
        from kformer.models.generation import decode_widths

        widths = decode_widths(self.max_source_length)
        width = next((w for w in widths if w >= ids.shape[1]), ids.shape[1])
        return int(min(self.max_target_length, 2 * width + 8))

    def translate(self, texts: Sequence[str], *, beam: int = 1, batch_size: int = 64,
                  max_repeat: int = MAX_REPEAT) -> list[str]:
        """Translate each text (greedy when ``beam`` is 1, else beam search); blank texts give ''.
        No word or span of up to 8 subwords appears more than ``max_repeat`` times in a row in a
        translation (0: no limit; see :data:`MAX_REPEAT`)."""
        texts = check_texts(texts)
        check_decoding(beam, batch_size, max_repeat)
        results = [""] * len(texts)
        todo = [i for i, text in enumerate(texts) if text.strip()]
        if todo:
            decoded = self._decode(self.encode_sources([texts[i] for i in todo]), beam, batch_size, max_repeat)
            for i, text in zip(todo, decoded, strict=True):
                results[i] = text
        return results

    def score(self, pairs: Sequence[Pair], *, beam: int = 1, batch_size: int = 64,
              max_repeat: int = MAX_REPEAT) -> tuple[dict, list[str]]:
        """BLEU, chrF, exact match, ``repetition`` (share of translations in which a word or a
        target subword repeats more than 3 times in a row), ``n``, ``beam``, ``max_repeat`` and
        ``decode_seconds`` of the translations of ``pairs`` (decoded as :meth:`translate`); also
        the translations."""
        from kformer.metrics import repetition_share, translation_scores

        start = time.monotonic()
        hypotheses = self.translate([p.source for p in pairs], beam=beam, batch_size=batch_size, max_repeat=max_repeat)
        seconds = time.monotonic() - start
        scores = translation_scores(hypotheses, [p.target for p in pairs])
        scores["repetition"] = repetition_share(hypotheses, self.target_vocab.encode(hypotheses))
        scores.update(beam=beam, max_repeat=max_repeat, decode_seconds=round(seconds, 2))
        return scores, hypotheses

    def evaluate(self, data: PairData, *, beam: int = 1, batch_size: int = 64, out: str | os.PathLike | None = None,
                 limit: int | None = None, max_repeat: int = MAX_REPEAT) -> dict:
        """Scores (as :meth:`score`) of the translations of ``data`` (a pairs file or pairs in
        memory; the first ``limit`` only, when given). With ``out``, also writes
        ``out/scores.json`` and ``out/translations.json`` (source, reference, translation)."""
        from kformer.artifacts import staged_folder, write_json_atomic

        check_decoding(beam, batch_size, max_repeat)
        pairs = read_pair_data(data, "data")
        if limit is not None:
            _at_least("limit", limit, 1)
            pairs = pairs[:limit]
        scores, hypotheses = self.score(pairs, beam=beam, batch_size=batch_size, max_repeat=max_repeat)
        if out is not None:
            with staged_folder(Path(out)) as stage:
                write_json_atomic(stage / "scores.json", scores)
                write_json_atomic(stage / "translations.json", _examples(pairs, hypotheses))
        return scores

    def predict_instances(self, instances: list[str], parameters: dict[str, Any] | None = None) -> list[dict]:
        """``{"translation": ...}`` per input sentence (parameters: ``beam``, ``max_repeat``)."""
        parameters = self.check_parameters(parameters)
        instances = check_texts(instances, "instances")
        check_decoding(parameters["beam"], 1, parameters["max_repeat"], prefix="parameters.")
        return [{"translation": text}
                for text in self.translate(instances, beam=parameters["beam"], max_repeat=parameters["max_repeat"])]

    def attention_maps(self, text: str) -> AttentionMaps:
        """Translate ``text`` greedily; encoder, decoder-self and cross attention of every layer and
        head, ``(layers, heads, queries, keys)``, labelled with subword pieces."""
        import numpy as np

        from kformer.data.batching import pad_batch
        from kformer.models.generation import greedy_decode, strip_special
        from kformer.text.specials import START, START_ID

        if not isinstance(text, str) or not text.strip():
            raise BadInput("{field} must be a non-empty sentence", field="text")
        source = self.encode_sources([text])
        padded = pad_batch(source, limit=self.max_source_length)  # decoded exactly as translate() does
        generated = greedy_decode(self.model, padded, self._decode_length(padded),
                                  row_limits=self.decode_limits([len(source[0])]), max_repeat=MAX_REPEAT)[0]
        # the decoder reads [START] + output: a translation that never ended is cut to fit
        output = strip_special(generated)[: self.max_target_length - 1]
        source = np.array(source, dtype="int32")
        target_in = np.array([[START_ID, *output]], dtype="int32")
        maps = {name: stack[0] for name, stack in self.model.attention_maps(source, target_in).items()}
        source_pieces = self.source_vocab.pieces(source[0])
        target_pieces = [START, *self.target_vocab.pieces(output)]
        return AttentionMaps(
            maps=maps,
            rows={"encoder": source_pieces, "decoder_self": target_pieces, "cross": target_pieces},
            cols={"encoder": source_pieces, "decoder_self": target_pieces, "cross": source_pieces},
            output=self.target_vocab.decode([generated])[0],
        )

    def export_plan(self):
        """The encoder, one decoder step and greedy decoding (:mod:`kformer.models.seq2seq_export`),
        each greedy row capped by :attr:`decode_length`; the SentencePiece files beside them."""
        import shutil

        from kformer.models.export_plan import Plan
        from kformer.models.seq2seq_export import seq2seq_endpoints, seq2seq_info

        vocab = self.manifest.get("vocab") or {}
        files = list(dict.fromkeys([vocab.get("source", SOURCE_VOCAB_FILE), vocab.get("target", TARGET_VOCAB_FILE)]))

        def write_files(folder: Path) -> None:
            for name in files:
                shutil.copyfile(self.folder / name, folder / name)

        return Plan(TASK, seq2seq_endpoints(self.model, self.decode_length), [self.model], write_files,
                    {"vocabulary_files": files, **seq2seq_info(self.model)})

    def warmup(self, beams: Sequence[int] = (1,)) -> None:
        """Decode once per decode shape (batch and width bucket) and beam width in ``beams``
        (1 = greedy, what a request gets by default), with the default repeat limit, so no request
        decoding that way waits for a compile. ``warmup(beams=(1, 4))`` also readies beam 4 (each
        beam width compiles its own loop: seconds per shape)."""
        import numpy as np

        from kformer.models.generation import beam_search, decode_shapes, greedy_decode
        from kformer.text.specials import END_ID

        for beam in beams:
            check_decoding(beam, 1)
        for beam in dict.fromkeys(beams):
            for batch, width in decode_shapes(self.model):
                ids = np.full((batch, width), END_ID + 1, dtype="int32")  # any ordinary piece
                if beam == 1:
                    greedy_decode(self.model, ids, self._decode_length(ids), max_repeat=MAX_REPEAT)
                else:
                    beam_search(self.model, ids, self._decode_length(ids), beam_width=beam, max_repeat=MAX_REPEAT)


def load(folder: str | os.PathLike) -> Translator:
    """Open a translation model folder (safe mode; a clear error if it is not one). Folders
    written before model folders had a ``format_version`` load too."""
    import kformer.models.seq2seq  # noqa: F401  registers Seq2SeqTransformer for loading
    from kformer.folders import load_keras_model

    folder = Path(folder)
    manifest = read_manifest(folder, task=TASK)
    source_vocab, target_vocab = _load_vocabs(folder, manifest.get("vocab", {}))
    model = load_keras_model(folder / manifest.get("model_file", MODEL_FILE))
    return Translator(model, source_vocab, target_vocab, folder, manifest)


translate = Translator.translate
evaluate = Translator.evaluate
attention_maps = Translator.attention_maps
