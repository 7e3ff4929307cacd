"""``fit``: ``model.fit`` with every callback a run needs, reporting what happened.

A run's length and checkpoints are one :class:`FitPlan`; :func:`fit` adds the standard callbacks
(:class:`StandardCallbacks`: time budget, early stopping keeping the best epoch, checkpoint per
epoch, logs), resumes from the last checkpoint when asked, turns Ctrl-C into
:class:`~kformer.training.callbacks.TrainingInterrupted` and returns a :class:`FitResult`.
"""

from __future__ import annotations

import importlib.util
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import keras

from kformer import faults
from kformer.training.callbacks import (
    BatchFaults,
    BestEpoch,
    Heartbeat,
    Position,
    TimeBudget,
    TrainingInterrupted,
)
from kformer.training.checkpoints import (
    EpochCheckpoint,
    checkpoint_seconds,
    last_checkpoint,
    remove_checkpoint_debris,
    restore_checkpoint,
)
from kformer.training.progress import (
    HISTORY_NAME,
    TRAIN_LOG,
    Progress,
    ProgressReporter,
    append_log,
    log_to_file,
)


def set_seed(seed: int) -> None:
    """Seed Python, NumPy and the backend so that runs repeat."""
    keras.utils.set_random_seed(int(seed))


@dataclass(frozen=True)
class FitPlan:
    """How long a run trains and where it keeps its checkpoints and logs.

    ``epochs`` at most; early stopping after ``patience`` epochs without improvement of
    ``monitor`` (None: off; without validation data the training metric is watched); a time budget
    of ``max_minutes`` (with ``resume``: minutes of training in all); ``batch_size`` only when
    the training data are arrays.
    """

    epochs: int
    out_dir: Path
    patience: int | None = 2
    max_minutes: float | None = None
    monitor: str = "val_loss"
    resume: bool = False
    batch_size: int | None = None


@dataclass(frozen=True)
class StandardCallbacks:
    """The callbacks every run uses, by name (:func:`standard_callbacks`)."""

    budget: TimeBudget
    best: BestEpoch
    checkpoint: EpochCheckpoint
    logs: tuple[keras.callbacks.Callback, ...]

    def all(self) -> list[keras.callbacks.Callback]:
        return [self.budget, self.best, self.checkpoint, *self.logs]


