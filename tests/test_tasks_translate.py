"""The translate task from Python, no CLI: train from a TSV file and (resuming) from pairs in memory,
kformer.load, translate, evaluate, attention maps as arrays, "auto" choices, config errors.

Two tiny training runs in all (one module fixture): a tiny corpus trained, validated and tested on
itself (as the Tamil lesson does with a level file), then resumed for one more epoch.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import number_pairs, write_tsv_pairs

import kformer
from kformer.config import build_config, make_config
from kformer.errors import BadInput
from kformer.metrics import repetition_share, translation_scores
from kformer.tasks import translate
from kformer.tasks.translate import TranslateConfig

TINY = {"vocab_size": 300, "dim": 16, "heads": 2, "ff_dim": 32, "encoder_layers": 1, "decoder_layers": 1,
        "dropout": 0.0, "batch_size": 8, "learning_rate": 0.01, "label_smoothing": 0.0}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, eager_decoding):
    """A 1-epoch run from a TSV file, then the same pairs from memory resumed to 2 epochs."""
    root = tmp_path_factory.mktemp("tasks_translate")
    pairs = number_pairs(16, seed=1)
    tsv = write_tsv_pairs(root / "level.tsv", pairs)
    out = root / "model"
    events = []
    first = translate.train({**TINY, "epochs": 1}, tsv, out, valid=tsv, test=tsv, progress=events.append)
    first_checkpoint = json.loads((out / "training" / "checkpoint.json").read_text(encoding="utf-8"))
    # resumed from memory: vocab_size is a setting of the first run's and is kept; patience may change
    resumed = translate.train({**TINY, "epochs": 2, "vocab_size": 999, "patience": 7}, pairs, out, valid=pairs,
                              test=pairs, resume=True)
    return {"pairs": pairs, "tsv": tsv, "out": out, "first": first, "first_checkpoint": first_checkpoint,
            "resumed": resumed, "events": events}


def test_train_from_a_tiny_file_writes_a_folder_with_auto_choices(runs):
    first, out = runs["first"], runs["out"]
    assert first.folder == out and runs["first_checkpoint"]["epochs_done"] == 1
    assert first.metrics["splits"]["train"] == first.metrics["splits"]["test"] == 16
    auto = json.loads((out / "metrics.json").read_text(encoding="utf-8"))["auto"]
    assert set(auto) == {"encoder", "retrieval", "tokens", "max_length", "warmup_steps", "shared_vocab",
                         "target_vocab_size", "tie_embeddings", "norm_first",
                         "early_stopping", "jit_compile"}  # batch_size is given: no token budget
    assert auto["jit_compile"]["value"] is False  # 2 updates: compiling the step would not pay
    assert auto["encoder"]["value"] == "scratch"  # not English, and a toy corpus (tests/test_translate_pretrained.py)
    assert auto["retrieval"]["value"] == "off"
    assert all(item["why"] for item in auto.values()) and first.config.batch_tokens == "auto"
    assert auto["tokens"]["value"] == "subwords"  # 16 distinct pairs: enough for SentencePiece
    assert first.config.max_length == auto["max_length"]["value"] >= 8  # resolved: a number, not "auto"
    assert first.config.warmup_steps == auto["warmup_steps"]["value"] == 1  # 5% of 2 steps, at least 1
    assert first.auto == first.metrics["auto"]
    assert first.config.early_stopping == auto["early_stopping"]["value"] == "loss"  # no label smoothing in TINY
    stages = [event.stage for event in runs["events"]]
    assert stages[:2] == ["settings", "compiling"] and "epoch" in stages
    after_training = stages[stages.index("done") + 1:]  # the phases after training: the test decoding
    assert after_training[-1] == "phase_end" and set(after_training) <= {"phase", "phase_end"}
    line = runs["events"][0].message  # one line saying what auto chose, before training
    assert line.startswith("auto settings for 16 training pairs") and f"max_length={first.config.max_length}" in line
    manifest = json.loads((out / "kformer.json").read_text(encoding="utf-8"))
    assert manifest["task"] == "translate" and manifest["format_version"] >= 1
    assert manifest["max_source_length"] == first.config.max_length


@pytest.mark.slow
def test_an_xla_step_trains_and_scores(tmp_path):
    pairs = number_pairs(16, seed=1)
    result = translate.train({**TINY, "epochs": 1, "jit_compile": True}, pairs, tmp_path / "xla", valid=pairs,
                             test=pairs)
    assert result.config.jit_compile is True and "jit_compile" not in result.auto
    assert np.isfinite(result.metrics["valid_loss"]) and result.metrics["test"]["n"] == 16


def test_resume_continues_from_the_checkpoint(runs):
    resumed, out = runs["resumed"], runs["out"]
    assert resumed.metrics["resumed_from_epoch"] == 1 and resumed.metrics["epochs_run"] == 1
    assert json.loads((out / "training" / "checkpoint.json").read_text(encoding="utf-8"))["epochs_done"] == 2
    assert resumed.config.vocab_size == 300 and resumed.auto == runs["first"].auto
    assert resumed.config.patience == resumed.metrics["recipe"]["patience"] == 7
    assert resumed.metrics["steps"] == 2 * 2  # the step counter carries on (2 batches of 8 per epoch)
    assert isinstance(resumed.load(), translate.Translator)


def test_load_translate_evaluate(runs, tmp_path):
    translator = kformer.load(runs["out"])
    assert isinstance(translator, translate.Translator) and translator.task == "translate"
    sources = [s for s, _ in runs["pairs"]]
    translations = translator.translate(sources + ["   "], beam=1)
    assert len(translations) == len(sources) + 1 and translations[-1] == ""
    assert all(isinstance(t, str) for t in translations)
    scores = translator.evaluate(runs["pairs"], out=tmp_path / "eval")
    expected = translation_scores(translations[:-1], [t for _, t in runs["pairs"]])
    assert scores["n"] == 16 and scores["chrf"] == pytest.approx(expected["chrf"])
    assert scores["exact_match"] == pytest.approx(expected["exact_match"])
    stuck = repetition_share(translations[:-1], translator.target_vocab.encode(translations[:-1]))
    assert scores["repetition"] == pytest.approx(stuck)  # words or target subwords repeated 4+ times in a row
    assert json.loads((tmp_path / "eval" / "scores.json").read_text(encoding="utf-8")) == scores
    assert len(json.loads((tmp_path / "eval" / "translations.json").read_text(encoding="utf-8"))) == 16
    # a smaller batch (another padding width) and the module alias give the same translations
    assert translate.translate(translator, sources[:3]) == translations[:3]
    assert translator.predict(sources[:3]) == [{"translation": t} for t in translations[:3]]
    assert translator.evaluate(runs["tsv"], limit=3)["n"] == 3


def test_each_translation_is_capped_by_its_source_length(runs, monkeypatch):
    """The folder records the cap measured on its training pairs; decoding passes each row's cap."""
    from kformer.models import generation

    translator = translate.load(runs["out"])
    rule = json.loads((runs["out"] / "kformer.json").read_text(encoding="utf-8"))["decode_length"]
    assert rule == translator.decode_length == runs["first"].metrics["lengths"]["decode"]
    assert rule["extra"] == translate.auto.DECODE_EXTRA and 1.0 <= rule["per_source_token"] <= 4.0
    tight = translate.Translator(translator.model, translator.source_vocab, translator.target_vocab, runs["out"],
                                 {**translator.manifest, "decode_length": {"per_source_token": 1.0, "extra": 1}})
    assert tight.decode_limits([1, 3, 500]) == [2, 4, tight.max_target_length]
    seen, real = [], generation.greedy_decode
    monkeypatch.setattr(generation, "greedy_decode", lambda model, ids, max_length, row_limits=None, max_repeat=0: (
        seen.append((ids, list(row_limits), max_repeat)),
        real(model, ids, max_length, row_limits=row_limits, max_repeat=max_repeat))[1])
    sources = ["one", "three one two"]
    tight.translate(sources)
    lengths = [len(ids) for ids in tight.encode_sources(sources)]
    assert sorted(limit for _, limits, _ in seen for limit in limits) == sorted(n + 1 for n in lengths)
    # the repeat limit reaches the decoder: the default, or what the caller asks for
    assert {repeat for *_, repeat in seen} == {translate.MAX_REPEAT}
    seen.clear()
    tight.translate(sources, max_repeat=0)
    assert {repeat for *_, repeat in seen} == {0}
    old = {k: v for k, v in translator.manifest.items() if k != "decode_length"}  # a folder from before the rule
    assert translate.Translator(translator.model, None, None, runs["out"], old).decode_length == {
        "per_source_token": 2.0, "extra": 8}


