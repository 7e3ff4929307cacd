"""``--distribute`` and its job flags, shared by every ``kformer train`` command.

Parsing only: the job itself is :mod:`kformer.parallel` (imported lazily). The CLI selects Keras'
JAX backend before Keras is imported when ``--distribute`` is given (``kformer.cli``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kformer.cli.progress import progress_for
from kformer.errors import BadInput


def add_distribute_flags(parser: argparse.ArgumentParser) -> None:
    """``--distribute`` and the job's ``--coordinator``, ``--num-processes``, ``--process-id``."""
    group = parser.add_argument_group(
        "data-parallel training (docs/distributed.md)",
        "Run the same command on every host, each with its own --process-id. Without --coordinator the job comes "
        "from KERAS_DISTRIBUTION_* variables or Slurm / Open MPI, else it is this machine's devices. "
        "--batch-size is the global batch; process 0 writes --out.")
    group.add_argument("--distribute", action="store_true",
                       help="train data-parallel on Keras' DataParallel (JAX backend) over every device of the job")
    group.add_argument("--coordinator", metavar="HOST:PORT", help="address of process 0, the same on every host")
    group.add_argument("--num-processes", type=int, metavar="N", help="processes in the job (one per host)")
    group.add_argument("--process-id", type=int, metavar="I", help="this process: 0 (writes --out) to N-1")


def distribute_config(args: argparse.Namespace):
    """The :class:`~kformer.parallel.DistributeConfig` of ``--distribute`` (None without it)."""
    job = (args.coordinator, args.num_processes, args.process_id)
    if not args.distribute:
        if any(value is not None for value in job):
            raise BadInput("--coordinator, --num-processes and --process-id need {field}", field="distribute")
        return None
    from kformer.parallel import DistributeConfig

    return DistributeConfig(*job) if any(value is not None for value in job) else DistributeConfig.from_env()


def is_chief(distribute) -> bool:
    """True for a plain run and for process 0 of a job (the one that writes ``--out`` and prints)."""
    return distribute is None or distribute.process_id in (None, 0)


def job_progress(args: argparse.Namespace, distribute):
    """The progress callback of ``--quiet`` / ``--log-format``; None in processes 1..N-1 of a job
    (process 0 shows the job's progress)."""
    return progress_for(args) if is_chief(distribute) else None


def worker_line(distribute, folder: Path) -> str:
    """What process I (not 0) prints at the end: it wrote no model, only its checkpoints."""
    return f"process {distribute.process_id}: done; process 0 wrote the model (checkpoints for --resume in {folder})"
