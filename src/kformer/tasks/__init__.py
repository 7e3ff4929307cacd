"""The task API: one module per task, each owning its whole life cycle and its folder format.

- :mod:`kformer.tasks.classify` -- text classification (``train``, ``load`` -> ``Classifier``).
- :mod:`kformer.tasks.translate` -- translation (``train``, ``load`` -> ``Translator``).
- :mod:`kformer.tasks.arithmetic` -- multi-digit arithmetic (``train``, ``load`` -> ``ArithmeticModel``).

:func:`load` opens any model folder, or export folder, as the right task's object, and :func:`recipe` a
recipe as the right task's settings object. The CLI and the REST service
call these functions; so can a notebook or a script.
"""

from __future__ import annotations

import importlib
import inspect
import os

from kformer.errors import BadInput, Unsupported

TASKS = ("classify", "translate", "arithmetic")
LOAD_OPTIONS = ("runtime",)  # what load passes to the tasks that take it


def task_module(task: str):
    """The module of ``task`` (``"classify"``, ``"translate"`` or ``"arithmetic"``)."""
    if task not in TASKS:
        raise Unsupported(f"unknown task '{task}'; kformer knows {', '.join(TASKS)}", field="task")
    return importlib.import_module(f"kformer.tasks.{task}")


def load(folder: str | os.PathLike, **options):
    """Load any kformer model folder -- or export folder (``kformer export``'s ``--out``) -- as its
    task's model object (safe mode, clear errors).

    ``options`` go to the task's ``load`` where it takes them, and are ignored where it does not:
    ``runtime`` (``"keras"``, ``"onnx"`` or ``"onnx-int8"``) is where a classifier predicts; other
    tasks predict with Keras whatever it says.
    """
    from kformer.folders import read_export_metadata, read_manifest

    unknown = sorted(set(options) - set(LOAD_OPTIONS))
    if unknown:
        raise BadInput(f"unknown option {{field}}; load takes {', '.join(LOAD_OPTIONS)}", field=unknown[0])
    exported = read_export_metadata(folder)
    if exported is not None:  # an export answers on the runtime it was exported for
        return task_module(exported["task"]).load_export(folder, exported)
    manifest = read_manifest(folder)
    task_load = task_module(manifest["task"]).load
    taken = inspect.signature(task_load).parameters
    return task_load(folder, **{name: value for name, value in options.items() if name in taken})


def recipe(name: str | os.PathLike, **overrides):
    """The settings of recipe ``name`` (shipped, or a TOML path naming its ``task``) as that task's
    config object, then ``overrides``: the same as ``ClassifyConfig.from_recipe(name, **overrides)``
    for a classify recipe."""
    from kformer.config import TaskSettings, recipe_task

    task = recipe_task(name)
    if task not in TASKS:
        raise BadInput(f"recipe {name} names no task kformer knows (task = {task!r}); add task = \"classify\", "
                       "\"translate\" or \"arithmetic\", or use that task's Config.from_recipe", field="recipe")
    module = task_module(task)
    config_cls = next(value for value in vars(module).values()
                      if isinstance(value, type) and issubclass(value, TaskSettings) and value.task == task)
    return config_cls.from_recipe(name, **overrides)
