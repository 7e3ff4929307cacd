"""KerasHub's WordPiece tokenizer in plain Python (standard library only), for the reference ONNX
clients beside it (``onnx_classify_client.py``, ``onnx_translate_client.py``): ONNX has no
operator for its Unicode normalisation and word splitting, so a client tokenises itself.

The rules are an export's metadata (``export_rules`` in ``kformer/text/wordpiece.py``): with
``strip_accents``, Unicode NFD without the nonspacing marks (Mn); words split at ``' \\t\\n\\r\\f'``
and control/format characters (dropped) and at punctuation and, with ``split_on_cjk``, CJK
ideographs (both kept as words); with ``lowercase``, NFKC case folding (``tf_text.case_fold_utf8``);
then each word greedy longest-match-first over the vocabulary, later pieces prefixed
``suffix_indicator``, a word without a match or over ``max_bytes_per_word`` bytes ``oov_token``.
"""

from __future__ import annotations

import unicodedata

CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
       (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
IGNORABLE = ((0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
             (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
             (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
             (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF))


class WordPieces:
    """``rules`` (a dict with the keys above) over ``ids`` (``{piece: id}``, the vocabulary file's
    line numbers): ``pieces(text)`` -> the text's pieces, ``ids[piece]`` each one's id."""

    def __init__(self, rules: dict, ids: dict[str, int]):
        self.rules, self.ids = rules, ids

    def pieces(self, text: str) -> list[str]:
        return [piece for word in self.words(text) for piece in self.word_pieces(word)]

    def words(self, text: str) -> list[str]:
        rules = self.rules
        if rules["strip_accents"]:
            text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        words, current = [], ""
        for char in text:
            kept = _punctuation(char) or (rules["split_on_cjk"] and _in(char, CJK))
            if kept or char in " \t\n\r\f" or unicodedata.category(char) in ("Cc", "Cf"):
                words += [current] if current else []
                words += [char] if kept else []
                current = ""
            else:
                current += char
        words += [current] if current else []
        return [_case_fold(word) for word in words] if rules["lowercase"] else words

    def word_pieces(self, word: str) -> list[str]:
        rules = self.rules
        if len(word.encode("utf-8")) > rules["max_bytes_per_word"]:
            return [rules["oov_token"]]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = (rules["suffix_indicator"] if start else "") + word[start:end]
                if piece in self.ids:
                    break
                end -= 1
            else:
                return [rules["oov_token"]]
            pieces.append(piece)
            start = end
        return pieces


def _in(char: str, ranges) -> bool:
    return any(lo <= ord(char) <= hi for lo, hi in ranges)


def _punctuation(char: str) -> bool:
    code = ord(char)
    return 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126 or \
        unicodedata.category(char).startswith("P")


def _case_fold(word: str) -> str:
    """NFKC case folding (tf_text.case_fold_utf8), as KerasHub lowercases."""
    word = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", word).casefold())
    return "".join(c for c in word if not _in(c, IGNORABLE))
