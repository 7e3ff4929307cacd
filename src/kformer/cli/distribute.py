"""``--distribute`` and its job flags, shared by every ``kformer train`` command.

Parsing only: the job itself is :mod:`kformer.parallel` (imported lazily), and a job this command
starts on this machine (``--num-processes N`` without ``--coordinator``) is
:mod:`kformer.launcher`'s, whose settings (:class:`~kformer.launcher.LaunchConfig`) are flags here.
The CLI selects Keras' JAX backend before Keras is imported when ``--distribute`` is given
(``kformer.cli``).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from pathlib import Path

from kformer.cli.progress import progress_for
from kformer.errors import BadInput
from kformer.launcher import LaunchConfig, current_process


def add_distribute_flags(parser: argparse.ArgumentParser) -> None:
    """``--distribute``, the job's ``--coordinator``, ``--num-processes``, ``--process-id``, and one
    flag per field of :class:`~kformer.launcher.LaunchConfig` (default None: the field's default)."""
    group = parser.add_argument_group(
        "data-parallel training (docs/distributed.md)",
        "Run the same command on every host, each with its own --process-id. Without --coordinator the job comes "
        "from KERAS_DISTRIBUTION_* variables or Slurm / Open MPI, else it is this machine's devices; "
        "--num-processes N alone starts N processes here and restarts them from the last checkpoint when one "
        "is lost. --batch-size is the global batch; process 0 writes --out.")
    group.add_argument("--distribute", action="store_true",
                       help="train data-parallel on Keras' DataParallel (JAX backend) over every device of the job")
    group.add_argument("--coordinator", metavar="HOST:PORT", help="address of process 0, the same on every host")
    group.add_argument("--num-processes", type=int, metavar="N", help="processes in the job (one per host)")
    group.add_argument("--process-id", type=int, metavar="I", help="this process: 0 (writes --out) to N-1")
    for spec in dataclasses.fields(LaunchConfig):
        group.add_argument(spec.metadata["flag"], dest=spec.name, type=type(spec.default), default=None,
                           metavar=spec.metadata["metavar"],
                           help=f"{spec.metadata['help']} (--num-processes N alone; default: {spec.default:g})")


def local_job(args: argparse.Namespace) -> tuple[int, LaunchConfig] | None:
    """``(processes, settings)`` when the command starts its job on this machine itself
    (``--distribute --num-processes N``, N > 1, without ``--coordinator`` or ``--process-id``);
    None for any other command. BadInput for launcher flags given to a command that is no such job."""
    if not hasattr(args, "distribute"):
        return None
    launcher = {spec.name: getattr(args, spec.name) for spec in dataclasses.fields(LaunchConfig)}
    local = (args.distribute and (args.num_processes or 0) > 1 and args.coordinator is None
             and args.process_id is None)
    if not local:
        given = next((name for name, value in launcher.items() if value is not None), None)
        if given is not None and current_process() is None:
            raise BadInput("{field} is for a job this command starts on this machine (--distribute --num-processes "
                           "N without --coordinator); on a cluster its orchestrator restarts the job", field=given)
        return None
    return args.num_processes, LaunchConfig.of(**launcher)


def user_command(argv: Sequence[str]) -> list[str]:
    """The command the user typed (for ``metrics.json``): the launcher's, in a process it started."""
    job = current_process()
    return list(job.command) if job is not None and job.command else ["kformer", *argv]


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
