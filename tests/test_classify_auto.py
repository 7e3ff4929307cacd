"""``auto`` classify settings: the rules (kformer.tasks.classify.auto) on synthetic data of
different shapes, the shipped recipes untouched by them, and one tiny run showing the choices
land in metrics.json, reach the progress callback first, and lose to explicit values."""

from __future__ import annotations

import argparse
import io
import json
import random
from collections import Counter

import pytest
from conftest import write_tickets

from kformer.cli.progress import progress_printer
from kformer.config import AUTO, available_recipes, make_config
from kformer.tasks import classify
from kformer.tasks.classify import ClassifyConfig
from kformer.tasks.classify.auto import (
    UNUSED_BY_PRETRAINED,
    DataStats,
    choose,
    data_stats,
    describe,
    epoch_seconds,
)

WORDS = [f"w{i}" for i in range(3000)]
# what kformer chose before auto existed; a recipe must still come out with exactly these
OLD_DEFAULTS = {"truncation": "head", "dropout": 0.1, "vocab_size": 8000, "max_length": 128, "dim": 64, "heads": 2, "ff_dim": 128, "blocks": 1,
                "epochs": 10, "batch_size": 32, "label_smoothing": 0.0, "patience": 2}


def stats(rows: int, classes: int, words: float, distinct: int = 5000, valid: int = 0,
          repeated: int | None = None) -> DataStats:
    """Texts around ``words`` long (quantiles spread +-50 % around it)."""
    quantiles = tuple(words * (0.5 + q / 100) for q in range(101))
    return DataStats(rows, classes, quantiles, distinct, valid, rows, repeated)


def resolved(data: DataStats, **settings):
    config, auto = choose(ClassifyConfig(**settings), data)
    return config, auto.to_json()


def test_short_intents_and_long_documents_get_different_models():
    intents, _ = resolved(stats(15_000, 150, 8, distinct=6_000))
    reviews, _ = resolved(stats(22_500, 2, 230, distinct=70_000))
    assert (intents.max_length, intents.dim, intents.heads, intents.ff_dim) == (16, 128, 4, 256)
    assert intents.label_smoothing == 0.1 and intents.vocab_size == 6007  # every word (+ 7 reserved tokens)
    assert intents.dropout == 0.2 and reviews.dropout == 0.1  # 100 vs 11,250 rows per class
    assert reviews.max_length == 256 and (reviews.dim, reviews.heads, reviews.ff_dim) == (64, 2, 128)
    assert reviews.label_smoothing == 0.0 and reviews.vocab_size == 30_000  # capped
    assert intents.blocks == reviews.blocks == 1
    assert (intents.truncation, reviews.truncation) == ("head", "head_tail")  # only reviews get cut


def test_set_size_moves_batch_rate_epochs_and_depth():
    small, _ = resolved(stats(500, 3, 10))
    medium, _ = resolved(stats(9_000, 77, 12))
    large, _ = resolved(stats(200_000, 20, 20))
    assert (small.batch_size, medium.batch_size, large.batch_size) == (32, 32, 128)
    assert (small.learning_rate, medium.learning_rate, large.learning_rate) == (1e-3, 2e-3, 2e-3)
    assert small.dim == 64 and medium.dim == 128 and large.blocks == 2 and medium.blocks == 1
    # ~3,300 steps (282 per epoch for the medium set: 12 epochs) within 3..40
    assert small.epochs == 40 and medium.epochs == 12 and large.epochs == 3
    # a 150-class problem is not cut at epoch 3: patience grows with the epochs
    assert medium.patience == 3 and small.patience == 10 and large.patience == 3
    # a large set of few classes: 539 steps per epoch would plan 7 epochs, ~120,000 texts seen plan 4
    tickets, auto = resolved(stats(34_443, 8, 45))
    assert tickets.batch_size == 64 and tickets.epochs == 4 and "texts seen" in auto["epochs"]["why"]


def test_bigrams_double_the_length_and_the_vocabulary():
    words, _ = resolved(stats(22_500, 2, 60))
    bigrams, auto = resolved(stats(22_500, 2, 60), ngrams=2)
    assert (words.max_length, bigrams.max_length) == (96, 192) and bigrams.vocab_size == 60_000
    assert words.truncation == bigrams.truncation == "head" and "bigrams" in auto["vocab_size"]["why"]


def test_words_seen_once_are_left_to_unk():
    config, auto = resolved(stats(9_000, 64, 7, distinct=4_167, repeated=2_091))
    assert config.vocab_size == 2_098 and "[UNK]" in auto["vocab_size"]["why"]
    tiny, auto = resolved(stats(200, 3, 7, distinct=40, repeated=25))
    assert tiny.vocab_size == 1_000 and "all of them fit" in auto["vocab_size"]["why"]


