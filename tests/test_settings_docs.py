"""Each setting and each ``auto`` rule is written once, in code; the settings reference, the CLI
help and metrics.json are made from it. These tests fail when any of them says something else."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kformer.auto import auto_settings, setting_help
from kformer.cli import build_parser
from kformer.cli.settings_docs import TASK_SETTINGS, reference, settings_class

DOCS = Path(__file__).resolve().parents[1] / "docs" / "settings.md"
CLASSES = {task: settings_class(path) for task, path in TASK_SETTINGS}


def test_the_settings_reference_is_what_the_code_says():
    assert DOCS.read_text(encoding="utf-8") == reference(), (
        "docs/settings.md is out of date: python -m kformer.cli.settings_docs > docs/settings.md")


@pytest.mark.parametrize("task", CLASSES)
def test_every_auto_setting_has_exactly_one_rule(task):
    config_cls = CLASSES[task]
    rules = getattr(config_cls, "rules", None)
    assert set(auto_settings(config_cls)) == set(rules.summaries() if rules else ())


@pytest.mark.parametrize("task", CLASSES)
def test_every_setting_is_a_flag_whose_help_is_the_setting_help(task):
    train = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["train"]
    command = next(a for a in train._actions if isinstance(a, argparse._SubParsersAction)).choices[task]
    helps = {action.dest: action.help.replace("%%", "%") for action in command._actions}
    config_cls = CLASSES[task]
    for name in (f.name for f in __import__("dataclasses").fields(config_cls)):
        assert helps[name].startswith(setting_help(config_cls, name)), name


def test_a_drifted_rule_text_is_caught(monkeypatch):
    """The reference follows a rule's summary: change the summary and the page no longer matches."""
    config_cls = CLASSES["classify"]
    name = next(iter(config_cls.rules.summaries()))
    monkeypatch.setattr(config_cls.rules, "summaries", lambda: {name: "something else"})
    assert "something else" in reference() and reference() != DOCS.read_text(encoding="utf-8")
