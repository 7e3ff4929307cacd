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

What a crash loses: :class:`EpochCheckpoint` writes the weights, optimizer state (with its step
counter, so the learning-rate schedule continues) and the dropout seed counters after every epoch,
through a temporary file and a rename, so SIGKILL at any moment leaves the last complete epoch's
checkpoint and ``resume`` repeats only the epoch that was running. Ctrl-C (SIGINT) in :func:`fit`
raises :class:`TrainingInterrupted`, which says how many epochs the checkpoint holds and how many
batches of the running epoch are lost (a half epoch is never saved as a whole one). The crash
tests inject faults through ``KFORMER_FAULT`` (:mod:`kformer.faults`; off unless set).
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

from kformer import faults
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

    ``stage`` is ``"settings"`` (before training: ``message`` says what the task chose, e.g. its
    ``auto`` settings), ``"compiling"`` (the first batch, which traces/compiles the step),
    ``"training"`` (a batch ended), ``"epoch"`` (an epoch ended; ``logs`` has its training and
    validation metrics) or ``"done"``. ``fraction`` is the share of the run done: of the steps, or
    of the time budget when that ends first.
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
    message: str = ""

    def line(self) -> str:
        """One readable line: ``epoch 3/10  loss 0.4123  accuracy 0.8812  val_loss ...  12 s  ~40 s left``
        (a ``"settings"`` event: its ``message``)."""
        if self.stage == "settings":
            return self.message
        parts = [f"epoch {self.epoch}" + (f"/{self.epochs}" if self.epochs and self.epochs < 10**6 else "")]
        parts += [f"{name} {value:.4f}" for name, value in self.logs.items() if name != "learning_rate"]
        parts.append(f"{self.seconds:.0f} s")
        if self.seconds_left is not None and self.stage != "done":
            parts.append(f"~{self.seconds_left:.0f} s left")
        return "  ".join(parts)

    def to_json(self) -> dict[str, Any]:
        """The event as a JSON-ready dict (``--log-format json``)."""
        return {"stage": self.stage, "epoch": self.epoch, "epochs": self.epochs, "step": self.step,
                "fraction": round(self.fraction, 4), "seconds": round(self.seconds, 2),
                "seconds_left": None if self.seconds_left is None else round(self.seconds_left, 1),
                **{k: round(v, 6) for k, v in self.logs.items()}, **({"message": self.message} if self.message else {})}


Progress = Callable[[ProgressEvent], None]
TRAIN_LOG = "train.log"


