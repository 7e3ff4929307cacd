"""Flags generated from a task's settings: a setting declared once is a flag with its help.

Every field of a settings dataclass (:func:`kformer.config.setting`) becomes ``--name-with-dashes``
(or the ``flag`` its metadata names) with ``dest`` the setting's name and default None, so a flag
not given leaves the recipe's value; the type decides the parsing:

===========================  =====================================================================
``bool`` (``| Auto``)        ``--flag`` / ``--no-flag``
``Literal[...]`` (``| Auto``)  one of the choices (and ``auto``)
``int``/``float`` (``| Auto``)  a number (or ``auto``)
``... | None``               as the other alternative; not given = the recipe's value
``str``                      text
===========================  =====================================================================

The help is :func:`kformer.auto.setting_help` (the setting's line and, for ``auto``, its rule's
summary) and the default: the CLI says nothing a setting does not say itself.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any, Literal

from kformer.auto import AUTO, setting_help


def add_setting_flags(parser: argparse.ArgumentParser, config_cls, *, skip: tuple[str, ...] = ()) -> list[str]:
    """Add one flag per setting of ``config_cls`` (but ``skip``) to ``parser``, grouped by recipe
    section (``[data]``, ``[model]``, ``[training]``); returns the settings' names, for
    :func:`settings_from_args`."""
    from kformer.config import SECTIONS

    hints = typing.get_type_hints(config_cls)
    groups = {section: parser.add_argument_group(
        f"{section} settings (recipe section [{section}])",
        "each overrides the recipe's setting of the same name" if section == SECTIONS[0] else None)
        for section in SECTIONS}
    names = []
    for field in dataclasses.fields(config_cls):
        if field.name in skip:
            continue
        flag = field.metadata.get("flag") or "--" + field.name.replace("_", "-")
        groups[field.metadata["section"]].add_argument(
            flag, dest=field.name, default=None, help=_help(config_cls, field), **_parsing(hints[field.name], field))
        names.append(field.name)
    return names


def recipes_help(task: str) -> str:
    """``--recipe``'s help: the recipes shipped for ``task``, read from the recipes folder."""
    from kformer.config import available_recipes

    names = ", ".join(available_recipes(task)) or "none shipped"
    return f"settings over the defaults: a shipped recipe ({names}) or a TOML file (default: none)"


def add_train_flags(train: argparse.ArgumentParser, config_cls, *, out_help: str, out_required: bool = False) -> None:
    """What every ``kformer train TASK`` takes beside its data: ``--out``, ``--recipe``,
    ``--resume``, the log and data-parallel flags, and one flag per setting of ``config_cls``
    (their names end up in ``args.settings``)."""
    from kformer.cli.distribute import add_distribute_flags
    from kformer.cli.progress import add_log_flags
    from kformer.config import fields
    from kformer.tasks.state import RESUMABLE

    train.add_argument("--out", required=out_required, metavar="DIR", help=out_help)
    train.add_argument("--recipe", metavar="NAME|PATH", help=recipes_help(config_cls.task))
    changeable = ", ".join("--" + name.replace("_", "-") for name in RESUMABLE if name in fields(config_cls))
    train.add_argument("--resume", nargs="?", const=True, default=False, type=_auto_only, metavar="auto",
                       help=f"continue from the last checkpoint in --out with the first run's settings and the same "
                       f"data; only {changeable} may change (--max-minutes counts the interrupted run's minutes too). "
                       "--resume auto: resume when --out holds a complete checkpoint, else start afresh (one command "
                       "for the first start and every restart)")
    add_log_flags(train)
    add_distribute_flags(train)
    train.set_defaults(settings=add_setting_flags(train, config_cls))


def _auto_only(text: str) -> str:
    """``--resume``'s optional value: only ``auto``."""
    if text != "auto":
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (--resume takes nothing or 'auto')")
    return text


def settings_from_args(args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    """``{setting: value}`` of the flags given (None for the others: the recipe decides)."""
    return {name: getattr(args, name) for name in names}


def config_from_args(args: argparse.Namespace, config_cls, task: str, progress=None):
    """The settings of a ``kformer train TASK`` command: the class defaults, ``--recipe``, then the
    flags given (:func:`kformer.config.make_config`). A setting a given flag narrowed is said in a
    ``"settings"`` event to ``progress`` before training: ``settings: train_digits=3 (narrowed to
    --digits 3)``."""
    from kformer.config import make_config

    narrowed: dict[str, tuple[Any, str]] = {}
    config = make_config(config_cls, task, args.recipe, settings_from_args(args, args.settings), narrowed=narrowed)
    if narrowed and progress is not None:
        from kformer.training import ProgressEvent

        flags = {f.name: f.metadata.get("flag") or "--" + f.name.replace("_", "-") for f in dataclasses.fields(config_cls)}
        said = ", ".join(f"{name}={_shown(value)} (narrowed to {flags[because]} {_shown(getattr(config, because))})"
                         for name, (value, because) in narrowed.items())
        progress(ProgressEvent("settings", 0.0, message=f"settings: {said}"))
    return config


def _shown(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _help(config_cls, field: dataclasses.Field) -> str:
    default = field.default
    shown = "" if default is None or default == AUTO else f" (default: {default})"
    return (setting_help(config_cls, field.name) + shown).replace("%", "%%")


def _alternatives(hint) -> list:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return [alt for alt in typing.get_args(hint) if alt is not type(None)]
    return [hint]


def _parsing(hint, field: dataclasses.Field) -> dict[str, Any]:
    """argparse keywords (``type``, ``choices``, ``action``, ``metavar``) for a setting's type."""
    alternatives = _alternatives(hint)
    literals = [value for alt in alternatives if typing.get_origin(alt) is Literal for value in typing.get_args(alt)]
    plain = [alt for alt in alternatives if typing.get_origin(alt) is not Literal]
    metavar = field.metadata.get("metavar")
    if plain == [bool]:
        return {"action": argparse.BooleanOptionalAction}  # "auto" stays the default when neither is given
    if not plain:  # choices only
        return {"choices": literals, **({"metavar": metavar} if metavar else {})}
    kind = plain[0]
    if literals:  # a number or "auto"
        return {"type": _or_words(kind, literals), "metavar": metavar or f"{_word(kind)}|{'|'.join(literals)}"}
    return {"type": kind, "metavar": metavar or _word(kind)}


def _word(kind) -> str:
    return {int: "N", float: "X", str: "TEXT"}.get(kind, "VALUE")


def _or_words(kind, words: list[str]):
    """An argparse ``type`` taking ``kind`` or one of ``words`` (``"auto"``)."""

    def parse(text: str):
        if text in words:
            return text
        try:
            return kind(text)
        except ValueError:
            # argparse's own words for a bad number (what these flags said before they took "auto" too)
            raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value: {text!r} (or {' or '.join(words)})") from None

    parse.__name__ = kind.__name__  # argparse names the type in its error message
    return parse
