"""Subword vocabularies for translation: SentencePiece models learned from training text only.

Training uses the ``sentencepiece`` trainer directly rather than
``keras_hub.tokenizers.compute_sentence_piece_proto``, because that helper fixes the
normaliser to NFKC and names the special pieces ``<pad>``/``<s>``; here the special pieces
are kformer's (``[PAD] [UNK] [START] [END]`` at ids 0..3), the normaliser is the identity
(text is NFC-normalised beforehand by :func:`kformer.data.pairs.normalize_text`) and
unknown characters fall back to UTF-8 bytes, so any text -- Tamil combining marks
included -- decodes back exactly. Tokenizing and detokenizing go through
``keras_hub.tokenizers.SentencePieceTokenizer``.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from kformer.errors import KformerError
from kformer.text.specials import END, END_ID, PAD, SPECIAL_TOKENS, START, START_ID, UNK

# Room for the 256 byte pieces and the specials on top of the characters a corpus uses.
MIN_VOCAB_SIZE = 300


def train_sentencepiece(texts: Iterable[str], vocab_size: int, symbols: Sequence[str] = ()) -> bytes:
    """Learn a unigram SentencePiece model from ``texts``; returns the serialized model proto.

    ``vocab_size`` is an upper bound: a small corpus gets the vocabulary it can support. It is
    raised where needed to hold every character of the corpus besides the byte and special pieces.
    ``symbols`` (such as corpus tags, ``<news>``) are pieces of their own, never split.
    """
    import sentencepiece as spm

    texts = [t for t in texts if t]
    if not texts:
        raise KformerError("cannot learn a subword vocabulary from no text")
    # character_coverage=1.0 makes every character a piece, on top of the byte pieces and the
    # specials: a smaller vocab_size is a sentencepiece RuntimeError, so lift it to that floor.
    characters: set[str] = {" "}
    for text in texts:
        characters.update(text)
    floor = len(characters) + 256 + len(SPECIAL_TOKENS) + len(symbols)
    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=writer,
        vocab_size=max(int(vocab_size), MIN_VOCAB_SIZE, floor),
        hard_vocab_limit=False,
        model_type="unigram",
        character_coverage=1.0,
        byte_fallback=True,
        split_digits=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=True,
        input_sentence_size=2_000_000,
        shuffle_input_sentence=True,
        pad_id=0, unk_id=1, bos_id=2, eos_id=3,
        pad_piece=PAD, unk_piece=UNK, bos_piece=START, eos_piece=END,
        user_defined_symbols=list(symbols),
        minloglevel=2,
    )
    return writer.getvalue()


class Subwords:
    """A SentencePiece vocabulary: text <-> id lists, specials at ids 0..3."""

    def __init__(self, proto: bytes):
        import keras_hub

        self.proto = proto
        self.tokenizer = keras_hub.tokenizers.SentencePieceTokenizer(proto=proto)
        self.vocab_size = int(self.tokenizer.vocabulary_size())

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Subword ids of each text, without START/END."""
        if not texts:
            return []
        return [[int(i) for i in ids] for ids in _to_lists(self.tokenizer.tokenize(list(texts)))]

    def decode(self, id_lists: Iterable[Sequence[int]]) -> list[str]:
        """Text of each id list; stops at END and skips PAD and START."""
        cleaned = []
        for ids in id_lists:
            ids = [int(i) for i in ids]
            if END_ID in ids:
                ids = ids[: ids.index(END_ID)]
            cleaned.append([i for i in ids if i > START_ID] or [END_ID])
        if not cleaned:
            return []
        import tensorflow as tf  # detokenize wants a ragged batch for lists of unequal length

        texts = self.tokenizer.detokenize(tf.ragged.constant(cleaned, dtype="int32"))
        return [_to_str(t) for t in _to_lists(texts)]

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """The piece string of each id (for attention-map labels)."""
        return [str(self.tokenizer.id_to_token(int(i))) for i in ids]

    def save(self, path: str | os.PathLike) -> None:
        Path(path).write_bytes(self.proto)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Subwords:
        path = Path(path)
        if not path.is_file():
            raise KformerError(f"vocabulary file {path} is missing; the model folder is incomplete, retrain it")
        try:
            return cls(path.read_bytes())
        except Exception as exc:  # sentencepiece raises RuntimeError/various for a bad proto
            raise KformerError(f"vocabulary file {path} is corrupt ({type(exc).__name__}); retrain the model") from None


def learn_vocabularies(
    sources: Sequence[str], targets: Sequence[str], vocab_size: int, shared: bool,
    target_vocab_size: int | None = None, symbols: Sequence[str] = (),
) -> tuple[Subwords, Subwords]:
    """Source and target vocabularies from training text; ``shared`` learns one of ``vocab_size``
    from both sides, else the source's of ``vocab_size`` and the target's of
    ``target_vocab_size`` (default: ``vocab_size``). The source's keeps ``symbols`` whole
    (:func:`train_sentencepiece`).

    A shared vocabulary lets names, numbers and cognates map to the same pieces on both sides,
    which helps small corpora in one script; separate ones give each script all its pieces.
    """
    if shared:
        both = Subwords(train_sentencepiece(list(sources) + list(targets), vocab_size, symbols))
        return both, both
    return (
        Subwords(train_sentencepiece(sources, vocab_size, symbols)),
        Subwords(train_sentencepiece(targets, target_vocab_size or vocab_size)),
    )


def _to_lists(tensor) -> list:
    if hasattr(tensor, "to_list"):
        return tensor.to_list()
    if hasattr(tensor, "numpy"):
        return tensor.numpy().tolist()
    return list(tensor)


def _to_str(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
