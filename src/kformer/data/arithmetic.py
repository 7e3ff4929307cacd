"""Addition/subtraction problems, generated on the fly, with a held-out set training never sees.

A problem is ``(a, op, b)`` with ``0 <= a, b < 10**digits`` and ``op`` in ``"+-"``; it is shown as
``1234+4567`` with the answer ``=5801`` (``=-1985`` when negative).

What the model reads and writes is set by :class:`ArithmeticFormat`:

- ``pad_operands``: operands zero-padded to ``digits`` (``0012+0345``) so every digit sits at a
  fixed position.
- ``source_style``: ``"chars"`` (``0012+0345``), ``"interleaved"`` (the operator, then the two
  digits of each place side by side, ones first: ``1234+45`` -> ``+ 4 5 3 4 2 0 1 0``) or
  ``"columns"`` (the operator, then one token per place holding both digits, ones first, like
  the columns of written addition: ``+ 4|5 3|4 2|0 1|0``).
- ``reverse_answer``: the model writes the answer's ``digits + 1`` digits least-significant first,
  the order in which carries and borrows are worked out by hand, then its sign. A negative answer
  is written in ten's complement, as hand subtraction leaves it when the last borrow is
  outstanding: ``5801`` -> ``10850+`` and ``-1985`` -> ``10000 - 1985 = 98015`` -> ``51089-``.
  So every digit depends only on the two operand digits of its place and the carry/borrow from
  the place before, and the sign is simply the final borrow. Answers are turned back to
  ``=5801`` / ``=-1985`` for people.

Held-out split: a hash of ``(a, op, b)`` puts a fixed slice of all problems aside; training never
samples them and :func:`held_out_problems` samples only them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from kformer.errors import KformerError
from kformer.text.chars import CharVocabulary
from kformer.text.specials import END_ID, START_ID

OPERATORS = "+-"
CHARACTERS = "0123456789+-"
SOURCE_STYLES = ("chars", "interleaved", "columns")
# One token per place ("column" of written addition): the two digits, e.g. "4|7".
COLUMN_TOKENS = tuple(f"{x}|{y}" for x in range(10) for y in range(10))
_OP_CODES = {"+": 1, "-": 2}


@dataclass(frozen=True)
class ArithmeticFormat:
    """How problems become token ids (see the module docstring)."""

    digits: int = 4
    ops: str = "+-"
    pad_operands: bool = True
    reverse_answer: bool = True
    source_style: str = "chars"
    # Operands of *training* problems have at most this many digits (0: ``digits``), still written
    # at the full width; held-out problems use all ``digits``: a measure of length generalisation.
    train_digits: int = 0

    def __post_init__(self):
        if not 1 <= int(self.digits) <= 12:
            raise KformerError(f"--digits must be between 1 and 12, not {self.digits}")
        if not 0 <= int(self.train_digits) <= int(self.digits):
            raise KformerError(f"train_digits must be between 0 (= digits) and digits ({self.digits}), "
                               f"not {self.train_digits}")
        if self.source_style not in SOURCE_STYLES:
            raise KformerError(f"source_style must be one of {', '.join(SOURCE_STYLES)}, not {self.source_style!r}")
        if self.source_style != "chars" and not self.pad_operands:
            raise KformerError(f"source_style '{self.source_style}' needs pad_operands = true")
        if not self.ops or any(op not in OPERATORS for op in self.ops) or len(set(self.ops)) != len(self.ops):
            raise KformerError(f"--ops must be made of distinct '+' and '-' characters, not {self.ops!r}")

    @property
    def vocabulary(self) -> CharVocabulary:
        return CharVocabulary(CHARACTERS, COLUMN_TOKENS if self.source_style == "columns" else ())

    @property
    def source_length(self) -> int:
        return self.digits + 1 if self.source_style == "columns" else 2 * self.digits + 1

    @property
    def answer_length(self) -> int:
        """Most tokens of an answer (without END)."""
        return self.digits + 2  # (digits + 1) digits and a sign, or "-" and digits + 1 digits

    @property
    def target_length(self) -> int:
        """Length of ``target_in`` / ``target_out``: the answer plus START or END."""
        return self.answer_length + 1

    @property
    def holdout_modulus(self) -> int:
        """One problem in this many is held out (a larger share when there are few problems)."""
        return 256 if len(self.ops) * 10 ** (2 * self.digits) >= 10**6 else 8

    def to_json(self) -> dict:
        return asdict(self)

    # --- text forms -------------------------------------------------------------------------

    def problem_text(self, a: int, op: str, b: int) -> str:
        """What people read: ``1234+45``."""
        return f"{a}{op}{b}"

    def source_tokens(self, a: int, op: str, b: int) -> list[str]:
        """What the encoder reads, token by token (see ``source_style``)."""
        if self.source_style == "chars":
            return list(f"{a:0{self.digits}d}{op}{b:0{self.digits}d}" if self.pad_operands else f"{a}{op}{b}")
        places = zip(f"{a:0{self.digits}d}"[::-1], f"{b:0{self.digits}d}"[::-1], strict=True)
        if self.source_style == "interleaved":
            return [op, *(digit for place in places for digit in place)]
        return [op, *(f"{x}|{y}" for x, y in places)]

    def answer_text(self, value: int) -> str:
        """What the decoder writes for ``value``: ``10850+`` / ``51089-`` (reversed) or ``5801``."""
        if self.reverse_answer:
            modulus = 10 ** (self.digits + 1)
            return f"{value % modulus:0{self.digits + 1}d}"[::-1] + ("-" if value < 0 else "+")
        return str(value)

    def parse_answer(self, text: str) -> int | None:
        """Inverse of :meth:`answer_text`; None for text that is not a well-formed answer."""
        if self.reverse_answer:
            body, sign = text[:-1], text[-1:]
            if len(body) != self.digits + 1 or not _is_digits(body) or sign not in ("+", "-"):
                return None
            value = int(body[::-1])
            return value - 10 ** (self.digits + 1) if sign == "-" else value
        body = text[1:] if text.startswith("-") else text
        if not _is_digits(body):
            return None
        return int(text)

    # --- arrays -----------------------------------------------------------------------------

    def encode(self, a, ops, b) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Problems -> ``(source (n, S), target_in (n, T), target_out (n, T))`` int32, 0-padded.

        ``target_in = [START] + answer``, ``target_out = answer + [END]``.
        """
        vocab = self.vocabulary
        n = len(a)
        source = np.zeros((n, self.source_length), dtype="int32")
        target_in = np.zeros((n, self.target_length), dtype="int32")
        target_out = np.zeros((n, self.target_length), dtype="int32")
        for row, (x, op, y) in enumerate(zip(np.asarray(a).tolist(), ops, np.asarray(b).tolist(), strict=True)):
            src = vocab.encode_tokens(self.source_tokens(x, op, y))
            source[row, : len(src)] = src
            answer = vocab.encode(self.answer_text(solve(x, op, y)))
            target_in[row, 0] = START_ID
            target_in[row, 1 : len(answer) + 1] = answer
            target_out[row, : len(answer)] = answer
            target_out[row, len(answer)] = END_ID
        return source, target_in, target_out

    def encode_sources(self, problems: list[tuple[int, str, int]]) -> np.ndarray:
        """Problems -> source ids ``(n, S)``."""
        source, _, _ = self.encode([p[0] for p in problems], [p[1] for p in problems], [p[2] for p in problems])
        return source

    def decode_answer(self, ids) -> int | None:
        """Generated ids of one row -> the answer's value (None if malformed)."""
        return self.parse_answer(self.vocabulary.decode(ids))

    # --- sampling ---------------------------------------------------------------------------

    def is_held_out(self, a, ops, b) -> np.ndarray:
        """Bool per problem: does it belong to the held-out slice?"""
        codes = np.where(np.asarray(ops) == "+", _OP_CODES["+"], _OP_CODES["-"]).astype(np.uint64)
        h = _mix(np.asarray(a, dtype=np.uint64) + np.uint64(0x51ED27))
        h = _mix(h ^ np.asarray(b, dtype=np.uint64))
        h = _mix(h ^ codes)
        return (h % np.uint64(self.holdout_modulus)) == 0

    def _draw(self, rng: np.random.Generator, n: int, digits: int | None = None):
        high = 10 ** (digits or self.digits)
        a = rng.integers(0, high, size=n, dtype=np.int64)
        b = rng.integers(0, high, size=n, dtype=np.int64)
        ops = np.array(list(self.ops))[rng.integers(0, len(self.ops), size=n)]
        return a, ops, b

    def sample_training(self, rng: np.random.Generator, n: int):
        """``n`` random problems ``(a, ops, b)`` outside the held-out slice (operands of at most
        ``train_digits`` digits when that is set)."""
        a, ops, b = self._draw(rng, n, self.train_digits)
        while True:
            bad = np.nonzero(self.is_held_out(a, ops, b))[0]
            if not len(bad):
                return a, ops, b
            a2, ops2, b2 = self._draw(rng, len(bad), self.train_digits)
            a[bad], ops[bad], b[bad] = a2, ops2, b2

    def held_out_problems(self, n: int, seed: int = 2026) -> list[tuple[int, str, int]]:
        """``n`` distinct problems from the held-out slice (all of it, shuffled, if it is smaller)."""
        rng = np.random.default_rng(seed)
        high = 10**self.digits
        if len(self.ops) * high * high <= 4_000_000:  # small space: list the whole slice
            a, b = (grid.ravel() for grid in np.meshgrid(np.arange(high), np.arange(high), indexing="ij"))
            a, b = np.tile(a, len(self.ops)), np.tile(b, len(self.ops))
            ops = np.repeat(np.array(list(self.ops)), high * high)
            keep = rng.permutation(np.nonzero(self.is_held_out(a, ops, b))[0])[:n]
            return [(int(a[i]), str(ops[i]), int(b[i])) for i in keep]
        chosen: dict[tuple[int, str, int], None] = {}
        while len(chosen) < n:
            a, ops, b = self._draw(rng, 1_000_000)
            for i in np.nonzero(self.is_held_out(a, ops, b))[0].tolist():
                chosen.setdefault((int(a[i]), str(ops[i]), int(b[i])), None)
                if len(chosen) >= n:
                    break
        return list(chosen)


