"""Training plumbing shared by every task: recipes, seeds, schedules and callbacks.

- :class:`WarmupDecay` is a serializable learning-rate schedule (linear warmup, then cosine or
  linear decay).
- :func:`standard_callbacks` gives early stopping with best weights restored, a time budget
  (:class:`TimeBudget`), an atomic checkpoint per epoch (:class:`EpochCheckpoint`), TensorBoard
  logs and a CSV history; :func:`restore_checkpoint` resumes from the last checkpoint.
- :func:`fit` runs ``model.fit`` with all of the above and reports what happened.
- :func:`budget_schedule` (warmup, then cosine decay over the steps or a time budget) for
  generated-data and seq2seq training.
- :class:`ProgressReporter` turns Keras' batch and epoch ends into :class:`ProgressEvent` calls
  of a caller's ``progress`` function (the CLI draws a bar, a server reports a percentage);
  nothing in training prints.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import keras
import numpy as np

from kformer.artifacts import save_keras_atomic, write_json_atomic
from kformer.errors import BadInput, CorruptModel

CHECKPOINT_NAME = "checkpoint.keras"
CHECKPOINT_STATE_NAME = "checkpoint.json"


def set_seed(seed: int) -> None:
    """Seed Python, NumPy and the backend so that runs repeat."""
    keras.utils.set_random_seed(int(seed))


# --- learning-rate schedule --------------------------------------------------------------------


@keras.saving.register_keras_serializable(package="kformer")
class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to ``peak`` over ``warmup_steps``, then decay to ``peak * final_ratio``.

    ``decay`` is ``"cosine"`` or ``"linear"``; after ``total_steps`` the rate stays at its floor.
    """

    def __init__(self, peak: float, warmup_steps: int, total_steps: int, decay: str = "cosine", final_ratio: float = 0.0):
        if decay not in ("cosine", "linear"):
            raise ValueError(f"decay must be 'cosine' or 'linear', got {decay!r}")
        self.peak = float(peak)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = max(int(total_steps), self.warmup_steps + 1)
        self.decay = decay
        self.final_ratio = float(final_ratio)

    def __call__(self, step):
        ops = keras.ops
        step = ops.cast(step, "float32")
        warmup = float(max(self.warmup_steps, 1))
        warm_lr = self.peak * ops.minimum(step + 1.0, warmup) / warmup
        progress = ops.clip((step - self.warmup_steps) / float(self.total_steps - self.warmup_steps), 0.0, 1.0)
        if self.decay == "cosine":
            shape = 0.5 * (1.0 + ops.cos(math.pi * progress))
        else:
            shape = 1.0 - progress
        floor = self.peak * self.final_ratio
        decayed = floor + (self.peak - floor) * shape
        return ops.where(step < self.warmup_steps, warm_lr, decayed)

    def get_config(self) -> dict[str, Any]:
        return {
            "peak": self.peak,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            "decay": self.decay,
            "final_ratio": self.final_ratio,
        }


# --- progress ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProgressEvent:
    """One report from a training run, for a caller's ``progress`` function.

    ``stage`` is ``"compiling"`` (the first batch, which traces/compiles the step), ``"training"``
    (a batch ended), ``"epoch"`` (an epoch ended; ``logs`` has its training and validation
    metrics) or ``"done"``. ``fraction`` is the share of the run done: of the steps, or of the
    time budget when that ends first.
    """

    stage: str
    fraction: float
    step: int = 0
    total_steps: int | None = None
    epoch: int = 0
    epochs: int | None = None
    seconds: float = 0.0
    seconds_left: float | None = None
    logs: dict[str, float] = field(default_factory=dict)


Progress = Callable[[ProgressEvent], None]


class ProgressReporter(keras.callbacks.Callback):
    """Calls ``progress(ProgressEvent)`` at the first batch, every ``every_seconds`` of batches,
    and at every epoch end. ``total_steps`` counts all batches of the run (``initial_epoch``
    included); ``budget_seconds`` is the time budget, if any."""

    def __init__(self, progress: Progress, total_steps: int | None, epochs: int | None,
                 budget_seconds: float | None = None, every_seconds: float = 0.5, initial_step: int = 0):
        super().__init__()
        self.progress, self.total_steps, self.epochs = progress, total_steps, epochs
        self.budget_seconds, self.every_seconds = budget_seconds, every_seconds
        self.step, self.epoch = int(initial_step), 0

    def _event(self, stage: str, logs=None) -> ProgressEvent:
        seconds = time.monotonic() - self.start
        fractions = [self.step / self.total_steps] if self.total_steps else []
        if self.budget_seconds:
            fractions.append(seconds / self.budget_seconds)
        fraction = min(max(fractions, default=0.0), 1.0)
        left = None
        if self.budget_seconds:
            left = max(self.budget_seconds - seconds, 0.0)
        if fraction > 0 and stage != "compiling":
            by_rate = seconds * (1 - fraction) / fraction
            left = by_rate if left is None else min(left, by_rate)
        scalars = {k: float(v) for k, v in (logs or {}).items() if np.ndim(v) == 0}
        return ProgressEvent(stage, fraction, self.step, self.total_steps, self.epoch, self.epochs,
                             seconds, left, scalars)

    def on_train_begin(self, logs=None):
        self.start = self.last = time.monotonic()
        self.progress(self._event("compiling"))

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch + 1

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        now = time.monotonic()
        if now - self.last >= self.every_seconds:
            self.last = now
            self.progress(self._event("training", logs))

    def on_epoch_end(self, epoch, logs=None):
        self.progress(self._event("epoch", logs))

    def on_train_end(self, logs=None):
        self.progress(self._event("done", logs))


