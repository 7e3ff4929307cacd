"""kformer export: SavedModel and ONNX round trips against the Keras models, the CLI, the serving
runtime, and bad input. The tiny models are the serving tests' (trained once per session)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from export_helpers import ATOL, assert_same_routes, load_as_the_readme_says

from kformer import load
from kformer.cli import main
from kformer.errors import BadInput, ModelNotFound, Unsupported
from kformer.export import export

TEXTS = ["my laptop screen is broken", "Refund my INVOICE, please!", "", "password locked <br /> café vpn",
         "urgent " * 40 + "battery"]


@pytest.fixture(scope="module")
def folders(tiny_models):
    return tiny_models


@pytest.fixture(scope="module")
def classifier(folders):

    return load(folders["tickets"])


@pytest.fixture(scope="module")
def translator(folders):

    return load(folders["en-ta"])


def padded_sources(translator, texts):
    from kformer.data.batching import pad_batch

    return pad_batch(translator.encode_sources(texts), limit=translator.max_source_length)


# --- classifier -----------------------------------------------------------------------------------


def test_classifier_exports_match_keras_for_ids_and_raw_texts(folders, classifier, tmp_path):
    from export_helpers import check_classifier_exports

    metadata = check_classifier_exports(folders["tickets"], TEXTS, tmp_path)["saved_model"]
    out = tmp_path / "saved_model"
    assert (out / "labels.txt").read_text(encoding="utf-8").splitlines() == classifier.labels
    assert (out / "vocab.txt").read_text(encoding="utf-8").splitlines() == classifier.tokenizer.get_vocabulary()
    assert set(metadata["signatures"]) == {"serving_default", "texts"}
    assert metadata["signatures"]["texts"]["outputs"]["labels"]["dtype"] == "string"
    assert metadata["tokenizer"]["kind"] == "word" and metadata["wide"] is None and metadata["threshold"] is None
    assert "token_ids" in (out / "README.txt").read_text(encoding="utf-8")
    assert "plain TensorFlow" in metadata["texts_signature"] and not (out / "texts").exists()

    # a fresh Python with plain TensorFlow (no TensorFlow Text, no kformer) runs the README's load lines; the
    # tolerance is the in-process one (check_classifier_exports): float32 graphs against the Keras model
    fresh = load_as_the_readme_says(out, {"texts": {"texts": TEXTS},
                                          "serving_default": {"token_ids": classifier.features(TEXTS).tolist()}})
    for outputs in fresh.values():
        np.testing.assert_allclose(outputs["probabilities"], classifier.probabilities(TEXTS), atol=ATOL)
    onnx = load_as_the_readme_says(tmp_path / "onnx", {"model.onnx": {"token_ids": classifier.features(TEXTS).tolist()}})
    np.testing.assert_allclose(onnx["model.onnx"]["probabilities"], classifier.probabilities(TEXTS), atol=ATOL)


def test_graph_word_tokenizer_gives_the_python_tokenizers_ids():
    import tensorflow as tf

    from kformer.text.graph_words import GraphWordTokenizer
    from kformer.text.vocabulary import RESERVED_TOKENS, encode
    from kformer.text.words import WordTokenizer

    vocabulary = [*RESERVED_TOKENS, "the", "laptop", "cafe", "!", "?", "screen", "12", "_x", "ு", "日本語"]
    texts = ["The laptop!! screen", "", "  ", "Café<br />CAFE?", "über_x 12 naïve", "தமிழ் ok", "a\u00a0b\u2003c",
             "x" * 600, " ".join(["the", "laptop", "screen", "cafe"] * 5), "日本語 the", "½ ² Ⅻ"]
    pairs = [*vocabulary, "the laptop", "laptop screen", "cafe cafe", "screen cafe"]  # a word-pair vocabulary
    for truncation in ("head", "tail", "head_tail"):
        for words in (vocabulary, pairs):
            expected = encode(WordTokenizer(words, 8, truncation), texts)
            got = GraphWordTokenizer(words, 8, truncation)(tf.constant(texts)).numpy()
            np.testing.assert_array_equal(got, expected, err_msg=truncation)


def test_classifier_onnx_through_the_cli_matches_keras(folders, classifier, tmp_path, capsys):
    import onnxruntime as ort

    out = tmp_path / "onnx"
    assert main(["export", str(folders["tickets"]), "--format", "onnx", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "model.onnx: token_ids -> probabilities, labels" in printed
    assert sorted(p.name for p in out.iterdir()) == ["README.txt", "labels.txt", "metadata.json", "model.onnx",
                                                      "vocab.txt"]
    session = ort.InferenceSession(str(out / "model.onnx"))
    ids = classifier.features(TEXTS)
    np.testing.assert_allclose(session.run(None, {"token_ids": ids})[0], classifier.probabilities(TEXTS), atol=1e-4)

    # an earlier export is replaced whole (no file of the old format stays behind)
    assert main(["export", str(folders["tickets"]), "--format", "saved_model", "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == "saved_model"
    assert not (out / "model.onnx").exists() and (out / "1" / "saved_model.pb").is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left


def test_onnx_conversion_optimizes_without_copies_and_falls_back_to_them_when_a_pass_fails(
        classifier, tmp_path, monkeypatch):
    """tf2onnx's passes run on the graph itself (no deep copy of it per pass); a pass that fails
    there sends the conversion back to copying, where the failed pass is skipped; either way the
    file gives the classifier's probabilities and TF2ONNX_CATCH_ERRORS is as it was."""
    import copy
    import os
    import types

    import onnxruntime as ort
    from tf2onnx import optimizer

    from kformer.models.export_plan import onnx_file

    copies = []
    counting = types.SimpleNamespace(deepcopy=lambda thing: copies.append(type(thing).__name__) or copy.deepcopy(thing))
    monkeypatch.setattr(optimizer, "copy", counting)  # the copy module as tf2onnx's optimizer loop sees it
    endpoint, ids = classifier.export_plan().endpoints[0], classifier.features(TEXTS)

    def probabilities(path):
        return ort.InferenceSession(str(path)).run(["probabilities"], {"token_ids": ids})[0]

    onnx_file(endpoint, tmp_path / "fast.onnx", classifier.model)
    assert "Graph" not in copies and "TF2ONNX_CATCH_ERRORS" not in os.environ  # (it copies a Counter of ops)

    class Failing:
        graph_been_opt = False

        def optimize(self, graph, iteration):
            raise RuntimeError("a pass that fails on this graph")

    monkeypatch.setitem(optimizer._optimizers, "failing", Failing)
    onnx_file(endpoint, tmp_path / "fallback.onnx", classifier.model)
    assert copies.count("Graph") > 10  # the second conversion copied the graph before each pass
    for path in ("fast.onnx", "fallback.onnx"):
        np.testing.assert_allclose(probabilities(tmp_path / path), classifier.probabilities(TEXTS), atol=ATOL)


