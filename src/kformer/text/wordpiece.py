"""A pretrained BERT's WordPiece vocabulary as a translator's source vocabulary.

:class:`WordPieceVocabulary` wraps a ``keras_hub.models.BertTokenizer`` behind the interface the
translator uses for its vocabularies (``encode``, ``pieces``, ``vocab_size``, ``save``/``load``):
a source sentence becomes ``[CLS] pieces [SEP]`` ids of the pretrained model's own vocabulary,
lowercased and without accents when the model was (all-MiniLM-L6-v2 is: an uncased BERT; see
:func:`kformer.models.pretrained.hf_text_rules`). The file it saves is the plain vocabulary, one
piece a line (``vocab.txt``'s format), so a model folder needs no pip package to read it; the
folder's manifest records ``lowercase`` and ``strip_accents`` beside it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from kformer.errors import KformerError

ENCODE_CHUNK = 1024  # sentences per tokenizer call
MAX_BYTES_PER_WORD = 100  # KerasHub's: a longer word is its oov_token
WORDPIECE_STEP = ("KerasHub WordPiece: with strip_accents, Unicode NFD and drop the marks (Mn); split at ' \\t\\n\\r\\f' "
                  "and control/format characters (Cc, Cf: dropped) and at punctuation (ASCII non-alphanumerics and P*) "
                  "and, with split_on_cjk, CJK ideographs (kept as tokens); with lowercase, NFKC case folding (NFKC, "
                  "casefold, NFKC, drop default-ignorable code points); each word greedy longest-match-first over the "
                  "vocabulary file, later pieces prefixed suffix_indicator; a word over max_bytes_per_word UTF-8 bytes "
                  "or without a match is oov_token")


def export_rules(tokenizer) -> dict:
    """How a client reproduces a KerasHub WordPiece ``tokenizer`` (an export's metadata; the
    reference clients' ``docs/onnx_wordpiece.py`` follows it): its settings, with
    :data:`WORDPIECE_STEP` saying what they do."""
    return {"lowercase": bool(tokenizer.lowercase), "strip_accents": bool(tokenizer.strip_accents),
            "split_on_cjk": bool(tokenizer.split_on_cjk), "suffix_indicator": tokenizer.suffix_indicator,
            "oov_token": tokenizer.oov_token, "max_bytes_per_word": MAX_BYTES_PER_WORD}


class WordPieceVocabulary:
    """A BERT tokenizer's vocabulary: ``encode`` gives ``[CLS] ... [SEP]`` ids, padding id 0."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.tokens = list(tokenizer.get_vocabulary())
        self.vocab_size = len(self.tokens)
        self.lowercase = bool(getattr(tokenizer, "lowercase", True))
        self.strip_accents = bool(getattr(tokenizer, "strip_accents", False))
        if tokenizer.pad_token_id != 0:
            raise KformerError(f"the encoder's vocabulary pads with id {tokenizer.pad_token_id}; kformer needs [PAD] "
                               "at id 0 (the first line of vocab.txt)")
        self.cls_id, self.sep_id = int(tokenizer.cls_token_id), int(tokenizer.sep_token_id)

    @classmethod
    def from_tokens(cls, tokens: Sequence[str], lowercase: bool = True,
                    strip_accents: bool | None = None) -> WordPieceVocabulary:
        """The vocabulary ``tokens`` read with these rules; ``strip_accents=None``: as ``lowercase``
        (Hugging Face's rule for an uncased BERT)."""
        import keras_hub

        strip_accents = lowercase if strip_accents is None else strip_accents
        return cls(keras_hub.models.BertTokenizer(vocabulary=list(tokens), lowercase=bool(lowercase),
                                                  strip_accents=bool(strip_accents)))

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """``[CLS] + WordPiece ids + [SEP]`` of each text (lowercased and without accents when the
        tokenizer lowercases and strips accents)."""
        import tensorflow as tf  # KerasHub's tokenizers are TensorFlow Text ops

        texts = list(texts)
        rows: list[list[int]] = []
        for start in range(0, len(texts), ENCODE_CHUNK):
            ids = self.tokenizer(tf.constant(texts[start : start + ENCODE_CHUNK], dtype=tf.string))
            ids = ids.to_list() if hasattr(ids, "to_list") else ids  # eager KerasHub gives lists
            rows.extend([self.cls_id, *map(int, row), self.sep_id] for row in ids)
        return rows

    def decode(self, id_lists: Iterable[Sequence[int]]) -> list[str]:
        """Pieces joined back into words (``##`` continuations glued; special tokens dropped)."""
        texts = []
        for ids in id_lists:
            words: list[str] = []
            for piece in self.pieces([i for i in ids if int(i) not in (0, self.cls_id, self.sep_id)]):
                if piece.startswith("##") and words:
                    words[-1] += piece[2:]
                else:
                    words.append(piece)
            texts.append(" ".join(words))
        return texts

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """The piece of each id (attention-map labels)."""
        return [self.tokens[int(i)] if 0 <= int(i) < self.vocab_size else "[UNK]" for i in ids]

    def save(self, path: str | os.PathLike) -> None:
        Path(path).write_text("\n".join(self.tokens) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike, lowercase: bool = True,
             strip_accents: bool | None = None) -> WordPieceVocabulary:
        """The vocabulary file ``path`` (:meth:`save`) read with these rules (:meth:`from_tokens`)."""
        path = Path(path)
        if not path.is_file():
            raise KformerError(f"vocabulary file {path} is missing; the model folder is incomplete, retrain it")
        tokens = path.read_text(encoding="utf-8").splitlines()
        if len(tokens) < 2 or tokens[0] != "[PAD]":
            raise KformerError(f"vocabulary file {path} is not a WordPiece vocabulary (it must start with [PAD])")
        return cls.from_tokens(tokens, lowercase, strip_accents)