def test_warmup_decodes_every_decode_shape(runs, monkeypatch):
    from kformer.models import generation

    translator = translate.load(runs["out"])
    seen = []
    monkeypatch.setattr(generation, "greedy_decode",
                        lambda model, ids, max_length, max_repeat: seen.append((*ids.shape, max_repeat)))
    translator.warmup()  # the compiled variant translate() uses: with the default repeat limit
    assert sorted(seen) == sorted((*shape, translate.MAX_REPEAT) for shape in generation.decode_shapes(translator.model))


def test_warmup_with_beams_readies_what_beam_translations_meet(runs):
    from kformer.models import generation

    translator = translate.load(runs["out"])
    translator.warmup(beams=(1, 3))
    compiled = generation.compiled_functions(translator.model)
    warmed = set(compiled["beam_shapes"])
    assert {shape[:2] for shape in warmed} == set(generation.decode_shapes(translator.model))
    assert {shape[3] for shape in warmed} == {3}
    translator.translate(["three one", "two"], beam=3)  # a short batch: a shape warmup already compiled
    assert compiled["beam_shapes"] == warmed
    with pytest.raises(BadInput, match="beam"):
        translator.warmup(beams=(0,))


def test_attention_maps_are_arrays_labelled_with_pieces(runs):
    translator = translate.load(runs["out"])
    maps = translator.attention_maps("three one")
    source = translator.encode_sources(["three one"])[0]
    layers, heads = 1, 2
    assert maps.maps["encoder"].shape == (layers, heads, len(source), len(source))
    target = len(maps.rows["decoder_self"])  # [START] + the translation's pieces
    assert maps.rows["decoder_self"][0] == "[START]" and maps.cols["cross"] == maps.rows["encoder"]
    assert maps.maps["decoder_self"].shape == (layers, heads, target, target)
    assert maps.maps["cross"].shape == (layers, heads, target, len(source))
    for stack in maps.maps.values():
        np.testing.assert_allclose(stack.sum(axis=-1), 1.0, atol=1e-4)
    assert maps.output == translator.translate(["three one"])[0]
    assert json.loads(json.dumps(maps.to_json()))["maps"]["cross"]["rows"] == maps.rows["cross"]


