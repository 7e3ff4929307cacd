"""Training plumbing shared by every task: recipes, seeds, schedules and callbacks.

- :func:`load_recipe` reads a named recipe (``src/kformer/recipes/NAME.toml``) or a user's TOML.
- :class:`WarmupDecay` is a serializable learning-rate schedule (linear warmup, then cosine or
  linear decay).
- :func:`standard_callbacks` gives early stopping with best weights restored, a time budget
  (:class:`TimeBudget`), an atomic checkpoint per epoch (:class:`EpochCheckpoint`), TensorBoard
  logs and a CSV history; :func:`restore_checkpoint` resumes from the last checkpoint.
- :func:`fit` runs ``model.fit`` with all of the above and reports what happened.
- :class:`BucketedBatches` batches token ids of similar length, cut to the batch's longest row.
- :func:`budget_schedule` (warmup, then cosine decay over the steps or a time budget) and
  :func:`progress_bar` (a tqdm bar over the budget) for generated-data and seq2seq training.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import keras

from kformer.artifacts import save_keras_atomic, write_json_atomic
from kformer.errors import KformerError

RECIPES_DIR = Path(__file__).parent / "recipes"
CHECKPOINT_NAME = "checkpoint.keras"
CHECKPOINT_STATE_NAME = "checkpoint.json"


# --- recipes -----------------------------------------------------------------------------------


def available_recipes() -> list[str]:
    """Names of the recipes shipped with kformer."""
    return sorted(p.stem for p in RECIPES_DIR.glob("*.toml"))


def load_recipe(name_or_path: str | os.PathLike) -> dict[str, Any]:
    """Read a recipe: a NAME shipped in ``kformer/recipes/`` or the PATH of a TOML file."""
    text = str(name_or_path)
    path = Path(text)
    if not (path.suffix == ".toml" or os.sep in text or path.is_file()):
        path = RECIPES_DIR / f"{text}.toml"
        if not path.is_file():
            names = ", ".join(available_recipes()) or "none"
            raise KformerError(f"unknown recipe '{text}'; available: {names} (or pass the path of a .toml file)")
    if not path.is_file():
        raise KformerError(f"recipe file {path} does not exist")
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise KformerError(f"recipe {path} is not valid TOML ({exc})") from None


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


# --- batches of similar length --------------------------------------------------------------------


class BucketedBatches:
    """Batches of token-id rows of similar length, each cut to its longest row (rounded up).

    ``x`` is ``(n, max_length)`` int ids padded with 0 at the end; ``y`` (and optional
    ``sample_weight``) are indexed alongside. Rows are shuffled each epoch (with ``shuffle``),
    sorted by length within chunks of 64 batches, and the batches shuffled, so a batch of short
    texts costs a short sequence. Widths are rounded up to a multiple that leaves at most about
    8 distinct shapes, so compiled step functions are reused.
    ``batches[i]`` is ``(x (batch, width), y)`` or ``(x, y, sample_weight)``; :meth:`dataset` gives
    a ``tf.data.Dataset`` with a variable-width signature that re-arranges the rows every epoch.
    """

    def __init__(self, x, y, batch_size: int = 32, shuffle: bool = True, seed: int = 0, sample_weight=None):
        import numpy as np

        self.x, self.y = np.asarray(x), np.asarray(y)
        self.sample_weight = None if sample_weight is None else np.asarray(sample_weight, dtype="float32")
        self.lengths = (self.x != 0).sum(axis=1)
        self.batch_size, self.shuffle, self.seed, self.epoch = int(batch_size), shuffle, int(seed), 0
        self.multiple = max(8, -(-self.x.shape[1] // 8))
        self._arrange()

    def _arrange(self) -> None:
        import numpy as np

        rng = np.random.default_rng(self.seed + self.epoch)
        n = len(self.x)
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        chunk = self.batch_size * 64
        batches = []
        for start in range(0, n, chunk):
            part = order[start:start + chunk]
            part = part[np.argsort(self.lengths[part], kind="stable")]
            batches += [part[i:i + self.batch_size] for i in range(0, len(part), self.batch_size)]
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        self.batches = batches

    def width(self, rows) -> int:
        longest = max(int(self.lengths[rows].max()), 1)
        return min(self.x.shape[1], -(-longest // self.multiple) * self.multiple)

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index):
        rows = self.batches[index]
        x = self.x[rows, : self.width(rows)]
        if self.sample_weight is None:
            return x, self.y[rows]
        return x, self.y[rows], self.sample_weight[rows]

    def _generate(self):
        for index in range(len(self)):
            yield self[index]
        self.epoch += 1
        if self.shuffle:
            self._arrange()

    def dataset(self):
        """The batches as a ``tf.data.Dataset`` (any width; rows re-arranged each epoch)."""
        import tensorflow as tf

        signature = [
            tf.TensorSpec((None, None), tf.as_dtype(self.x.dtype)),
            tf.TensorSpec((None, *self.y.shape[1:]), tf.as_dtype(self.y.dtype)),
        ]
        if self.sample_weight is not None:
            signature.append(tf.TensorSpec((None,), tf.float32))
        data = tf.data.Dataset.from_generator(self._generate, output_signature=tuple(signature))
        return data.apply(tf.data.experimental.assert_cardinality(len(self))).prefetch(2)


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
        raise KformerError(f"{state_path} is corrupt; delete it and {model_path.name} to start afresh") from None
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
        raise KformerError(f"cannot resume from {path} ({reason}); use the same settings or a new --out") from None
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
    verbose: int | str = "auto",
    batch_size: int | None = None,
    class_weight: dict | None = None,
    callbacks: list | None = None,
) -> FitResult:
    """``model.fit`` with :func:`standard_callbacks`; with ``resume`` it continues from the last checkpoint.

    ``train`` is a ``tf.data.Dataset`` (or anything ``model.fit`` takes as ``x``) or an ``(x, y)``
    tuple; ``validation`` is what ``validation_data`` takes; ``batch_size`` applies to arrays.
    Without ``validation`` early stopping watches the training loss.
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
        result = model.fit(
            x,
            y,
            validation_data=validation,
            epochs=epochs,
            initial_epoch=initial_epoch,
            batch_size=None if y is None else batch_size,
            shuffle=y is not None,  # a dataset arrives already shuffled (Keras would warn)
            callbacks=standard + list(callbacks or []),
            class_weight=class_weight,
            verbose=verbose,
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


# --- time-budget schedule and progress bar (generated-data and seq2seq training) -------------


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


def progress_bar(total_steps, budget_seconds=None):
    """A callback drawing a tqdm bar over the time budget (or the steps) with loss and accuracy."""
    from tqdm.auto import tqdm

    class ProgressBar(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.start = time.monotonic()
            # The first batch compiles the training step, which takes a while on a small CPU.
            if budget_seconds:
                self.bar = tqdm(total=round(budget_seconds), unit="s", desc="compiling", dynamic_ncols=True)
            else:
                self.bar = tqdm(total=total_steps, unit="step", desc="compiling", dynamic_ncols=True)
            self.compiled = False

        def on_train_batch_end(self, batch, logs=None):
            if not self.compiled:
                self.compiled = True
                self.bar.set_description("training")
            if batch % 20 == 0:
                names = {"loss": "loss", "accuracy": "token_acc"}
                shown = {names[k]: f"{float(v):.4f}" for k, v in (logs or {}).items() if k in names}
                self.bar.set_postfix(shown, refresh=False)
            if budget_seconds:
                self.bar.n = min(round(time.monotonic() - self.start), self.bar.total)
                self.bar.refresh()
            else:
                self.bar.update(1)

        def on_train_end(self, logs=None):
            if budget_seconds:
                self.bar.n = self.bar.total
                self.bar.refresh()
            self.bar.close()

    return ProgressBar()
