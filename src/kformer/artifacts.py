"""Atomic writes: a file or folder is written under a temporary name and renamed into place, so a
crash never leaves a half-written artefact where a good one stood. (What a model folder holds,
and reading it back, is :mod:`kformer.folders`.)"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MANIFEST_NAME = "kformer.json"


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """Write ``data`` as pretty JSON to ``path`` through a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, ensure_ascii=False, default=_json_default)
            handle.write("\n")
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
    curves written during training) are kept.
    """
    final_dir = Path(final_dir)
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final_dir.name}.", dir=final_dir.parent))
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    final_dir.mkdir(exist_ok=True)
    for item in staging.iterdir():
        target = final_dir / item.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(item, target)
    staging.rmdir()
