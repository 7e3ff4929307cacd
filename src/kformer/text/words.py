"""A fast word-level tokenizer for kformer's encoder classifier (pure Python + NumPy).

Texts are lowercased, accents stripped, HTML line breaks removed and split into words and
punctuation marks; each token maps to its id in a vocabulary that starts with kformer's special
tokens, unknown words to ``[UNK]``. Long texts are cut to ``max_length`` tokens, keeping the
head, the tail, or both (``head_tail``: the first quarter and the last three quarters of the
budget, because reviews and tickets often say what matters at the end).
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


def count_words(texts: Sequence[str]) -> Counter:
    counts: Counter = Counter()
    for text in texts:
        counts.update(split_words(text))
    return counts


class WordTokenizer:
    """Texts -> ``(batch, max_length)`` int32 ids, 0-padded, truncated by ``truncation``."""

    def __init__(self, vocabulary: Sequence[str], max_length: int, truncation: str = "head"):
        if truncation not in TRUNCATIONS:
            raise KformerError(f"unknown truncation '{truncation}'; use one of {', '.join(TRUNCATIONS)}")
        self.vocabulary = list(vocabulary)
        self.index = {token: i for i, token in enumerate(self.vocabulary)}
        self.sequence_length = int(max_length)
        self.truncation = truncation

    def get_vocabulary(self) -> list[str]:
        return self.vocabulary

    def _cut(self, tokens: list[str]) -> list[str]:
        n = self.sequence_length
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
            ids[row, : len(tokens)] = [get(token, UNK_ID) for token in tokens]
        return ids
