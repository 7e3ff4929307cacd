"""kformer's word tokenizer as TensorFlow ops, so an exported SavedModel can take raw strings.

:class:`GraphWordTokenizer` gives the ids :class:`kformer.text.words.WordTokenizer` gives (same
lowercasing, ``<br />`` removal, accent stripping, split into words and punctuation marks,
head/tail/head_tail truncation, unknown words as ``[UNK]``, an empty text as one ``[UNK]``, the
known word pairs of a bigram vocabulary after the words), as a graph a SavedModel carries:
core TensorFlow string ops and lookup tables only, so plain TensorFlow (and any TensorFlow Serving
build) loads it without TensorFlow Text. Accents are stripped by a table of every character whose
NFD decomposition without nonspacing marks differs from it (:func:`accent_table`).

Python's ``\\w`` and ``\\s`` are Unicode-aware; RE2's are ASCII only, so both are spelled out.
Lowercasing follows ICU, which differs from Python's ``str.lower`` for a handful of characters
(e.g. the dotted capital I).
"""

from __future__ import annotations

import functools
import itertools
import unicodedata
from collections.abc import Sequence

import tensorflow as tf

from kformer.errors import Unsupported
from kformer.text.char_classes import SPACE_CHARS, WORD_CHARS
from kformer.text.specials import PAD_ID, UNK_ID
from kformer.text.words import TRUNCATIONS

# Python's Unicode \w (letters, numbers, underscore) and \s, in RE2 syntax
_WORD = f"[{WORD_CHARS}]+"
_SPACE = f"[{SPACE_CHARS}]"
_MARK = f"[^{WORD_CHARS}{SPACE_CHARS}]"
_CHARS_PER_TOKEN = 16  # as WordTokenizer: very long texts are cut to characters before splitting


@functools.cache
def accent_table() -> tuple[list[str], list[str]]:
    """``(characters, what each becomes)``: every code point whose NFD decomposition, nonspacing
    marks (Mn) dropped, differs from it (accented letters, Hangul syllables, the marks themselves)."""
    changed, stripped = [], []
    # planes 3-13 and 15-16 hold no decomposable character and no mark: only these ranges are read
    for code in itertools.chain(range(0x30000), range(0xE0000, 0xE1000)):
        if 0xD800 <= code <= 0xDFFF:  # surrogates are not characters of valid UTF-8
            continue
        char = chr(code)
        if unicodedata.category(char) != "Mn" and unicodedata.normalize("NFD", char) == char:
            continue
        changed.append(char)
        stripped.append("".join(c for c in unicodedata.normalize("NFD", char) if unicodedata.category(c) != "Mn"))
    return changed, stripped


class GraphWordTokenizer(tf.Module):
    """Strings ``(batch,)`` -> ids ``(batch, max_length)`` int32, 0-padded (a ``tf.Module``; track
    it in the export so its lookup table is saved)."""

    def __init__(self, vocabulary: Sequence[str], max_length: int, truncation: str = "head"):
        super().__init__(name="word_tokenizer")
        if truncation not in TRUNCATIONS:
            raise Unsupported(f"unknown truncation '{truncation}'", field="truncation")
        self.max_length = int(max_length)
        # a vocabulary with word pairs ("a b"): half the ids for words, then the known pairs
        self.with_bigrams = any(" " in token for token in vocabulary)
        self.words_length = max(1, self.max_length // 2) if self.with_bigrams else self.max_length
        self.truncation = truncation
        keys = tf.constant(list(vocabulary))
        values = tf.range(len(vocabulary), dtype=tf.int64)
        self.table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, values), UNK_ID)
        changed, stripped = accent_table()
        self.stripped = tf.constant(stripped)
        self.accents = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(changed), tf.range(len(changed), dtype=tf.int64)), -1)

    def _cut_characters(self, texts):
        """A text longer than twice the character budget keeps its head (and tail) characters."""
        limit = self.max_length * _CHARS_PER_TOKEN
        length = tf.strings.length(texts, unit="UTF8_CHAR")
        head = tf.strings.substr(texts, 0, limit, unit="UTF8_CHAR")
        if self.truncation == "head":
            cut = head
        else:
            start = tf.maximum(length - limit, 0)
            tail = tf.strings.substr(texts, start, tf.fill(tf.shape(start), limit), unit="UTF8_CHAR")
            cut = tf.strings.join([head, tail], separator=" ")
        return tf.where(length > 2 * limit, cut, texts)

    def words(self, texts):
        """Strings ``(batch,)`` -> a ragged ``(batch, None)`` of words and punctuation marks."""
        text = tf.strings.lower(self._cut_characters(texts), encoding="utf-8")
        text = self._strip_accents(tf.strings.regex_replace(text, r"<br\s*/?>", " "))
        # every mark becomes a word of its own between spaces; then the words are what spaces separate
        text = tf.strings.regex_replace(tf.strings.regex_replace(text, f"{_SPACE}+", " "), f"({_MARK})", r" \1 ")
        return tf.strings.split(text)

    def _strip_accents(self, texts):
        """Each character replaced by its NFD decomposition without nonspacing marks (Python's
        ``unicodedata``, as :class:`~kformer.text.words.WordTokenizer`)."""
        chars = tf.strings.unicode_split(texts, "UTF-8")
        found = tf.ragged.map_flat_values(self.accents.lookup, chars)
        replaced = tf.ragged.map_flat_values(
            lambda index, char: tf.where(index >= 0, tf.gather(self.stripped, tf.maximum(index, 0)), char), found, chars)
        return tf.strings.reduce_join(replaced, axis=-1)

    def _truncate(self, words):
        """Keep ``words_length`` words per row: the head, the tail, or a quarter head and the rest tail."""
        n = self.words_length
        head = {"head": n, "tail": 0, "head_tail": n // 4}[self.truncation]
        lengths = words.row_lengths()
        positions = tf.ragged.range(lengths)
        total = tf.expand_dims(lengths, 1)
        keep = (positions < head) | (positions >= total - (n - head)) | (total <= n)
        return tf.ragged.boolean_mask(words, keep)

    def __call__(self, texts):
        words = self._truncate(self.words(tf.reshape(texts, [-1])))
        ids = tf.ragged.map_flat_values(self.table.lookup, words)
        if self.with_bigrams:  # the ids of the known pairs of consecutive kept words, after the words
            pairs = tf.ragged.map_flat_values(self.table.lookup, tf.strings.ngrams(words, 2, separator=" "))
            ids = tf.concat([ids, tf.ragged.boolean_mask(pairs, pairs != UNK_ID)], axis=1)
        ids = tf.cast(ids.to_tensor(default_value=PAD_ID, shape=[None, self.max_length]), tf.int32)
        empty = tf.reduce_all(tf.equal(ids, PAD_ID), axis=1)
        first = tf.where(empty, tf.constant(UNK_ID, tf.int32), ids[:, 0])
        return tf.concat([first[:, None], ids[:, 1:]], axis=1)
