"""A translate model folder round-trips: separate vocabularies, manifest, same translations after loading."""

import json

from kformer.text.subword import learn_vocabularies

ENGLISH = ["one two", "three", "four five six", "seven eight", "nine ten"]
TAMIL = ["ஒன்று இரண்டு", "மூன்று", "நான்கு ஐந்து ஆறு", "ஏழு எட்டு", "ஒன்பது பத்து"]


def test_save_and_load_with_separate_vocabularies(tmp_path):
    from kformer.models.seq2seq import Seq2SeqTransformer, compile_seq2seq
    from kformer.models.translator import (
        Translator,
        load_translator,
        save_translator,
        translate_texts,
    )
    from kformer.training import set_seed

    set_seed(0)
    source, target = learn_vocabularies(ENGLISH * 4, TAMIL * 4, vocab_size=300, shared=False)
    assert source is not target
    model = Seq2SeqTransformer(source.vocab_size, target.vocab_size, 12, 9, dim=16, heads=2, ff_dim=32,
                               encoder_layers=1, decoder_layers=1)
    compile_seq2seq(model, 1e-3, 1, None)
    translator = Translator(model, source, target, {})
    texts = ["one two", "   ", "seven eight nine ten " * 5]  # blank, and longer than max_source_length
    before = translate_texts(translator, texts, beam=2, batch_size=2)
    assert before[1] == "" and all(isinstance(t, str) for t in before)

    out = save_translator(translator, tmp_path / "model", {"dim": 16}, {"test": {"bleu": 1.0}},
                          extra_files={"notes.json": ["kept"]})
    names = {p.name for p in out.iterdir()}
    assert {"model.keras", "source.spm", "target.spm", "kformer.json", "metrics.json", "notes.json"} <= names
    assert "vocab.spm" not in names
    manifest = json.loads((out / "kformer.json").read_text(encoding="utf-8"))
    assert manifest["vocab"]["shared"] is False and manifest["max_target_length"] == 9

    loaded = load_translator(out)
    assert loaded.target_vocab.encode(TAMIL) == target.encode(TAMIL)
    assert translate_texts(loaded, texts, beam=2, batch_size=2) == before
