"""Model folders: the one place that writes them and reads them back.

A model folder (``--out DIR`` of ``kformer train``) holds ``kformer.json`` -- the manifest --
beside one ``.keras`` model, the vocabulary files its task needs, ``metrics.json`` and pictures.
The manifest always has::

    format_version  int   FORMAT_VERSION when written (folders of kformer 0.1 have none: version 0)
    task            str   "classify" | "translate" | "arithmetic"
    model_file      str   the .keras file, loaded with safe_mode=True
    kformer_version str   the kformer that wrote it
    recipe          dict  the settings it was trained with
    metrics         dict  a summary of metrics.json

plus the keys its task lists in ``required``. Folders are written under a temporary name and
renamed (:func:`write_model_folder`), so a crash never leaves a half-written model where a good one
stood.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kformer.artifacts import MANIFEST_NAME, save_keras_atomic, staged_folder, write_json_atomic
from kformer.errors import BadInput, CorruptModel, ModelNotFound, Unsupported

FORMAT_VERSION = 1
METRICS_FILE = "metrics.json"
MODEL_FILE = "model.keras"
TRAINING_DIR = "training"  # checkpoints, logs and what --resume needs


def read_manifest(folder: str | os.PathLike, task: str | None = None, required: Sequence[str] = ()) -> dict:
    """The manifest of a model folder, checked.

    Raises ModelNotFound (no such folder, no manifest), CorruptModel (unreadable manifest, a
    missing key), Unsupported (written by a newer kformer) or BadInput (a folder of another
    ``task``).
    """
    import json

    folder = Path(folder)
    if not folder.is_dir():
        raise ModelNotFound(f"{folder} is not a folder; pass the --out folder of `kformer train`", field="model_dir")
    path = folder / MANIFEST_NAME
    if not path.is_file():
        raise ModelNotFound(
            f"{folder} is not a kformer model folder (no {MANIFEST_NAME}); pass the --out folder of `kformer train`",
            field="model_dir",
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptModel(f"{path} is corrupt ({exc}); retrain or restore it", field="model_dir") from None
    if not isinstance(manifest, dict) or "task" not in manifest:
        raise CorruptModel(f"{path} has no 'task'; it was not written by kformer", field="model_dir")
    version = manifest.get("format_version", 0)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise Unsupported(
            f"{folder} was written by a newer kformer (model format {version}; this kformer reads up to "
            f"{FORMAT_VERSION}); upgrade kformer",
            field="model_dir",
        )
    if task is not None and manifest["task"] != task:
        raise BadInput(f"{folder} holds a '{manifest['task']}' model, not a '{task}' one", field="model_dir")
    missing = [key for key in required if key not in manifest]
    if missing:
        raise CorruptModel(f"{path} is missing {', '.join(missing)}; retrain the model", field="model_dir")
    return manifest


def write_model_folder(
    out: str | os.PathLike,
    task: str,
    model,
    manifest: dict[str, Any],
    metrics: dict[str, Any],
    write_files: Callable[[Path], None] | None = None,
) -> Path:
    """Write a complete model folder atomically and return its path.

    ``model`` is saved without optimizer state (:func:`save_inference_model`) as ``model.keras``;
    ``manifest`` gets the common keys; ``metrics`` goes to ``metrics.json``; ``write_files(stage)``
    adds the task's own files (vocabularies, pictures) to the staging folder.
    """
    from kformer import __version__

    manifest = {
        "format_version": FORMAT_VERSION,
        "task": task,
        "model_file": MODEL_FILE,
        "kformer_version": __version__,
        **manifest,
    }
    out = Path(out)
    with staged_folder(out) as stage:
        save_inference_model(model, stage / MODEL_FILE)
        if write_files is not None:
            write_files(stage)
        write_json_atomic(stage / METRICS_FILE, metrics)
        write_json_atomic(stage / MANIFEST_NAME, manifest)  # last: a folder with a manifest is complete
    return out


def save_inference_model(model, path: str | os.PathLike) -> None:
    """Save ``model`` for inference: its compile settings are kept, its optimizer state is not.

    A trained optimizer is swapped for a fresh, unbuilt one of the same kind and settings, so the
    file carries no moments or step counter (any model: kformer's, or a KerasHub task, which
    does not recompile from its compile config).
    """
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and optimizer.built:
        model.optimizer = type(optimizer).from_config(optimizer.get_config())
    save_keras_atomic(model, path)


def load_keras_model(path: str | os.PathLike):
    """Load a ``.keras`` file with ``safe_mode=True``; a bad file is a one-line CorruptModel."""
    import keras

    import kformer.layers  # noqa: F401  registers kformer's serializable layers
    import kformer.metrics  # noqa: F401  registers the losses and metrics models are compiled with
    import kformer.training  # noqa: F401  registers the learning-rate schedule

    path = Path(path)
    if not path.is_file():
        raise CorruptModel(f"model file {path} is missing; retrain or restore the folder", field="model_dir")
    try:
        with warnings.catch_warnings():
            # the model is saved with a fresh (unbuilt) optimizer, which Keras reports on loading
            warnings.filterwarnings("ignore", message="Skipping variable loading for optimizer")
            return keras.saving.load_model(path, safe_mode=True)
    except Exception as exc:  # Keras raises many types for a damaged zip or config
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CorruptModel(
            f"cannot load {path}: the file is corrupt or not a kformer model ({reason[:200]})", field="model_dir"
        ) from None


# --- versions, exports, and what is converted from a folder ------------------------------------------

EXPORT_METADATA = "metadata.json"  # an export folder's description (kformer.export writes it)
EXPORT_MARKER = "kformer_export"  # its key telling an export folder from anything else
RUNTIME_CACHE_DIR = "runtimes"  # conversions of a model folder for a runtime, kept beside it
SKIPPED_SUFFIXES = (".png", ".svg", ".jpg")


def read_export_metadata(folder: str | os.PathLike) -> dict | None:
    """The metadata of an export folder (``kformer export``'s ``--out``), or None when ``folder``
    is not one."""
    import json

    try:
        metadata = json.loads((Path(folder) / EXPORT_METADATA).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return metadata if isinstance(metadata, dict) and metadata.get(EXPORT_MARKER) else None


def folder_version(folder: str | os.PathLike) -> str:
    """The fingerprint of a model or export folder: 12 hex digits of a SHA-256 over its files'
    paths and contents (pictures, ``training/``, hidden files and :data:`RUNTIME_CACHE_DIR`
    left out), so the same folder always has the same version and a retrained one a new one."""
    import hashlib

    digest = hashlib.sha256()
    folder = Path(folder)
    if not folder.is_dir():
        return "0"
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if (not path.is_file() or relative.parts[0] in (TRAINING_DIR, RUNTIME_CACHE_DIR) or path.suffix in SKIPPED_SUFFIXES
                or any(part.startswith(".") for part in relative.parts)):
            continue
        digest.update(relative.as_posix().encode() + b"\0")
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:12]


def converted(folder: str | os.PathLike, name: str, convert: Callable[[Path], None]) -> bytes:
    """The file ``name`` converted from the model folder ``folder`` (e.g. its network as ONNX),
    converted once and kept beside it: ``folder/runtimes/<version>/name``, keyed by
    :func:`folder_version`, so a restart or a reload of the same folder reads it back and a
    retrained folder converts again (the conversions of older versions are removed).
    ``convert(path)`` writes the file. A folder that cannot be written to keeps it in
    ``$XDG_CACHE_HOME/kformer/<version>`` (default ``~/.cache``) instead; what is not a model
    folder (no manifest) is converted every time."""
    import shutil
    import tempfile

    folder = Path(folder).resolve()
    if not (folder / MANIFEST_NAME).is_file():
        with tempfile.TemporaryDirectory(prefix="kformer-convert-") as work:
            convert(Path(work) / name)
            return (Path(work) / name).read_bytes()
    version = folder_version(folder)
    places = (folder / RUNTIME_CACHE_DIR / version,
              Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kformer" / version)
    for place in places:
        if (place / name).is_file():
            return (place / name).read_bytes()
    for place in places:
        try:
            place.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=place, prefix=".converting-") as work:
                convert(Path(work) / name)
                os.replace(Path(work) / name, place / name)
        except OSError:
            continue
        if place == places[0]:  # the conversions of versions the folder no longer has
            for old in place.parent.iterdir():
                if old != place:
                    shutil.rmtree(old, ignore_errors=True)
        return (place / name).read_bytes()
    raise BadInput(f"cannot keep a converted {name} in {places[0]} or {places[1]}: neither can be written",
                   field="model_dir")
