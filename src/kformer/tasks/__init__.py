"""The task API: one module per task, each owning its whole life cycle and its folder format.

- :mod:`kformer.tasks.classify` -- text classification (``train``, ``load`` -> ``Classifier``).
- :mod:`kformer.tasks.translate` -- translation (``train``, ``load`` -> ``Translator``).
- :mod:`kformer.tasks.arithmetic` -- multi-digit arithmetic (``train``, ``load`` -> ``ArithmeticModel``).

:func:`load` opens any model folder as the right task's object. The CLI and the REST service
call these functions; so can a notebook or a script.
"""

from __future__ import annotations

import importlib
import os

from kformer.errors import Unsupported

TASKS = ("classify", "translate", "arithmetic")


def task_module(task: str):
    """The module of ``task`` (``"classify"``, ``"translate"`` or ``"arithmetic"``)."""
    if task not in TASKS:
        raise Unsupported(f"unknown task '{task}'; kformer knows {', '.join(TASKS)}", field="task")
    return importlib.import_module(f"kformer.tasks.{task}")


def load(folder: str | os.PathLike):
    """Load any kformer model folder as its task's model object (safe mode, clear errors)."""
    from kformer.folders import read_manifest

    manifest = read_manifest(folder)
    return task_module(manifest["task"]).load(folder)
