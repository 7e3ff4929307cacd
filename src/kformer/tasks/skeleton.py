"""The one training skeleton every task fills in: read data -> choose ``auto`` settings -> build
and fit -> evaluate -> write the folder.

:func:`train` is the whole life cycle of a run and its guarantees, written once: bad input fails
before anything is written; a resumed run takes its settings from ``training/state.json``
(:class:`~kformer.tasks.state.ResumeState`); the folder is locked while it is written and a failed
fresh run leaves nothing behind (:func:`~kformer.tasks.training_folder.training_folder`); in a
data-parallel job (``distribute``) every process trains and only process 0 writes the model.
``resume="auto"`` resumes when the folder holds a complete checkpoint and starts afresh otherwise
(in a job, from the newest checkpoint of any process); a run the launcher restarted
(:mod:`kformer.launcher`) records its restarts in ``train.log`` and ``metrics.json``.
A task supplies its steps as a :class:`TrainingRun`::

    class ArithmeticRun(TrainingRun):
        task, config_class = "arithmetic", ArithmeticConfig
        def read(self, config, data, valid, test): ...      # check the data, no Keras yet
        def prepare(self, config, data, saved): ...         # splits, auto settings, vocabularies
        def fit(self, prepared, state_dir, resume, progress, cluster): ...
        def assemble(self, prepared, fitted): ...           # optional: what validation decides
        def evaluate(self, prepared, fitted): ...           # -> the task's metrics
        def write(self, out, prepared, fitted, metrics): ...

    def train(config=None, data=None, out=..., **options):
        return skeleton.train(ArithmeticRun(), config, data, out, **options)
"""

from __future__ import annotations

import contextlib
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from kformer.auto import AutoChoices
from kformer.config import as_config, to_dict
from kformer.errors import BadInput
from kformer.folders import TRAINING_DIR
from kformer.tasks.base import TrainResult
from kformer.tasks.state import STATE_FILE, ResumeState
from kformer.tasks.training_folder import check_not_busy, check_out_folder, training_folder

if TYPE_CHECKING:
    from kformer.parallel import Cluster, DistributeConfig
    from kformer.training import Progress


@dataclass
class Prepared:
    """What a run knows before it trains: its ``config`` (``"auto"`` resolved), the ``auto``
    choices, and a line saying what auto chose (``settings_line``; None: say nothing). Tasks
    subclass it to carry their splits, labels or vocabularies."""

    config: Any
    auto: AutoChoices = field(default_factory=AutoChoices)
    settings_line: str | None = None


class TrainingRun(ABC):
    """One task's steps, in the order :func:`train` calls them."""

    task: ClassVar[str]
    config_class: ClassVar[type]

    @abstractmethod
    def read(self, config, data, valid, test) -> Any:
        """The data, read and checked (no Keras import, so bad input fails at once)."""

    @abstractmethod
    def prepare(self, config, data, saved: ResumeState | None) -> Prepared:
        """Splits, ``auto`` settings and whatever must exist before the model (vocabularies);
        ``saved`` is the interrupted run's state when resuming (its ``config`` already merged)."""

    def check_job(self, prepared: Prepared, cluster: Cluster) -> None:
        """Refuse what a data-parallel job cannot do (before anything is written)."""
        if getattr(prepared.config, "batch_size", None) not in (None, "auto"):
            cluster.check_batch_size(prepared.config.batch_size)

    def state(self, prepared: Prepared, state_dir: Path) -> dict[str, Any]:
        """What the task adds to ``training/state.json`` (files it saves there itself)."""
        return {}

    @abstractmethod
    def fit(self, prepared: Prepared, state_dir: Path, resume: bool, progress: Progress | None,
            cluster: Cluster | None) -> Any:
        """Build and train the model (inside the job's scope when ``cluster`` is given)."""

    def assemble(self, prepared: Prepared, fitted: Any) -> Any:
        """What is chosen on the validation data once the model is fitted (classify: the wide
        part's weight, the threshold), outside the job's scope like :meth:`evaluate`; what it
        returns is what :meth:`evaluate` and :meth:`write` get. The default keeps ``fitted``."""
        return fitted

    @abstractmethod
    def evaluate(self, prepared: Prepared, fitted: Any) -> dict[str, Any]:
        """The task's metrics (``metrics.json``, before the keys every task records)."""

    @abstractmethod
    def write(self, out: Path, prepared: Prepared, fitted: Any, metrics: dict[str, Any]) -> None:
        """Write the model folder ``out`` (process 0 only)."""