# --- callbacks ---------------------------------------------------------------------------------


class TimeBudget(keras.callbacks.Callback):
    """Stop training cleanly once ``max_minutes`` have passed (checked after every batch).

    ``fired`` tells afterwards whether the budget ended training. The running epoch stops at the
    next batch; Keras still runs its validation, so early stopping can restore the best weights.
    """

    def __init__(self, max_minutes: float | None):
        super().__init__()
        self.max_seconds = None if max_minutes is None else float(max_minutes) * 60.0
        self.fired = False
        self._start = None

    def on_train_begin(self, logs=None):
        self._start = time.monotonic()
        self.fired = False

    def on_train_batch_end(self, batch, logs=None):
        if self.max_seconds is not None and time.monotonic() - self._start >= self.max_seconds:
            self.fired = True
            self.model.stop_training = True


class EpochCheckpoint(keras.callbacks.Callback):
    """After every epoch write ``out_dir/checkpoint.keras`` (weights + optimizer state) atomically.

    ``checkpoint.json`` beside it records the number of completed epochs; it is written after the
    model file, so a crash between the two leaves a consistent older pair or a newer model that
    :func:`restore_checkpoint` simply resumes one epoch early from.
    """

    def __init__(self, out_dir: str | os.PathLike):
        super().__init__()
        self.out_dir = Path(out_dir)

    def on_epoch_end(self, epoch, logs=None):
        save_keras_atomic(self.model, self.out_dir / CHECKPOINT_NAME)
        state = {"epochs_done": epoch + 1, "logs": {k: float(v) for k, v in (logs or {}).items()}}
        write_json_atomic(self.out_dir / CHECKPOINT_STATE_NAME, state)


def last_checkpoint(out_dir: str | os.PathLike) -> tuple[Path, int] | None:
    """``(checkpoint path, completed epochs)`` of the last checkpoint in ``out_dir``, or None."""
    out_dir = Path(out_dir)
    model_path, state_path = out_dir / CHECKPOINT_NAME, out_dir / CHECKPOINT_STATE_NAME
    if not (model_path.is_file() and state_path.is_file()):
        return None
    try:
        epochs_done = int(json.loads(state_path.read_text(encoding="utf-8"))["epochs_done"])
    except (ValueError, KeyError, TypeError):
        raise CorruptModel(f"{state_path} is corrupt; delete it and {model_path.name} to start afresh") from None
    return model_path, epochs_done


def restore_checkpoint(model: keras.Model, out_dir: str | os.PathLike) -> int:
    """Load the last checkpoint's weights and optimizer state into a compiled ``model``.

    Returns the ``initial_epoch`` for ``model.fit`` (0 when there is no checkpoint). The model
    must be built the same way as the one that wrote the checkpoint.
    """
    found = last_checkpoint(out_dir)
    if found is None:
        return 0
    path, epochs_done = found
    if model.optimizer is not None and not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    try:
        model.load_weights(path)
    except Exception as exc:  # shape mismatch, damaged zip
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise BadInput(f"cannot resume from {path} ({reason}); use the same settings or a new --out") from None
    return epochs_done


