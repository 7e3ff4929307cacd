"""A translate model folder round-trips: separate vocabularies, manifest, same translations after
loading -- also for a folder written before model folders had a format version."""

import json

import pytest

from kformer.text.subword import learn_vocabularies

ENGLISH = ["one two", "three", "four five six", "seven eight", "nine ten"]
TAMIL = ["ஒன்று இரண்டு", "மூன்று", "நான்கு ஐந்து ஆறு", "ஏழு எட்டு", "ஒன்பது பத்து"]
TEXTS = ["one two", "   ", "seven eight nine ten " * 5]  # blank, and longer than max_source_length
pytestmark = pytest.mark.usefixtures("eager_decoding")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """An untrained translator with separate vocabularies, saved; and its translations of TEXTS."""
    from kformer.models.seq2seq import Seq2SeqTransformer, compile_seq2seq
    from kformer.tasks import translate
    from kformer.training import set_seed

    set_seed(0)
    source, target = learn_vocabularies(ENGLISH * 4, TAMIL * 4, vocab_size=300, shared=False)
    assert source is not target
    model = Seq2SeqTransformer(source.vocab_size, target.vocab_size, 12, 9, dim=16, heads=2, ff_dim=32,
                               encoder_layers=1, decoder_layers=1)
    compile_seq2seq(model, 1e-3, 1, None)
    out = tmp_path_factory.mktemp("translate_folder") / "model"
    translator = translate.Translator(model, source, target, out)
    before = translator.translate(TEXTS, beam=2, batch_size=2)
    assert before[1] == "" and all(isinstance(t, str) for t in before)
    translate.save(translator, out, {"dim": 16}, {"test": {"bleu": 1.0}}, extra_files={"notes.json": ["kept"]})
    return out, translator, before


def test_save_and_load_with_separate_vocabularies(saved):
    from kformer.tasks import translate

    out, translator, before = saved
    names = {p.name for p in out.iterdir()}
    assert {"model.keras", "source.spm", "target.spm", "kformer.json", "metrics.json", "notes.json"} <= names
    assert "vocab.spm" not in names
    manifest = json.loads((out / "kformer.json").read_text(encoding="utf-8"))
    assert manifest["vocab"]["shared"] is False and manifest["max_target_length"] == 9
    assert manifest["task"] == "translate" and manifest["format_version"] >= 1

    loaded = translate.load(out)
    assert loaded.target_vocab.encode(TAMIL) == translator.target_vocab.encode(TAMIL)
    assert loaded.translate(TEXTS, beam=2, batch_size=2) == before
    assert loaded.metadata()["shared_vocab"] is False


def test_a_folder_without_format_version_still_loads(saved, tmp_path):
    """kformer 0.1 wrote the manifest without format_version, kformer_version (and in older
    folders without model_file); kformer.load must still open it."""
    import shutil

    import kformer

    out, _, before = saved
    old = tmp_path / "old"
    shutil.copytree(out, old)
    manifest = json.loads((old / "kformer.json").read_text(encoding="utf-8"))
    for key in ("format_version", "kformer_version", "model_file"):
        del manifest[key]
    (old / "kformer.json").write_text(json.dumps(manifest), encoding="utf-8")
    loaded = kformer.load(old)
    assert loaded.task == "translate" and loaded.metadata()["format_version"] == 0
    assert loaded.translate(TEXTS, beam=2, batch_size=2) == before


def test_wrong_or_broken_folders_are_clear_errors(saved, tmp_path):
    import shutil

    from kformer.errors import BadInput, CorruptModel
    from kformer.tasks import translate

    out, _, _ = saved
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    (broken / "target.spm").unlink()
    with pytest.raises(CorruptModel, match="target.spm"):
        translate.load(broken)
    manifest = json.loads((broken / "kformer.json").read_text(encoding="utf-8"))
    (broken / "kformer.json").write_text(json.dumps({**manifest, "task": "classify"}), encoding="utf-8")
    with pytest.raises(BadInput, match="'classify' model"):
        translate.load(broken)
