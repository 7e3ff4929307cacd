"""Training a classifier's network: build it, compile it, batch the texts, fit it.

kformer's own encoder (``backbone`` scratch, kind ``"encoder"``) or a KerasHub BERT (the other
backbones, kind ``"bert"``); with ``freeze`` only the head is trained, on text vectors the frozen
backbone computes once (:func:`cached_vectors`). Keras is imported inside the functions: a
classify run fails on bad input before that second of start-up.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from kformer.tasks.classify.data import one_hot

if TYPE_CHECKING:
    from kformer.parallel import Cluster
    from kformer.tasks.classify.settings import ClassifyConfig

# early stopping keeps the epoch of best validation macro-F1 (a Keras F1Score over the validation
# batches: argmax vs label, per-class F1 averaged); validation loss can rise while accuracy climbs
MONITOR = "val_macro_f1"
# AdamW leaves these variables undecayed in BERT models: every bias and LayerNorm's scale/offset
NO_WEIGHT_DECAY = ("^bias$", "^gamma$", "^beta$")
# kinds whose whole-network training step runs under XLA: a pretrained BERT's step on CPU
# TensorFlow (no XLA under Keras' "auto") took 1.6-1.8x the CPU time of the XLA step (MiniLM,
# batch 32 x 24 tokens, side by side under load); kformer's scratch encoder keeps Keras' choice
XLA_KINDS = ("bert",)
VECTORS_FILE = "text_vectors.npz"


def build_network(config: ClassifyConfig, n_labels: int, vocabulary: list[str] | None):
    """``(uncompiled model, kind)``: kformer's encoder, or a KerasHub BERT for the other backbones."""
    if config.backbone == "scratch":
        from kformer.models.classifier import build_encoder_classifier

        model = build_encoder_classifier(
            len(vocabulary), n_labels, config.max_length, dim=config.dim, heads=config.heads, ff_dim=config.ff_dim,
            blocks=config.blocks, dropout=config.dropout, positions=config.positions, window=config.window,
        )
        return model, "encoder"
    from kformer.models.pretrained import build_bert_classifier

    model = build_bert_classifier(
        config.backbone, n_labels, config.max_length, vocabulary=vocabulary, layers=config.blocks,
        heads=config.heads, dim=config.dim, ff_dim=config.ff_dim, dropout=config.dropout, pooling=config.pooling,
        freeze_token_embedding=config.freeze_token_embedding,
    )
    return model, "bert"


def compile_network(model, config: ClassifyConfig, steps_per_epoch: int, kind: str = "encoder", *,
                    initial_step: int = 0, cluster: Cluster | None = None, xla: bool = False) -> list:
    """Compile ``model`` (AdamW, clipnorm 1, warmup then ``config.decay``); returns the callbacks
    the schedule needs. With ``max_minutes`` the rate is set per batch by
    :func:`~kformer.training.budget_schedule`: it decays by steps or by the clock, whichever is
    further, so a run cut by its time budget ends at a low rate (with a ``cluster``, every process
    takes process 0's rate: :func:`~kformer.parallel.follow_chief_rate`; ``initial_step``: a resumed
    run's step). BERT models keep biases and LayerNorm weights out of weight decay. ``xla``
    compiles the training step with XLA (``jit_compile=True``) whatever the
    backend would choose: Keras' ``"auto"`` turns XLA off on a CPU-only TensorFlow, where the
    MiniLM fine-tuning step then costs 1.6-1.8x the work (:data:`XLA_KINDS`); XLA compiles once per
    batch shape, so the batches must come in few shapes (:func:`batches`). Validation then runs
    as a plain graph (:func:`~kformer.models.pretrained.graph_validation`: nothing compiled per
    shape)."""
    import keras

    from kformer.training import WarmupDecay, budget_schedule

    total = max(1, steps_per_epoch * config.epochs)
    peak, warmup = float(config.learning_rate), int(total * config.warmup)
    callbacks = []
    if config.decay == "none":  # a constant rate, as in the reference lesson
        schedule = peak
    elif config.max_minutes is not None:
        schedule = 0.0  # a variable the callback sets before every batch
        from kformer.parallel import follow_chief_rate

        callbacks.append(budget_schedule(peak, warmup, total, config.max_minutes * 60.0, final_ratio=0.0,
                                         decay=config.decay, initial_step=initial_step))
        callbacks += follow_chief_rate(cluster, clocked=True)
    else:
        schedule = WarmupDecay(peak, warmup, total, config.decay)
    optimizer = keras.optimizers.AdamW(schedule, weight_decay=config.weight_decay, clipnorm=1.0)
    if kind == "bert":
        optimizer.exclude_from_weight_decay(var_names=list(NO_WEIGHT_DECAY))
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.CategoricalCrossentropy(label_smoothing=config.label_smoothing),
        metrics=["accuracy", keras.metrics.F1Score(average="macro", name=MONITOR[4:])],
        jit_compile=True if xla else "auto",
    )
    if xla:
        from kformer.models.pretrained import graph_validation

        callbacks.append(graph_validation())
    return callbacks