def standard_callbacks(
    out_dir: str | os.PathLike,
    patience: int | None = 2,
    max_minutes: float | None = None,
    monitor: str = "val_loss",
    checkpoint: bool = True,
    tensorboard: bool = True,
    csv_history: bool = True,
) -> list[keras.callbacks.Callback]:
    """The callbacks every kformer training run uses, writing into ``out_dir``.

    Early stopping (``patience`` epochs without improvement of ``monitor``; None = off) always
    restores the best weights at the end, also when the time budget or the epoch count ends
    training. Logs: ``out_dir/logs`` (TensorBoard, when the ``tensorboard`` package is installed)
    and ``out_dir/history.csv``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    callbacks: list[keras.callbacks.Callback] = [TimeBudget(max_minutes)]
    callbacks.append(
        keras.callbacks.EarlyStopping(
            monitor=monitor,
            patience=patience if patience is not None else 10**9,
            restore_best_weights=True,
        )
    )
    if checkpoint:
        callbacks.append(EpochCheckpoint(out_dir))
    if tensorboard and importlib.util.find_spec("tensorboard") is not None:
        callbacks.append(keras.callbacks.TensorBoard(log_dir=str(out_dir / "logs"), write_graph=False))
    if csv_history:
        callbacks.append(keras.callbacks.CSVLogger(str(out_dir / "history.csv"), append=True))
    return callbacks


@dataclass
class FitResult:
    """What :func:`fit` did: the history, seconds spent, and why it stopped."""

    history: dict[str, list[float]]
    seconds: float
    initial_epoch: int
    epochs_run: int
    stopped_by_budget: bool
    best_epoch: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def fit(
    model: keras.Model,
    train,
    validation=None,
    *,
    epochs: int,
    out_dir: str | os.PathLike,
    patience: int | None = 2,
    max_minutes: float | None = None,
    resume: bool = False,
    monitor: str = "val_loss",
    batch_size: int | None = None,
    class_weight: dict | None = None,
    callbacks: list | None = None,
    progress: Progress | None = None,
) -> FitResult:
    """``model.fit`` with :func:`standard_callbacks`; with ``resume`` it continues from the last checkpoint.

    ``train`` is a ``tf.data.Dataset`` (or anything ``model.fit`` takes as ``x``) or an ``(x, y)``
    tuple; ``validation`` is what ``validation_data`` takes; ``batch_size`` applies to arrays.
    Without ``validation`` early stopping watches the training loss. Nothing is printed:
    ``progress`` (if given) receives a :class:`ProgressEvent` per epoch and every half second.
    """
    if validation is None and monitor.startswith("val_"):
        monitor = monitor[4:]
    standard = standard_callbacks(out_dir, patience=patience, max_minutes=max_minutes, monitor=monitor)
    initial_epoch = restore_checkpoint(model, out_dir) if resume else 0
    start = time.monotonic()
    if initial_epoch >= epochs:
        history: dict[str, list[float]] = {}
        epochs_run = 0
    else:
        x, y = train if isinstance(train, tuple) else (train, None)
        extra = list(callbacks or [])
        if progress is not None:
            steps = _steps_per_epoch(x, batch_size)
            extra.append(ProgressReporter(
                progress, None if steps is None else steps * epochs, epochs,
                None if max_minutes is None else float(max_minutes) * 60.0,
                initial_step=0 if steps is None else steps * initial_epoch,
            ))
        result = model.fit(
            x,
            y,
            validation_data=validation,
            epochs=epochs,
            initial_epoch=initial_epoch,
            batch_size=None if y is None else batch_size,
            shuffle=y is not None,  # a dataset arrives already shuffled (Keras would warn)
            callbacks=standard + extra,
            class_weight=class_weight,
            verbose=0,
        )
        history = {k: [float(v) for v in vs] for k, vs in result.history.items()}
        epochs_run = len(next(iter(history.values()), []))
    budget = standard[0]
    stopper = standard[1]
    best = getattr(stopper, "best_epoch", None)
    return FitResult(
        history=history,
        seconds=time.monotonic() - start,
        initial_epoch=initial_epoch,
        epochs_run=epochs_run,
        stopped_by_budget=budget.fired,
        best_epoch=None if best is None else int(best),
    )


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


# --- time-budget schedule (generated-data and seq2seq training) -------------------------------


def budget_schedule(peak, warmup_steps, total_steps, budget_seconds=None, final_ratio=0.02):
    """A callback setting the learning rate: linear warmup over ``warmup_steps``, then cosine decay
    to ``peak * final_ratio`` by whichever comes first, ``total_steps`` or the end of
    ``budget_seconds`` of training (so a time-bounded run still ends at a low rate). The clock
    for the budget starts after the first batch, whose time (graph tracing / XLA compilation)
    is taken off the budget rather than off the decay. Its ``steps`` counts batches."""

    class WarmupCosineByBudget(keras.callbacks.Callback):
        steps = 0

        def on_train_begin(self, logs=None):
            self.began = time.monotonic()
            self.start, self.budget = None, budget_seconds

        def rate(self) -> float:
            warmup = max(int(warmup_steps), 1)
            if self.steps < warmup:
                return peak * (self.steps + 1) / warmup
            progress = (self.steps - warmup) / max(int(total_steps) - warmup, 1)
            if self.budget and self.start is not None:
                progress = max(progress, (time.monotonic() - self.start) / max(self.budget, 1e-3))
            floor = peak * final_ratio
            return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

        def on_train_batch_begin(self, batch, logs=None):
            self.model.optimizer.learning_rate.assign(self.rate())

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1
            if self.start is None:
                self.start = time.monotonic()
                if budget_seconds:
                    self.budget = budget_seconds - (self.start - self.began)

    return WarmupCosineByBudget()