def test_a_time_budget_cuts_epochs_to_fit():
    data = stats(22_500, 2, 230, valid=2_500)
    free, _ = resolved(data)
    short, auto = resolved(data, max_minutes=12.0)
    per_epoch = epoch_seconds(data, short)
    assert short.epochs < free.epochs and short.epochs >= 1
    plan = 12.0 * 60 * 0.9 - 20  # 90 % of the budget less compiling
    assert abs(short.epochs * per_epoch - plan) <= per_epoch / 2  # the nearest whole number of epochs
    assert short.epochs * per_epoch <= 12.0 * 60  # the schedule's end lies inside the budget
    assert "max_minutes 12" in auto["epochs"]["why"]
    roomy, auto = resolved(stats(500, 3, 10), max_minutes=30.0)
    assert roomy.epochs == 40 and "fits max_minutes" in auto["epochs"]["why"]


def test_explicit_values_win_and_later_rules_build_on_them():
    config, auto = resolved(stats(9_000, 77, 12), dim=96, batch_size=64, epochs=7, max_length=40)
    assert (config.dim, config.batch_size, config.epochs, config.max_length) == (96, 64, 7, 40)
    assert (config.heads, config.ff_dim) == (2, 192) and config.patience == 3
    assert not {"dim", "batch_size", "epochs", "max_length"} & set(auto)
    assert set(auto) == {"truncation", "vocab_size", "heads", "ff_dim", "blocks", "learning_rate", "label_smoothing",
                         "dropout", "patience", "wide", "calibrate", "ood_score", "refit", "contrastive_weight"}
    assert all(item["why"] for item in auto.values())


def test_pretrained_backbones_keep_their_own_size():
    config, auto = resolved(stats(9_000, 77, 12), backbone="minilm")
    assert {name: getattr(config, name) for name in UNUSED_BY_PRETRAINED} == UNUSED_BY_PRETRAINED
    assert "not used" in auto["dim"]["why"]
    assert (config.batch_size, config.learning_rate, config.epochs) == (32, 1e-4, 6)
    assert config.max_length == 24  # 95th percentile 17 words ~ 23 word pieces -> bucket 24
    line = describe(stats(9_000, 77, 12), auto)  # the printed line names only what the network uses
    assert "max_length=24" in line and "learning_rate=0.0001" in line and "dim=" not in line and "vocab_size" not in line


@pytest.mark.parametrize("recipe", available_recipes("classify"))
def test_shipped_recipes_train_as_before(recipe):
    """A recipe sets everything auto would choose (a pretrained backbone's unused size settings
    get the old defaults), so it trains as it did before auto, whatever the data."""
    config = make_config(ClassifyConfig, "classify", recipe)
    expected = {name: OLD_DEFAULTS[name] if getattr(config, name) == AUTO else getattr(config, name)
                for name in OLD_DEFAULTS}
    for data in (stats(300, 2, 5), stats(50_000, 80, 300)):
        chosen, auto = choose(config, data)
        assert {name: getattr(chosen, name) for name in OLD_DEFAULTS} == expected
        assert set(auto.to_json()) - {"calibrate", "ood_score", "contrastive_weight"} <= set(UNUSED_BY_PRETRAINED)
        # data without out-of-scope examples: no recipe calibrates, the unknown route reads as before
        assert chosen.calibrate is False and chosen.ood_score == "probability" and chosen.contrastive_weight == 0


def test_the_contrastive_term_trains_own_encoders_for_an_unknown_route_only():
    """On for kformer's own encoder when the data holds out-of-scope examples (what it is for);
    off without them, for a pretrained backbone, with freeze, and when given."""
    import dataclasses

    from kformer.tasks.classify.auto import SCRATCH_CONTRASTIVE

    intents = stats(9_000, 77, 12)
    routed = dataclasses.replace(intents, unknown_rows=400)
    assert resolved(routed)[0].contrastive_weight == SCRATCH_CONTRASTIVE > 0
    assert "400 out-of-scope examples" in resolved(routed)[1]["contrastive_weight"]["why"]
    for data, settings, why in [(intents, {}, "no out-of-scope examples"),
                                (routed, {"backbone": "minilm"}, "pretrained"),
                                (routed, {"backbone": "minilm", "freeze": True}, "freeze")]:
        config, auto = resolved(data, **settings)
        assert config.contrastive_weight == 0 and why in auto["contrastive_weight"]["why"]
    config, auto = resolved(routed, contrastive_weight=0.3)
    assert config.contrastive_weight == 0.3 and "contrastive_weight" not in auto


