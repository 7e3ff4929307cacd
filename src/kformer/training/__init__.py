"""Training plumbing shared by every task: seeds, schedules, callbacks, checkpoints and ``fit``.

One module a job:

- :mod:`.fit` -- :func:`fit` runs ``model.fit`` as a :class:`FitPlan` says, with the standard
  callbacks (:func:`standard_callbacks`), and reports what happened (:class:`FitResult`).
- :mod:`.schedules` -- :class:`WarmupDecay`, a serializable warmup-then-decay schedule, and
  :func:`budget_schedule`, which decays over the steps or a time budget, whichever ends first.
- :mod:`.callbacks` -- the time budget (:class:`TimeBudget`), early stopping that keeps the best
  epoch (:class:`BestEpoch`), and :class:`TrainingInterrupted` for Ctrl-C.
- :mod:`.checkpoints` -- an atomic checkpoint per epoch and :func:`restore_checkpoint`.
- :mod:`.progress` -- :class:`ProgressEvent` reports to a caller's ``progress`` function (also
  from the phases after ``fit``, :class:`PhaseReporter`), the ``train.log`` lines and the
  ``history.csv`` reader; nothing in training prints.

Ctrl-C (SIGINT) in :func:`fit` raises :class:`TrainingInterrupted`, which says how many epochs
the checkpoint holds and how many batches of the running epoch are lost (a half epoch is never
saved as a whole one). The crash tests inject faults through ``KFORMER_FAULT``
(:mod:`kformer.faults`; off unless set).
"""

from kformer.training.callbacks import BestEpoch, TimeBudget, TrainingInterrupted
from kformer.training.checkpoints import (
    CHECKPOINT_NAME,
    CHECKPOINT_STATE_NAME,
    EpochCheckpoint,
    checkpoint_seconds,
    last_checkpoint,
    restore_checkpoint,
)
from kformer.training.fit import FitPlan, FitResult, fit, set_seed, standard_callbacks
from kformer.training.progress import (
    TRAIN_LOG,
    PhaseReporter,
    Progress,
    ProgressEvent,
    ProgressReporter,
    fan_out,
    read_history,
)
from kformer.training.schedules import WarmupDecay, budget_schedule

__all__ = [
    "CHECKPOINT_NAME", "CHECKPOINT_STATE_NAME", "TRAIN_LOG", "BestEpoch", "EpochCheckpoint", "FitPlan", "FitResult",
    "PhaseReporter", "Progress", "ProgressEvent", "ProgressReporter", "TimeBudget", "TrainingInterrupted", "WarmupDecay",
    "budget_schedule", "checkpoint_seconds", "fan_out", "fit", "last_checkpoint", "read_history", "restore_checkpoint",
    "set_seed", "standard_callbacks",
]
