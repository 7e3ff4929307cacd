"""Model folders: one place that writes them atomically and reads them back safely.

A model folder (``--out DIR``) holds ``kformer.json`` (the manifest: task, labels, recipe,
metrics, file names) beside one ``.keras`` model and whatever vocabulary files the task needs.
Folders are written under a temporary name and renamed, so a crash never leaves a half-written
model where a good one stood. ``.keras`` files always load with ``safe_mode=True``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kformer.errors import KformerError

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


def save_keras_atomic(model, path: str | os.PathLike) -> None:
    """Save a Keras model to ``path`` (``.keras``) through a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp.keras")
    try:
        model.save(tmp)
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


def read_manifest(model_dir: str | os.PathLike) -> dict:
    """Read ``kformer.json`` from a model folder, with a clear error if it is not one."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise KformerError(f"{model_dir} is not a folder; pass the --out folder of `kformer train`")
    manifest_path = model_dir / MANIFEST_NAME
    if not manifest_path.is_file():
        raise KformerError(
            f"{model_dir} is not a kformer model folder (no {MANIFEST_NAME}); "
            "pass the --out folder of `kformer train`"
        )
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise KformerError(f"{manifest_path} is corrupt ({exc}); retrain or restore it") from None
    if not isinstance(manifest, dict) or "task" not in manifest:
        raise KformerError(f"{manifest_path} has no 'task'; it was not written by kformer")
    return manifest


def load_keras_model(path: str | os.PathLike, custom_objects: dict | None = None):
    """Load a ``.keras`` file with ``safe_mode=True``; a bad file is a one-line KformerError."""
    import keras

    import kformer.layers  # noqa: F401  registers kformer's serializable layers

    path = Path(path)
    if not path.is_file():
        raise KformerError(f"model file {path} is missing")
    try:
        return keras.saving.load_model(path, custom_objects=custom_objects, safe_mode=True)
    except Exception as exc:  # Keras raises many types for a damaged zip or config
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise KformerError(f"cannot load {path}: the file is corrupt or not a kformer model ({reason[:200]})") from None
