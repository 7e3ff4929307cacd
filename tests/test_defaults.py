"""One source of defaults: the CLI with no recipe builds what Python builds from None; a flag
narrows the settings that depend on it; recipes are reachable from Python; recipe files and
setting help hold no measurements."""

from __future__ import annotations

import re

import pytest

import kformer
from kformer.cli import build_parser, main
from kformer.cli.settings_flags import config_from_args
from kformer.config import RECIPES_DIR, as_config, available_recipes, make_config
from kformer.errors import BadInput
from kformer.tasks.arithmetic import ArithmeticConfig
from kformer.tasks.classify import ClassifyConfig
from kformer.tasks.translate import TranslateConfig

TASKS = {
    "classify": (ClassifyConfig, ["--data", "texts.csv"]),
    "translate": (TranslateConfig, ["--data", "pairs.tsv"]),
    "arithmetic": (ArithmeticConfig, ["--out", "runs/x"]),
}


def cli_config(task: str, *flags: str, progress=None):
    """The settings `kformer train TASK ...` would train with (parsed, built, not trained)."""
    config_cls, required = TASKS[task]
    args = build_parser().parse_args(["train", task, *required, *flags])
    return config_from_args(args, config_cls, task, progress)


@pytest.mark.parametrize("task", sorted(TASKS))
def test_no_recipe_on_the_command_line_is_none_in_python(task):
    config_cls = TASKS[task][0]
    assert cli_config(task) == as_config(config_cls, None) == make_config(config_cls, task)


def test_the_arithmetic_defaults_are_what_the_demo_trains():
    config = as_config(ArithmeticConfig, None)
    assert (config.digits, config.train_digits, config.mixed_lengths, config.source_style) == (8, 4, True, "op_columns")
    assert (config.positions, config.attention_window, config.encoder_layers) == ("abacus", 2, 0)


def test_a_smaller_digits_flag_narrows_train_digits_and_says_so():
    events = []
    config = cli_config("arithmetic", "--digits", "3", progress=events.append)
    assert (config.digits, config.train_digits) == (3, 3)
    assert [event.message for event in events] == ["settings: train_digits=3 (narrowed to --digits 3)"]
    wider = []
    assert cli_config("arithmetic", "--digits", "6", progress=wider.append).train_digits == 4 and wider == []
    # the recipe's value is narrowed the same way; a Python dict is what the user gave too
    assert cli_config("arithmetic", "--recipe", "arithmetic-long", "--digits", "5").train_digits == 5
    assert as_config(ArithmeticConfig, {"digits": 2}).train_digits == 2
    assert cli_config("arithmetic", "--source-style", "chars").mixed_lengths is False


def test_flags_that_contradict_each_other_are_one_line(tmp_path, capsys):
    with pytest.raises(BadInput) as caught:
        cli_config("arithmetic", "--digits", "3", "--train-digits", "4")
    assert caught.value.field == "train_digits"
    assert main(["train", "arithmetic", "--out", str(tmp_path / "x"), "--digits", "3", "--train-digits", "4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--train-digits must be between 0" in err and "not 4" in err
    assert not (tmp_path / "x").exists()


def test_recipes_from_python_like_presets():
    tickets = ClassifyConfig.from_recipe("tickets", epochs=2)
    assert isinstance(tickets, ClassifyConfig) and tickets.epochs == 2
    assert tickets == make_config(ClassifyConfig, "classify", "tickets", {"epochs": 2})
    assert TranslateConfig.from_recipe("en-es").vocab_size == 8000
    assert ArithmeticConfig.from_recipe("arithmetic-long").digits == 100
    for name in available_recipes():
        assert type(kformer.recipe(name)).from_recipe(name) == kformer.recipe(name)
    assert isinstance(kformer.recipe("en-ta", beam=2), TranslateConfig)


@pytest.mark.parametrize("call, field, words", [
    (lambda: kformer.recipe("nope"), "recipe", "unknown recipe 'nope'"),
    (lambda: ClassifyConfig.from_recipe("en-es"), "recipe", "is a 'translate' recipe, not a 'classify' one"),
    (lambda: ClassifyConfig.from_recipe("tickets", colour="red"), "colour", "unknown setting"),
    (lambda: kformer.recipe("tickets", epochs="two"), "epochs", "whole number"),
])
def test_recipe_errors_are_bad_input(call, field, words):
    with pytest.raises(BadInput, match=words) as caught:
        call()
    assert caught.value.field == field


def test_recipe_without_a_task_is_bad_input(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text("[model]\ndim = 32\n")
    with pytest.raises(BadInput, match="names no task"):
        kformer.recipe(path)
    assert ClassifyConfig.from_recipe(path).dim == 32


MEASURED = re.compile(r"\b20\d\d-\d\d-\d\d\b|measured|\b(BLEU|chrF|accuracy)\s+\d|\d+\.\d+ ?%", re.I)


def test_recipe_files_hold_no_measurements():
    for path in sorted(RECIPES_DIR.glob("*.toml")):
        found = [line for line in path.read_text().splitlines() if MEASURED.search(line)]
        assert found == [], path.name


def test_setting_help_holds_no_measurements():
    from kformer.auto import setting_help
    from kformer.config import fields

    for config_cls in (ClassifyConfig, TranslateConfig, ArithmeticConfig):
        found = [name for name in fields(config_cls) if MEASURED.search(setting_help(config_cls, name))]
        assert found == [], config_cls.__name__
