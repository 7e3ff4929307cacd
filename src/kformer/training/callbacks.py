"""The callbacks every run uses beside its checkpoints: the time budget, early stopping that keeps
the best epoch, the position within an epoch (for Ctrl-C), the heartbeat of a process the launcher
started, and the ``batch-*`` faults."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import keras


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

class BatchFaults(keras.callbacks.Callback):
    """The ``batch-sleep``, ``batch-pause`` and ``batch-die`` faults (:mod:`kformer.faults`): after every
    batch, sleep ``seconds`` and print ``kformer: fault: epoch <e> batch <b>`` to stderr; after batch
    ``pause_at`` (``(epoch, batch)``, 1-based) also print ``kformer: fault: paused at ...`` and sleep
    ``pause_seconds``; after batch ``die_at`` print ``kformer: fault: killed at ...`` and SIGKILL the
    process. Only used when a fault is set."""

    def __init__(self, seconds: float, pause_at: tuple[int, int] | None = None, pause_seconds: float = 0.0,
                 die_at: tuple[int, int] | None = None):
        super().__init__()
        self.seconds, self.epoch = float(seconds), 0
        self.pause_at, self.pause_seconds, self.die_at = pause_at, float(pause_seconds), die_at

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch + 1

    def on_train_batch_end(self, batch, logs=None):
        import sys

        from kformer import faults

        time.sleep(self.seconds)
        if self.seconds:
            print(f"kformer: fault: epoch {self.epoch} batch {batch + 1}", file=sys.stderr, flush=True)
        if self.pause_at == (self.epoch, batch + 1):
            print(f"kformer: fault: paused at epoch {self.epoch} batch {batch + 1}", file=sys.stderr, flush=True)
            time.sleep(self.pause_seconds)
        if self.die_at == (self.epoch, batch + 1):
            print(f"kformer: fault: killed at epoch {self.epoch} batch {batch + 1}", file=sys.stderr, flush=True)
            faults.die()

class Heartbeat(keras.callbacks.Callback):
    """Touch ``path`` while training runs, so the launcher (:mod:`kformer.launcher`) can tell a hung
    process: at the start, after training, validation and prediction batches (at most once per
    ``every_seconds``) and at every epoch's end; removed when training ends (what follows, scoring
    and writing the model, is not watched)."""

    def __init__(self, path: Path, every_seconds: float = 1.0):
        super().__init__()
        self.path, self.every_seconds, self._last = Path(path), float(every_seconds), -float("inf")

    def _beat(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last >= self.every_seconds:
            self.path.touch()
            self._last = now

    def on_train_begin(self, logs=None):
        self._beat(force=True)

    def on_train_batch_end(self, batch, logs=None):
        self._beat()

    def on_test_batch_end(self, batch, logs=None):
        self._beat()

    def on_predict_batch_end(self, batch, logs=None):
        self._beat()

    def on_epoch_end(self, epoch, logs=None):
        self._beat(force=True)

    def on_train_end(self, logs=None):
        self.path.unlink(missing_ok=True)

class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) stopped :func:`fit`. The checkpoint in ``out_dir`` holds ``epochs_done``
    complete epochs (0: there is none); ``batches_lost`` batches of epoch ``epochs_done + 1``
    were trained and are not kept (``resume`` repeats that epoch)."""

    def __init__(self, out_dir: Path, epochs_done: int, batches_lost: int):
        self.out_dir, self.epochs_done, self.batches_lost = Path(out_dir), int(epochs_done), int(batches_lost)
        super().__init__(f"interrupted during epoch {self.epochs_done + 1} ({self.batches_lost} batches lost); "
                         f"the checkpoint holds {self.epochs_done} epochs")

class Position(keras.callbacks.Callback):
    """Where training is: batches done in the running epoch."""

    batches = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.batches = 0

    def on_train_batch_end(self, batch, logs=None):
        self.batches = batch + 1