def solve(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b


def parse_problem(text: str) -> tuple[int, str, int]:
    """``"1234+4567"`` (spaces allowed) -> ``(1234, "+", 4567)``; KformerError if it is not one."""
    compact = text.replace(" ", "")
    for position in range(1, len(compact)):
        if compact[position] in OPERATORS:
            left, right = compact[:position], compact[position + 1 :]
            if _is_digits(left) and _is_digits(right):
                return int(left), compact[position], int(right)
    raise KformerError(f"'{text}' is not a problem like 1234+4567 or 1234-4567 (non-negative whole numbers)")


def parse_problem_line(line: str) -> tuple[tuple[int, str, int], int]:
    """``"1234+4567=5801"`` or ``"1234+4567<TAB>5801"`` -> ``((1234, "+", 4567), 5801)``."""
    if "\t" in line:
        problem, answer = line.split("\t", 1)
    elif "=" in line:
        problem, answer = line.split("=", 1)
    else:
        raise KformerError("expected 'PROBLEM=ANSWER' or 'PROBLEM<TAB>ANSWER'")
    answer = answer.strip().lstrip("=")
    if not _is_digits(answer[1:] if answer.startswith(("+", "-")) else answer):
        raise KformerError(f"answer '{answer}' is not a whole number (digits 0-9, optionally signed)")
    return parse_problem(problem), int(answer)


def _is_digits(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also accepts '²' and '١', which are not what was meant."""
    return text.isascii() and text.isdigit()


def score_answers(predicted: list[int | None], expected: list[int]) -> dict:
    """Exact match (whole answer right) and per-character accuracy of answers as people write them.

    Character accuracy compares ``str(answer)`` position by position from the left; a row counts
    ``max(len(predicted), len(expected))`` characters, so missing or extra characters are errors.
    """
    if not expected:
        raise KformerError("no problems to score")
    exact = hits = total = 0
    for guess, truth in zip(predicted, expected, strict=True):
        exact += guess == truth
        want, got = str(truth), "" if guess is None else str(guess)
        hits += sum(x == y for x, y in zip(want, got, strict=False))
        total += max(len(want), len(got))
    return {"exact_match": exact / len(expected), "char_accuracy": hits / total, "n": len(expected)}


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser: a well-spread 64-bit hash of each element (wrapping arithmetic)."""
    x = np.asarray(x, dtype=np.uint64).copy()
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(0xFFFFFFFFFFFFFFFF)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return x
