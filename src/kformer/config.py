"""Typed settings: one frozen dataclass per task, read from recipe TOML, overridden by arguments.

Each task declares its settings as a frozen dataclass (like nanoGPT's ``GPTConfig``) whose fields
carry their defaults, the recipe section they belong to (``data``, ``model`` or ``training``) and
a line of help (:func:`setting`). This module turns mappings into such objects and back:

- :func:`build_config` -- defaults, then a recipe, then overrides; unknown keys and wrong types
  are a :class:`~kformer.errors.BadInput` naming the key.
- :func:`load_recipe` -- a shipped recipe name (``kformer/recipes/NAME.toml``) or a TOML path.
  Recipes are written in sections::

      task = "classify"
      [data]
      vocab_size = 6000
      [model]
      dim = 128
      [training]
      epochs = 15

  A flat recipe (every key at the top, as kformer 0.1 wrote them) still loads.
- ``"auto"``: a field typed ``... | Auto`` may hold ``"auto"``; the task then chooses the value
  from its data and time budget by rules declared once (:mod:`kformer.auto`), and writes what it
  chose and why under ``"auto"`` in ``metrics.json``.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, ClassVar, Literal

from kformer.auto import AUTO, Auto  # noqa: F401  (re-exported: every settings class is declared with them)
from kformer.errors import BadInput

SECTIONS = ("data", "model", "training")
RECIPES_DIR = Path(__file__).parent / "recipes"


def setting(default: Any, section: str, help: str, *, metavar: str | None = None, flag: str | None = None) -> Any:
    """A dataclass field with its recipe ``section`` and one line of ``help``.

    The field is also a flag of its ``kformer train`` command (:mod:`kformer.cli.settings_flags`):
    ``--name-with-dashes`` unless ``flag`` names another, shown with ``metavar``. A setting that may
    be ``"auto"`` says no more about what auto chooses: its rule's summary is added to the help
    (:func:`kformer.auto.setting_help`).
    """
    if section not in SECTIONS:
        raise ValueError(f"section must be one of {SECTIONS}, got {section!r}")
    metadata = {"section": section, "help": help, "metavar": metavar, "flag": flag}
    return dataclasses.field(default=default, metadata=metadata)


def fields(config_cls) -> dict[str, dataclasses.Field]:
    """The settings of a config class (or instance), by name."""
    return {f.name: f for f in dataclasses.fields(config_cls)}


def to_dict(config) -> dict[str, Any]:
    """A config as a flat ``{name: value}`` dict (what ``metrics.json`` records as the recipe)."""
    return dataclasses.asdict(config)


def to_sections(config) -> dict[str, Any]:
    """A config as the sectioned mapping a recipe file holds (for writing a recipe back)."""
    out: dict[str, dict[str, Any]] = {section: {} for section in SECTIONS}
    for name, f in fields(config).items():
        value = getattr(config, name)
        if value is not None:
            out[f.metadata["section"]][name] = value
    return {section: values for section, values in out.items() if values}


# --- type checking ---------------------------------------------------------------------------------


def _hints(config_cls) -> dict[str, Any]:
    return typing.get_type_hints(config_cls)


def _allowed(hint) -> list:
    """The alternatives of a union hint (``int | None`` -> ``[int, NoneType]``)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return list(typing.get_args(hint))
    return [hint]


def _describe(hint) -> str:
    words = []
    for alt in _allowed(hint):
        if alt is type(None):
            words.append("nothing (omit it)")
        elif typing.get_origin(alt) is Literal:
            words.append(" or ".join(repr(a) for a in typing.get_args(alt)))
        else:
            words.append({int: "a whole number", float: "a number", bool: "true or false", str: "text"}.get(alt, str(alt)))
    return " or ".join(words)


def coerce(value: Any, hint, field: str) -> Any:
    """``value`` checked against the type ``hint``; ints become floats where a float is wanted."""
    for alt in _allowed(hint):
        if alt is type(None) and value is None:
            return None
        if typing.get_origin(alt) is Literal and value in typing.get_args(alt) and type(value) is not bool:
            return value
        if alt is bool and isinstance(value, bool):
            return value
        if alt is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if alt is float and isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if alt is str and isinstance(value, str):
            return value
    raise BadInput(f"setting {{field}} = {value!r} must be {_describe(hint)}", field=field)