def test_bad_requests_name_the_argument(runs):
    translator = translate.load(runs["out"])
    for call, field in [
        (lambda: translator.translate(["one"], beam=0), "beam"),
        (lambda: translator.translate("one"), "texts"),
        (lambda: translator.translate(["one"], batch_size=0), "batch_size"),
        (lambda: translator.attention_maps("  "), "text"),
        (lambda: translator.check_parameters({"beam": 0}), "parameters.beam"),
        (lambda: translator.check_parameters({"max_repeat": -1}), "parameters.max_repeat"),
        (lambda: translator.predict(["one"], beam=0), "beam"),
        (lambda: translator.translate(["one"], max_repeat=-1), "max_repeat"),
        (lambda: translator.check_parameters({"top_k": 3}), "parameters.top_k"),
        (lambda: translator.evaluate([("one", "")]), "data[0]"),
    ]:
        with pytest.raises(BadInput) as raised:
            call()
        assert raised.value.field == field


def test_config_errors_name_the_setting():
    with pytest.raises(BadInput) as raised:
        build_config(TranslateConfig, {"dimension": 32})
    assert raised.value.field == "dimension" and "unknown setting" in str(raised.value)
    with pytest.raises(BadInput) as raised:
        build_config(TranslateConfig, {"dim": "big"})
    assert raised.value.field == "dim" and "whole number" in str(raised.value)
    for settings, field in [({"dim": 30}, "heads"), ({"max_length": 1}, "max_length"), ({"beam": 0}, "beam"),
                            ({"positions": "rotary"}, "positions"), ({"warmup_steps": "soon"}, "warmup_steps"),
                            ({"early_stopping": "bleu"}, "early_stopping"),
                            ({"share_embeddings": True, "shared_vocab": False}, "share_embeddings")]:
        with pytest.raises(BadInput) as raised:
            build_config(TranslateConfig, settings)
        assert raised.value.field == field, settings
    assert build_config(TranslateConfig, {"max_length": 0}).max_length == "auto"  # kformer 0.1's "automatic"


@pytest.mark.parametrize("name", ["en-es", "en-ta"])
def test_shipped_recipes_load(name):
    config = make_config(TranslateConfig, "translate", name, {"epochs": 1})
    assert config.epochs == 1 and config.tie_embeddings and config.norm_first


def test_bad_data_fails_before_anything_is_written(tmp_path):
    out = tmp_path / "out"
    cases = [
        (dict(data=[("one", "ஒன்று"), ("two",)]), "data[1]"),
        (dict(data=[("one", "ஒன்று")] * 5), "test"),  # too few to hold out test pairs
        (dict(data=tmp_path / "missing.tsv"), "data"),
        (dict(data=[("one", "ஒன்று")], valid=[("one", "ஒன்று")], test=[("one", "ஒன்று")], resume=True), "resume"),
    ]
    for arguments, field in cases:
        with pytest.raises(BadInput) as raised:
            translate.train(TINY, out=out, **arguments)
        assert raised.value.field == field, arguments
        assert not out.exists()


@pytest.mark.parametrize("state", ["{not json", '{"settings": {"epochs": 1}, "auto": {}}'])
def test_a_corrupt_resume_state_is_one_line_naming_resume(tmp_path, state):
    """Unreadable, or naming no vocabularies: CorruptModel, before any training."""
    from kformer.errors import CorruptModel

    out = tmp_path / "out"
    (out / "training").mkdir(parents=True)
    (out / "training" / "state.json").write_text(state, encoding="utf-8")
    pairs = number_pairs(16, seed=1)
    with pytest.raises(CorruptModel) as raised:
        translate.train(TINY, pairs, out, valid=pairs, test=pairs, resume=True)
    assert raised.value.field == "resume" and "\n" not in str(raised.value) and "state.json" in str(raised.value)
