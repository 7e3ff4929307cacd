"""Python's Unicode ``\\w`` and ``\\s`` as RE2 character-class bodies (what TensorFlow's string ops
and ONNX Runtime's ``Tokenizer`` speak), so graph tokenizers split text as Python's ``re`` does.

RE2's own ``\\w`` and ``\\s`` are ASCII only. Python's ``\\w`` is exactly the Unicode letters and
numbers and ``_`` (``[\\p{L}\\p{N}_]``; checked over every code point against Python's tables),
its ``\\s`` (``str.isspace``) the 29 code points spelled out below.
"""

from __future__ import annotations

WORD_CHARS = r"\p{L}\p{N}_"
SPACE_CHARS = (r"\t\n\x{0B}\f\r\x{1C}-\x{1F} \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}"
               r"\x{205F}\x{3000}")