# --- building a config ------------------------------------------------------------------------------


def build_config(config_cls, *layers: dict[str, Any] | None, sources: tuple[str, ...] = (),
                 narrowed: dict[str, tuple[Any, str]] | None = None):
    """A ``config_cls`` from its defaults updated by each mapping of ``layers`` in turn.

    Keys are setting names (``"epochs"``) or ``section.name`` (``"training.epochs"``); ``None``
    values are skipped (an argument not given). ``sources`` names each layer for messages
    (e.g. ``"recipe imdb"``). Unknown keys and wrong types are a BadInput naming the key.

    A config class may have ``narrow(values)``: the settings that others rule out, each with the
    value the other allows and the setting that rules it out (``{name: (value, because)}``, e.g.
    arithmetic's ``train_digits`` above a smaller ``digits``). A setting takes that value when
    ``because`` was set by a later layer than it (a flag narrows a recipe's value or a default; a
    recipe narrows a default) and is then added to ``narrowed`` when that is passed; set in the
    same layer or a later one, the class's BadInput stands.
    """
    values: dict[str, Any] = {}
    origin: dict[str, int] = {}  # the layer each value comes from (missing: the default)
    for i, layer in enumerate(layers):
        layer_values = _layer_values(config_cls, layer, sources[i] if i < len(sources) else "settings")
        values.update(layer_values)
        origin.update(dict.fromkeys(layer_values, i))
    changes = _narrowing(config_cls, values, origin)
    values.update({name: value for name, (value, _) in changes.items()})
    if narrowed is not None:
        narrowed.update(changes)
    return config_cls(**values)


def _layer_values(config_cls, layer: dict[str, Any] | None, source: str) -> dict[str, Any]:
    """One layer's ``{name: value}``, checked (None values skipped)."""
    known = fields(config_cls)
    hints = _hints(config_cls)
    values: dict[str, Any] = {}
    for key, value in (layer or {}).items():
        if value is None:
            continue
        name = key.split(".", 1)[1] if "." in key else key
        try:
            if name not in known or ("." in key and key.split(".")[0] != known[name].metadata["section"]):
                raise BadInput(f"{source}: unknown setting {{field}}; known: {', '.join(known)}", field=key)
            values[name] = coerce(value, hints[name], name)
        except BadInput as exc:
            if source.startswith("recipe"):  # the fault is in the file: name its key, not a flag
                message = exc.message_for(key)
                message = message if message.startswith(source) else f"{source}: {message}"
                raise BadInput(message, field=key) from None
            raise
    return values


def _narrowing(config_cls, values: dict[str, Any], origin: dict[str, int]) -> dict[str, tuple[Any, str]]:
    """What ``config_cls.narrow`` changes: settings ruled out by one set in a later layer."""
    narrow = getattr(config_cls, "narrow", None)
    if narrow is None or not origin:
        return {}
    full = {name: values.get(name, f.default) for name, f in fields(config_cls).items()}
    return {name: (value, because) for name, (value, because) in narrow(full).items()
            if origin.get(name, -1) < origin.get(because, -1)}


def available_recipes(task: str | None = None) -> list[str]:
    """Names of the recipes shipped with kformer (for ``task`` only, when given)."""
    names = []
    for path in sorted(RECIPES_DIR.glob("*.toml")):
        if task is None or _read_toml(path).get("task", task) == task:
            names.append(path.stem)
    return names


def recipe_path(name_or_path: str | os.PathLike) -> Path:
    """The TOML file behind a recipe NAME (shipped) or PATH."""
    text = str(name_or_path)
    path = Path(text)
    if path.suffix == ".toml" or os.sep in text or path.is_file():
        if not path.is_file():
            raise BadInput(f"recipe file {path} does not exist", field="recipe")
        return path
    path = RECIPES_DIR / f"{text}.toml"
    if not path.is_file():
        names = ", ".join(available_recipes()) or "none"
        raise BadInput(f"unknown recipe '{text}'; available: {names} (or pass the path of a .toml file)", field="recipe")
    return path


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BadInput(f"recipe {path} is not valid TOML ({exc})", field="recipe") from None


