"""What every task shares: progress events, train results, attention maps, the loaded-model base.

Each task module (``kformer.tasks.classify``, ``.translate``, ``.arithmetic``) offers the same
life cycle as plain functions -- ``train(config, data, out, *, resume=False, progress=None)``,
``load(folder)``, then ``predict`` (every task: one dict per input; ``translate`` and ``solve``
are the task-named spellings), ``evaluate`` and ``attention_maps`` on what ``load`` returned. Nothing here prints, parses arguments or exits:
progress reaches the caller through a ``progress`` callback, errors are
:class:`~kformer.errors.KformerError` subclasses.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from kformer.errors import BadInput, KformerError, Unsupported

if TYPE_CHECKING:
    from kformer.models.export_plan import Plan
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
    """A loaded model folder. Subclasses add the task's own spellings (translate, solve).

    The one interface every task has: :meth:`predict` answers a list of input strings with one
    JSON-ready dict each (what the service returns per instance), :meth:`attention_maps` explains
    one input, :meth:`warmup` compiles what the first requests would otherwise wait for,
    :meth:`metadata` describes it.
    """

    task: ClassVar[str] = ""
    # keyword parameters :meth:`predict` accepts (a request's "parameters"), with their defaults
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
        """A request's ``parameters`` with defaults filled in; an unknown name or a value
        :meth:`predict` would refuse is a BadInput whose field is ``parameters.<name>``."""
        parameters = dict(parameters or {})
        unknown = sorted(set(parameters) - set(self.parameters))
        if unknown:
            raise BadInput(
                f"unknown parameter {{field}} for a {self.task} model; known: {', '.join(self.parameters) or 'none'}",
                field=f"parameters.{unknown[0]}",
            )
        merged = {**self.parameters, **parameters}
        try:
            self.check_values(merged)
        except KformerError as exc:
            raise type(exc)(exc.template, field=f"parameters.{exc.field}") from None
        return merged

    def check_values(self, parameters: dict[str, Any]) -> None:
        """Raise BadInput (its field: the parameter's name) for a value :meth:`predict` refuses."""

    def predict(self, instances: Sequence[str], **parameters) -> list[dict[str, Any]]:
        """One JSON-ready dict per instance; ``parameters`` are :attr:`parameters`' names."""
        raise NotImplementedError

    def attention_maps(self, text: str) -> AttentionMaps:
        raise NotImplementedError

    def warmup(self) -> None:
        """Run the model once per input shape a service will see, so no request pays a compile."""

    def export_plan(self) -> Plan:
        """What an export of this model holds (:mod:`kformer.export` writes it as a SavedModel or ONNX)."""
        raise Unsupported(f"models of task {self.task!r} cannot be exported", field="model_dir")


class FromExport:
    """What a task model loaded from an export folder (``kformer export``'s ``--out``) cannot do,
    said once: mixed in before the task's model class (``class ExportedX(FromExport, X)``)."""

    folder: Path

    def attention_maps(self, text: str) -> AttentionMaps:
        raise Unsupported("an export has no attention maps (they need the Keras network); serve the model folder",
                          field="model_dir")

    def export_plan(self) -> Plan:
        raise Unsupported(f"{self.folder} is an export already", field="model_dir")

    @staticmethod
    def greedy_only(beam: int) -> None:
        """Unsupported unless ``beam`` is 1: an export decodes greedily."""
        if beam != 1:
            raise Unsupported("an export decodes greedily (beam 1); serve the model folder for beam search",
                              field="beam")


# --- helpers the task modules share ---------------------------------------------------------------


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
