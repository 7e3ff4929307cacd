"""Whole-word vocabularies (kformer.text.word_vocab): ids, round trips, files, errors."""

from __future__ import annotations

import pytest

from kformer.errors import KformerError
from kformer.text.specials import END_ID, PAD_ID, START_ID, UNK_ID
from kformer.text.word_vocab import WordVocabulary, learn_word_vocabularies

ENGLISH = ["good morning", "thank you", "good night"]
TAMIL = ["காலை வணக்கம்", "நன்றி நீங்கள்", "இனிய இரவு"]


def test_words_get_ids_after_the_specials_and_decode_back_exactly():
    vocab = WordVocabulary.learn(TAMIL)
    assert vocab.vocab_size == 4 + 6 and vocab.encode(["காலை வணக்கம்"]) == [[4, 5]]
    assert vocab.decode(vocab.encode(TAMIL)) == TAMIL
    assert vocab.encode(["காலை hello"]) == [[4, UNK_ID]]
    # decoding stops at END and skips PAD, START and UNK, as Subwords does
    assert vocab.decode([[START_ID, 4, UNK_ID, 5, END_ID, 6], [PAD_ID]]) == ["காலை வணக்கம்", ""]
    assert vocab.pieces([START_ID, 4]) == ["[START]", "காலை"]


def test_shared_and_separate_vocabularies(tmp_path):
    source, target = learn_word_vocabularies(ENGLISH, TAMIL, shared=False)
    assert source is not target and source.encode(["good night"]) == [[4, 8]]
    assert target.encode(["good"]) == [[UNK_ID]]
    both, same = learn_word_vocabularies(ENGLISH, TAMIL, shared=True)
    assert both is same and both.decode(both.encode(ENGLISH + TAMIL)) == ENGLISH + TAMIL
    both.save(tmp_path / "words.txt")
    assert WordVocabulary.load(tmp_path / "words.txt").tokens == both.tokens


def test_missing_or_foreign_files_and_empty_text_are_errors(tmp_path):
    with pytest.raises(KformerError, match="missing"):
        WordVocabulary.load(tmp_path / "none.txt")
    (tmp_path / "bad.txt").write_text("hello\nworld\n", encoding="utf-8")
    with pytest.raises(KformerError, match="corrupt"):
        WordVocabulary.load(tmp_path / "bad.txt")
    with pytest.raises(KformerError, match="no text"):
        WordVocabulary.learn(["", "  "])
