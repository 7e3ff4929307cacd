"""Character vocabularies: one token per character, the special tokens first."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kformer.errors import KformerError
from kformer.text.specials import END_ID, PAD_ID, SPECIAL_TOKENS, START_ID, UNK_ID


class CharVocabulary:
    """Maps characters to ids: ``[PAD], [UNK], [START], [END]`` get 0..3, then ``characters``,
    then any ``extra_tokens`` (multi-character tokens, used through :meth:`encode_tokens`).

    Args:
        characters: the characters of the vocabulary, each once, in id order.
        extra_tokens: further tokens after the characters.
    """

    def __init__(self, characters: str | Sequence[str], extra_tokens: Sequence[str] = ()):
        characters = list(characters)
        if any(len(c) != 1 for c in characters):
            raise KformerError("a character vocabulary needs single characters (use extra_tokens for longer ones)")
        self.tokens: list[str] = [*SPECIAL_TOKENS, *characters, *extra_tokens]
        if len(set(self.tokens)) != len(self.tokens):
            raise KformerError("vocabulary tokens must be distinct")
        self._ids = {c: i for i, c in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, text: str, start: bool = False, end: bool = False) -> list[int]:
        """Text -> ids, one per character (unknown -> ``[UNK]``), optionally wrapped in START/END."""
        return self.encode_tokens(list(text), start=start, end=end)

    def encode_tokens(self, tokens: Sequence[str], start: bool = False, end: bool = False) -> list[int]:
        """Tokens -> ids (unknown -> ``[UNK]``), optionally wrapped in START/END."""
        ids = [self._ids.get(t, UNK_ID) for t in tokens]
        return ([START_ID] if start else []) + ids + ([END_ID] if end else [])

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> text, stopping at END and skipping PAD/START (UNK shows as ``?``)."""
        return "".join(self.decode_tokens(ids))

    def decode_tokens(self, ids: Iterable[int]) -> list[str]:
        """Ids -> tokens, stopping at END and skipping PAD/START (UNK, or an id past the
        vocabulary, shows as ``?``)."""
        out = []
        for token in ids:
            token = int(token)
            if token == END_ID:
                break
            if token in (PAD_ID, START_ID):
                continue
            out.append("?" if token == UNK_ID or token >= len(self.tokens) else self.tokens[token])
        return out

    def to_json(self) -> list[str]:
        """The token list, specials included (what a model folder stores)."""
        return list(self.tokens)

    @classmethod
    def from_json(cls, tokens: Sequence[str]) -> CharVocabulary:
        if list(tokens[: len(SPECIAL_TOKENS)]) != list(SPECIAL_TOKENS):
            raise KformerError("vocabulary does not start with the special tokens; the model folder is damaged")
        rest = list(tokens[len(SPECIAL_TOKENS):])
        split = next((i for i, t in enumerate(rest) if len(t) != 1), len(rest))
        return cls(rest[:split], rest[split:])
