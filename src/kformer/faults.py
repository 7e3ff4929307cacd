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
``batch-die:<epoch>:<batch>``  after that batch print ``kformer: fault: killed at epoch <e> batch <b>``
                               and SIGKILL the process itself (what the OOM killer does)
``predict-sleep:<seconds>``    ``kformer serve``'s inference thread sleeps that long before every
                               model call, so requests are surely in flight when a test sends SIGTERM
=============================  =====================================================================

A fault followed by ``@<process>`` (``batch-die:2:3@1``) acts only in that process of a job started
by ``kformer train ... --num-processes N`` (:mod:`kformer.launcher`), and in such a job every fault
acts only in the group's first start: the restarted group runs without it (else it would meet the
same fault again).

The training code asks :func:`checkpoint_fault` once per checkpoint and :func:`batch_sleep`,
:func:`batch_pause` and :func:`batch_die` once per run (it adds a callback only when the fault is
set); the server's inference thread asks :func:`slowed` once. With ``KFORMER_FAULT`` unset they
change nothing.
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
    """``{name: argument}`` of ``KFORMER_FAULT`` that act in this process (empty when unset)."""
    spec = os.environ.get(FAULT_ENV, "")
    if not spec:
        return {}
    from kformer.launcher import current_process

    job = current_process()
    if job is not None and job.restarts:
        return {}  # a restarted group runs clean
    faults = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        item, _, process = item.partition("@")
        if process and (job is None or int(process) != job.process_id):
            continue
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
    return _epoch_batch("batch-pause")


def batch_die() -> tuple[int, int] | None:
    """``(epoch, batch)`` (1-based) after which the process kills itself (``batch-die:<epoch>:<batch>``), or None."""
    return _epoch_batch("batch-die")


def _epoch_batch(fault: str) -> tuple[int, int] | None:
    argument = _faults().get(fault)
    if argument is None:
        return None
    epoch, batch = argument.split(":")
    return int(epoch), int(batch)


def die() -> None:
    """SIGKILL this process (no cleanup runs; what the OOM killer does)."""
    import signal

    os.kill(os.getpid(), signal.SIGKILL)
