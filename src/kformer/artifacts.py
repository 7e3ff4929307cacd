"""Atomic writes: a file or folder is written under a temporary name and renamed into place, so a
crash never leaves a half-written artefact where a good one stood. (What a model folder holds,
and reading it back, is :mod:`kformer.folders`.)"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kformer.errors import BadInput

MANIFEST_NAME = "kformer.json"


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """Write ``data`` as pretty JSON to ``path`` through a temporary file and a rename."""
    text = json.dumps(data, indent=2, ensure_ascii=False, default=_json_default) + "\n"
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file (``.NAME.*.tmp`` beside it) and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def save_keras_atomic(model, path: str | os.PathLike, before_replace: Callable[[Path], None] | None = None) -> None:
    """Save a Keras model to ``path`` (``.keras``) through a temporary file and a rename.

    ``before_replace(tmp)`` runs between the two (the crash tests' fault injection,
    :mod:`kformer.faults`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp.keras")
    try:
        model.save(tmp)
        if before_replace is not None:
            before_replace(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def staged_folder(final_dir: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``final_dir``; on success it replaces ``final_dir``.

    On an exception the temporary folder is removed and ``final_dir`` is left as it was.
    Files already in ``final_dir`` that the new contents do not replace (checkpoints, logs,
    curves written during training) are kept. The new items are renamed in one by one, the
    manifest last (a folder with a manifest is complete); the items they replace are parked
    beside, so when a rename fails (a disk gone read-only) every item is put back as it was.
    Staging folders carry their writer's process id; ones left by a process that was killed
    (``kill -9`` mid-write) are removed by the next write of the same folder.
    """
    final_dir = Path(final_dir)
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = new_staging_folder(final_dir)
    try:
        yield staging
        final_dir.mkdir(exist_ok=True)
        _swap_in(staging, final_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _swap_in(staging: Path, final_dir: Path) -> None:
    """Move every item of ``staging`` into ``final_dir`` (manifest last); all or nothing."""
    parked = new_staging_folder(final_dir, "old")
    moved: list[tuple[Path, Path | None]] = []  # (target, parked old item or None)
    try:
        for item in sorted(staging.iterdir(), key=lambda p: (p.name == MANIFEST_NAME, p.name)):
            target = final_dir / item.name
            old = None
            if target.exists() or target.is_symlink():
                old = parked / item.name
                os.replace(target, old)
            moved.append((target, old))
            os.replace(item, target)
    except BaseException:
        for target, old in reversed(moved):  # undo, newest first; one that fails does not stop the rest
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target, ignore_errors=True)
            else:
                target.unlink(missing_ok=True)
            if old is not None:
                with contextlib.suppress(OSError):
                    os.replace(old, target)
        raise
    finally:
        shutil.rmtree(parked, ignore_errors=True)


def new_staging_folder(final_dir: Path, kind: str = "stage") -> Path:
    """A new empty hidden folder beside ``final_dir`` named after this process (``kind``: stage
    for new contents, old for parked ones), once what killed writers left there is removed."""
    remove_stale_staging(final_dir)
    return Path(tempfile.mkdtemp(prefix=f".{final_dir.name}.{kind}-{os.getpid()}-", dir=final_dir.parent))


def remove_stale_staging(final_dir: Path) -> list[Path]:
    """Remove the staging/parking folders beside ``final_dir`` whose writing process is gone.

    Returns what was removed. A folder whose process id is alive (another writer, or this one)
    is left alone.
    """
    pattern = re.compile(rf"^\.{re.escape(final_dir.name)}\.(?:stage|old)-(\d+)-")
    removed = []
    for path in final_dir.parent.iterdir():
        match = pattern.match(path.name)
        if match and path.is_dir() and not _process_alive(int(match.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


WRITE_ERRNOS = {errno.EROFS: "the disk is read-only", errno.ENOSPC: "the disk is full",
                errno.EDQUOT: "the disk quota is used up", errno.EACCES: "no permission",
                errno.EPERM: "no permission", errno.EFBIG: "the file is too large for the disk"}


def write_error(exc: OSError, field: str | None = None) -> BadInput | None:
    """A one-line BadInput for a write the disk refused (read-only, full, no permission), naming
    the file and what to do; None for other OS errors (those are bugs, not the user's to fix)."""
    why = WRITE_ERRNOS.get(exc.errno)
    if why is None:
        return None
    where = exc.filename or "the output folder"
    advice = "free some disk space" if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) else "use a writable folder"
    target = " or pass another {field}" if field else ""
    return BadInput(f"cannot write {where}: {why} ({exc.strerror}); {advice}{target}. Nothing was changed",
                    field=field)