def sample_weights(config: ClassifyConfig, labels: list[str], train_labels: list[str]) -> np.ndarray | None:
    """``(n,)`` float32 weights inversely proportional to class frequency, or None."""
    if not config.class_weights:
        return None
    from sklearn.utils.class_weight import compute_class_weight

    weights = compute_class_weight("balanced", classes=np.array(labels), y=np.array(train_labels))
    by_label = dict(zip(labels, weights, strict=True))
    return np.array([by_label[label] for label in train_labels], dtype="float32")


def training_rows(classifier, config: ClassifyConfig, rows, unknown=None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(ids (n, max_length), targets (n, classes), sample weights (n,) or None)`` of the training
    ``rows`` (LabelledTexts of the classifier's labels: one-hot targets, class weights if asked)
    followed by the ``unknown`` rows (``unknown_label``; None or empty: none): outlier exposure
    (Hendrycks et al. 2019), their target the uniform distribution, so their cross-entropy pulls
    the prediction toward "none of these", each weighted ``config.unknown_weight``."""
    index = {label: i for i, label in enumerate(classifier.labels)}
    targets, weights = one_hot(rows.labels, index), sample_weights(config, classifier.labels, rows.labels)
    if unknown is None or not len(unknown):
        return classifier.features(rows.texts), targets, weights
    ids = classifier.features([*rows.texts, *unknown.texts])
    targets = np.concatenate([targets, uniform_targets(len(unknown), len(index))])
    weights = np.concatenate([np.ones(len(rows), dtype="float32") if weights is None else weights,
                              np.full(len(unknown), config.unknown_weight, dtype="float32")])
    return ids, targets, weights


def uniform_targets(rows: int, classes: int) -> np.ndarray:
    """``(rows, classes)`` float32 of ``1 / classes``: the target of a text that belongs to no class."""
    return np.full((rows, classes), 1.0 / classes, dtype="float32")


def batches(kind: str, ids, y, batch_size: int, shuffle: bool, seed: int = 0, sample_weight=None, first_epoch: int = 0,
            cluster: Cluster | None = None, contrast: bool = False, per_class: int = 0):
    """A ``tf.data.Dataset`` of length-bucketed batches (BERT models get their input dicts);
    ``first_epoch`` is where a resumed run starts (it sees the order of that epoch). With a
    ``cluster``: this process's rows of the global batches. For :data:`XLA_KINDS` (one XLA
    compile per batch shape) every training batch (``shuffle``) has ``batch_size`` rows: the short
    one is filled up with copies of its rows weighted 0 (:func:`~kformer.data.batching.fill_batch`),
    so the step meets only ``(batch_size, width bucket)`` shapes. Validation batches keep their
    rows (the same few shapes every epoch; a filled batch would skew ``val_loss``). ``contrast``:
    batches for :func:`training_network`'s contrastive network (:func:`with_contrast_targets`);
    ``per_class`` > 1: training batches hold a class's rows that many at a time
    (:func:`~kformer.data.batching.class_grouped_batches`; rows of no class, uniform ``y``, are one group)."""
    from kformer.data.batching import BucketedBatches, fill_batch
    from kformer.models.pretrained import bert_inputs

    make = BucketedBatches if cluster is None else cluster.batches
    classes = np.where(y.max(axis=1) == 1, y.argmax(axis=1), -1) if per_class > 1 else None
    data = make(ids, y, batch_size, shuffle=shuffle, seed=seed, sample_weight=sample_weight,
                first_epoch=first_epoch, classes=classes, per_class=per_class).dataset()
    if kind in XLA_KINDS and shuffle and cluster is None:
        data = data.map(lambda *batch: fill_batch(batch, batch_size))
    data = data.map(bert_inputs) if kind == "bert" else data
    return data.map(with_contrast_targets) if contrast else data


def with_contrast_targets(x, y, *weight):
    """A batch ``(x, y (n, classes)[, sample_weight (n,)])`` as the contrastive network's
    (:func:`~kformer.models.classifier.with_contrastive_loss`): ``x`` (ids ``(n, width)``, or
    BERT's input dict) becomes a dict that also holds each row's target, zeroed where its weight is
    0 (a filler copy: :func:`~kformer.data.batching.fill_batch`), so the copy is left out."""
    import tensorflow as tf  # input pipeline only, outside the model

    from kformer.models.classifier import CONTRAST_TARGETS

    targets = tf.cast(y, tf.float32)
    if weight:
        targets *= tf.cast(weight[0] > 0, tf.float32)[:, None]
    features = dict(x) if isinstance(x, dict) else {"token_ids": x}
    return ({**features, CONTRAST_TARGETS: targets}, y, *weight)


def training_network(model, config: ClassifyConfig):
    """What ``fit`` trains: ``model`` itself, or with ``contrastive_weight`` > 0 a network of its
    weights that adds the supervised contrastive loss in training
    (:func:`~kformer.models.classifier.with_contrastive_loss`); ``model`` is what is saved."""
    if not config.contrastive_weight:
        return model
    from kformer.models.classifier import with_contrastive_loss

    return with_contrastive_loss(model, config.contrastive_weight, config.contrastive_temperature)


def fit_network(classifier, config: ClassifyConfig, splits, state_dir: Path, resume: bool, progress,
                cluster: Cluster | None = None, unknown=None):
    """Compile and train ``classifier.model`` in place on ``splits`` ``(train, valid)`` and the
    ``unknown`` rows (:func:`training_rows`); returns :class:`~kformer.training.FitResult`."""
    from kformer.training import FitPlan, fit, last_checkpoint

    if config.freeze:
        return fit_frozen(classifier, config, splits, state_dir, resume, progress)
    train, valid = splits
    index = {label: i for i, label in enumerate(classifier.labels)}
    x_train, y_train, weights = training_rows(classifier, config, train, unknown)
    x_valid = classifier.features(valid.texts)
    done = last_checkpoint(state_dir) if resume else None
    contrast = config.contrastive_weight > 0
    train_batches = batches(classifier.kind, x_train, y_train, config.batch_size, True, config.seed, weights,
                            first_epoch=0 if done is None else done[1], cluster=cluster, contrast=contrast,
                            per_class=config.contrastive_per_class if contrast else 0)
    valid_batches = batches(classifier.kind, x_valid, one_hot(valid.labels, index), max(config.batch_size, 64), False,
                            cluster=cluster, contrast=contrast)
    model = training_network(classifier.model, config)
    steps = math.ceil(len(x_train) / config.batch_size)
    schedule = compile_network(model, config, steps, classifier.kind, initial_step=0 if done is None else done[1] * steps,
                               cluster=cluster, xla=classifier.kind in XLA_KINDS)
    preprocessor = getattr(classifier.model, "preprocessor", None)
    if classifier.kind == "bert":
        classifier.model.preprocessor = None  # batches are already token ids; the saved model keeps its preprocessor
    try:
        plan = FitPlan(epochs=config.epochs, out_dir=state_dir, patience=config.patience,
                       max_minutes=config.max_minutes, monitor=MONITOR, resume=resume, batch_size=config.batch_size)
        return fit(model, train_batches, valid_batches, plan, callbacks=schedule, progress=progress,
                   agree=None if cluster is None else cluster.agree)
    finally:
        if classifier.kind == "bert":
            classifier.model.preprocessor = preprocessor


def fit_without_validation(classifier, config: ClassifyConfig, rows, epochs: int, state_dir: Path, progress,
                           unknown=None):
    """``refit``: compile and train ``classifier.model`` (freshly built) on ``rows`` (LabelledTexts:
    the training and validation texts together) for ``epochs``, the count validation chose. The
    rate follows the first run's schedule (warmup and decay over ``config.epochs``) and stops at
    that epoch, so the second run repeats the chosen one on more texts; nothing is held out, so
    nothing stops it early (``loss`` is watched only to restore the last, lowest-loss weights).
    ``config.max_minutes`` is this run's own budget; ``unknown`` rows train as in :func:`training_rows`.
    Returns :class:`~kformer.training.FitResult`."""
    from kformer.training import FitPlan, fit

    ids, targets, weights = training_rows(classifier, config, rows, unknown)
    contrast = config.contrastive_weight > 0
    train_batches = batches(classifier.kind, ids, targets, config.batch_size, True, config.seed, weights,
                            contrast=contrast, per_class=config.contrastive_per_class if contrast else 0)
    steps = math.ceil(len(ids) / config.batch_size)
    model = training_network(classifier.model, config)
    schedule = compile_network(model, config, steps, classifier.kind, xla=classifier.kind in XLA_KINDS)
    preprocessor = getattr(classifier.model, "preprocessor", None)
    if classifier.kind == "bert":
        classifier.model.preprocessor = None
    try:
        plan = FitPlan(epochs=epochs, out_dir=state_dir, patience=None, max_minutes=config.max_minutes,
                       monitor="loss", batch_size=config.batch_size)
        return fit(model, train_batches, None, plan, callbacks=schedule, progress=progress)
    finally:
        if classifier.kind == "bert":
            classifier.model.preprocessor = preprocessor


def fit_frozen(classifier, config: ClassifyConfig, splits, state_dir: Path, resume: bool, progress):
    """``freeze``: the frozen backbone's mean-pooled text vectors of the training and validation
    texts, computed once (:func:`cached_vectors`), train only the head (the model's dropout and
    dense layers, so the folder's model still predicts from raw text)."""
    from kformer.models.pretrained import frozen_parts
    from kformer.training import FitPlan, fit, last_checkpoint

    train, valid = splits
    index = {label: i for i, label in enumerate(classifier.labels)}
    encoder, head = frozen_parts(classifier.model)
    vectors = cached_vectors(state_dir, classifier, encoder, {"train": train.texts, "valid": valid.texts})
    done = last_checkpoint(state_dir) if resume else None
    steps = math.ceil(len(train) / config.batch_size)
    schedule = compile_network(head, config, steps, "bert", initial_step=0 if done is None else done[1] * steps)
    plan = FitPlan(epochs=config.epochs, out_dir=state_dir, patience=config.patience, max_minutes=config.max_minutes,
                   monitor=MONITOR, resume=resume, batch_size=config.batch_size)
    return fit(head, (vectors["train"], one_hot(train.labels, index)), (vectors["valid"], one_hot(valid.labels, index)),
               plan, callbacks=schedule, progress=progress)


def cached_vectors(state_dir: Path, classifier, encoder, texts: dict[str, Sequence[str]]) -> dict[str, np.ndarray]:
    """``{name: (len(texts[name]), dim) float32}`` text vectors, read from ``training/`` when it
    holds those of the same texts and backbone (a resumed run), else computed and saved there."""
    from kformer.models.pretrained import text_vectors

    digest = hashlib.sha256(json.dumps([classifier.manifest.get("backbone"), classifier.max_length, texts],
                                       sort_keys=True).encode("utf-8")).hexdigest()
    path = state_dir / VECTORS_FILE
    if path.is_file():
        with contextlib.suppress(OSError, ValueError, KeyError), np.load(path) as cached:
            if str(cached["digest"]) == digest:
                return {name: np.asarray(cached[name]) for name in texts}
    vectors = {name: text_vectors(encoder, classifier.features(rows)) for name, rows in texts.items()}
    partial = path.with_name(path.name + ".partial.npz")
    np.savez(partial, digest=np.array(digest), **vectors)
    os.replace(partial, path)
    return vectors
