"""Training a classifier: read and split the data, choose the ``auto`` settings, fit the network
(and the wide part), settle what validation decides, score, write the folder.

:class:`ClassifyRun` fills in the task skeleton (:mod:`kformer.tasks.skeleton`); :func:`train` is
the public entry point.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kformer.auto import AutoChoices
from kformer.config import to_dict
from kformer.data.readers import LabelledTexts
from kformer.errors import CorruptModel, Unsupported
from kformer.folders import TRAINING_DIR
from kformer.tasks import skeleton
from kformer.tasks.base import TrainResult
from kformer.tasks.classify import network, wide_fit
from kformer.tasks.classify.auto import RULES, data_stats, describe
from kformer.tasks.classify.calibration import calibrate
from kformer.tasks.classify.data import (
    Data,
    check_labels,
    read_all,
    scope_split,
    split_unknown,
    without_label,
)
from kformer.tasks.classify.model import VOCAB_FILE, Classifier, network_manifest, write_folder
from kformer.tasks.classify.ood_fit import fit_ood
from kformer.tasks.classify.ood_text import refit_tfidf
from kformer.tasks.classify.settings import TASK, ClassifyConfig
from kformer.tasks.state import STATE_FILE

if TYPE_CHECKING:
    import os

    from kformer.parallel import DistributeConfig
    from kformer.tasks.classify.wide import Mix, WidePart
    from kformer.training import FitResult, Progress


@dataclass
class _Prepared(skeleton.Prepared):
    labels: list[str] = field(default_factory=list)  # output order: sorted training labels
    train: LabelledTexts | None = None
    valid: LabelledTexts | None = None  # in scope: only labels of the training data
    test: LabelledTexts | None = None
    out_of_scope: LabelledTexts | None = None  # validation rows of other labels (calibrate)
    unknown: LabelledTexts | None = None  # training rows of unknown_label: outlier exposure, never a class


@dataclass
class _Fitted:
    classifier: Classifier  # the network alone
    result: FitResult
    vocabulary: list[str] | None
    wide_part: WidePart | None = None  # fitted on the training split, not yet mixed in
    wide_seconds: float = 0.0
    final: Classifier | None = None  # refit: the network trained again on training + validation texts
    refit: dict[str, Any] | None = None  # metrics.json's "refit"


@dataclass
class _Assembled:
    classifier: Classifier  # the network with the wide part and threshold validation chose
    result: FitResult
    vocabulary: list[str] | None
    valid_scores: dict[str, Any]
    calibration: dict[str, Any] | None
    wide: dict[str, Any] | None  # metrics.json's "wide"
    refit: dict[str, Any] | None = None  # metrics.json's "refit"


class ClassifyRun(skeleton.TrainingRun):
    """Labelled texts: the training data, and optional validation and test data."""

    task = TASK
    config_class = ClassifyConfig

    def read(self, config, data, valid, test):
        return read_all(config, data, valid, test)

    def prepare(self, config: ClassifyConfig, data, saved) -> _Prepared:
        train, valid, test = data
        if saved is None:
            _check_backbone(config)
        train, valid, unknown = split_unknown(config, train, valid)
        if saved is None:
            unknown_rows = _out_of_scope_rows(train, valid) + (len(unknown) if unknown else 0)
            stats = data_stats(train.texts, train.labels, len(valid), unknown_rows=unknown_rows)
            config, auto = RULES.resolve(config, stats)
            labels = sorted(set(train.labels))
            line = describe(stats, auto.to_json())
        else:  # settings, labels and auto choices as the run began
            labels = _saved_labels(saved.extra)
            auto = AutoChoices(saved.auto)
            line = describe(None, saved.auto)
        check_labels(labels, train, "data", "label(s) {shown} of {field} are not among the checkpoint's labels; "
                     "resume with the same data or train into a new folder")
        out_of_scope = None
        if config.calibrate is not True and config.unknown_label is not None:  # nothing sets a threshold on them
            valid = without_label(valid, config.unknown_label)
        if config.calibrate is True:  # validation labels the training data lacks: out-of-scope texts for the threshold
            valid, out_of_scope = scope_split(labels, valid)
        check_labels(labels, valid, "valid", "validation label(s) {shown} never occur in the training data; fix {field}"
                     " (or pass --calibrate: they are then out-of-scope texts for the unknown route)")
        return _Prepared(config, auto, line if auto.chosen else None, labels, train, valid, test, out_of_scope, unknown)

    def check_job(self, prepared: _Prepared, cluster) -> None:
        if prepared.config.freeze:
            raise Unsupported("{field} trains one small head on cached text vectors; run it without --distribute",
                              field="freeze")
        if prepared.config.refit is True:
            if "refit" not in prepared.auto.chosen:
                raise Unsupported("{field} is not supported with --distribute yet; run it without one of them",
                                  field="refit")
            prepared.config = dataclasses.replace(prepared.config, refit=False)
            prepared.auto.chosen["refit"] = {**prepared.auto.chosen["refit"], "value": False,
                                             "why": "off under --distribute (not supported there yet)"}
        super().check_job(prepared, cluster)

    def state(self, prepared: _Prepared, state_dir: Path) -> dict[str, Any]:
        return {"labels": prepared.labels}  # the vocabulary: training/vocab.txt (learned_vocabulary)

    def fit(self, prepared: _Prepared, state_dir: Path, resume: bool, progress, cluster) -> _Fitted:
        """Build the network and fit it (the wide part first, when the run has one: ``max_minutes``
        counts it, and the network gets what is left)."""
        config, labels, train, valid = prepared.config, prepared.labels, prepared.train, prepared.valid
        started = time.monotonic()
        vocabulary = learned_vocabulary(config, train.texts, state_dir, resume)
        classifier = _new_classifier(config, labels, vocabulary, state_dir)
        fit_config, wide_part, wide_seconds = config, None, 0.0
        if config.wide is True:  # fitted on the training split, weight chosen on valid (a run resumed from before
            # the wide part has "auto" left unresolved: it stays as it began, without)
            wide_part, wide_seconds = wide_fit.fit_timed(train, labels, class_weights=config.class_weights, valid=valid,
                                                         word_ngrams=config.wide_ngrams)
            fit_config = _budget_left(config, wide_seconds, len(train), len(valid))
        result = network.fit_network(classifier, fit_config, (train, valid), state_dir, resume, progress, cluster,
                                     unknown=prepared.unknown)
        fitted = _Fitted(classifier, result, vocabulary, wide_part, wide_seconds)
        if config.refit is True:
            spent = time.monotonic() - started
            fitted.final, fitted.refit = _refit_network(prepared, vocabulary, result, state_dir, progress, spent)
        return fitted

    def assemble(self, prepared: _Prepared, fitted: _Fitted) -> _Assembled:
        """The wide part's weight, the validation scores and the threshold, chosen on the validation
        split, of the out-of-scope score fitted on the training split
        (:func:`~kformer.tasks.classify.ood_fit.fit_ood`); then
        (``wide_refit``) the wide part fitted again on training and validation texts."""
        config, train, valid = prepared.config, prepared.train, prepared.valid
        batch_size = max(config.batch_size, 64)
        chosen: Mix | None = None
        wide = None
        if config.wide is True:
            chosen, wide = wide_fit.choose_mix(fitted.classifier, fitted.wide_part, fitted.wide_seconds, valid,
                                               batch_size=batch_size)
        base = fitted.classifier.with_parts(wide=chosen, threshold=None)
        ood, choice = fit_ood(base, config, train, batch_size, valid, prepared.out_of_scope,
                              auto="ood_score" in prepared.auto.chosen)
        mixed = base.with_parts(wide=chosen, threshold=None, ood=ood)
        valid_scores = mixed.scores(valid, batch_size)
        calibration = None
        if config.calibrate is True:
            calibration = calibrate(mixed, valid, prepared.out_of_scope, batch_size, recall=config.unknown_recall,
                                    keep=config.unknown_keep)
        if choice is not None and "ood_score" in prepared.auto.chosen:  # validation settled what the rule left open
            prepared.auto.chosen["ood_score"] = {**prepared.auto.chosen["ood_score"], "value": choice["score"],
                                                 "why": choice["why"]}  # metrics.json["auto"] says so
        if choice is not None and calibration is not None:
            calibration["auroc_of_each_score"] = choice["auroc"]
            if "combined" in choice:
                calibration["combined"] = choice["combined"]
        if chosen is not None and (config.wide_refit or fitted.final is not None):  # after all validation decides
            chosen, refitted = wide_fit.refit(chosen, train, valid, class_weights=config.class_weights,
                                              word_ngrams=config.wide_ngrams)
            wide = {**wide, "refit": refitted}
            ood = refit_tfidf(ood, chosen.part, train.texts)  # the novelty reads the refitted part's columns
        threshold = None if calibration is None else calibration["threshold"]
        classifier = mixed.with_parts(wide=chosen, threshold=threshold, ood=ood)
        if fitted.final is not None:  # the refit network, its distance score fitted on every text it learned from
            every = _together(train, valid)
            final = fitted.final.with_parts(wide=chosen, threshold=None)
            ood, _ = fit_ood(final, config, every, batch_size, valid, None, auto=False)
            classifier = fitted.final.with_parts(wide=chosen, threshold=None, ood=ood)
        return _Assembled(classifier, fitted.result, fitted.vocabulary, valid_scores, calibration, wide, fitted.refit)

    def evaluate(self, prepared: _Prepared, assembled: _Assembled) -> dict[str, Any]:
        config, train, valid, test = prepared.config, prepared.train, prepared.valid, prepared.test
        classifier, result, wide = assembled.classifier, assembled.result, assembled.wide
        batch_size = max(config.batch_size, 64)
        if classifier.wide is not None and test is not None:
            wide = {**wide, "test_accuracy": wide_fit.part_accuracies(classifier, test, batch_size)}
        test_scores = classifier.scores(test, batch_size) if test is not None else None
        vocabulary = assembled.vocabulary
        return {
            "valid": _summary(assembled.valid_scores),
            "test": _summary(test_scores) if test_scores else None,
            "train_seconds": round(result.seconds + (assembled.refit or {}).get("seconds", 0.0), 2),
            "epochs_run": result.initial_epoch + result.epochs_run,
            "best_epoch": None if result.best_epoch is None else result.best_epoch + 1,
            "stopped_by_time_budget": result.stopped_by_budget,
            "splits": {"train": len(train), "valid": len(valid), "test": len(test) if test else 0,
                       "dropped_empty": train.dropped,
                       **({"unknown_train": len(prepared.unknown)} if prepared.unknown else {})},
            "recipe": to_dict(config),
            **({"vocabulary": vocabulary_summary(config, vocabulary)} if vocabulary else {}),
            **({"calibration": assembled.calibration} if assembled.calibration else {}),
            **({"wide": wide} if wide else {}),
            **({"refit": assembled.refit} if assembled.refit else {}),
        }

    def write(self, out: Path, prepared: _Prepared, assembled: _Assembled, metrics: dict[str, Any]) -> None:
        write_folder(out, assembled.classifier, metrics, assembled.vocabulary, assembled.valid_scores)


def train(config: ClassifyConfig | dict[str, Any] | None = None, data: Data | None = None,
          out: str | os.PathLike | None = None, *, valid: Data | None = None, test: Data | None = None,
          resume: bool | str = False, progress: Progress | None = None, command: Sequence[str] | None = None,
          distribute: DistributeConfig | None = None) -> TrainResult:
    """Train a classifier on ``data``, score it on ``valid`` and ``test``, and write the folder ``out``.

    ``data``/``valid``/``test``: a file (CSV/TSV/JSONL, ``.gz``, or a folder of label folders), a
    ``(texts, labels)`` pair of lists, or LabelledTexts. Without ``valid`` a stratified
    ``valid_fraction`` of ``data`` is held out. ``resume`` continues the run in ``out`` from its
    last checkpoint with its saved settings and labels (only epochs, patience and max_minutes
    may change); ``"auto"``: resume when ``out`` holds a complete checkpoint, else start afresh. ``progress`` receives :class:`~kformer.training.ProgressEvent` objects;
    ``command`` is recorded in ``metrics.json``. Bad input fails before anything is written, and
    a failed fresh run leaves no folder behind. ``distribute`` trains data-parallel as one process
    of that job (:mod:`kformer.parallel`; JAX backend): ``batch_size`` is the global batch, process
    0 writes ``out``, the others only their checkpoints beside it (their result's ``folder``).
    """
    return skeleton.train(ClassifyRun(), config, data, out, valid=valid, test=test, resume=resume, progress=progress,
                          command=None if command is None else list(command), distribute=distribute)


def learned_vocabulary(config: ClassifyConfig, texts: Sequence[str], state_dir: Path, resume: bool) -> list[str] | None:
    """The scratch backbones' vocabulary: learned and saved to ``training/vocab.txt``, or read
    back from it on resume. None for pretrained backbones (they bring their own)."""
    from kformer.text.vocabulary import (
        RESERVED_TOKENS,
        learn_vocabulary,
        load_vocabulary,
        save_vocabulary,
    )
    from kformer.text.words import bigram_vocabulary

    if not config.scratch:
        return None
    path = state_dir / VOCAB_FILE
    if resume:
        return load_vocabulary(path)
    if config.ngrams == 2:
        vocabulary = bigram_vocabulary(texts, config.vocab_size, RESERVED_TOKENS)
    else:
        vocabulary = learn_vocabulary(texts, config.vocab_size, config.tokenizer)
    save_vocabulary(vocabulary, path)
    return vocabulary


def vocabulary_summary(config: ClassifyConfig, vocabulary: list[str]) -> dict[str, Any]:
    """``{"requested", "size"}`` of the learned vocabulary, and a ``note`` when the training text
    had fewer distinct tokens than ``vocab_size`` (the vocabulary is then capped, not padded)."""
    summary: dict[str, Any] = {"requested": config.vocab_size, "size": len(vocabulary)}
    if len(vocabulary) < config.vocab_size:
        summary["note"] = (f"the training text has only {len(vocabulary)} distinct tokens (reserved ones included), "
                           f"fewer than vocab_size {config.vocab_size}: the vocabulary was capped")
    return summary


def _check_backbone(config: ClassifyConfig) -> None:
    if not config.scratch:
        from kformer.models.pretrained import backbone_source

        backbone_source(config.backbone)  # a missing package or folder fails before any writing


def _saved_labels(extra: dict[str, Any]) -> list[str]:
    labels = extra.get("labels")
    if not isinstance(labels, list) or not labels:
        raise CorruptModel(f"{TRAINING_DIR}/{STATE_FILE} names no labels; train afresh (without {{field}}) or into a new "
                           "folder", field="resume")
    return [str(label) for label in labels]


def _new_classifier(config: ClassifyConfig, labels: list[str], vocabulary: list[str] | None,
                    state_dir: Path) -> Classifier:
    """A freshly built (seeded) network for ``labels``, wrapped as the folder's Classifier."""
    from kformer.precision import precision_scope
    from kformer.text.vocabulary import make_tokenizer
    from kformer.training import set_seed

    set_seed(config.seed)
    with precision_scope(config.precision):
        model, kind = network.build_network(config, len(labels), vocabulary)
    tokenizer = make_tokenizer(vocabulary, config.max_length, config.tokenizer, config.truncation) if kind == "encoder" else None
    return Classifier(state_dir.parent, network_manifest(config, labels, kind), model, tokenizer)


def _refit_network(prepared: _Prepared, vocabulary: list[str] | None, first: FitResult, state_dir: Path, progress,
                   spent: float) -> tuple[Classifier | None, dict[str, Any]]:
    """``refit``: a new network of the same settings and seed trained on the training and
    validation texts together for the epochs validation chose (the first run's best epoch), in
    what is left of ``max_minutes`` after ``spent`` seconds. ``(None, why)`` when nothing is left."""
    config = prepared.config
    epochs = first.initial_epoch + first.epochs_run if first.best_epoch is None else first.best_epoch + 1
    every = _together(prepared.train, prepared.valid)
    if config.max_minutes is not None:
        left = config.max_minutes - spent / 60.0
        if left < 0.05 * config.max_minutes:
            return None, {"skipped": f"max_minutes {config.max_minutes:g} was spent by the first run", "seconds": 0.0}
        config = dataclasses.replace(config, max_minutes=left)
    final = _new_classifier(config, prepared.labels, vocabulary, state_dir)
    result = network.fit_without_validation(final, config, every, epochs, state_dir / "refit", progress,
                                            unknown=prepared.unknown)
    return final, {"epochs": epochs, "epochs_run": result.epochs_run, "rows": len(every),
                   "seconds": round(result.seconds, 2), "stopped_by_time_budget": result.stopped_by_budget}


def _out_of_scope_rows(train: LabelledTexts, valid: LabelledTexts) -> int:
    """The validation rows whose labels the training split lacks: examples of no class."""
    known = set(train.labels)
    return sum(label not in known for label in valid.labels)


def _together(train: LabelledTexts, valid: LabelledTexts) -> LabelledTexts:
    """The training and validation texts as one set: what a refit learns from."""
    return LabelledTexts([*train.texts, *valid.texts], [*train.labels, *valid.labels], train.source)


def _budget_left(config: ClassifyConfig, wide_seconds: float, train_rows: int, valid_rows: int) -> ClassifyConfig:
    """``config`` with the ``max_minutes`` the network gets once the wide part's fit (and, with
    ``wide_refit``, its refit on training + validation rows, estimated from the first) is counted."""
    if config.max_minutes is None:
        return config
    refit_share = (train_rows + valid_rows) / train_rows if config.wide_refit or config.refit is True else 0.0
    wide_minutes = wide_seconds / 60.0 * (1.0 + refit_share)
    return dataclasses.replace(config, max_minutes=max(config.max_minutes - wide_minutes, 0.1))


def _summary(scores: dict) -> dict:
    route = {"unknown_route": scores["unknown_route"]} if "unknown_route" in scores else {}
    return {"accuracy": scores["accuracy"], "macro_f1": scores["macro_f1"], "n": scores["n"], **route}