@pytest.fixture(scope="module")
def tickets_copy(folders, tmp_path_factory):
    """A copy of the tiny classifier's folder: the onnx runtimes keep their conversion in it."""
    import shutil

    out = tmp_path_factory.mktemp("copy") / "tickets"
    shutil.copytree(folders["tickets"], out)
    return out


def test_onnx_runtime_converts_once_per_folder_version_and_serves_the_same_predictions(
        tickets_copy, classifier, tmp_path, monkeypatch):
    import asyncio

    from test_server_api import serving

    from kformer.folders import folder_version
    from kformer.models import export_plan
    from kformer.server import ServeConfig

    onnx = load(tickets_copy, runtime="onnx")
    kept = tickets_copy / "runtimes" / folder_version(tickets_copy) / "network.onnx"
    assert kept.is_file() and onnx.metadata()["runtime"] == "onnx" and classifier.metadata()["runtime"] == "keras"
    np.testing.assert_allclose(onnx.probabilities(TEXTS), classifier.probabilities(TEXTS), atol=1e-4)
    assert onnx.attention_maps(TEXTS[0]).maps["encoder"].shape[:2] == (1, 2)  # still the Keras network
    export(tickets_copy, tmp_path / "export", "onnx")

    def no_conversion(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(export_plan, "onnx_file", no_conversion)  # from here on nothing may convert

    async def ask():
        models = {"tickets": tickets_copy, "exported": tmp_path / "export"}  # a model folder and an export folder
        async with serving(models, ServeConfig(runtime="onnx")) as (client, _):
            answers = [(await client.post(f"/v1/models/{name}:predict", json={"instances": TEXTS[:2]})).json()
                       for name in models]
            metadata = await client.get("/v1/models/tickets/metadata")
            return answers, metadata.json()

    answers, metadata = asyncio.run(ask())  # a restart: the kept conversion is read back
    assert metadata["runtime"] == "onnx"
    exact = classifier.probabilities(TEXTS[:2])
    for answer in answers:
        assert_same_routes([p["label"] for p in answer["predictions"]], [p["label"] for p in classifier.predict(TEXTS[:2])],
                           exact.max(axis=1), classifier.threshold, 1e-4, probabilities=exact, least=2)
    with pytest.raises(BadInput, match="runtime"):
        ServeConfig(runtime="tflite")

    # a changed folder (retrained) is another version: converted again, the old conversion removed
    (tickets_copy / "metrics.json").write_text((tickets_copy / "metrics.json").read_text("utf-8") + "\n", "utf-8")
    with pytest.raises(AssertionError, match="converted again"):
        load(tickets_copy, runtime="onnx")
    monkeypatch.undo()
    load(tickets_copy, runtime="onnx")
    assert [p.name for p in (tickets_copy / "runtimes").iterdir()] == [folder_version(tickets_copy)]


def test_int8_runtime_quantizes_the_weights_and_keeps_the_predictions(tickets_copy, classifier):

    int8 = load(tickets_copy, runtime="onnx-int8")
    assert int8.metadata()["runtime"] == "onnx-int8"
    exact, quantized = classifier.probabilities(TEXTS), int8.probabilities(TEXTS)
    assert not np.allclose(quantized, exact, atol=1e-6)  # 8-bit weights: not the float network
    np.testing.assert_allclose(quantized, exact, atol=0.05)
    # labels as the float network's wherever its two most likely are not within the 0.05 of a tie
    assert_same_routes([p["label"] for p in int8.predict(TEXTS)], [p["label"] for p in classifier.predict(TEXTS)],
                       exact.max(axis=1), classifier.threshold, 0.05, probabilities=exact)


# --- translate and arithmetic ---------------------------------------------------------------------

CLIENT = Path(__file__).resolve().parents[1] / "docs" / "onnx_translate_client.py"
SENTENCES = ["one two", "three", "seven nine five", "", "ten ten ten ten ten ten ten", "Eight,  SIX"]


def reference_client():
    """docs/onnx_translate_client.py as a module (it imports no kformer)."""
    from export_helpers import docs_module

    return docs_module("onnx_translate_client")


def keras_steps(model, source, tokens):
    """Keras' cached decoder: the logits after each of ``tokens`` (``(B, steps)``)."""
    from kformer.models.generation import CachedStepper

    stepper = CachedStepper(model, source, model.max_target_length)
    return [np.asarray(stepper.next_logits(tokens[:, i:i + 1])) for i in range(tokens.shape[1])]


def test_translator_saved_model_encodes_steps_with_a_cache_and_decodes_greedily(folders, translator, tmp_path,
                                                                                  eager_decoding):
    import tensorflow as tf

    export(folders["en-ta"], tmp_path / "sm")
    assert (tmp_path / "sm" / "vocab.spm").is_file()
    loaded = tf.saved_model.load(str(tmp_path / "sm" / "1"))
    assert set(loaded.signatures) == {"serving_default", "encode", "decode_step"}
    model = translator.model
    source = padded_sources(translator, ["one two", "three", "seven nine"])
    encoded = loaded.signatures["encode"](source_ids=tf.constant(source))
    np.testing.assert_allclose(encoded["encoder_outputs"].numpy(), np.asarray(model.encode(source, training=False)[0]),
                               atol=1e-5)
    tokens = np.array([[2, 5, 9], [2, 7, 7], [2, 4, 4]], dtype="int32")
    cache = np.zeros((3, 1, 2, model.max_target_length, 2, 16), dtype="float32")
    for index, expected in enumerate(keras_steps(model, source, tokens)):
        step = loaded.signatures["decode_step"](token=tf.constant(tokens[:, index:index + 1]), index=tf.constant(index),
                                                self_cache=tf.constant(cache), cross_cache=encoded["cross_cache"],
                                                source_ids=tf.constant(source))
        np.testing.assert_allclose(step["logits"].numpy(), expected, atol=1e-5)
        cache = step["new_self_cache"].numpy()

    ids = padded_sources(translator, SENTENCES[:3])
    generated = loaded.signatures["serving_default"](source_ids=tf.constant(ids))["target_ids"].numpy()
    assert translator.target_vocab.decode(generated) == translator.translate(SENTENCES[:3])
    assert load(tmp_path / "sm").predict(SENTENCES) == translator.predict(SENTENCES)  # served from the export
    fresh = load_as_the_readme_says(tmp_path / "sm", {"serving_default": {"source_ids": ids.tolist()}})
    np.testing.assert_array_equal(fresh["serving_default"]["target_ids"], generated)  # the same graph, the same ids


def test_translator_onnx_decodes_with_a_cache_and_the_reference_client_translates_as_kformer(
        folders, translator, tmp_path, eager_decoding):
    import os
    import subprocess
    import sys

    import onnxruntime as ort

    result = export(folders["en-ta"], tmp_path / "onnx", "onnx")
    assert result.metadata["files"] == ["encoder.onnx", "decoder_step.onnx"]
    assert result.metadata["greedy"]["max_repeat"] == 3 and result.metadata["decode_length"] == translator.decode_length
    model = translator.model
    source = padded_sources(translator, ["one two", "three"])
    encoder = ort.InferenceSession(str(tmp_path / "onnx" / "encoder.onnx"))
    step = ort.InferenceSession(str(tmp_path / "onnx" / "decoder_step.onnx"))
    encoded, cross = encoder.run(None, {"source_ids": source})
    np.testing.assert_allclose(encoded, np.asarray(model.encode(source, training=False)[0]), atol=1e-4)
    tokens = np.array([[2, 6, 8, 8], [2, 5, 5, 9]], dtype="int32")
    cache = np.zeros((2, 1, 2, 12, 2, 16), dtype="float32")  # any length that holds the steps
    for index, expected in enumerate(keras_steps(model, source, tokens)):
        logits, cache = step.run(None, {"token": tokens[:, index:index + 1], "index": np.array(index, dtype="int32"),
                                        "self_cache": cache, "cross_cache": cross, "source_ids": source})
        np.testing.assert_allclose(logits, expected, atol=1e-4)

    fresh = load_as_the_readme_says(tmp_path / "onnx", {"encoder.onnx": {"source_ids": source.tolist()}})
    np.testing.assert_allclose(fresh["encoder.onnx"]["encoder_outputs"], encoded, atol=1e-5)
    client = reference_client().OnnxTranslator(tmp_path / "onnx")
    assert client.translate(SENTENCES) == translator.translate(SENTENCES)
    served = load(tmp_path / "onnx")  # what `kformer serve` does with an export folder
    assert served.predict(SENTENCES) == translator.predict(SENTENCES)
    with pytest.raises(Unsupported, match="greedily"):
        served.predict(SENTENCES[:1], beam=2)
    # ... and it runs where kformer cannot be imported
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-I", str(CLIENT), str(tmp_path / "onnx"), *SENTENCES[:2]], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == translator.translate(SENTENCES[:2])


def test_arithmetic_exports_solve_as_kformer_does(folders, tmp_path, eager_decoding):
    import tensorflow as tf


    model = load(folders["arith"])
    problems = [(12, "+", 34), (99, "-", 5), (7, "+", 80), (0, "-", 99)]
    expected = model.solve(problems)
    result = export(folders["arith"], tmp_path / "sm")
    assert result.metadata["arithmetic_format"] == model.format.to_json()
    vocabulary = (tmp_path / "sm" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert vocabulary == model.format.vocabulary.to_json()
    loaded = tf.saved_model.load(str(tmp_path / "sm" / "1"))
    ids = loaded.signatures["serving_default"](source_ids=tf.constant(model.format.encode_sources(problems)))
    assert [model.format.decode_answer(row) for row in ids["target_ids"].numpy()] == expected
    sources = model.format.encode_sources(problems)
    fresh = load_as_the_readme_says(tmp_path / "sm", {"serving_default": {"source_ids": np.asarray(sources).tolist()}})
    np.testing.assert_array_equal(fresh["serving_default"]["target_ids"], ids["target_ids"].numpy())

    export(folders["arith"], tmp_path / "onnx", "onnx")
    decoder = reference_client().OnnxDecoder(tmp_path / "onnx")
    sources = [[int(i) for i in row if i] for row in model.format.encode_sources(problems)]
    assert [model.format.decode_answer(row) for row in decoder.decode(sources)] == expected
    for kind in ("sm", "onnx"):  # served from the export
        assert load(tmp_path / kind).predict(["12+34", "99-5"]) == model.predict(["12+34", "99-5"])


# --- bad input ------------------------------------------------------------------------------------


def test_export_refuses_what_it_must_not_overwrite_or_cannot_read(folders, tmp_path, capsys):
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(BadInput, match="something other than a kformer export") as caught:
        export(folders["tickets"], other)
    assert caught.value.field == "out" and (other / "keep.txt").read_text(encoding="utf-8") == "mine"
    with pytest.raises(BadInput, match="is a file"):
        export(folders["tickets"], other / "keep.txt")
    with pytest.raises(BadInput, match="saved_model, onnx") as caught:
        export(folders["tickets"], tmp_path / "x", "tflite")
    assert caught.value.field == "format"
    with pytest.raises(ModelNotFound):
        export(tmp_path / "missing", tmp_path / "y")

    assert main(["export", str(folders["tickets"]), "--out", str(other)]) == 2
    assert capsys.readouterr().err.startswith("kformer: error: --out ")
    assert main(["export", str(tmp_path / "missing"), "--out", str(tmp_path / "z")]) == 3
    assert "kformer: error:" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]  # nothing written by the failures


def test_kformer_threads_is_checked_and_sets_tensorflows_pools(monkeypatch):
    from kformer.threads import configure_threads, thread_count, usable_cores

    monkeypatch.setenv("KFORMER_THREADS", "3")
    monkeypatch.delenv("TF_NUM_INTRAOP_THREADS", raising=False)
    monkeypatch.delenv("TF_NUM_INTEROP_THREADS", raising=False)
    assert thread_count() == 3 and configure_threads() == 3
    import os

    assert os.environ["TF_NUM_INTRAOP_THREADS"] == "3" and os.environ["TF_NUM_INTEROP_THREADS"] == "2"
    monkeypatch.setenv("KFORMER_THREADS", "0")
    with pytest.raises(BadInput, match="KFORMER_THREADS"):
        configure_threads()
    assert main(["export", "x", "--out", "y"]) == 2
    monkeypatch.delenv("KFORMER_THREADS")
    assert thread_count() == usable_cores() >= 1
