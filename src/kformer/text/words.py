"""A fast word-level tokenizer for kformer's encoder classifier (pure Python + NumPy).

Texts are lowercased, accents stripped, HTML line breaks removed and split into words and
punctuation marks; each token maps to its id in a vocabulary that starts with kformer's special
tokens, unknown words to ``[UNK]``. Long texts are cut to ``max_length`` tokens, keeping the
head, the tail, or both (``head_tail``: the first quarter and the last three quarters of the
budget, because reviews and tickets often say what matters at the end).

A vocabulary may also hold word bigrams (``"not good"``, two words and a space; see
:func:`bigram_vocabulary`): the tokenizer then keeps half of ``max_length`` for words and appends
the ids of the known bigrams among the kept words (fastText-style n-gram features; unknown
bigrams are left out rather than written as ``[UNK]``).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

import numpy as np

from kformer.errors import KformerError
from kformer.text.specials import PAD_ID, UNK_ID

TRUNCATIONS = ("head", "tail", "head_tail")
_HTML_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_TOKEN = re.compile(r"\w+|[^\w\s]")


def split_words(text: str) -> list[str]:
    """Lowercased words and punctuation marks, accents stripped, ``<br />`` dropped."""
    text = _HTML_BREAK.sub(" ", text.lower())
    if not text.isascii():
        text = "".join(ch for ch in unicodedata.normalize("NFD", text) if unicodedata.category(ch) != "Mn")
    return _TOKEN.findall(text)


def bigrams(words: Sequence[str]) -> list[str]:
    """``["a", "b", "c"]`` -> ``["a b", "b c"]``."""
    return [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]


def count_words(texts: Sequence[str], with_bigrams: bool = False) -> Counter:
    counts: Counter = Counter()
    for text in texts:
        words = split_words(text)
        counts.update(words)
        if with_bigrams:
            counts.update(bigrams(words))
    return counts


def bigram_vocabulary(texts: Sequence[str], size: int, reserved: Sequence[str]) -> list[str]:
    """``reserved`` tokens, then the most frequent words and word bigrams, ``size`` in all."""
    counts = count_words(texts, with_bigrams=True)
    return list(reserved) + [t for t, _ in counts.most_common(size - len(reserved)) if t not in reserved]


class WordTokenizer:
    """Texts -> ``(batch, max_length)`` int32 ids, 0-padded, truncated by ``truncation``."""

    def __init__(self, vocabulary: Sequence[str], max_length: int, truncation: str = "head"):
        if truncation not in TRUNCATIONS:
            raise KformerError(f"unknown truncation '{truncation}'; use one of {', '.join(TRUNCATIONS)}")
        self.vocabulary = list(vocabulary)
        self.index = {token: i for i, token in enumerate(self.vocabulary)}
        self.sequence_length = int(max_length)
        self.truncation = truncation
        self.with_bigrams = any(" " in token for token in self.vocabulary)
        self.words_length = max(1, self.sequence_length // 2) if self.with_bigrams else self.sequence_length

    def get_vocabulary(self) -> list[str]:
        return self.vocabulary

    def _cut(self, tokens: list[str]) -> list[str]:
        n = self.words_length
        if len(tokens) <= n:
            return tokens
        if self.truncation == "head":
            return tokens[:n]
        if self.truncation == "tail":
            return tokens[-n:]
        head = n // 4
        return tokens[:head] + tokens[len(tokens) - (n - head):]

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        ids = np.full((len(texts), self.sequence_length), PAD_ID, dtype="int32")
        get = self.index.get
        # A text of 50,000 words is cut to a generous character prefix/suffix before splitting.
        limit = self.sequence_length * 16
        for row, text in enumerate(texts):
            if len(text) > 2 * limit:
                text = text[:limit] + " " + text[-limit:] if self.truncation != "head" else text[:limit]
            tokens = self._cut(split_words(text))
            row_ids = [get(token, UNK_ID) for token in tokens]
            if self.with_bigrams:
                row_ids += [i for i in map(get, bigrams(tokens)) if i is not None][: self.sequence_length - len(row_ids)]
            ids[row, : len(row_ids)] = row_ids
        return ids