def load_recipe(name_or_path: str | os.PathLike, config_cls, task: str) -> dict[str, Any]:
    """The settings of a recipe as a flat ``{name: value}`` mapping, checked against ``config_cls``.

    A sectioned recipe's keys must sit in their own section; a flat one (no sections) is read
    as is. ``task = "..."``, when present, must be ``task``.
    """
    path = recipe_path(name_or_path)
    raw = _read_toml(path)
    where = f"recipe {name_or_path}"
    recipe_task = raw.pop("task", task)
    if recipe_task != task:
        raise BadInput(f"{where} is a '{recipe_task}' recipe, not a '{task}' one", field="recipe")
    known = fields(config_cls)
    flat: dict[str, Any] = {}
    for key, value in raw.items():
        if key in SECTIONS and isinstance(value, dict):
            for name, inner in value.items():
                if name in known and known[name].metadata["section"] != key:
                    right = known[name].metadata["section"]
                    raise BadInput(f"{where}: setting {{field}} belongs in [{right}], not [{key}]", field=f"{key}.{name}")
                flat[f"{key}.{name}"] = inner
        elif key in SECTIONS:
            raise BadInput(f"{where}: '{key}' must be a [{key}] section", field=key)
        else:
            flat[key] = value
    build_config(config_cls, flat, sources=(where,))  # unknown keys and wrong types fail here
    return flat


def as_config(config_cls, config):
    """``config`` as a ``config_cls``: one already (its types checked as a recipe's are), a dict
    of settings (flat or ``section.name`` keys), or None for the defaults. What a task's
    ``train(config, ...)`` accepts."""
    if isinstance(config, config_cls):
        return build_config(config_cls, to_dict(config))
    if config is None or isinstance(config, dict):
        return build_config(config_cls, config or {})
    raise BadInput(
        f"{{field}} must be a {config_cls.__name__} or a dict of settings, not {type(config).__name__}", field="config"
    )


def make_config(config_cls, task: str, recipe: str | os.PathLike | None = None, overrides: dict[str, Any] | None = None,
                narrowed: dict[str, tuple[Any, str]] | None = None):
    """``config_cls`` from its defaults, then the ``recipe`` (name or path), then ``overrides``
    (what the user gave: see :func:`build_config` for what they narrow, listed in ``narrowed``).

    A config class may name ``RECIPE_DEFAULTS`` (``{setting: value}``): what a recipe that does
    not mention those settings gets instead of the class default (settings added after recipes
    were measured, so a recipe trains as it was written)."""
    flat = load_recipe(recipe, config_cls, task) if recipe else {}
    if recipe:
        named = {key.split(".", 1)[-1] for key in flat}
        flat = {**{k: v for k, v in getattr(config_cls, "RECIPE_DEFAULTS", {}).items() if k not in named}, **flat}
    return build_config(config_cls, flat, overrides or {}, sources=(f"recipe {recipe}", "arguments"),
                        narrowed=narrowed)


# --- recipes from Python ----------------------------------------------------------------------------


class TaskSettings:
    """What every task's settings dataclass inherits: its ``task`` name and :meth:`from_recipe`."""

    task: ClassVar[str]

    @classmethod
    def from_recipe(cls, name: str | os.PathLike, **overrides):
        """The settings of a shipped recipe ``name`` (or a TOML path), then ``overrides``, as the
        ``--recipe`` flag and the setting flags build them (like KerasHub's ``from_preset``):
        ``ClassifyConfig.from_recipe("tickets", epochs=2)``."""
        return make_config(cls, cls.task, name, overrides)


def recipe_task(name: str | os.PathLike) -> str | None:
    """The task recipe ``name`` (or a TOML path) is for: its ``task = "..."`` (None without one)."""
    return _read_toml(recipe_path(name)).get("task")
