"""``"auto"`` settings: each rule written once, with its reason, and resolved in one pass.

A task declares its ``auto`` rules in one module (``kformer.tasks.<task>.auto``) on a
:class:`Rules` registry. Each rule is a plain function of the settings chosen so far and the
statistics of the training data, returning ``(value, why)`` for every setting it chooses; its
``summary`` is one line saying what ``auto`` becomes, written from the same constants the code
uses. That one line is all kformer ever says about the rule: the setting's help, the CLI flag's
help and the settings reference (``docs/settings.md``) are made from it (:func:`setting_help`),
and ``metrics.json["auto"]`` records it beside the reason measured on the data::

    RULES = Rules()

    @RULES.rule("max_length", summary=f"the {PERCENTILE}th percentile of the training texts' lengths")
    def _max_length(config, stats):
        return value, f"the {PERCENTILE}th percentile is {words:.0f} words"

    config, choices = RULES.resolve(config, stats)     # every "auto" setting, in declaration order

Settings given explicitly (a recipe, a flag, an argument) are never touched, and later rules see
what earlier ones chose (an explicit ``dim`` sets ``heads`` around it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

AUTO = "auto"
Auto = Literal["auto"]  # a setting typed `int | Auto` may hold "auto"


@dataclass(frozen=True)
class Rule:
    """One rule: the ``settings`` it chooses, its one-line ``summary`` and the function ``choose``
    (``(config, stats) -> (value, why)``, or ``{setting: (value, why)}`` for several settings)."""

    settings: tuple[str, ...]
    summary: str
    choose: Callable[[Any, Any], Any]
    phase: str = ""


class Rules:
    """An ordered registry of a task's :class:`Rule` objects (declaration order is resolve order)."""

    def __init__(self):
        self._rules: list[Rule] = []

    def rule(self, *settings: str, summary: str, phase: str = "") -> Callable:
        """Decorator: register the function as the rule choosing ``settings``. ``phase`` names a
        step of a task whose rules need data that earlier rules decide (translation: the corpus,
        then the encoded pairs); :meth:`resolve` runs one phase at a time when asked."""
        if not settings or not summary:
            raise ValueError("a rule names the settings it chooses and a summary")

        def register(function: Callable) -> Callable:
            taken = [name for name in settings if name in self.summaries()]
            if taken:
                raise ValueError(f"settings {taken} already have a rule")
            self._rules.append(Rule(tuple(settings), summary, function, phase))
            return function

        return register

    def __iter__(self):
        return iter(self._rules)

    def summaries(self) -> dict[str, str]:
        """``{setting: summary}`` of every rule."""
        return {name: rule.summary for rule in self._rules for name in rule.settings}

    def summary(self, name: str) -> str | None:
        return self.summaries().get(name)

    def resolve(self, config, stats, choices: AutoChoices | None = None, phase: str | None = None):
        """``(config with its "auto" settings chosen, choices)``: every rule (of ``phase``, when
        given) whose settings are still ``"auto"`` runs once, in declaration order."""
        choices = AutoChoices() if choices is None else choices
        for rule in self._rules:
            if phase is not None and rule.phase != phase:
                continue
            if all(getattr(config, name) != AUTO for name in rule.settings):
                continue
            chosen = rule.choose(config, stats)
            if len(rule.settings) == 1 and not isinstance(chosen, dict):
                chosen = {rule.settings[0]: chosen}
            config = choices.resolve(config, rule=rule.summary, **chosen)
        return config, choices


class AutoChoices:
    """What ``"auto"`` settings became and why: ``{name: {"value", "why", "rule"}}`` (``rule``:
    the rule's summary, ``why``: what it measured on this data)."""

    def __init__(self, chosen: dict[str, dict[str, Any]] | None = None):
        self.chosen: dict[str, dict[str, Any]] = dict(chosen or {})

    def choose(self, config, name: str, value: Any, why: str, rule: str | None = None) -> Any:
        """``value`` if ``config.name`` is ``"auto"`` (recorded with ``why``), else the setting."""
        current = getattr(config, name)
        if current != AUTO:
            return current
        self.chosen[name] = {"value": value, "why": why, **({"rule": rule} if rule else {})}
        return value

    def resolve(self, config, rule: str | None = None, **values_and_reasons: tuple[Any, str]):
        """A copy of ``config`` with each named ``"auto"`` field set to its ``(value, why)``."""
        changes = {name: self.choose(config, name, value, why, rule) for name, (value, why) in values_and_reasons.items()}
        return dataclasses.replace(config, **changes)

    def summary(self) -> str:
        """One line, e.g. ``max_length=48 (99th percentile of lengths), learning_rate=0.001 (...)``."""
        return ", ".join(f"{name}={item['value']} ({item['why']})" for name, item in self.chosen.items())

    def to_json(self) -> dict[str, dict[str, Any]]:
        return dict(self.chosen)


def setting_help(config_cls, name: str) -> str:
    """The help of setting ``name`` of ``config_cls``: its own line, and for a setting that may be
    ``"auto"`` the summary of the rule that then chooses it (``config_cls.rules``)."""
    field = {f.name: f for f in dataclasses.fields(config_cls)}[name]
    text = field.metadata["help"]
    summary = getattr(config_cls, "rules", None) and config_cls.rules.summary(name)
    return f"{text} (auto: {summary})" if summary else text


def auto_settings(config_cls) -> list[str]:
    """The settings of ``config_cls`` that may be ``"auto"`` (their type names ``Auto``)."""
    import typing

    hints = typing.get_type_hints(config_cls)
    return [f.name for f in dataclasses.fields(config_cls) if _allows_auto(hints[f.name])]


def _allows_auto(hint) -> bool:
    import types
    import typing

    alternatives: Iterable = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else [hint]
    return any(typing.get_origin(alt) is typing.Literal and AUTO in typing.get_args(alt) for alt in alternatives)
