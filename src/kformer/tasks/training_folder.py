"""The training folder: the one place that decides whether a run may write ``out`` and cleans up.

:func:`training_folder` is how every task's training writes its model folder: it refuses a file,
a folder of someone else's files and a folder another training is writing (a lock), empties the
last run's checkpoints for a fresh run or keeps them for ``resume``, and removes what a failed
fresh run created.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from kformer.errors import BadInput
from kformer.folders import TRAINING_DIR
from kformer.tasks.state import STATE_FILE

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


def check_not_busy(out: Path) -> None:
    """BadInput naming ``out`` when another training holds its lock (checked before the processes of
    a job exchange checkpoints, which happens before :func:`training_folder` takes the lock)."""
    if (out / TRAINING_DIR / LOCK_FILE).is_file():
        os.close(_lock(out))


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
    if not (state_dir / STATE_FILE).is_file():
        raise BadInput(
            f"nothing to resume in {out}: no {TRAINING_DIR}/{STATE_FILE}; train without resume first", field="resume"
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
