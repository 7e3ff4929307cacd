"""Showing training progress: a redrawn bar in a terminal, one line per step of progress in a log.

The task API reports :class:`~kformer.training.ProgressEvent` objects; :func:`progress_printer`
turns them into output. In a terminal a tqdm bar runs over the whole run (steps or time budget)
with the latest loss and accuracy, and each epoch's metrics are written above it. When the
output is a file or a pipe, nothing is redrawn: one line per epoch (at most about one per 10 %
of the run), so ``kformer train ... > log`` stays readable.
"""

from __future__ import annotations

import sys
from typing import TextIO

SHOWN = ("loss", "accuracy", "val_loss", "val_accuracy")


def format_event(event) -> str:
    """``epoch 3/10  loss 0.4123  accuracy 0.8812  val_loss ...  12 s  ~40 s left``."""
    parts = [f"epoch {event.epoch}" + (f"/{event.epochs}" if event.epochs and event.epochs < 10**6 else "")]
    parts += [f"{name} {event.logs[name]:.4f}" for name in SHOWN if name in event.logs]
    parts.append(f"{event.seconds:.0f} s")
    if event.seconds_left is not None and event.stage != "done":
        parts.append(f"~{event.seconds_left:.0f} s left")
    return "  ".join(parts)


def progress_printer(stream: TextIO | None = None, interactive: bool | None = None):
    """A ``progress`` callback for the task API that writes to ``stream`` (default stdout)."""
    stream = stream or sys.stdout
    if interactive is None:
        interactive = hasattr(stream, "isatty") and stream.isatty()
    return _Bar(stream) if interactive else _Lines(stream)


class _Lines:
    def __init__(self, stream: TextIO):
        self.stream, self.last_fraction = stream, -1.0

    def __call__(self, event) -> None:
        if event.stage == "compiling":
            print("training started (the first step compiles the model)", file=self.stream, flush=True)
        elif event.stage == "epoch" and (event.fraction - self.last_fraction >= 0.1 or event.fraction >= 1.0):
            self.last_fraction = event.fraction
            print(format_event(event), file=self.stream, flush=True)


class _Bar:
    TOTAL = 1000

    def __init__(self, stream: TextIO):
        self.stream, self.bar = stream, None

    def __call__(self, event) -> None:
        from tqdm.auto import tqdm

        if self.bar is None:
            self.bar = tqdm(total=self.TOTAL, desc="compiling", file=self.stream, dynamic_ncols=True,
                            bar_format="{desc} {percentage:3.0f}%|{bar}| {elapsed}<{remaining} {postfix}")
        if event.stage == "epoch":
            self.bar.write(format_event(event), file=self.stream)
        elif event.stage == "training":
            self.bar.set_description("training")
            shown = {k: f"{v:.4f}" for k, v in event.logs.items() if k in SHOWN}
            self.bar.set_postfix(shown, refresh=False)
        self.bar.n = round(event.fraction * self.TOTAL)
        self.bar.refresh()
        if event.stage == "done":
            self.bar.close()
            self.bar = None