def test_data_stats_measure_words_and_sample_huge_sets():
    rng = random.Random(0)
    texts = [" ".join(rng.sample(WORDS, n)) for n in range(1, 101)]  # 1..100 words
    measured = data_stats(texts, ["a", "b"] * 50, valid_rows=10)
    assert (measured.rows, measured.classes, measured.valid_rows, measured.sampled) == (100, 2, 10, 100)
    assert measured.percentile(50) == pytest.approx(50.5) and measured.percentile(95) == pytest.approx(95.05)
    assert measured.distinct_words == len({w for t in texts for w in t.split()})
    counts = Counter(w for t in texts for w in t.split())
    assert measured.kept_words == measured.repeated_words == sum(1 for c in counts.values() if c >= 2) > 0
    assert measured.mean_length(limit=10) == pytest.approx(9.5, abs=0.1)
    big = data_stats(["one two three"] * 120_001, ["x", "y", "z"] * 40_000 + ["x"])
    assert big.rows == 120_001 and big.sampled <= 50_000 and big.percentile(99) == 3
    line = describe(big, {"dim": {"value": 64, "why": "..."}, "learning_rate": {"value": 0.002, "why": "..."}})
    assert line.startswith("auto settings for 120,001 training rows, 3 classes") and "dim=64, learning_rate=0.002" in line


@pytest.mark.slow
def test_auto_run_records_choices_reports_them_first_and_explicit_values_win(tmp_path):
    train = write_tickets(tmp_path / "train.csv", 200, seed=1)
    events = []
    # wide off: the validation scores below are then the network's own (tests/test_classify_wide.py: the mix)
    result = classify.train({"epochs": 1, "dim": 16, "vocab_size": 200, "seed": 2, "wide": False}, train, tmp_path / "run",
                            progress=events.append)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["auto"] == result.auto and {"max_length", "heads", "ff_dim", "batch_size", "patience"} <= set(
        metrics["auto"])
    assert not {"epochs", "dim", "vocab_size"} & set(metrics["auto"])  # given, so not chosen
    assert metrics["recipe"]["dim"] == 16 and metrics["recipe"]["ff_dim"] == 32 and metrics["recipe"]["max_length"] == 16
    assert events[0].stage == "settings" and "max_length=16" in events[0].message
    # early stopping watched validation macro-F1, the same number kformer's own scores give
    history = [e for e in events if e.stage == "epoch" and "val_macro_f1" in e.logs][-1].logs  # not refit's
    assert history["val_macro_f1"] == pytest.approx(metrics["valid"]["macro_f1"], abs=1e-4)
    out = io.StringIO()
    progress_printer(out, interactive=False)(events[0])
    assert out.getvalue() == events[0].message + "\n"
    # resuming with nothing set keeps what the first run chose (its 1 epoch is done: nothing to train)
    resumed = classify.train(None, train, tmp_path / "run", resume=True)
    assert resumed.config == result.config and resumed.auto == result.auto


def test_early_stopping_ties_on_macro_f1_go_to_the_lower_loss():
    import keras

    from kformer.training import BestEpoch

    stopper = BestEpoch(monitor="val_macro_f1", patience=2, mode="max")
    stopper.set_model(keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)]))
    stopper.on_train_begin()
    epochs = [(0.5, 1.0), (1.0, 0.5), (1.0, 0.3), (1.0, 0.4), (0.9, 0.2), (1.0, 0.35)]
    for epoch, (f1, loss) in enumerate(epochs):
        stopper.on_epoch_end(epoch, {"val_macro_f1": f1, "val_loss": loss})
        if getattr(stopper.model, "stop_training", False):
            break
    assert stopper.best_epoch == 2  # epoch 1's F1 again, at a lower loss; epoch 3 ties at a higher one
    assert stopper.stopped_epoch == 4  # two epochs without an F1 gain or a lower-loss tie


def test_every_auto_setting_has_one_rule_whose_summary_is_its_help_and_flag_help():
    """A rule's text lives in its summary only: the setting's help and the CLI flag's help say it,
    and the two texts that once drifted from the code now come from its constants."""
    from kformer.auto import auto_settings, setting_help
    from kformer.cli import build_parser
    from kformer.tasks.classify import auto

    summaries = ClassifyConfig.rules.summaries()
    assert set(auto_settings(ClassifyConfig)) == set(summaries)
    parser = build_parser()
    for command in ("train", "classify"):
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    flags = {action.dest: action.help for action in parser._actions}
    for name, summary in summaries.items():
        assert setting_help(ClassifyConfig, name).endswith(f"(auto: {summary})")
        assert "(auto:" not in setting_help(ClassifyConfig, name)[: -len(summary) - 8]  # said once
        assert f"(auto: {summary})" in flags[name].replace("%%", "%")
    assert f"about {auto.TARGET_STEPS:,} optimizer steps" in summaries["epochs"]
    assert "seen at least twice" in summaries["vocab_size"] and "distinct" not in summaries["vocab_size"]
