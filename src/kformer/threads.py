"""How many CPU threads TensorFlow (and ONNX Runtime) may use: the cores this process may run on,
or ``KFORMER_THREADS``.

TensorFlow sizes its thread pools from the machine's core count, which in a container is often the
host's (64) rather than the process's share (2): dozens of threads then fight over two cores.
:func:`configure_threads` sets ``TF_NUM_INTRAOP_THREADS`` (threads inside one op) to the usable
cores and ``TF_NUM_INTEROP_THREADS`` (ops run side by side) to 1 on two cores or fewer, else 2;
TensorFlow reads both when it starts its runtime, so this must run before the first TensorFlow
op -- :func:`kformer.setup` does it (the CLI and the server call that). Variables the user set are
left alone.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from kformer.errors import BadInput

ENV = "KFORMER_THREADS"


def usable_cores() -> int:
    """CPUs this process may use: its affinity mask, capped by a cgroup (v2) CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def thread_count() -> int:
    """``KFORMER_THREADS`` when set (a whole number of at least 1), else :func:`usable_cores`."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return usable_cores()
    if not value.isdigit() or int(value) < 1:
        raise BadInput(f"environment variable {{field}} must be a whole number of at least 1, not {value!r}",
                       field=ENV)
    return int(value)


def configure_threads() -> int:
    """Set TensorFlow's thread pools from :func:`thread_count`; returns the intra-op count.

    A bad ``KFORMER_THREADS`` is BadInput (one line and exit status 2 from the CLI).
    """
    threads = thread_count()
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(threads))
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1" if threads <= 2 else "2")
    return threads
