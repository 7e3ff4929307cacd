"""SentencePiece subword vocabularies: specials at 0..3, Tamil and unseen text round-trip intact."""

import unicodedata

import pytest

from kformer.data.pairs import normalize_text
from kformer.text.specials import END_ID, PAD_ID, SPECIAL_TOKENS, START_ID
from kformer.text.subword import Subwords, learn_vocabularies

TAMIL = [
    "நான் தூங்கினேன்.",
    "அமைதியாக இருங்கள்",
    "இந்த அறிகுறிகள் எவ்வளவு காலமாக இருந்து வருகின்றன?",
    "கொரோனா வைரஸ் நோய் 2019 (கோவிட்-19) ஒரு தொற்று நோயாகும்.",
    "மேலும், காய்ச்சலுடன்",
]
ENGLISH = ["I slept.", "Calm down.", "How long have these symptoms been going on?",
           "Coronavirus disease 2019 (COVID-19) is an infectious disease.", "and along with a fever"]


def test_tamil_round_trips_through_the_tokenizer(tmp_path):
    source, target = learn_vocabularies(ENGLISH * 3, TAMIL * 3, vocab_size=400, shared=False)
    assert target.pieces(range(4)) == list(SPECIAL_TOKENS)
    # unseen words, a decomposed (NFD) spelling and an emoji: NFC text comes back exactly
    unseen = [normalize_text(unicodedata.normalize("NFD", "கொடுங்கள் ஷ்ரீ ௐ 😀 ok"))] + TAMIL
    ids = target.encode(unseen)
    assert all(min(seq) > END_ID for seq in ids)
    assert target.decode(ids) == unseen
    assert unseen[0] == unicodedata.normalize("NFC", unseen[0])
    # decode stops at END and ignores START/PAD, as decoder output carries them
    assert target.decode([[START_ID, *ids[1], END_ID, 99, PAD_ID]]) == [TAMIL[0]]
    # saved beside a model and loaded again, it encodes the same way
    target.save(tmp_path / "target.spm")
    assert Subwords.load(tmp_path / "target.spm").encode(TAMIL) == target.encode(TAMIL)
    assert source.decode(source.encode(ENGLISH)) == ENGLISH


def test_shared_vocabulary_is_one_model_for_both_sides():
    source, target = learn_vocabularies(ENGLISH, TAMIL, vocab_size=400, shared=True)
    assert source is target
    assert source.decode(source.encode(ENGLISH + TAMIL)) == ENGLISH + TAMIL
    # the numbers are spelled with the same pieces on both sides
    assert source.encode(["2019"]) == target.encode(["2019"])


@pytest.mark.slow
@pytest.mark.shared_data
def test_real_tamil_round_trips(shared_data):
    from kformer.data.pairs import read_pairs

    pairs = read_pairs(shared_data / "en-ta-tico19" / "en-ta.tsv")
    tamil = [p.target for p in pairs]
    _, target = learn_vocabularies([p.source for p in pairs[:2500]], tamil[:2500], vocab_size=2000, shared=False)
    held = tamil[2500:]  # sentences the vocabulary never saw
    assert target.decode(target.encode(held)) == held
