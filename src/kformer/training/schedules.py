"""Learning-rate schedules: a serializable warmup-then-decay schedule, and a callback that decays
by steps or by a time budget, whichever ends first."""

from __future__ import annotations

import math
import time
from typing import Any

import keras


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