def standard_callbacks(plan: FitPlan, monitor: str, agree: Callable[[bool], bool] | None = None) -> StandardCallbacks:
    """The callbacks every kformer training run uses, writing into ``plan.out_dir``.

    Early stopping (``plan.patience`` epochs without improvement of ``monitor``; None = off)
    always restores the best weights at the end, also when the time budget or the epoch count ends
    training. Logs: ``out_dir/logs`` (TensorBoard, when the ``tensorboard`` package is installed)
    and ``out_dir/history.csv``. ``agree`` makes the budget's stop decision the job's
    (:class:`TimeBudget`).
    """
    out_dir = Path(plan.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    logs: list[keras.callbacks.Callback] = []
    if importlib.util.find_spec("tensorboard") is not None:
        logs.append(keras.callbacks.TensorBoard(log_dir=str(out_dir / "logs"), write_graph=False))
    logs.append(keras.callbacks.CSVLogger(str(out_dir / HISTORY_NAME), append=True))
    patience = plan.patience if plan.patience is not None else 10**9
    return StandardCallbacks(TimeBudget(plan.max_minutes, agree),
                             BestEpoch(monitor=monitor, patience=patience, restore_best_weights=True),
                             EpochCheckpoint(out_dir), tuple(logs))


@dataclass
class FitResult:
    """What :func:`fit` did: the history, seconds spent, and why it stopped."""

    history: dict[str, list[float]]
    seconds: float
    initial_epoch: int
    epochs_run: int
    stopped_by_budget: bool
    best_epoch: int | None = None


def fit(model: keras.Model, train, validation, plan: FitPlan, *, callbacks: list | None = None,
        progress: Progress | None = None, agree: Callable[[bool], bool] | None = None) -> FitResult:
    """``model.fit`` as ``plan`` says, with :func:`standard_callbacks`; with ``plan.resume`` it
    continues from the last checkpoint.

    ``train`` is a ``tf.data.Dataset`` (or anything ``model.fit`` takes as ``x``) or an ``(x, y)``
    tuple; ``validation`` is what ``validation_data`` takes, or None. ``callbacks`` come after
    the standard ones. Nothing is printed: ``progress`` (if given) receives a
    :class:`~kformer.training.progress.ProgressEvent` per epoch and every half second, and
    ``out_dir/train.log`` gets one line per epoch. ``agree`` (data-parallel runs) makes the time
    budget's stop decision process 0's.
    """
    monitor = plan.monitor[4:] if validation is None and plan.monitor.startswith("val_") else plan.monitor
    standard = standard_callbacks(plan, monitor, agree)
    remove_checkpoint_debris(plan.out_dir)
    spent = checkpoint_seconds(plan.out_dir) if plan.resume else 0.0
    initial_epoch = restore_checkpoint(model, plan.out_dir) if plan.resume else 0
    if initial_epoch:
        append_log(Path(plan.out_dir) / TRAIN_LOG, f"resumed from the checkpoint after epoch {initial_epoch}")
    for callback in [*standard.all(), *(callbacks or [])]:
        if hasattr(callback, "spent_seconds"):  # clocks that continue across a resume
            callback.spent_seconds = spent
    start = time.monotonic()
    history: dict[str, list[float]] = {}
    if initial_epoch < plan.epochs:
        extra = _extra_callbacks(train, plan, initial_epoch, spent, progress, callbacks or [])
        history = _run(model, train, validation, plan, initial_epoch, [*standard.all(), *extra])
    best = getattr(standard.best, "best_epoch", None)
    return FitResult(history=history, seconds=time.monotonic() - start, initial_epoch=initial_epoch,
                     epochs_run=len(next(iter(history.values()), [])), stopped_by_budget=standard.budget.fired,
                     best_epoch=None if best is None else int(best))


def _run(model, train, validation, plan: FitPlan, initial_epoch: int, callbacks: list) -> dict:
    """``model.fit`` from ``initial_epoch``; Ctrl-C becomes :class:`TrainingInterrupted`."""
    x, y = train if isinstance(train, tuple) else (train, None)
    position = next(c for c in callbacks if isinstance(c, Position))
    _build_optimizer(model)
    try:
        result = model.fit(x, y, validation_data=validation, epochs=plan.epochs, initial_epoch=initial_epoch,
                           batch_size=None if y is None else plan.batch_size,
                           shuffle=y is not None,  # a dataset arrives already shuffled (Keras would warn)
                           callbacks=callbacks, verbose=0)
    except KeyboardInterrupt:
        # the last complete epoch's checkpoint stays; a half epoch is not saved as a whole one
        done = last_checkpoint(plan.out_dir)
        raise TrainingInterrupted(Path(plan.out_dir), 0 if done is None else done[1], position.batches) from None
    return {k: [float(v) for v in vs] for k, vs in result.history.items()}


def _build_optimizer(model) -> None:
    """Create the optimizer's slot variables now, eagerly. On TensorFlow, Keras otherwise creates
    them inside the first traced training step, where each costs ~40 ms (lifted out of the graph
    one by one): seconds per training run for a model of a hundred variables."""
    if model.optimizer is not None and not model.optimizer.built and model.built and model.trainable_variables:
        model.optimizer.build(model.trainable_variables)


def _extra_callbacks(train, plan: FitPlan, initial_epoch: int, spent: float, progress: Progress | None,
                     callbacks: list) -> list:
    """Where training is (for Ctrl-C), the caller's ``callbacks``, the heartbeat of a process the
    launcher started, the ``batch-*`` faults and the progress reports, in that order."""
    from kformer.launcher import current_process

    extra: list = [Position(), *callbacks]
    job = current_process()
    if job is not None:
        extra.append(Heartbeat(job.heartbeat))
    sleep, pause, die = faults.batch_sleep(), faults.batch_pause(), faults.batch_die()
    if sleep is not None or pause is not None or die is not None:
        extra.append(BatchFaults(sleep or 0.0, pause, faults.PAUSE_SECONDS, die))
    x = train[0] if isinstance(train, tuple) else train
    steps = _steps_per_epoch(x, plan.batch_size)
    budget = None if plan.max_minutes is None else max(float(plan.max_minutes) * 60.0 - spent, 0.0)
    for report in filter(None, (progress, log_to_file(Path(plan.out_dir) / TRAIN_LOG))):
        extra.append(ProgressReporter(report, None if steps is None else steps * plan.epochs, plan.epochs, budget,
                                      initial_step=0 if steps is None else steps * initial_epoch))
    return extra


def _steps_per_epoch(x, batch_size: int | None) -> int | None:
    """Batches per epoch of what ``model.fit`` gets as ``x`` (None when it cannot be known)."""
    if hasattr(x, "cardinality"):  # tf.data
        steps = int(x.cardinality())
        return steps if steps > 0 else None
    if hasattr(x, "__len__") and batch_size is None:  # a PyDataset / Sequence of batches
        return len(x)
    if batch_size:
        return math.ceil(len(x) / batch_size)
    return None
