"""The settings reference (``docs/settings.md``), written from the settings classes themselves.

Every setting of every task -- its recipe section, type, default, flag and help, and for a
setting that may be ``"auto"`` the summary of the rule that then chooses it -- comes from the same
declarations the CLI's flags are generated from (:mod:`kformer.cli.settings_flags`), so the
reference cannot say anything the code does not. ``python -m kformer.cli.settings_docs`` prints
it; a test fails when ``docs/settings.md`` differs from what this prints.
"""

from __future__ import annotations

import dataclasses
import importlib
import types
import typing

from kformer.auto import setting_help
from kformer.config import SECTIONS

# (task, its settings class as module:Class), in the order the reference lists them
TASK_SETTINGS = (
    ("classify", "kformer.tasks.classify:ClassifyConfig"),
    ("translate", "kformer.tasks.translate:TranslateConfig"),
    ("arithmetic", "kformer.tasks.arithmetic:ArithmeticConfig"),
)

HEADER = """\
# Settings reference

Every setting of every task: its recipe section, type, default and the `kformer train` flag that
sets it. A setting whose default is `auto` is chosen from the training data when it is not given;
its line says by which rule, and the run records what it chose and why in `metrics.json["auto"]`
(and prints one line before training). Settings come from the task's defaults, then a recipe
(`--recipe NAME|PATH`, a TOML file with `[data]`, `[model]` and `[training]` sections), then the
flags; in Python, `train(config, ...)` takes the settings class or a dict of settings.

This page is generated from the code (`python -m kformer.cli.settings_docs > docs/settings.md`);
a test fails when it is out of date.
"""


def settings_class(path: str):
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def type_name(hint) -> str:
    """``int | "auto"``, ``"head" | "tail"``, ``float | none`` ... for the reference."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " \\| ".join(type_name(alt) for alt in typing.get_args(hint))
    if typing.get_origin(hint) is typing.Literal:
        return " \\| ".join(f'`"{value}"`' for value in typing.get_args(hint))
    if hint is type(None):
        return "none"
    return getattr(hint, "__name__", str(hint))


def toml_value(value) -> str:
    """A default as a recipe writes it: ``"text"``, ``true``, ``0.1``; ``none`` for None (omit it)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def task_reference(task: str, path: str) -> list[str]:
    """The reference of one task's settings (``path``: ``module:Class``): a table per recipe section."""
    config_cls = settings_class(path)
    hints = typing.get_type_hints(config_cls)
    fields = dataclasses.fields(config_cls)
    lines = [f"## {task}", "", f"`kformer train {task}`; Python: `{path.replace(':', '.')}`.", ""]
    for section in SECTIONS:
        chosen = [f for f in fields if f.metadata["section"] == section]
        if not chosen:
            continue
        lines += [f"### [{section}]", "", "| setting | flag | type | default | what it does |", "|---|---|---|---|---|"]
        for field in chosen:
            flag = field.metadata.get("flag") or "--" + field.name.replace("_", "-")
            default = f"`{toml_value(field.default)}`"
            help_text = setting_help(config_cls, field.name).replace("|", "\\|")
            lines.append(f"| `{field.name}` | `{flag}` | {type_name(hints[field.name])} | {default} | {help_text} |")
        lines.append("")
    return lines


def reference() -> str:
    """The whole of ``docs/settings.md``."""
    lines = [HEADER]
    for task, path in TASK_SETTINGS:
        lines += task_reference(task, path)
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    print(reference(), end="")
