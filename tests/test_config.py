"""Typed settings: defaults, recipes (sectioned and flat), overrides, auto choices, clear errors."""

from dataclasses import FrozenInstanceError, dataclass

import pytest

from kformer import config
from kformer.auto import AutoChoices
from kformer.cli import error_line, flag_for
from kformer.config import AUTO, Auto, build_config, load_recipe, make_config, setting
from kformer.errors import BadInput, KformerError


@dataclass(frozen=True)
class Toy:
    vocab_size: int = setting(100, "data", "tokens")
    dim: int = setting(8, "model", "width")
    dropout: float = setting(0.1, "model", "dropout")
    learning_rate: float | Auto = setting(AUTO, "training", "peak rate")
    max_minutes: float | None = setting(None, "training", "budget")
    shuffle: bool = setting(True, "training", "shuffle")


def test_defaults_then_layers_with_types_checked():
    toy = build_config(Toy, {"dim": 16, "dropout": 0}, {"training.max_minutes": 2, "dim": None})
    assert toy == Toy(dim=16, dropout=0.0, max_minutes=2.0)
    assert isinstance(toy.dropout, float)  # an int where a float goes becomes a float
    with pytest.raises(FrozenInstanceError):
        toy.dim = 3
    for bad, field, words in [({"dim": "8"}, "dim", "a whole number"), ({"dim": True}, "dim", "a whole number"),
                              ({"shuffle": 1}, "shuffle", "true or false"),
                              ({"learning_rate": "fast"}, "learning_rate", "'auto'"),
                              ({"colour": 1}, "colour", "unknown setting"),
                              ({"model.vocab_size": 5}, "model.vocab_size", "unknown setting")]:
        with pytest.raises(BadInput) as caught:
            build_config(Toy, bad)
        assert caught.value.field == field and words in str(caught.value)


def test_sectioned_and_flat_recipes_load_the_same(tmp_path):
    sectioned = tmp_path / "sectioned.toml"
    sectioned.write_text('task = "toy"\n[data]\nvocab_size = 50\n[model]\ndim = 32\n[training]\nshuffle = false\n')
    flat = tmp_path / "flat.toml"
    flat.write_text("vocab_size = 50\ndim = 32\nshuffle = false\n")
    assert make_config(Toy, "toy", sectioned) == make_config(Toy, "toy", flat) == Toy(vocab_size=50, dim=32, shuffle=False)
    assert make_config(Toy, "toy", sectioned, {"dim": 64}).dim == 64  # arguments override the recipe
    misplaced = tmp_path / "misplaced.toml"
    misplaced.write_text("[training]\ndim = 32\n")
    with pytest.raises(BadInput, match=r"belongs in \[model\], not \[training\]"):
        load_recipe(misplaced, Toy, "toy")
    other = tmp_path / "other.toml"
    other.write_text('task = "translate"\n')
    with pytest.raises(BadInput, match="is a 'translate' recipe, not a 'toy' one"):
        load_recipe(other, Toy, "toy")
    with pytest.raises(BadInput, match="unknown recipe 'nope'; available: .*arithmetic"):
        load_recipe("nope", Toy, "toy")
    broken = tmp_path / "broken.toml"
    broken.write_text("dim = = 3\n")
    with pytest.raises(BadInput, match="not valid TOML"):
        load_recipe(broken, Toy, "toy")


def test_every_shipped_recipe_is_sectioned_and_loads_for_its_task():
    from kformer.tasks import task_module

    names = config.available_recipes()
    assert {"arithmetic-long", "imdb", "tickets", "banking77-minilm", "en-es", "en-ta"} <= set(names)
    for name in names:
        raw = config._read_toml(config.recipe_path(name))
        task = raw["task"]
        assert set(raw) - {"task"} <= set(config.SECTIONS), name
        module = task_module(task)
        config_cls = next(v for k, v in vars(module).items() if k.endswith("Config") and isinstance(v, type))
        make_config(config_cls, task, name)


def test_auto_choices_record_value_and_reason():
    choices = AutoChoices()
    toy = choices.resolve(Toy(), learning_rate=(1e-3, "training from scratch"))
    assert toy.learning_rate == 1e-3
    fixed = AutoChoices().resolve(Toy(learning_rate=0.5), learning_rate=(1e-3, "unused"))
    assert fixed.learning_rate == 0.5
    assert choices.to_json() == {"learning_rate": {"value": 1e-3, "why": "training from scratch"}}
    assert choices.summary() == "learning_rate=0.001 (training from scratch)"


def test_cli_shows_the_field_as_its_flag():
    from kformer.cli import build_parser

    parser = build_parser()
    train = parser._subparsers._group_actions[0].choices["train"]
    classify = train._subparsers._group_actions[0].choices["classify"]
    assert flag_for(classify, "training.max_length") == "--max-length"
    assert flag_for(classify, "nothing_like_it") is None
    error = BadInput("{field} must be at least 1, not 0", field="max_length")
    assert error_line(error, classify) == "kformer: error: --max-length must be at least 1, not 0"
    # a fault in a recipe file names the recipe's key, not the flag
    recipe_error = pytest.raises(BadInput, build_config, Toy, {"dim": "8"}, sources=("recipe mine.toml",)).value
    assert error_line(recipe_error, classify) == "kformer: error: recipe mine.toml: setting dim = '8' must be a whole number"
    assert str(error) == "max_length must be at least 1, not 0"  # the library names the argument
    assert isinstance(error, KformerError) and error.exit_code == 2 and error.http_status == 422
