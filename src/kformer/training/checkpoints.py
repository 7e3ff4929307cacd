"""Checkpoints: one atomic checkpoint per epoch, and restoring the last one to resume.

What a crash loses: :class:`EpochCheckpoint` writes the weights, optimizer state (with its step
counter, so the learning-rate schedule continues) and the dropout seed counters after every epoch,
through a temporary file and a rename, so SIGKILL at any moment leaves the last complete epoch's
checkpoint and ``resume`` repeats only the epoch that was running.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import keras
import numpy as np

from kformer import faults
from kformer.artifacts import save_keras_atomic, write_json_atomic
from kformer.errors import BadInput, CorruptModel

CHECKPOINT_NAME = "checkpoint.keras"
CHECKPOINT_STATE_NAME = "checkpoint.json"


class EpochCheckpoint(keras.callbacks.Callback):
    """After every epoch write ``out_dir/checkpoint.keras`` (weights + optimizer state) atomically.

    ``checkpoint.json`` beside it records the completed ``epochs_done``, the optimizer's
    ``iterations``, the ``learning_rate`` of the last step, the dropout layers' ``seed_states``
    (Keras does not save them; restored so a resumed run draws the masks an uninterrupted one
    would), ``train_seconds`` (training time so far, the runs before a resume included, so a
    resumed time budget and its learning-rate decay continue where they were) and the epoch's
    ``logs``. It is written after the model file; a crash between the two
    renames leaves a model one epoch newer than the JSON, which :func:`restore_checkpoint`
    recognises by its optimizer step and resumes from.
    """

    def __init__(self, out_dir: str | os.PathLike):
        super().__init__()
        self.out_dir = Path(out_dir)
        self.spent_seconds = 0.0  # set by fit() when resuming
        self._began = time.monotonic()

    def on_train_begin(self, logs=None):
        self._began = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        save_keras_atomic(self.model, self.out_dir / CHECKPOINT_NAME, faults.checkpoint_fault(epoch + 1))
        optimizer = self.model.optimizer
        state = {
            "epochs_done": epoch + 1,
            "iterations": None if optimizer is None else int(optimizer.iterations.numpy()),
            "learning_rate": None if optimizer is None else float(np.asarray(optimizer.learning_rate)),
            "seed_states": _seed_states(self.model),
            "train_seconds": round(self.spent_seconds + time.monotonic() - self._began, 3),
            "logs": {k: float(v) for k, v in (logs or {}).items() if np.ndim(v) == 0},
        }
        write_json_atomic(self.out_dir / CHECKPOINT_STATE_NAME, state)

def _seed_variables(model: keras.Model) -> list:
    """The ``(2,)`` seed-generator states (seed, counter) of the model's dropout layers, in layer order."""
    return [v for v in model.non_trainable_variables if v.path.endswith("seed_generator_state")]

def _seed_states(model: keras.Model) -> list[list]:
    """``[[variable path, [seed, counter]], ...]`` for checkpoint.json (restored by position: the
    paths carry process-wide name counters)."""
    return [[v.path, np.asarray(v.numpy()).tolist()] for v in _seed_variables(model)]

def _checkpoint_state(out_dir: Path) -> dict[str, Any] | None:
    """``checkpoint.json`` of ``out_dir`` (None when it or ``checkpoint.keras`` is missing)."""
    model_path, state_path = out_dir / CHECKPOINT_NAME, out_dir / CHECKPOINT_STATE_NAME
    if not (model_path.is_file() and state_path.is_file()):
        return None
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
        state["epochs_done"] = int(state["epochs_done"])
    except (ValueError, KeyError, TypeError):
        raise CorruptModel(f"{state_path} is corrupt; delete it and {model_path.name} to start afresh") from None
    return state

def last_checkpoint(out_dir: str | os.PathLike) -> tuple[Path, int] | None:
    """``(checkpoint path, completed epochs)`` of the last checkpoint in ``out_dir``, or None."""
    state = _checkpoint_state(Path(out_dir))
    return None if state is None else (Path(out_dir) / CHECKPOINT_NAME, state["epochs_done"])

def checkpoint_seconds(out_dir: str | os.PathLike) -> float:
    """Training seconds recorded by the last checkpoint in ``out_dir`` (0 when there is none)."""
    state = _checkpoint_state(Path(out_dir))
    return 0.0 if state is None else float(state.get("train_seconds") or 0.0)

def checkpoint_files(out_dir: str | os.PathLike) -> dict[str, bytes]:
    """The last checkpoint of ``out_dir`` as ``{file name: bytes}``, with the history up to it: what
    another process of a data-parallel job needs to resume from it (empty when there is none)."""
    from kformer.training.progress import HISTORY_NAME

    out_dir = Path(out_dir)
    if _checkpoint_state(out_dir) is None:
        return {}
    names = (CHECKPOINT_NAME, CHECKPOINT_STATE_NAME, HISTORY_NAME)
    return {name: (out_dir / name).read_bytes() for name in names if (out_dir / name).is_file()}

def put_checkpoint_files(out_dir: str | os.PathLike, files: dict[str, bytes]) -> None:
    """Make ``files`` (:func:`checkpoint_files` of another folder) the checkpoint of ``out_dir``, each
    file atomically and the model first, as :class:`EpochCheckpoint` writes them: a crash half-way
    leaves a model newer than its JSON, which :func:`restore_checkpoint` recognises."""
    from kformer.artifacts import write_bytes_atomic

    for name in sorted(files, key=lambda name: name != CHECKPOINT_NAME):
        write_bytes_atomic(Path(out_dir) / name, files[name])

def remove_checkpoint_debris(out_dir: str | os.PathLike) -> list[Path]:
    """Delete temporary checkpoint files (and history copies) a killed run left in ``out_dir``; returns them."""
    from kformer.training.progress import HISTORY_NAME

    debris = [p for p in Path(out_dir).glob(".*") if ".tmp" in p.name
              and p.name.startswith((".checkpoint.", f".{HISTORY_NAME}."))]
    for path in debris:
        path.unlink(missing_ok=True)
    return debris

def restore_checkpoint(model: keras.Model, out_dir: str | os.PathLike) -> int:
    """Load the last checkpoint's weights, optimizer state and dropout seed counters into a
    compiled ``model``.

    Returns the ``initial_epoch`` for ``model.fit`` (0 when there is no checkpoint). The model
    must be built the same way as the one that wrote the checkpoint.
    """
    out_dir = Path(out_dir)
    state = _checkpoint_state(out_dir)
    if state is None:
        return 0
    path, epochs_done = out_dir / CHECKPOINT_NAME, state["epochs_done"]
    if model.optimizer is not None and not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    try:
        model.load_weights(path)
    except Exception as exc:  # shape mismatch, damaged zip
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise BadInput(f"cannot resume from {path} ({reason}); use the same settings or a new --out") from None
    recorded = state.get("iterations")
    if model.optimizer is not None and recorded is not None and int(model.optimizer.iterations.numpy()) != recorded:
        return epochs_done + 1  # killed between the model's rename and the JSON's: the model is one epoch newer
    seeds, variables = state.get("seed_states") or [], _seed_variables(model)
    if len(seeds) == len(variables):
        for variable, (_, value) in zip(variables, seeds, strict=True):
            variable.assign(np.asarray(value, dtype=variable.dtype))
    return epochs_done
