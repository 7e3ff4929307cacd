"""Whole-word vocabularies for translating tiny corpora (the Tamil lesson's toy levels).

SentencePiece learns pieces from substrings that recur; in a handful of pairs hardly any do, so
it falls back to single characters (the lesson's five one-word pairs: every Tamil word 5-8
pieces) and the model must spell each word out. A :class:`WordVocabulary` instead gives every
whitespace-separated word of the training text one id, as the lesson's ``prepare_data_simple``
does: case and punctuation kept, so text that was NFC-normalised with single spaces
(:func:`kformer.data.pairs.normalize_text`) decodes back exactly. Words never seen in training
become ``[UNK]``. It has the interface of :class:`kformer.text.subword.Subwords` (``encode``,
``decode``, ``pieces``, ``save``, ``load``, ``vocab_size``). The file is UTF-8, one token per
line, kformer's special tokens first.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from kformer.errors import KformerError
from kformer.text.specials import END_ID, SPECIAL_TOKENS, START_ID, UNK_ID


class WordVocabulary:
    """Maps whitespace-separated words to ids: ``[PAD] [UNK] [START] [END]`` at 0..3, then ``words``."""

    def __init__(self, words: Sequence[str]):
        self.tokens = [*SPECIAL_TOKENS, *words]
        if len(set(self.tokens)) != len(self.tokens) or any(not t or t != t.strip() or " " in t for t in words):
            raise KformerError("a word vocabulary needs distinct words without spaces")
        self._ids = {token: i for i, token in enumerate(self.tokens)}
        self.vocab_size = len(self.tokens)

    @classmethod
    def learn(cls, texts: Iterable[str]) -> WordVocabulary:
        """Every word of ``texts``, in order of first appearance."""
        words = dict.fromkeys(word for text in texts for word in text.split())
        if not words:
            raise KformerError("cannot learn a word vocabulary from no text")
        return cls([w for w in words if w not in SPECIAL_TOKENS])

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Word ids of each text (unknown words -> ``[UNK]``), without START/END."""
        return [[self._ids.get(word, UNK_ID) for word in text.split()] for text in texts]

    def decode(self, id_lists: Iterable[Sequence[int]]) -> list[str]:
        """Text of each id list: stops at END, skips PAD, UNK and START (as ``Subwords``), words joined by spaces."""
        texts = []
        for ids in id_lists:
            ids = [int(i) for i in ids]
            if END_ID in ids:
                ids = ids[: ids.index(END_ID)]
            texts.append(" ".join(self.tokens[i] for i in ids if START_ID < i < self.vocab_size))
        return texts

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """The token of each id (for attention-map labels)."""
        return [self.tokens[int(i)] if 0 <= int(i) < self.vocab_size else SPECIAL_TOKENS[UNK_ID] for i in ids]

    def save(self, path: str | os.PathLike) -> None:
        Path(path).write_text("\n".join(self.tokens) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike) -> WordVocabulary:
        path = Path(path)
        if not path.is_file():
            raise KformerError(f"vocabulary file {path} is missing; the model folder is incomplete, retrain it")
        try:
            tokens = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            tokens = []
        if tuple(tokens[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
            raise KformerError(f"vocabulary file {path} is corrupt (it must start with {SPECIAL_TOKENS}); retrain the model")
        return cls(tokens[len(SPECIAL_TOKENS):])


def learn_word_vocabularies(sources: Sequence[str], targets: Sequence[str], shared: bool
                            ) -> tuple[WordVocabulary, WordVocabulary]:
    """Source and target word vocabularies from training text; ``shared`` learns one from both."""
    if shared:
        both = WordVocabulary.learn([*sources, *targets])
        return both, both
    return WordVocabulary.learn(sources), WordVocabulary.learn(targets)
