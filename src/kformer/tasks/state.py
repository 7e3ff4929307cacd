"""Resume state: the one reader and writer of ``training/state.json``.

A fresh run writes, before its first epoch, what ``resume`` needs to rebuild the same model:
the settings it runs with (``"auto"`` already resolved), the ``auto`` choices, and what its task
adds (classify: the labels; translate: its vocabulary files). A resumed run reads them back and
takes from the caller only the settings that may change between the two runs
(:data:`RESUMABLE`): how long to go on, not what to build.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kformer.config import AUTO, build_config, fields, to_dict
from kformer.errors import BadInput, CorruptModel
from kformer.folders import TRAINING_DIR

STATE_FILE = "state.json"
# settings a resumed run takes from its caller (when the task has them); all others are the first run's
RESUMABLE = ("epochs", "patience", "max_minutes")


@dataclass(frozen=True)
class ResumeState:
    """``settings`` (a flat ``{name: value}``), the ``auto`` choices and the task's ``extra``;
    ``task``: the task that wrote it (None in a state written before kformer recorded it);
    ``folder``: the ``training/`` folder it was read from (where the task's files are), if any."""

    settings: dict[str, Any]
    auto: dict[str, dict[str, Any]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    folder: Path | None = field(default=None, compare=False)
    task: str | None = None

    @classmethod
    def of(cls, config, auto: dict | None = None, **extra: Any) -> ResumeState:
        return cls(to_dict(config), dict(auto or {}), extra, task=getattr(config, "task", None))

    def write(self, state_dir: Path) -> None:
        from kformer.artifacts import write_json_atomic

        task = {"task": self.task} if self.task else {}
        write_json_atomic(Path(state_dir) / STATE_FILE,
                          {**self.extra, **task, "settings": self.settings, "auto": self.auto})

    @classmethod
    def read(cls, out: Path) -> ResumeState:
        """The state of the run in the model folder ``out``: BadInput (field ``resume``) when
        there is none, CorruptModel when it cannot be read."""
        path = Path(out) / TRAINING_DIR / STATE_FILE
        if not path.is_file():
            raise BadInput(f"nothing to resume in {out}: no {TRAINING_DIR}/{STATE_FILE}; train without {{field}} "
                           "first", field="resume")
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
            settings, auto = dict(saved.pop("settings")), dict(saved.pop("auto", {}) or {})
            task = saved.pop("task", None)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise CorruptModel(f"{path} is corrupt; train afresh (without {{field}}) or into a new folder",
                               field="resume") from None
        return cls(settings, auto, saved, path.parent, task)

    def config(self, config_cls, given, state_path: str = STATE_FILE):
        """The first run's settings as ``config_cls``, with the :data:`RESUMABLE` settings of
        ``given`` (those it sets: ``"auto"`` keeps what the first run chose)."""
        try:
            saved = build_config(config_cls, self.settings, sources=(state_path,))
        except BadInput as exc:
            raise CorruptModel(f"{state_path} is corrupt ({exc.message_for()}); train afresh into a new folder",
                               field="resume") from None
        names = [name for name in RESUMABLE if name in fields(config_cls)]
        return dataclasses.replace(saved, **{name: getattr(given, name) for name in names
                                             if getattr(given, name) != AUTO})
