"""Showing training progress: a redrawn bar in a terminal, one line per step of progress in a log.

The task API reports :class:`~kformer.training.ProgressEvent` objects; :func:`progress_printer`
turns them into output. In a terminal a tqdm bar runs over the whole run (steps or time budget)
with the latest loss and accuracy, and each epoch's metrics are written above it. When the
output is a file or a pipe, nothing is redrawn: one line per epoch (at most about one per 10 %
of the run), so ``kformer train ... > log`` stays readable. A phase after training (``"phase"``
events: a translator's datastore, retrieval tuning, test decoding) gets a bar of its own in a
terminal, else a line at its start, every tenth and its end. ``log_format="json"`` prints one JSON
object per epoch (and per phase's end) instead, for machines. (Every run also keeps
``training/train.log``.)
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

LOG_FORMATS = ("text", "json")
SHOWN = ("loss", "accuracy", "val_loss", "val_accuracy")


def add_log_flags(parser) -> None:
    """``--quiet`` and ``--log-format`` for a command that trains."""
    parser.add_argument("--quiet", action="store_true", help="print only the result, no progress")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default="text",
                        help="progress as text (a bar in a terminal, one line per epoch otherwise) "
                        "or one JSON object per epoch (default text)")


def progress_for(args):
    """The progress callback a training command's ``--quiet`` / ``--log-format`` ask for."""
    return None if args.quiet else progress_printer(log_format=args.log_format)


def progress_printer(stream: TextIO | None = None, interactive: bool | None = None, log_format: str = "text"):
    """A ``progress`` callback for the task API that writes to ``stream`` (default stdout)."""
    stream = stream or sys.stdout
    if log_format == "json":
        return _Json(stream)
    if interactive is None:
        interactive = hasattr(stream, "isatty") and stream.isatty()
    return _Bar(stream) if interactive else _Lines(stream)


class _Json:
    def __init__(self, stream: TextIO):
        self.stream = stream

    def __call__(self, event) -> None:
        if event.stage in ("settings", "epoch", "done", "phase_end"):
            print(json.dumps(event.to_json()), file=self.stream, flush=True)


class _Lines:
    def __init__(self, stream: TextIO):
        self.stream, self.last_fraction, self.phases = stream, -1.0, {}

    def __call__(self, event) -> None:
        from kformer.training.progress import PHASE_STAGES, phase_line_due

        if event.stage in PHASE_STAGES:
            if phase_line_due(event, self.phases):
                print(event.line(), file=self.stream, flush=True)
        elif event.stage == "settings":
            print(event.line(), file=self.stream, flush=True)
        elif event.stage == "compiling":
            print("training started (the first step compiles the model)", file=self.stream, flush=True)
        elif event.stage == "epoch" and (event.fraction - self.last_fraction >= 0.1 - 1e-9 or event.fraction >= 1.0):
            self.last_fraction = event.fraction
            print(event.line(), file=self.stream, flush=True)


class _Bar:
    TOTAL = 1000

    def __init__(self, stream: TextIO):
        self.stream, self.bar = stream, None

    def __call__(self, event) -> None:
        from tqdm.auto import tqdm

        if event.stage == "settings":  # before the bar starts
            print(event.line(), file=self.stream, flush=True)
            return
        if event.stage in ("phase", "phase_end"):
            self._phase(event)
            return
        if self.bar is None:
            self.bar = tqdm(total=self.TOTAL, desc="compiling", file=self.stream, dynamic_ncols=True,
                            bar_format="{desc} {percentage:3.0f}%|{bar}| {elapsed}<{remaining} {postfix}")
        if event.stage == "epoch":
            self.bar.write(event.line(), file=self.stream)
        elif event.stage == "training":
            self.bar.set_description("training")
            shown = {k: f"{v:.4f}" for k, v in event.logs.items() if k in SHOWN}
            self.bar.set_postfix(shown, refresh=False)
        self.bar.n = round(event.fraction * self.TOTAL)
        self.bar.refresh()
        if event.stage == "done":
            self.bar.close()
            self.bar = None

    def _phase(self, event) -> None:
        """A phase after training: a bar of its own, named after it, closed with its line."""
        from tqdm.auto import tqdm

        if self.bar is not None and (self.bar.desc != event.message or not event.total_steps):
            self.bar.close()
            self.bar = None
        if not event.total_steps:  # a note: a phase skipped, and why
            print(event.line(), file=self.stream, flush=True)
            return
        if self.bar is None:
            self.bar = tqdm(total=self.TOTAL, desc=event.message, file=self.stream, dynamic_ncols=True,
                            bar_format="{desc}{postfix} {percentage:3.0f}%|{bar}|")
        left = "" if event.seconds_left is None else f"~{event.seconds_left:.0f} s left"
        self.bar.set_postfix_str(f"{event.step:,}/{event.total_steps or 0:,} {left}", refresh=False)
        self.bar.n = round(event.fraction * self.TOTAL)
        self.bar.refresh()
        if event.stage == "phase_end":
            self.bar.close()
            self.bar = None
            print(event.line(), file=self.stream, flush=True)
