"""Fault injection for the crash tests: nothing happens unless ``KFORMER_FAULT`` is set.

``KFORMER_FAULT`` holds one or more comma-separated faults:

=============================  =====================================================================
``checkpoint-pause:<epoch>``   while writing the checkpoint after epoch ``<epoch>`` (1-based), cut
                               the temporary ``.checkpoint.tmp.keras`` to half its size, print
                               ``kformer: fault: paused writing <path>`` to stderr and sleep (an hour),
                               so a test can SIGKILL the process in the middle of the write
``checkpoint-die:<epoch>``     the same, then ``os._exit(86)`` instead of sleeping
``batch-sleep:<seconds>``      after every training batch sleep that long and print
                               ``kformer: fault: epoch <e> batch <b>`` (1-based), so a test can
                               kill the process at a known batch of a known epoch
``batch-pause:<epoch>:<batch>``  after that batch (1-based) print ``kformer: fault: paused at epoch <e>
                               batch <b>`` to stderr and sleep (an hour), so a test's kill lands at that
                               batch however loaded the machine is
``predict-sleep:<seconds>``    ``kformer serve``'s inference thread sleeps that long before every
                               model call, so requests are surely in flight when a test sends SIGTERM
=============================  =====================================================================

The training code asks :func:`checkpoint_fault` once per checkpoint and :func:`batch_sleep` and
:func:`batch_pause` once per run (it adds a callback only when the fault is set); the server's inference thread asks
:func:`slowed` once. With ``KFORMER_FAULT`` unset they change nothing.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

FAULT_ENV = "KFORMER_FAULT"
DIE_EXIT_CODE = 86
PAUSE_SECONDS = 3600.0


def _faults() -> dict[str, str]:
    """``{name: argument}`` of ``KFORMER_FAULT`` (empty when unset)."""
    spec = os.environ.get(FAULT_ENV, "")
    faults = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, argument = item.partition(":")
        faults[name] = argument
    return faults


def checkpoint_fault(epochs_done: int) -> Callable[[Path], None] | None:
    """The hook to run on the written temporary checkpoint file before its rename, when
    ``checkpoint-pause`` or ``checkpoint-die`` names ``epochs_done``; else None."""
    faults = _faults()
    for name, act in (("checkpoint-pause", "pause"), ("checkpoint-die", "die")):
        if name in faults and int(faults[name]) == int(epochs_done):
            return lambda tmp, act=act: _half_write(tmp, act)
    return None


def _half_write(tmp: Path, act: str) -> None:
    """Cut ``tmp`` to half its bytes (a write interrupted halfway), then pause or die."""
    size = tmp.stat().st_size
    with open(tmp, "r+b") as handle:
        handle.truncate(size // 2)
    print(f"kformer: fault: {'paused' if act == 'pause' else 'died'} writing {tmp}", file=sys.stderr, flush=True)
    if act == "die":
        os._exit(DIE_EXIT_CODE)
    time.sleep(PAUSE_SECONDS)


def slowed(run: Callable, fault: str = "predict-sleep") -> Callable:
    """``run``, or with ``<fault>:<seconds>`` set, ``run`` sleeping that long before each call."""
    argument = _faults().get(fault)
    if argument is None:
        return run
    seconds = float(argument)

    def slow_run(*args, **kwargs):
        time.sleep(seconds)
        return run(*args, **kwargs)

    return slow_run


def batch_sleep() -> float | None:
    """Seconds to sleep after every training batch (``batch-sleep:<seconds>``), or None."""
    argument = _faults().get("batch-sleep")
    return None if argument is None else float(argument)


def batch_pause() -> tuple[int, int] | None:
    """``(epoch, batch)`` (1-based) after which training pauses (``batch-pause:<epoch>:<batch>``), or None."""
    argument = _faults().get("batch-pause")
    if argument is None:
        return None
    epoch, batch = argument.split(":")
    return int(epoch), int(batch)