def train(run: TrainingRun, config=None, data=None, out: str | os.PathLike | None = None, *, valid=None, test=None,
          resume: bool | str = False, progress: Progress | None = None, command: list[str] | None = None,
          distribute: DistributeConfig | None = None) -> TrainResult:
    """Run ``run``'s steps (see the module's docstring); returns what was written."""
    config = as_config(run.config_class, config)
    if out is None:
        raise BadInput("{field} is required: the model folder to write", field="out")
    out = Path(out)
    data = run.read(config, data, valid, test)
    cluster = None
    if distribute is not None:
        from kformer.parallel import start

        cluster = start(distribute)  # waits for every process of the job
        out = cluster.folder(out)
    check_out_folder(out)
    resume = _resume(resume, out, run.task, cluster)
    saved = None
    if resume:
        saved = ResumeState.read(out)
        config = saved.config(run.config_class, config, f"{out}/training/state.json")
    prepared = run.prepare(config, data, saved)
    if cluster is not None:
        run.check_job(prepared, cluster)
    report_settings(progress, prepared.settings_line)
    with training_folder(out, resume) as state_dir:  # refuses a foreign or busy folder; cleans up on failure
        if not resume:
            ResumeState.of(prepared.config, prepared.auto.to_json(), **run.state(prepared, state_dir)).write(state_dir)
        restarts = _log_restart(state_dir)
        with contextlib.nullcontext() if cluster is None else cluster.scope():
            fitted = run.fit(prepared, state_dir, resume, progress, cluster)
        fitted = run.assemble(prepared, fitted)
        metrics = {**run.evaluate(prepared, fitted), "recipe": to_dict(prepared.config),
                   "auto": prepared.auto.to_json(), **({"command": list(command)} if command is not None else {}),
                   **({"restarts": restarts} if restarts else {})}
        if cluster is None or cluster.chief:
            run.write(out, prepared, fitted, metrics)
    return TrainResult(out, metrics, prepared.config, prepared.auto.to_json())


def _resume(resume: bool | str, out: Path, task: str, cluster: Cluster | None) -> bool:
    """Whether this run resumes: ``resume`` True or False, or ``"auto"``: when ``out`` holds a
    complete checkpoint. BadInput when ``out`` holds another task's model or run. In a job of several
    processes every process first takes the newest checkpoint of any of them
    (:meth:`~kformer.parallel.Cluster.take_newest_checkpoint`), so all resume from one epoch."""
    if resume not in (True, False, "auto"):
        raise BadInput(f"{{field}} must be True, False or 'auto', not {resume!r}", field="resume")
    if not resume:
        return False
    _check_task(out, task)
    from kformer.training import last_checkpoint

    state_dir = out / TRAINING_DIR
    if cluster is not None and cluster.num_processes > 1:
        check_not_busy(out)
        found = cluster.take_newest_checkpoint(state_dir)
    else:
        found = last_checkpoint(state_dir) is not None
    return True if resume is True else found and (state_dir / STATE_FILE).is_file()


def _check_task(out: Path, task: str) -> None:
    """BadInput naming ``out`` when its model folder or its run's state belongs to another task."""
    import json

    from kformer.artifacts import MANIFEST_NAME

    for path in (out / MANIFEST_NAME, out / TRAINING_DIR / STATE_FILE):
        try:
            found = json.loads(path.read_text(encoding="utf-8")).get("task")
        except (OSError, ValueError, AttributeError):
            continue  # none, or unreadable: what reads it later says so
        if found and found != task:
            raise BadInput(f"{out} holds a model or run of the {found} task, not {task}; pass another folder as "
                           "{field}", field="out")


def _log_restart(state_dir: Path) -> list[dict]:
    """The restarts of a job the launcher started (:func:`kformer.launcher.current_process`), the
    latest written to ``train.log``; [] otherwise."""
    from kformer.launcher import current_process, restart_line

    job = current_process()
    if job is None or not job.restarts:
        return []
    from kformer.training import TRAIN_LOG
    from kformer.training.progress import append_log

    append_log(state_dir / TRAIN_LOG, restart_line(job.restarts[-1]))
    return [dict(restart) for restart in job.restarts]


def report_settings(progress: Progress | None, line: str | None) -> None:
    """A ``"settings"`` progress event carrying ``line`` (what auto chose), before training."""
    if progress is not None and line:
        from kformer.training import ProgressEvent

        progress(ProgressEvent("settings", 0.0, message=line))