def read_history(path: str | os.PathLike) -> dict[str, list[float]]:
    """``{metric: [value per epoch]}`` from the ``history.csv`` that :func:`fit` writes ({} if none)."""
    import csv

    history: dict[str, list[float]] = {}
    if not Path(path).is_file():
        return history
    with open(path, encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            for key, value in row.items():
                if key != "epoch" and value not in (None, "", "NA"):  # CSVLogger writes NA for a missing metric
                    history.setdefault(key, []).append(float(value))
    return history


def log_to_file(path: Path) -> Progress:
    """A progress function appending one line per epoch (and the start and end) to ``path``."""

    def write(event: ProgressEvent) -> None:
        if event.stage in ("epoch", "done", "compiling"):
            text = {"compiling": "training started", "done": f"training ended after {event.seconds:.0f} s"}
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')}  {text.get(event.stage) or event.line()}\n")

    return write


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
    """Stop training cleanly once ``max_minutes`` have passed (checked after every batch and
    after each epoch's validation).

    ``fired`` tells afterwards whether the budget ended training. The running epoch stops at the
    next batch; Keras still runs its validation, so early stopping can restore the best weights.
    ``agree`` (set by :func:`fit` for data-parallel runs, :meth:`kformer.parallel.Cluster.agree`)
    turns this process's decision into the one every process follows: process 0's clock decides.
    ``spent_seconds`` (set by :func:`fit` when resuming) is the training time of the runs before:
    ``max_minutes`` counts all of them together.
    """

    def __init__(self, max_minutes: float | None, agree: Callable[[bool], bool] | None = None):
        super().__init__()
        self.max_seconds = None if max_minutes is None else float(max_minutes) * 60.0
        self.agree = agree
        self.fired = False
        self.spent_seconds = 0.0
        self._start = None

    def on_train_begin(self, logs=None):
        self._start = time.monotonic()
        self.fired = False

    def on_train_batch_end(self, batch, logs=None):
        self._check()

    def on_epoch_end(self, epoch, logs=None):
        # validation (before this call) may use up what was left: without this check the next
        # epoch would begin, and its first batch (a new curriculum level: new shapes to trace) runs
        # whole before the batch check can stop it (a 10-minute run once ended at 648 s)
        self._check()

    def _check(self) -> None:
        if self.max_seconds is None:
            return
        spent = self.spent_seconds + time.monotonic() - self._start >= self.max_seconds
        if self.agree(spent) if self.agree is not None else spent:
            self.fired = True
            self.model.stop_training = True


class EpochCheckpoint(keras.callbacks.Callback):
    """After every epoch write ``out_dir/checkpoint.keras`` (weights + optimizer state) atomically.

    ``checkpoint.json`` beside it records the completed ``epochs_done``, the optimizer's
    ``iterations``, the ``learning_rate`` of the last step, the dropout layers' ``seed_states``
    (Keras does not save them; restored so a resumed run draws the masks an uninterrupted one
    would), ``train_seconds`` (training time so far, the runs before a resume included, so a
    resumed time budget and its learning-rate decay continue where they were) and the epoch's
    ``logs``. It is written after the model file; a crash between the two
    renames leaves a model one epoch newer than the JSON, which :func:`restore_checkpoint`
    recognises by its optimizer step and resumes from.
    """

    def __init__(self, out_dir: str | os.PathLike):
        super().__init__()
        self.out_dir = Path(out_dir)
        self.spent_seconds = 0.0  # set by fit() when resuming
        self._began = time.monotonic()

    def on_train_begin(self, logs=None):
        self._began = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        save_keras_atomic(self.model, self.out_dir / CHECKPOINT_NAME, faults.checkpoint_fault(epoch + 1))
        optimizer = self.model.optimizer
        state = {
            "epochs_done": epoch + 1,
            "iterations": None if optimizer is None else int(optimizer.iterations.numpy()),
            "learning_rate": None if optimizer is None else float(np.asarray(optimizer.learning_rate)),
            "seed_states": _seed_states(self.model),
            "train_seconds": round(self.spent_seconds + time.monotonic() - self._began, 3),
            "logs": {k: float(v) for k, v in (logs or {}).items() if np.ndim(v) == 0},
        }
        write_json_atomic(self.out_dir / CHECKPOINT_STATE_NAME, state)


def _seed_variables(model: keras.Model) -> list:
    """The ``(2,)`` seed-generator states (seed, counter) of the model's dropout layers, in layer order."""
    return [v for v in model.non_trainable_variables if v.path.endswith("seed_generator_state")]


def _seed_states(model: keras.Model) -> list[list]:
    """``[[variable path, [seed, counter]], ...]`` for checkpoint.json (restored by position: the
    paths carry process-wide name counters)."""
    return [[v.path, np.asarray(v.numpy()).tolist()] for v in _seed_variables(model)]


class BatchSleep(keras.callbacks.Callback):
    """The ``batch-sleep`` fault (:mod:`kformer.faults`): after every batch, sleep ``seconds`` and
    print ``kformer: fault: epoch <e> batch <b>`` to stderr. Only used when the fault is set."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds, self.epoch = float(seconds), 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch + 1

    def on_train_batch_end(self, batch, logs=None):
        import sys

        time.sleep(self.seconds)
        print(f"kformer: fault: epoch {self.epoch} batch {batch + 1}", file=sys.stderr, flush=True)


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) stopped :func:`fit`. The checkpoint in ``out_dir`` holds ``epochs_done``
    complete epochs (0: there is none); ``batches_lost`` batches of epoch ``epochs_done + 1``
    were trained and are not kept (``resume`` repeats that epoch)."""

    def __init__(self, out_dir: Path, epochs_done: int, batches_lost: int):
        self.out_dir, self.epochs_done, self.batches_lost = Path(out_dir), int(epochs_done), int(batches_lost)
        super().__init__(f"interrupted during epoch {self.epochs_done + 1} ({self.batches_lost} batches lost); "
                         f"the checkpoint holds {self.epochs_done} epochs")


class _Position(keras.callbacks.Callback):
    """Where training is: batches done in the running epoch."""

    batches = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.batches = 0

    def on_train_batch_end(self, batch, logs=None):
        self.batches = batch + 1


def _checkpoint_state(out_dir: Path) -> dict[str, Any] | None:
    """``checkpoint.json`` of ``out_dir`` (None when it or ``checkpoint.keras`` is missing)."""
    model_path, state_path = out_dir / CHECKPOINT_NAME, out_dir / CHECKPOINT_STATE_NAME
    if not (model_path.is_file() and state_path.is_file()):
        return None
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
        state["epochs_done"] = int(state["epochs_done"])
    except (ValueError, KeyError, TypeError):
        raise CorruptModel(f"{state_path} is corrupt; delete it and {model_path.name} to start afresh") from None
    return state


def last_checkpoint(out_dir: str | os.PathLike) -> tuple[Path, int] | None:
    """``(checkpoint path, completed epochs)`` of the last checkpoint in ``out_dir``, or None."""
    state = _checkpoint_state(Path(out_dir))
    return None if state is None else (Path(out_dir) / CHECKPOINT_NAME, state["epochs_done"])


def checkpoint_seconds(out_dir: str | os.PathLike) -> float:
    """Training seconds recorded by the last checkpoint in ``out_dir`` (0 when there is none)."""
    state = _checkpoint_state(Path(out_dir))
    return 0.0 if state is None else float(state.get("train_seconds") or 0.0)


def remove_checkpoint_debris(out_dir: str | os.PathLike) -> list[Path]:
    """Delete temporary checkpoint files a killed run left in ``out_dir``; returns them."""
    debris = [p for p in Path(out_dir).glob(".checkpoint.*") if ".tmp" in p.name]
    for path in debris:
        path.unlink(missing_ok=True)
    return debris


def restore_checkpoint(model: keras.Model, out_dir: str | os.PathLike) -> int:
    """Load the last checkpoint's weights, optimizer state and dropout seed counters into a
    compiled ``model``.

    Returns the ``initial_epoch`` for ``model.fit`` (0 when there is no checkpoint). The model
    must be built the same way as the one that wrote the checkpoint.
    """
    out_dir = Path(out_dir)
    state = _checkpoint_state(out_dir)
    if state is None:
        return 0
    path, epochs_done = out_dir / CHECKPOINT_NAME, state["epochs_done"]
    if model.optimizer is not None and not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    try:
        model.load_weights(path)
    except Exception as exc:  # shape mismatch, damaged zip
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise BadInput(f"cannot resume from {path} ({reason}); use the same settings or a new --out") from None
    recorded = state.get("iterations")
    if model.optimizer is not None and recorded is not None and int(model.optimizer.iterations.numpy()) != recorded:
        return epochs_done + 1  # killed between the model's rename and the JSON's: the model is one epoch newer
    seeds, variables = state.get("seed_states") or [], _seed_variables(model)
    if len(seeds) == len(variables):
        for variable, (_, value) in zip(variables, seeds, strict=True):
            variable.assign(np.asarray(value, dtype=variable.dtype))
    return epochs_done


class BestEpoch(keras.callbacks.EarlyStopping):
    """Early stopping where a near-tie on ``monitor`` goes to the epoch with the lower loss
    (validation loss when ``monitor`` is a validation metric).

    A metric such as validation macro-F1 often repeats its best value, or moves by less than one
    validation example's worth, while the model is still improving (a fine-tuning run whose rate
    decays to zero at the end of its budget): values within ``tie_tolerance`` of the best count as
    ties, and the later, lower-loss epoch is kept rather than the first, less trained one. The bar
    itself never drops: a tie keeps the best value seen. Unless ``mode`` is given, a ``...loss``
    is minimised and any other metric (accuracy, macro-F1) maximised: Keras cannot tell the
    direction of a custom metric such as the seq2seq masked accuracy."""

    def __init__(self, monitor: str = "val_loss", tie_tolerance: float = 1e-3, **kwargs):
        kwargs.setdefault("mode", "min" if monitor.endswith("loss") else "max")
        super().__init__(monitor=monitor, **kwargs)
        self.tie_breaker = "val_loss" if monitor.startswith("val_") else "loss"
        self.tie_tolerance = float(tie_tolerance) if monitor != self.tie_breaker else 0.0
        self._loss = self._best_loss = None

    def on_epoch_end(self, epoch, logs=None):
        self._loss = (logs or {}).get(self.tie_breaker)
        bar = self.best
        super().on_epoch_end(epoch, logs)
        if bar is not None and self.best is not None and self.monitor_op(bar, self.best):
            self.best = bar  # a tie within the tolerance won: keep the higher bar

    def _is_improvement(self, monitor_value, reference_value):
        better = super()._is_improvement(monitor_value, reference_value)
        if (not better and reference_value is not None and None not in (self._loss, self._best_loss)
                and abs(float(monitor_value) - float(reference_value)) <= self.tie_tolerance):
            better = self._loss < self._best_loss
        if better:
            self._best_loss = self._loss
        return better


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
        BestEpoch(
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
    agree: Callable[[bool], bool] | None = None,
) -> FitResult:
    """``model.fit`` with :func:`standard_callbacks`; with ``resume`` it continues from the last checkpoint.

    ``train`` is a ``tf.data.Dataset`` (or anything ``model.fit`` takes as ``x``) or an ``(x, y)``
    tuple; ``validation`` is what ``validation_data`` takes; ``batch_size`` applies to arrays.
    Without ``validation`` early stopping watches the training loss. Nothing is printed:
    ``progress`` (if given) receives a :class:`ProgressEvent` per epoch and every half second, and
    ``out_dir/train.log`` gets one line per epoch. ``agree`` (data-parallel runs) makes the
    time budget's stop decision process 0's (:class:`TimeBudget`).
    """
    if validation is None and monitor.startswith("val_"):
        monitor = monitor[4:]
    standard = standard_callbacks(out_dir, patience=patience, max_minutes=max_minutes, monitor=monitor)
    standard[0].agree = agree
    remove_checkpoint_debris(out_dir)
    spent = checkpoint_seconds(out_dir) if resume else 0.0
    initial_epoch = restore_checkpoint(model, out_dir) if resume else 0
    for callback in [*standard, *(callbacks or [])]:
        if hasattr(callback, "spent_seconds"):  # clocks that continue across a resume
            callback.spent_seconds = spent
    start = time.monotonic()
    if initial_epoch >= epochs:
        history: dict[str, list[float]] = {}
        epochs_run = 0
    else:
        x, y = train if isinstance(train, tuple) else (train, None)
        position = _Position()
        extra = [position, *(callbacks or [])]
        sleep = faults.batch_sleep()
        if sleep is not None:
            extra.append(BatchSleep(sleep))
        steps = _steps_per_epoch(x, batch_size)
        for report in filter(None, (progress, log_to_file(Path(out_dir) / TRAIN_LOG))):
            extra.append(ProgressReporter(
                report, None if steps is None else steps * epochs, epochs,
                None if max_minutes is None else max(float(max_minutes) * 60.0 - spent, 0.0),
                initial_step=0 if steps is None else steps * initial_epoch,
            ))
        try:
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
        except KeyboardInterrupt:
            # the last complete epoch's checkpoint stays; a half epoch is not saved as a whole one
            done = last_checkpoint(out_dir)
            raise TrainingInterrupted(Path(out_dir), 0 if done is None else done[1], position.batches) from None
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


def budget_schedule(peak, warmup_steps, total_steps, budget_seconds=None, final_ratio=0.02, *, decay="cosine",
                    initial_step: int = 0):
    """A callback setting the learning rate: linear warmup over ``warmup_steps``, then ``decay``
    (``"cosine"`` or ``"linear"``) to ``peak * final_ratio`` by whichever comes first,
    ``total_steps`` or the end of ``budget_seconds`` of training (so a time-bounded run still ends
    at a low rate). The clock for the budget starts after the first batch, whose time (graph
    tracing / XLA compilation) is taken off the budget rather than off the decay. Its ``steps``
    counts batches, from ``initial_step`` (a resumed run's optimizer step); its ``spent_seconds``
    (set by :func:`fit` when resuming) are the training seconds before, so the clock's share of
    the budget continues where the interrupted run left it. In a data-parallel
    run follow it with :func:`kformer.parallel.follow_chief_rate` (process 0's rate for all).
    """
    if decay not in ("cosine", "linear"):
        raise ValueError(f"decay must be 'cosine' or 'linear', got {decay!r}")

    class WarmupDecayByBudget(keras.callbacks.Callback):
        steps = int(initial_step)
        spent_seconds = 0.0

        def on_train_begin(self, logs=None):
            self.began = time.monotonic()
            self.start, self.budget = None, budget_seconds

        def rate(self) -> float:
            warmup = max(int(warmup_steps), 1)
            if self.steps < warmup:
                return peak * (self.steps + 1) / warmup
            progress = (self.steps - warmup) / max(int(total_steps) - warmup, 1)
            if self.budget and self.start is not None:
                clock = self.spent_seconds + time.monotonic() - self.start
                progress = max(progress, clock / max(self.budget, 1e-3))
            progress = min(progress, 1.0)
            floor = peak * final_ratio
            shape = 0.5 * (1.0 + math.cos(math.pi * progress)) if decay == "cosine" else 1.0 - progress
            return floor + (peak - floor) * shape

        def on_train_batch_begin(self, batch, logs=None):
            self.model.optimizer.learning_rate.assign(self.rate())

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1
            if self.start is None:
                self.start = time.monotonic()
                if budget_seconds:
                    self.budget = budget_seconds - (self.start - self.began)

    return WarmupDecayByBudget()
