"""What every task shares: progress events, train results, attention maps, the loaded-model base.

Each task module (``kformer.tasks.classify``, ``.translate``, ``.arithmetic``) offers the same
life cycle as plain functions -- ``train(config, data, out, *, resume=False, progress=None)``,
``load(folder)``, then ``predict`` / ``translate`` / ``solve``, ``evaluate`` and
``attention_maps`` on what ``load`` returned. Nothing here prints, parses arguments or exits:
progress reaches the caller through a ``progress`` callback, errors are
:class:`~kformer.errors.KformerError` subclasses.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from kformer.errors import BadInput
from kformer.folders import TRAINING_DIR

if TYPE_CHECKING:
    from kformer.training import Progress, ProgressEvent  # noqa: F401  (re-exported, see __getattr__)


def __getattr__(name: str):
    """``Progress`` and ``ProgressEvent`` of :mod:`kformer.training`, re-exported lazily: importing
    a task module must not import Keras (bad input fails before that second of start-up)."""
    if name in ("Progress", "ProgressEvent"):
        import kformer.training

        return getattr(kformer.training, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class TrainResult:
    """What ``train`` wrote: the model ``folder``, its ``metrics`` (as in ``metrics.json``),
    the ``config`` it ran with (``"auto"`` settings resolved) and the ``auto`` choices."""

    folder: Path
    metrics: dict[str, Any]
    config: Any
    auto: dict[str, dict[str, Any]] = field(default_factory=dict)

    def load(self):
        """The trained model, as :func:`kformer.load` gives it."""
        from kformer.tasks import load

        return load(self.folder)


@dataclass
class AttentionMaps:
    """Attention weights for one input, per map name (``"encoder"``, ``"decoder_self"``, ``"cross"``).

    ``maps[name]`` is ``(layers, heads, queries, keys)`` float32; ``rows[name]`` / ``cols[name]``
    label the queries and keys with their tokens; ``output`` is what the model answered.
    """

    maps: dict[str, np.ndarray]
    rows: dict[str, list[str]]
    cols: dict[str, list[str]]
    output: str | None = None

    def to_json(self, digits: int = 4) -> dict[str, Any]:
        """Plain lists for JSON (weights rounded to ``digits``)."""
        return {
            "output": self.output,
            "maps": {
                name: {
                    "rows": self.rows[name],
                    "cols": self.cols[name],
                    "weights": np.round(stack.astype("float64"), digits).tolist(),
                }
                for name, stack in self.maps.items()
            },
        }

    def draw(self, out_dir: str | os.PathLike) -> list[Path]:
        """PNG heat maps into ``out_dir`` (per layer head-averaged, and a layer x head grid)."""
        from kformer.artifacts import staged_folder
        from kformer.viz import plot_attention

        out_dir = Path(out_dir)
        with staged_folder(out_dir) as stage:
            written = plot_attention(self.maps, self.rows, self.cols, stage)
        return [out_dir / Path(path).name for path in written]


class TaskModel:
    """A loaded model folder. Subclasses add the task's own methods (predict, translate, solve).

    The uniform part, for a service: :meth:`predict_instances` answers a batch of input strings
    with one JSON-ready dict each, :meth:`attention_maps` explains one input, :meth:`warmup`
    compiles what the first requests would otherwise wait for, :meth:`metadata` describes it.
    """

    task: ClassVar[str] = ""
    # request parameters :meth:`predict_instances` accepts, with their defaults
    parameters: ClassVar[dict[str, Any]] = {}

    def __init__(self, folder: Path, manifest: dict):
        self.folder = Path(folder)
        self.manifest = manifest

    def metadata(self) -> dict[str, Any]:
        """Task, recipe and metrics from the folder (and labels for classifiers)."""
        return {
            "task": self.task,
            "format_version": self.manifest.get("format_version", 0),
            "recipe": self.manifest.get("recipe", {}),
            "metrics": self.manifest.get("metrics", {}),
            "parameters": dict(self.parameters),
        }

    def check_parameters(self, parameters: dict[str, Any] | None) -> dict[str, Any]:
        """``parameters`` with defaults filled in; unknown names are a BadInput."""
        parameters = dict(parameters or {})
        unknown = sorted(set(parameters) - set(self.parameters))
        if unknown:
            raise BadInput(
                f"unknown parameter {{field}} for a {self.task} model; known: {', '.join(self.parameters) or 'none'}",
                field=f"parameters.{unknown[0]}",
            )
        return {**self.parameters, **parameters}

    def predict_instances(self, instances: list[str], parameters: dict[str, Any] | None = None) -> list[dict]:
        raise NotImplementedError

    def attention_maps(self, text: str) -> AttentionMaps:
        raise NotImplementedError

    def warmup(self) -> None:
        """Run the model once per input shape a service will see, so no request pays a compile."""


# --- helpers the task modules share ---------------------------------------------------------------


LOCK_FILE = ".lock"  # in out/training: held (flock) by the run writing the folder


@contextlib.contextmanager
def training_folder(out: Path, resume: bool) -> Iterator[Path]:
    """The one way a task's ``train`` writes its folder ``out``: yields ``out/training``.

    Before anything is written it refuses (BadInput naming ``out``) a file, a folder that holds
    files but no kformer model or run, and a folder another training is writing (a lock on
    ``out/training/.lock``, released when the block ends; the kernel drops the lock of a process
    that died, so a stale lock file never blocks). A fresh run empties ``out/training``; ``resume``
    needs its ``state.json``. When the block fails, a folder this run created is removed unless
    it holds a checkpoint to resume from, and a write that the disk refuses (read-only, full, no
    permission) becomes a one-line BadInput naming the file and what to do.
    """
    check_out_folder(out)
    created = not out.exists()
    try:
        (out / TRAINING_DIR).mkdir(parents=True, exist_ok=True)
        lock = _lock(out)
    except OSError as exc:
        remove_unfinished(out, created)
        raise _unwritable(exc) from None
    try:
        yield prepare_training_dir(out, resume)
    except OSError as exc:
        remove_unfinished(out, created)
        raise _unwritable(exc) from None
    except BaseException:
        remove_unfinished(out, created)
        raise
    finally:
        os.close(lock)


def _unwritable(exc: OSError) -> Exception:
    from kformer.artifacts import write_error

    return write_error(exc, "out") or exc


def check_out_folder(out: Path) -> None:
    """BadInput naming ``out`` when it is a file, or a folder of other files (never overwritten)."""
    from kformer.artifacts import MANIFEST_NAME

    if out.exists() and not out.is_dir():
        raise BadInput(f"{{field}} {out} is a file; pass a folder to write the model into", field="out")
    if out.is_dir() and not (out / MANIFEST_NAME).is_file() and not (out / TRAINING_DIR).is_dir():
        found = sorted(item.name for item in out.iterdir())
        if found:
            shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
            raise BadInput(
                f"{out} already holds files that are not a kformer model ({shown}); kformer does not overwrite "
                "them: pass a new or empty folder as {field}", field="out")


def _lock(out: Path) -> int:
    """Take ``out/training/.lock`` (non-blocking flock; the file holds the owner's PID) and return
    its descriptor; BadInput naming ``out`` when another process holds it."""
    path = out / TRAINING_DIR / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        import fcntl
    except ImportError:  # Windows: no flock; the folder is not guarded
        return fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise BadInput(f"{out} is being written by another kformer training (process {owner}); wait for it to "
                       "finish or pass another folder as {field}", field="out") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def resumable_state_dir(out: Path) -> Path:
    """``out/training`` of a run that can be resumed (it has ``state.json``), else BadInput."""
    state_dir = out / TRAINING_DIR
    if not (state_dir / "state.json").is_file():
        raise BadInput(
            f"nothing to resume in {out}: no {TRAINING_DIR}/state.json; train without resume first", field="resume"
        )
    return state_dir


def prepare_training_dir(out: Path, resume: bool) -> Path:
    """``out/training``: kept for ``resume`` (which needs its ``state.json``), else emptied (but
    for the lock of :func:`training_folder`)."""
    state_dir = out / TRAINING_DIR
    if resume:
        resumable_state_dir(out)
    elif state_dir.exists():
        for item in state_dir.iterdir():  # a fresh run must not mix with an older one's checkpoints
            if item.name == LOCK_FILE:
                continue
            if item.is_dir() and not item.is_symlink():
                shutil.rmtree(item)
            else:
                item.unlink()
    state_dir.mkdir(parents=True, exist_ok=True)
    return state_dir


def remove_unfinished(out: Path, created: bool) -> None:
    """After a failed run: remove ``out`` if this run created it and nothing in it is worth keeping."""
    from kformer.artifacts import MANIFEST_NAME
    from kformer.training import CHECKPOINT_STATE_NAME

    if created and not (out / MANIFEST_NAME).exists() and not (out / TRAINING_DIR / CHECKPOINT_STATE_NAME).exists():
        shutil.rmtree(out, ignore_errors=True)


def check_texts(texts, name: str = "texts") -> list[str]:
    """``texts`` as a list of strings; a single string or a non-string item is a BadInput."""
    if isinstance(texts, str | bytes):
        raise BadInput(f"{{field}} must be a list of strings, not one string; wrap it: [{texts[:30]!r}]", field=name)
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise BadInput(f"{{field}} must be a string, not {type(text).__name__}", field=f"{name}[{i}]")
    return texts


def write_curves(state_dir: Path, stage: Path) -> None:
    """``curves.png`` (loss and metrics per epoch) from the run's ``history.csv`` into ``stage``."""
    from kformer.training import read_history
    from kformer.viz import plot_training_curves

    plot_training_curves(read_history(Path(state_dir) / "history.csv"), Path(stage) / "curves.png")
