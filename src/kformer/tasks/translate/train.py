"""Training a translator: the pairs split, the vocabularies learned from the training side, the
``"auto"`` settings chosen (:mod:`.auto`), an encoder-decoder trained on length-bucketed
batches, the test pairs scored.

:class:`TranslateRun` fills in the task skeleton (:mod:`kformer.tasks.skeleton`); :func:`train`
is the public entry point.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kformer.auto import AUTO, AutoChoices
from kformer.config import to_dict
from kformer.errors import BadInput, CorruptModel
from kformer.tasks import skeleton
from kformer.tasks.state import STATE_FILE, ResumeState
from kformer.tasks.translate import budget as budgets
from kformer.tasks.translate import domains, phases, pretrained
from kformer.tasks.translate.auto import RULES, decode_length_rule, describe
from kformer.tasks.translate.batches import (
    EncodedPairs,
    batch_plan,
    dataset,
    fitting,
    fitting_rows,
    target_tokens,
)
from kformer.tasks.translate.model import (
    TEST_TRANSLATIONS_FILE,
    Translator,
    load_vocabs,
    save,
    save_vocabs,
    translation_rows,
)
from kformer.tasks.translate.pairs import PairData, read_pair_data, read_training_data, split_pairs
from kformer.tasks.translate.settings import TASK, TranslateConfig
from kformer.tasks.translate.stats import CorpusStats, EncodedStats

if TYPE_CHECKING:
    import numpy as np

    from kformer.data.corpora import Corpus
    from kformer.data.pairs import Pair
    from kformer.parallel import Cluster, DistributeConfig
    from kformer.tasks.base import TrainResult
    from kformer.training import Progress


@dataclass
class _Prepared(skeleton.Prepared):
    """Everything a run needs before it writes anything: vocabularies, encoded pairs, the test pairs."""

    source_vocab: Any = None
    target_vocab: Any = None  # the same object when shared
    train: EncodedPairs = field(default_factory=lambda: ([], []))  # the training pairs that fit max_length
    valid: EncodedPairs = field(default_factory=lambda: ([], []))
    valid_pairs: list[Pair] = field(default_factory=list)  # as text: what retrieval's weights are chosen on
    test: list[Pair] = field(default_factory=list)
    splits: dict[str, int] = field(default_factory=dict)  # pairs in train, valid and test
    skipped: int = 0  # training pairs longer than max_length
    vocab_seconds: float = 0.0
    decode_length: dict = field(default_factory=dict)  # the per-sentence output cap (auto.decode_length_rule)
    encoder: Any = None  # a pretrained encoder's backbone (encoder minilm or a folder), else None
    mix: domains.CorpusMix | None = None  # the corpora, their weights and tags
    groups: np.ndarray | None = None  # each kept training pair's corpus (an index into mix.corpora)
    corpora: list[dict] = field(default_factory=list)  # what the folder records per corpus (domains.records)
    tags: dict[str, dict] = field(default_factory=dict)  # {tag: {"token", "id"}} with corpus_tags on

    def manifest(self) -> dict[str, Any]:
        """What the loaded translator's manifest starts from: the output cap, the encoder, the
        corpora and their tags."""
        entry = {} if self.encoder is None else {"encoder": pretrained.manifest_entry(self.config, self.encoder)}
        corpora = [{key: row[key] for key in ("name", "pairs", "weight", "tag")} for row in self.corpora]
        return {"decode_length": self.decode_length, **entry, "corpora": corpora, **({"tags": self.tags} if self.tags else {})}

    def test_domains(self) -> list[str | None]:
        """The tag each test pair is translated with (its corpus's; None: neutral)."""
        return [self.mix.tag_of(pair) if self.mix else None for pair in self.test]


@dataclass
class _Fitted:
    model: Any
    result: Any  # kformer.training.FitResult
    steps: int  # optimizer steps of every run so far
    batches_per_epoch: int
    test_translations: list[str] = field(default_factory=list)  # filled by evaluate, written with the folder
    test_pairs: list[Pair] = field(default_factory=list)  # the test pairs those translate (what the budget allowed)
    retrieval: Any = None  # the kNN-MT datastore (retrieval "on"), built by assemble
    retrieval_left_out: dict | None = None  # the tuning of a datastore validation left out (phases.kept)
    encoder_states: Any = None  # a frozen pretrained encoder's outputs per training source, for the datastore


class TranslateRun(skeleton.TrainingRun):
    """Sentence pairs in, a translator folder out."""

    task = TASK
    config_class = TranslateConfig

    def __init__(self):
        self.started = budgets.now()  # train_seconds: the whole run, from reading to scoring
        self.budget = budgets.CommandBudget(None)  # max_minutes's deadline, set by fit
        self.reports = None  # the progress function and train.log, for the phases after training

    def read(self, config, data, valid, test):
        pretrained.check_encoder_source(config)
        pairs, corpora = read_training_data(data, "data")
        return (pairs, None if valid is None else read_pair_data(valid, "valid"),
                None if test is None else read_pair_data(test, "test"), corpora)

    def prepare(self, config, data, saved):
        pairs, valid, test, corpora = data
        return prepare(config, pairs, valid, test, saved, corpora)

    def check_job(self, prepared: _Prepared, cluster: Cluster) -> None:
        """Also: every process learned the same vocabularies (else the same ids would mean different pieces)."""
        super().check_job(prepared, cluster)
        pieces = [piece for vocab in (prepared.source_vocab, prepared.target_vocab)
                  for piece in vocab.pieces(range(vocab.vocab_size))]
        cluster.check_same("the vocabulary", "\n".join(pieces).encode("utf-8"))

    def state(self, prepared: _Prepared, state_dir: Path) -> dict[str, Any]:
        """The vocabularies, so a resumed run encodes the pairs as the first did."""
        return {"vocab": save_vocabs(state_dir, prepared.source_vocab, prepared.target_vocab)}

    def fit(self, prepared, state_dir: Path, resume: bool, progress, cluster):
        """Train for what ``max_minutes`` leaves after the later phases' estimates (:mod:`.budget`)."""
        from kformer.training.progress import TRAIN_LOG, append_log, fan_out, log_to_file

        config, log = prepared.config, state_dir / TRAIN_LOG
        self.reports = fan_out(progress, log_to_file(log))
        self.budget = budgets.CommandBudget.start(config.max_minutes, self.started)
        sizes = phases.sizes(config, prepared.train, prepared.valid_pairs, prepared.test)
        self.budget.plan(sizes)
        train_minutes, started = None, budgets.now()
        if config.max_minutes is not None:
            seconds = budgets.training_seconds(config.max_minutes * 60, started - self.started, self.budget.estimates)
            train_minutes, line = seconds / 60, budgets.budget_line(config.max_minutes, seconds, self.budget.estimates)
            skeleton.report_settings(progress, line)
            append_log(log, line)
        fitted = _fit(prepared, state_dir, resume, progress, cluster, train_minutes)
        self.budget.record("training", started, None if train_minutes is None else train_minutes * 60,
                           "stopped by its time budget" if fitted.result.stopped_by_budget else None)
        return fitted

    def assemble(self, prepared: _Prepared, fitted: _Fitted) -> _Fitted:
        """With ``retrieval`` on: the datastore of the training pairs, its weights chosen on the
        validation pairs (:mod:`.retrieval`; the test pairs are not seen), each sized to the time
        left (:mod:`.phases`)."""
        if prepared.config.retrieval == "on":
            translator = Translator(fitted.model, prepared.source_vocab, prepared.target_vocab, Path("."),
                                    prepared.manifest())
            order = domains.datastore_order(prepared.mix, prepared.groups, len(prepared.train[0]), prepared.config.seed)
            store = phases.datastore(translator, prepared.train, self.budget, self.reports, order,
                                     fitted.encoder_states)
            fitted.encoder_states = None  # read by the datastore alone: its memory goes now
            if store is not None:
                store = phases.tuning(translator, store, prepared.valid_pairs, self.budget, self.reports)
            fitted.retrieval = phases.kept(store, self.reports)
            if store is not None and fitted.retrieval is None:
                fitted.retrieval_left_out = {k: v for k, v in store.tuning.items() if k != "scores"}
        return fitted

    def evaluate(self, prepared: _Prepared, fitted: _Fitted) -> dict[str, Any]:
        """The test pairs scored (those that fit the time left), the run's metrics, its phases."""
        translator = Translator(fitted.model, prepared.source_vocab, prepared.target_vocab, Path("."),
                                prepared.manifest(), retrieval=fitted.retrieval)
        scores, fitted.test_pairs, fitted.test_translations = phases.evaluation(
            translator, prepared.test, prepared.config.beam, self.budget, self.reports, prepared.test_domains())
        metrics = _metrics(prepared, fitted, scores, budgets.now() - self.started)
        if fitted.retrieval is not None:
            metrics["retrieval"] = {k: v for k, v in fitted.retrieval.manifest_entry().items() if k not in ("keys", "values")}
        elif fitted.retrieval_left_out:
            metrics["retrieval"] = {"left_out": "validation chrF lower with it than without", **fitted.retrieval_left_out}
        writing = self.budget.estimates.get("writing")  # its seconds are not known when metrics.json is written
        metrics["phases"] = [*self.budget.phases, {"name": "writing", "estimated_seconds": writing and round(writing, 1),
                                                   "seconds": None, "cut": None}]
        return metrics

    def write(self, out: Path, prepared: _Prepared, fitted: _Fitted, metrics: dict[str, Any]) -> None:
        translator = Translator(fitted.model, prepared.source_vocab, prepared.target_vocab, out,
                                prepared.manifest(), retrieval=fitted.retrieval)
        save(translator, out, to_dict(prepared.config), metrics,
             extra_files={TEST_TRANSLATIONS_FILE: translation_rows(fitted.test_pairs, fitted.test_translations)})


def train(
    config: TranslateConfig | dict | None = None,
    data: PairData | None = None,
    out: str | os.PathLike = "runs/translate",
    *,
    valid: PairData | None = None,
    test: PairData | None = None,
    resume: bool | str = False,
    progress: Progress | None = None,
    command: Sequence[str] | None = None,
    distribute: DistributeConfig | None = None,
) -> TrainResult:
    """Learn vocabularies, train, score the test pairs and write the model folder ``out``.

    Args:
        config: a :class:`TranslateConfig`, a dict of its settings, or None for the defaults.
        data: training pairs: a path (``source<TAB>target`` lines, ``.gz`` fine), several
            corpora (a list of paths, a folder of pair files, or a ``.toml``/``.csv`` manifest
            giving each corpus's weight and tag; :mod:`kformer.data.corpora`), or a list of
            ``(source, target)`` tuples or :class:`~kformer.data.pairs.Pair` objects (which may
            name their ``corpus``).
        out: the model folder to write.
        valid: validation pairs for early stopping (default: ``valid_size`` held out of ``data``).
        test: pairs scored after training (default: ``holdout`` held out of ``data``). With both
            ``valid`` and ``test`` given, any number of training pairs will do.
        resume: continue from the last checkpoint in ``out/training``. The vocabularies and the
            settings that shape the model come from the first run; only ``epochs``, ``patience``
            and ``max_minutes`` may change. Pass the same data. ``"auto"``: resume when ``out``
            holds a complete checkpoint, else start afresh.
        progress: called with :class:`~kformer.training.ProgressEvent` while training.
        command: recorded in ``metrics.json`` (the CLI passes its argv).
        distribute: train data-parallel as one process of that job (:mod:`kformer.parallel`; JAX
            backend). Every process reads the same pairs and learns the same vocabularies (checked),
            builds the same global batches and feeds its rows of them; ``batch_size`` is the
            global batch. Process 0 writes ``out``; the others only their checkpoints beside it
            (their result's ``folder``).

    Returns:
        :class:`~kformer.tasks.base.TrainResult`; ``metrics`` has ``test`` (BLEU, chrF, exact
        match), ``splits``, ``lengths``, ``train_seconds``, ``auto`` and the ``recipe``. Bad input
        fails before anything is written; a failed fresh run leaves no folder behind.
    """
    return skeleton.train(TranslateRun(), config, data, out, valid=valid, test=test, resume=resume, progress=progress,
                          command=None if command is None else list(command), distribute=distribute)


def prepare(config: TranslateConfig, train_pairs: list[Pair], valid_pairs: list[Pair] | None,
            test_pairs: list[Pair] | None, saved: ResumeState | None, corpora: list[Corpus] | None = None) -> _Prepared:
    """The splits, the vocabularies (learned, or the interrupted run's), every ``"auto"`` setting
    and the pairs encoded: the corpus rules, the vocabularies, the rules over the encoded pairs.
    ``corpora``: those the training pairs name (default: read from the pairs)."""
    if corpora is None:
        train_pairs, corpora = read_training_data(train_pairs)
    train, valid, test = split_pairs(config, train_pairs, valid_pairs, test_pairs)
    mix = domains.corpus_mix(corpora, train, config.corpus_tags)
    started = time.monotonic()
    if saved is None:
        config, auto = RULES.resolve(config, CorpusStats.of(train), phase="corpus")
        config.check_shared_table()  # shared_vocab may be auto's choice
        config.check_encoder()  # so may encoder: a fine-tuning rate needs a pretrained one
    encoder = encoder_vocab = None
    if pretrained.uses_pretrained(config):  # after the corpus rules: encoder may be auto's choice
        encoder, encoder_vocab = pretrained.load_encoder(config)
    if saved is None:
        source_vocab, target_vocab = learn_vocabularies(config, train, encoder_vocab, domains.source_symbols(mix))
    else:
        auto = AutoChoices(saved.auto)
        source_vocab, target_vocab = _saved_vocabularies(saved)
    mix.record_weights(auto)
    vocab_seconds = time.monotonic() - started
    tags = domains.tag_table(source_vocab, mix.tags)
    sources = domains.encode_sources(source_vocab, train, domains.training_tags(mix, train, tags, config.seed))
    targets = target_vocab.encode([p.target for p in train])
    epoch = domains.epoch_rows(mix, train, config.seed)  # the rules size the run by what an epoch trains on
    config, auto = RULES.resolve(config, EncodedStats.of([sources[i] for i in epoch], [targets[i] for i in epoch]), auto,
                                 phase="encoded")
    if encoder is not None and config.max_length > pretrained.longest_source(encoder):
        config = replace(config, max_length=pretrained.longest_source(encoder))  # the backbone's position table
    rows = fitting_rows(sources, targets, config.max_length)
    kept = [sources[i] for i in rows], [targets[i] for i in rows]
    valid_ids = fitting(domains.encode_sources(source_vocab, valid, domains.held_out_tags(mix, valid, tags)),
                        target_vocab.encode([p.target for p in valid]), config.max_length)
    if not kept[0] or not valid_ids[0]:
        side = "training" if not kept[0] else "validation"
        raise BadInput(f"no {side} pair fits {{field}} {config.max_length} subwords; raise it", field="max_length")
    return _Prepared(config, auto, describe(len(kept[0]), target_tokens(kept), auto.to_json()),
                     source_vocab=source_vocab, target_vocab=target_vocab, train=kept, valid=valid_ids,
                     valid_pairs=valid, test=test,
                     splits={"train": len(train), "valid": len(valid), "test": len(test)},
                     skipped=len(sources) - len(kept[0]), vocab_seconds=vocab_seconds,
                     decode_length=decode_length_rule(*kept), encoder=encoder, mix=mix, groups=mix.groups(train)[rows],
                     corpora=domains.records(mix, {"train": train, "valid": valid, "test": test}), tags=tags)


def learn_vocabularies(config: TranslateConfig, pairs: list[Pair], source_vocab=None, symbols: Sequence[str] = ()):
    """``(source, target)`` vocabularies of the training ``pairs`` as ``config`` asks (its
    vocabulary settings chosen): SentencePiece subwords or whole words, shared or one per side,
    the source's keeping each of ``symbols`` (corpus tags) one piece; with a pretrained encoder's
    ``source_vocab``, the target's alone (tags then take its ``[unusedN]`` tokens)."""
    if source_vocab is not None:
        return source_vocab, pretrained.learn_target_vocabulary(config, pairs)
    from kformer.text.subword import learn_vocabularies as learn_subwords
    from kformer.text.word_vocab import learn_word_vocabularies

    sources, targets = [p.source for p in pairs], [p.target for p in pairs]
    if config.tokens == "words":
        return learn_word_vocabularies([*sources, *symbols], targets, config.shared_vocab)
    return learn_subwords(sources, targets, config.vocab_size, config.shared_vocab, config.target_vocab_size, symbols)


def _saved_vocabularies(saved: ResumeState):
    """The interrupted run's vocabularies, from the files its state names."""
    files = saved.extra.get("vocab")
    if not isinstance(files, dict) or saved.folder is None:
        raise CorruptModel(f"{saved.folder}/{STATE_FILE} names no vocabularies; train afresh into a new folder",
                           field="resume")
    return load_vocabs(saved.folder, files)


def build_model(config: TranslateConfig, source_vocab, target_vocab, encoder=None):
    """The uncompiled translator ``config`` describes (its ``"auto"`` settings chosen): kformer's
    encoder-decoder over the two vocabularies, or the pretrained ``encoder``'s with kformer's decoder."""
    from kformer.models.seq2seq import Seq2SeqTransformer

    if encoder is not None:
        return pretrained.build_model(config, encoder, target_vocab)

    # the decoder reads [START] + target and writes target + [END]: one more position
    return Seq2SeqTransformer(
        source_vocab.vocab_size, target_vocab.vocab_size, config.max_length, config.max_length + 1,
        dim=config.dim, heads=config.heads, ff_dim=config.ff_dim, encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers, dropout=config.dropout, positions=config.positions,
        tie_embeddings=config.tie_embeddings, norm_first=config.norm_first, share_embeddings=config.share_embeddings,
    )


def _fit(prepared: _Prepared, state_dir: Path, resume: bool, progress: Progress | None,
         cluster: Cluster | None = None, max_minutes: float | None = None) -> _Fitted:
    """Build, compile and train for at most ``max_minutes`` (training's share of the budget; with
    resume, of training in all). With a ``cluster`` (inside its scope) each process feeds its rows
    of the global batches."""
    import keras

    from kformer import parallel, training
    from kformer.data.pair_batches import pair_lengths
    from kformer.data.pairs import curriculum_levels
    from kformer.models.pretrained import graph_validation
    from kformer.models.seq2seq import compile_seq2seq
    from kformer.precision import precision_scope

    config, entered = prepared.config, budgets.now()
    training.set_seed(config.seed)
    with precision_scope(config.precision):
        model = build_model(config, prepared.source_vocab, prepared.target_vocab, prepared.encoder)
    states = (None, None)  # a frozen pretrained encoder's outputs, computed once
    if prepared.encoder is not None:
        states = pretrained.cached_states(model, prepared.train[0]), pretrained.cached_states(model, prepared.valid[0])
    lengths = pair_lengths(*prepared.train)
    levels = tuple(curriculum_levels(lengths, config.curriculum_levels)) if config.curriculum else None
    plan = batch_plan(config, lengths, shuffle=True, levels=levels, groups=prepared.groups, weights=prepared.mix.weights)
    total_steps = config.epochs * plan.steps
    warmup = min(config.warmup_steps, total_steps // 4 or 1)
    # constant rate in the optimizer; the callback warms up, then decays over the steps or the
    # time budget, whichever ends first, so a run cut by max_minutes still ends at a low rate
    compile_seq2seq(model, config.learning_rate, warmup, None, label_smoothing=config.label_smoothing,
                    weight_decay=config.weight_decay, jit_compile=config.jit_compile,
                    **(pretrained.optimizer_rates(config, model) if prepared.encoder is not None else {}))
    # validation batches come in many shapes: on TensorFlow a plain graph runs them all without a
    # compile each (JAX's steps are always compiled: op by op would be far slower)
    plain_validation = config.jit_compile and keras.backend.backend() == "tensorflow"
    extra_callbacks = [graph_validation()] if plain_validation else []
    if max_minutes is not None:  # building the model and a frozen encoder's outputs (minutes on big data) count
        max_minutes = max(max_minutes - (budgets.now() - entered) / 60.0, 0.1 * max_minutes)
    budget = None if max_minutes is None else max_minutes * 60.0
    schedule = training.budget_schedule(config.learning_rate, warmup, total_steps, budget)
    done = training.last_checkpoint(state_dir) if resume else None
    first_epoch = 0 if done is None else done[1]
    schedule.steps = first_epoch * plan.steps
    limits = (config.max_length, config.max_length + 1)
    valid_plan = batch_plan(config, pair_lengths(*prepared.valid), shuffle=False,
                            batch_size=None if config.batch_size == AUTO else max(config.batch_size, 64))
    result = parallel.fit(
        cluster, model,
        dataset(prepared.train, plan, limits=limits, first_epoch=first_epoch, states=states[0],
                full_rows=bool(config.jit_compile)),
        dataset(prepared.valid, valid_plan, limits=limits, states=states[1]),
        training.FitPlan(epochs=config.epochs, out_dir=state_dir, patience=config.patience,
                         max_minutes=max_minutes, monitor=f"val_{config.early_stopping}", resume=resume),
        callbacks=[schedule, *extra_callbacks], progress=progress,
    )
    kept = states[0] if config.retrieval == "on" else None  # the datastore reads them; else their memory goes now
    return _Fitted(model, result, schedule.steps, plan.steps, encoder_states=kept)


def _metrics(prepared: _Prepared, fitted: _Fitted, scores: dict, seconds: float) -> dict[str, Any]:
    """What ``metrics.json`` records about a run (the skeleton adds ``recipe``, ``auto``, ``command``)."""
    history, result, config = fitted.result.history, fitted.result, prepared.config
    metrics = {
        "test": scores,
        "valid_loss": min(history.get("val_loss", [float("nan")])),
        "valid_token_accuracy": max(history.get("val_accuracy", [float("nan")])),
        "train_seconds": round(seconds, 2),
        "vocab_seconds": round(prepared.vocab_seconds, 2),
        "epochs_run": result.epochs_run,
        "steps": fitted.steps,
        "batches_per_epoch": fitted.batches_per_epoch,
        "train_target_tokens": target_tokens(prepared.train),  # per epoch, [END] included
        "best_epoch": None if result.best_epoch is None else result.best_epoch + 1,
        "stopped_by_time_budget": result.stopped_by_budget,
        "splits": {**prepared.splits, "train_used": len(prepared.train[0]), "skipped_too_long": prepared.skipped},
        "lengths": {"max_source": config.max_length, "max_target": config.max_length, "decode": prepared.decode_length},
        "vocab": {"shared": prepared.source_vocab is prepared.target_vocab,
                  "source_size": prepared.source_vocab.vocab_size, "target_size": prepared.target_vocab.vocab_size},
        "parameters": int(fitted.model.count_params()),
        "corpora": prepared.corpora,
    }
    if result.initial_epoch:
        metrics["resumed_from_epoch"] = result.initial_epoch
    return metrics
