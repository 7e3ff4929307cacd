"""Word and WordPiece vocabularies for classification, learned from training text only.

A *word* vocabulary (the most frequent words) is used by :class:`kformer.text.words.WordTokenizer`;
a *WordPiece* vocabulary (KerasHub's ``compute_word_piece_vocabulary``) by
``keras_hub.tokenizers.WordPieceTokenizer``. Both split the same way (lowercased, accents
stripped, words and punctuation), and both start with kformer's special tokens (``[PAD]`` = 0,
...) followed by the BERT ones, so either file also serves ``keras_hub.models.BertTokenizer``
(a word vocabulary has no ``##`` pieces, so BERT maps an unknown word to ``[UNK]``). The file is
``vocab.txt``, one token per line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from kformer.errors import KformerError
from kformer.text.specials import PAD_ID, SPECIAL_TOKENS, UNK, UNK_ID

BERT_TOKENS = ("[CLS]", "[SEP]", "[MASK]")
RESERVED_TOKENS = tuple(SPECIAL_TOKENS) + BERT_TOKENS
VOCAB_FILE = "vocab.txt"
# A review of 50,000 words must not cost a full tokenization: beyond this many characters per
# token of the sequence length nothing can survive the truncation anyway.
CHARS_PER_TOKEN_LIMIT = 16

_HTML_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_SPACES = re.compile(r"\s+")


def clean_text(text: str, max_chars: int | None = None) -> str:
    """Turn HTML line breaks into spaces, collapse whitespace, cut to ``max_chars``."""
    text = _SPACES.sub(" ", _HTML_BREAK.sub(" ", text)).strip()
    return text[:max_chars] if max_chars else text


def learn_vocabulary(texts: Sequence[str], size: int, kind: str = "wordpiece") -> list[str]:
    """A vocabulary of at most ``size`` tokens, reserved tokens first.

    ``kind="word"``: the most frequent words. ``kind="wordpiece"``: KerasHub's
    ``compute_word_piece_vocabulary`` (words plus ``##`` continuation pieces).
    """
    texts = [t for t in texts if t]
    if not texts:
        raise KformerError("cannot learn a vocabulary from no text")
    if size <= len(RESERVED_TOKENS) + 1:
        raise KformerError(f"vocabulary size {size} is too small; use at least {len(RESERVED_TOKENS) + 2}")
    if kind == "word":
        from kformer.text.words import count_words

        counts = count_words(texts)
        words = [w for w, _ in counts.most_common(size - len(RESERVED_TOKENS)) if w not in RESERVED_TOKENS]
        return list(RESERVED_TOKENS) + words
    if kind != "wordpiece":
        raise KformerError(f"unknown tokenizer kind '{kind}'; use 'word' or 'wordpiece'")
    import keras_hub
    import tensorflow as tf

    data = tf.data.Dataset.from_tensor_slices(list(texts)).batch(1024)
    vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(
        data, vocabulary_size=size, lowercase=True, strip_accents=True, reserved_tokens=list(RESERVED_TOKENS)
    )
    return list(vocabulary)


def save_vocabulary(vocabulary: Sequence[str], path: str | os.PathLike) -> None:
    Path(path).write_text("\n".join(vocabulary) + "\n", encoding="utf-8")


def load_vocabulary(path: str | os.PathLike) -> list[str]:
    path = Path(path)
    if not path.is_file():
        raise KformerError(f"vocabulary file {path} is missing; the model folder is incomplete")
    vocabulary = path.read_text(encoding="utf-8").splitlines()
    if len(vocabulary) < 2 or vocabulary[0] != SPECIAL_TOKENS[0]:
        raise KformerError(f"{path} is not a kformer vocabulary (it must start with {SPECIAL_TOKENS[0]})")
    return vocabulary


def make_tokenizer(vocabulary: Sequence[str], max_length: int, kind: str = "word", truncation: str = "head"):
    """A tokenizer giving ``(batch, max_length)`` int ids, padded with 0, truncated.

    ``kind="word"``: :class:`~kformer.text.words.WordTokenizer` (fast, any ``truncation``);
    ``kind="wordpiece"``: KerasHub's ``WordPieceTokenizer`` (keeps the head).
    """
    if kind == "word":
        from kformer.text.words import WordTokenizer

        return WordTokenizer(vocabulary, max_length, truncation)
    import keras_hub

    return keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=list(vocabulary),
        sequence_length=int(max_length),
        lowercase=True,
        strip_accents=True,
        oov_token=UNK,
        dtype="int32",
    )


def encode(tokenizer, texts: Sequence[str], batch_size: int = 2048, progress: bool = False):
    """Token ids ``(len(texts), sequence_length)`` as a NumPy int32 array."""
    import numpy as np

    from kformer.text.words import WordTokenizer

    if isinstance(tokenizer, WordTokenizer):  # it cleans and cuts long texts itself
        cleaned = list(texts)
    else:
        limit = tokenizer.sequence_length * CHARS_PER_TOKEN_LIMIT
        cleaned = [clean_text(t, limit) for t in texts]
    batches = range(0, len(cleaned), batch_size)
    if progress:
        from tqdm import tqdm

        batches = tqdm(batches, desc="tokenizing", unit="batch", leave=False)
    parts = [np.asarray(tokenizer(cleaned[i:i + batch_size]), dtype="int32") for i in batches]
    if not parts:
        return np.zeros((0, tokenizer.sequence_length), dtype="int32")
    ids = np.concatenate(parts)
    ids[(ids == PAD_ID).all(axis=1), 0] = UNK_ID  # an empty text is one unknown token, not nothing to average
    return ids
