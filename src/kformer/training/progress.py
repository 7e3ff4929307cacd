"""Progress reports: what a training run tells its caller (:class:`ProgressEvent`), the Keras
callback that sends them, the one-line-per-epoch ``train.log`` and the ``history.csv`` reader.
Nothing here prints: the CLI draws a bar, a server reports a percentage."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import keras
import numpy as np


@dataclass(frozen=True)
class ProgressEvent:
    """One report from a training run, for a caller's ``progress`` function.

    ``stage`` is ``"settings"`` (before training: ``message`` says what the task chose, e.g. its
    ``auto`` settings), ``"compiling"`` (the first batch, which traces/compiles the step),
    ``"training"`` (a batch ended), ``"epoch"`` (an epoch ended; ``logs`` has its training and
    validation metrics) or ``"done"``. ``fraction`` is the share of the run done: of the steps, or
    of the time budget when that ends first. A phase after training (a translator's datastore, its
    retrieval tuning, the test decoding: :class:`PhaseReporter`) sends ``"phase"`` events
    (``message`` its name, ``step`` of ``total_steps`` items done) and one ``"phase_end"``.
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
        if self.stage in PHASE_STAGES:
            return self._phase_line()
        parts = [f"epoch {self.epoch}" + (f"/{self.epochs}" if self.epochs and self.epochs < 10**6 else "")]
        parts += [f"{name} {value:.4f}" for name, value in self.logs.items() if name != "learning_rate"]
        parts.append(f"{self.seconds:.0f} s")
        if self.seconds_left is not None and self.stage != "done":
            parts.append(f"~{self.seconds_left:.0f} s left")
        return "  ".join(parts)

    def _phase_line(self) -> str:
        """``datastore 120/400  12 s  ~28 s left`` (the end: ``datastore 400/400 in 40 s``; a
        phase of no items: its ``message`` alone)."""
        if not self.total_steps:  # a note: a phase skipped, and why
            return self.message
        count = f"{self.message} {self.step:,}/{self.total_steps:,}"
        if self.stage == "phase_end":
            return f"{count} in {self.seconds:.0f} s"
        left = "" if self.seconds_left is None else f"  ~{self.seconds_left:.0f} s left"
        return f"{count}  {self.seconds:.0f} s{left}"

    def to_json(self) -> dict[str, Any]:
        """The event as a JSON-ready dict (``--log-format json``)."""
        return {"stage": self.stage, "epoch": self.epoch, "epochs": self.epochs, "step": self.step,
                "fraction": round(self.fraction, 4), "seconds": round(self.seconds, 2),
                "seconds_left": None if self.seconds_left is None else round(self.seconds_left, 1),
                **{k: round(v, 6) for k, v in self.logs.items()}, **({"message": self.message} if self.message else {})}

Progress = Callable[[ProgressEvent], None]
TRAIN_LOG = "train.log"
HISTORY_NAME = "history.csv"
PHASE_STAGES = ("phase", "phase_end")
PHASE_LINE_SHARE = 0.1  # a log writes a phase's line each time another tenth of it is done (and at its end)


def phase_line_due(event: ProgressEvent, last: dict[str, float]) -> bool:
    """Whether a log should write ``event`` (a phase's): its start, each further
    :data:`PHASE_LINE_SHARE` of it, its end. ``last`` holds the fraction last written per phase."""
    if event.stage == "phase_end":
        last.pop(event.message, None)
        return True
    before = last.get(event.message)
    if event.fraction >= 1.0 and before is not None:  # its end says it
        return False
    if before is None or event.fraction - before >= PHASE_LINE_SHARE - 1e-9:
        last[event.message] = event.fraction
        return True
    return False


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
    """A progress function appending one line per epoch (and the start and end) to ``path``, and a
    phase's lines at its start, every tenth of it and its end (:func:`phase_line_due`)."""

    phases: dict[str, float] = {}

    def write(event: ProgressEvent) -> None:
        if event.stage in PHASE_STAGES:
            if phase_line_due(event, phases):
                append_log(path, event.line())
        elif event.stage in ("epoch", "done", "compiling"):
            text = {"compiling": "training started", "done": f"training ended after {event.seconds:.0f} s"}
            append_log(path, text.get(event.stage) or event.line())

    return write

def append_log(path: Path, text: str) -> None:
    """Append ``text`` to the log ``path`` as one line, after the time."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')}  {text}\n")

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


def fan_out(*reports: Progress | None) -> Progress:
    """One progress function calling each of ``reports`` (Nones skipped)."""
    kept = [report for report in reports if report is not None]

    def report(event: ProgressEvent) -> None:
        for each in kept:
            each(event)

    return report


class PhaseReporter:
    """Progress of one phase that is not ``model.fit`` (a datastore built, a tuning grid decoded):
    :meth:`advance` by the items done sends a ``"phase"`` event at most every ``every_seconds``
    (and the first at once), :meth:`close` the ``"phase_end"``. Time left is by the rate so far,
    never beyond ``deadline`` (a ``clock()`` time) when one is given."""

    def __init__(self, progress: Progress | None, name: str, total: int, *, deadline: float | None = None,
                 every_seconds: float = 0.5, clock: Callable[[], float] = time.monotonic):
        self.progress, self.name, self.total = progress, name, max(int(total), 0)
        self.deadline, self.every_seconds, self.clock = deadline, every_seconds, clock
        self.done, self.start = 0, clock()
        self.last: float | None = None
        self._send("phase")

    def _event(self, stage: str) -> ProgressEvent:
        seconds = self.clock() - self.start
        fraction = 1.0 if stage == "phase_end" else min(self.done / self.total, 1.0) if self.total else 0.0
        left = seconds * (1 - fraction) / fraction if 0 < fraction else None
        if self.deadline is not None:
            until = max(self.deadline - self.clock(), 0.0)
            left = until if left is None else min(left, until)
        return ProgressEvent(stage, fraction, self.done, self.total or None, seconds=seconds, seconds_left=left,
                             message=self.name)

    def _send(self, stage: str) -> None:
        if self.progress is not None:
            self.progress(self._event(stage))
        self.last = self.clock()

    def advance(self, items: int = 1) -> None:
        """``items`` more done."""
        self.done += int(items)
        if self.last is None or self.clock() - self.last >= self.every_seconds:
            self._send("phase")

    def extend(self, items: int) -> None:
        """``items`` more to do than the total planned (a phase that found time for more)."""
        self.total += max(int(items), 0)

    def close(self) -> None:
        """The phase ended (after all its items or fewer)."""
        self._send("phase_end")
