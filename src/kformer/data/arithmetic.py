"""Addition/subtraction/multiplication problems, generated on the fly, with a held-out set training never sees.

A problem is ``(a, op, b)`` with ``0 <= a, b < 10**digits`` and ``op`` in ``"+-*"``; it is shown as
``1234+4567`` with the answer ``=5801`` (``=-1985`` when negative, ``12*34`` -> ``=408``). Numbers may have up to
:data:`MAX_DIGITS` digits (Python ints; batches are worked as digit arrays,
:mod:`kformer.data.digit_columns`).

What the model reads and writes is set by :class:`ArithmeticFormat`:

- ``pad_operands``: operands zero-padded to ``digits`` (``0012+0345``) so every digit sits at a
  fixed position.
- ``source_style``: ``"chars"`` (``0012+0345``), ``"interleaved"`` (the operator, then the two
  digits of each place side by side, ones first: ``1234+45`` -> ``+ 4 5 3 4 2 0 1 0``) or
  ``"columns"`` (the operator, then one token per place holding both digits, ones first, like
  the columns of written addition: ``+ 4|5 3|4 2|0 1|0``) or ``"op_columns"`` (one token per
  place holding both digits and the operator, ones first, then ``[END]``: ``1234-45`` ->
  ``4-5 3-4 2-0 1-0 [END]``; everything a column of the answer needs sits in that column and the
  one before, and the end of the problem is marked).
- ``reverse_answer``: the model writes the answer's ``width + 1`` digits least-significant first,
  the order in which carries and borrows are worked out by hand, then its sign. A negative answer
  is written in ten's complement, as hand subtraction leaves it when the last borrow is
  outstanding: ``5801`` -> ``10850+`` and ``-1985`` -> ``10000 - 1985 = 98015`` -> ``51089-``.
  So every digit depends only on the two operand digits of its place and the carry/borrow from
  the place before, and the sign is simply the final borrow. Answers are turned back to
  ``=5801`` / ``=-1985`` for people. A product is written with ``2 * width`` digits (the most
  a product of ``width``-digit operands has), then ``+``: ``12*34`` -> ``8040+``; each of its
  digits depends on every column at or below its place (no local rule, unlike a sum).
- ``mixed_lengths``: each problem is written at its own width (the longer operand's digit count,
  the shorter zero-padded to it: ``12+345`` -> ``+ 2|5 1|4 0|3``, answer ``7530+``) instead of
  at ``digits`` columns, and training draws every operand length from 1 to ``train_digits``
  (uniformly, then uniform digits) in every batch. A model trained so can be asked problems
  longer than any it trained on, up to ``digits`` (a columns style, reversed answers).

Held-out split: a hash of ``(a, op, b)`` puts a fixed slice of all problems aside; training never
samples them, :meth:`ArithmeticFormat.held_out_problems` and :meth:`ArithmeticFormat.length_problems`
sample only them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from kformer.data import digit_columns as columns
from kformer.data import long_multiplication as long_rows
from kformer.errors import KformerError
from kformer.text.chars import CharVocabulary
from kformer.text.specials import END, END_ID, START_ID

OPERATORS = "+-*"  # in token-id order: a model's tokens for '+' and '-' keep their ids when '*' comes
MULTIPLY = "*"
CHARACTERS = "0123456789+-"  # and MULTIPLY after them, in the vocabulary of a model that multiplies
LONG_MULTIPLICATION = "long_multiplication"  # products only: the rows of long multiplication
SOURCE_STYLES = ("chars", "interleaved", "columns", "op_columns", LONG_MULTIPLICATION)
COLUMN_STYLES = ("columns", "op_columns")
MAX_DIGITS = 100
# One token per place ("column" of written addition): the two digits, e.g. "4|7".
COLUMN_TOKENS = tuple(f"{x}|{y}" for x in range(10) for y in range(10))
COLUMN_PAIRS = len(COLUMN_TOKENS)  # 100 tokens per operator in op_columns
_SUM_OPERATORS = "+-"  # the vocabulary of models without MULTIPLY (as before products came)


def op_column_tokens(operators: str) -> tuple[str, ...]:
    """The op_columns tokens ``"4+7"``, ``"4-7"``, ``"4*7"``: :data:`COLUMN_PAIRS` per operator of
    ``operators``, in that order."""
    return tuple(f"{x}{op}{y}" for op in operators for x in range(10) for y in range(10))


OP_COLUMN_TOKENS = op_column_tokens(_SUM_OPERATORS)
_ENUMERATE = 4_000_000  # problem spaces up to this size are listed whole rather than sampled


@dataclass(frozen=True)
class ArithmeticFormat:
    """How problems become token ids (see the module docstring)."""

    digits: int = 4
    ops: str = "+-"
    pad_operands: bool = True
    reverse_answer: bool = True
    source_style: str = "chars"
    # Operands of *training* problems have at most this many digits (0: ``digits``); the model
    # accepts operands of up to ``digits``: a measure of length generalisation.
    train_digits: int = 0
    mixed_lengths: bool = False

    def __post_init__(self):
        if not 1 <= int(self.digits) <= MAX_DIGITS:
            raise KformerError(f"--digits must be between 1 and {MAX_DIGITS}, not {self.digits}")
        if not 0 <= int(self.train_digits) <= int(self.digits):
            raise KformerError(f"train_digits must be between 0 (= digits) and digits ({self.digits}), "
                               f"not {self.train_digits}")
        if self.source_style not in SOURCE_STYLES:
            raise KformerError(f"source_style must be one of {', '.join(SOURCE_STYLES)}, not {self.source_style!r}")
        if self.source_style != "chars" and not self.pad_operands:
            raise KformerError(f"source_style '{self.source_style}' needs pad_operands = true")
        if self.mixed_lengths and (self.source_style not in COLUMN_STYLES or not self.reverse_answer):
            raise KformerError("mixed_lengths needs source_style 'columns' or 'op_columns' and reverse_answer = true")
        if not self.ops or any(op not in OPERATORS for op in self.ops) or len(set(self.ops)) != len(self.ops):
            raise KformerError(f"--ops must be distinct operators from '{OPERATORS}', not {self.ops!r}")
        if self.long_rows and (self.ops != MULTIPLY or self.mixed_lengths or not self.reverse_answer):
            raise KformerError(f"source_style '{LONG_MULTIPLICATION}' is for products only: it needs --ops '*', "
                               "mixed_lengths = false and reverse_answer = true")

    @property
    def long_rows(self) -> bool:
        """Are products written as the rows of long multiplication (:mod:`kformer.data.long_multiplication`)?"""
        return self.source_style == LONG_MULTIPLICATION

    @property
    def multiplies(self) -> bool:
        """Are products among the problems? (They widen the answer and the vocabulary.)"""
        return MULTIPLY in self.ops

    @property
    def vocabulary(self) -> CharVocabulary:
        """Specials, digits and operators, then the column tokens of a columns style; exactly the
        tokens of before products came unless ``ops`` has '*'."""
        if self.long_rows:
            return CharVocabulary(CHARACTERS + MULTIPLY, long_rows.PAIR_TOKENS + long_rows.STEP_TOKENS)
        operators = OPERATORS if self.multiplies else _SUM_OPERATORS
        extra = {"columns": COLUMN_TOKENS, "op_columns": op_column_tokens(operators)}.get(self.source_style, ())
        return CharVocabulary(CHARACTERS + (MULTIPLY if self.multiplies else ""), extra)

    @property
    def most_trained(self) -> int:
        """Most digits of a training operand."""
        return self.train_digits or self.digits

    @property
    def source_length(self) -> int:
        if self.long_rows:
            return long_rows.source_length(self.digits)
        return self.digits + 1 if self.source_style in COLUMN_STYLES else 2 * self.digits + 1

    def answer_places(self, op: str, width: int | None = None) -> int:
        """Digits of a reversed answer to an ``op`` problem written at ``width`` columns (default
        ``digits``): ``width + 1`` for a sum or difference, ``2 * width`` for a product."""
        width = self.digits if width is None else width
        return 2 * width if op == MULTIPLY else width + 1

    @property
    def answer_length(self) -> int:
        """Most tokens of an answer (without END): the longest answer's digits and its sign."""
        if self.long_rows:
            return long_rows.answer_length(self.digits)
        # sums: (digits + 1) digits and a sign, or "-" and digits + 1 digits; products: 2 * digits and a sign
        return max(self.answer_places(op) for op in self.ops) + 1 if self.multiplies else self.digits + 2

    @property
    def target_length(self) -> int:
        """Length of ``target_in`` / ``target_out``: the answer plus START or END."""
        return self.answer_length + 1

    @property
    def holdout_modulus(self) -> int:
        """One problem in this many is held out (a larger share when there are few problems, and
        for a model that multiplies: 1 in 64 leaves over 10,000 held-out 3x3-digit products)."""
        if len(self.ops) * 10 ** (2 * self.digits) < 10**6:
            return 8
        return 64 if self.multiplies else 256

    def to_json(self) -> dict:
        return asdict(self)

    # --- text forms -------------------------------------------------------------------------

    def problem_text(self, a: int, op: str, b: int) -> str:
        """What people read: ``1234+45``."""
        return f"{a}{op}{b}"

    def width(self, a: int, b: int) -> int:
        """How many columns the problem is written at: ``digits``, or with ``mixed_lengths`` the
        longer operand's digit count."""
        return max(len(str(a)), len(str(b))) if self.mixed_lengths else self.digits

    def source_tokens(self, a: int, op: str, b: int) -> list[str]:
        """What the encoder reads, token by token (see ``source_style``)."""
        width = self.width(a, b)
        if self.source_style == "chars":
            return list(f"{a:0{width}d}{op}{b:0{width}d}" if self.pad_operands else f"{a}{op}{b}")
        if self.long_rows:
            return [*long_rows.source_tokens(f"{a:0{width}d}"[::-1], f"{b:0{width}d}"[::-1]), END]
        places = zip(f"{a:0{width}d}"[::-1], f"{b:0{width}d}"[::-1], strict=True)
        if self.source_style == "interleaved":
            return [op, *(digit for place in places for digit in place)]
        if self.source_style == "op_columns":
            return [*(f"{x}{op}{y}" for x, y in places), END]
        return [op, *(f"{x}|{y}" for x, y in places)]

    def answer_text(self, value: int, width: int | None = None, op: str = "+") -> str:
        """What the decoder writes for ``value``, the answer to an ``op`` problem: ``10850+`` /
        ``51089-`` (reversed, :meth:`answer_places` digits; ``width`` defaults to ``digits``) or ``5801``.
        (With ``long_multiplication`` the model writes the rows instead, :meth:`encode`; this is
        the product's reversed text all the same.)"""
        if self.reverse_answer:
            places = self.answer_places(op, width)
            return f"{value % 10**places:0{places}d}"[::-1] + ("-" if value < 0 else "+")
        return str(value)

    def parse_answer(self, text: str) -> int | None:
        """Inverse of :meth:`answer_text`; None for text that is not a well-formed answer."""
        if self.reverse_answer:
            body, sign = text[:-1], text[-1:]
            lengths = {self.answer_places(op) for op in self.ops}  # of a problem written at `digits` columns
            fits = 2 <= len(body) <= max(lengths) if self.mixed_lengths else len(body) in lengths
            if not fits or not _is_digits(body) or sign not in ("+", "-"):
                return None
            value = int(body[::-1])
            return value - 10 ** len(body) if sign == "-" else value
        body = text[1:] if text.startswith("-") else text
        if not _is_digits(body):
            return None
        return int(text)

    # --- arrays -----------------------------------------------------------------------------

    def encode(self, a, ops, b) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Problems -> ``(source (n, S), target_in (n, T), target_out (n, T))`` int32, 0-padded
        to the longest problem the format takes.

        ``target_in = [START] + answer``, ``target_out = answer + [END]``.
        """
        if self.long_rows:
            digits = [columns.from_ints([int(v) for v in x], self.digits) for x in (a, b)]
            return self._encode_long_rows(*digits)
        vocab = self.vocabulary
        n = len(a)
        source = np.zeros((n, self.source_length), dtype="int32")
        target_in = np.zeros((n, self.target_length), dtype="int32")
        target_out = np.zeros((n, self.target_length), dtype="int32")
        # int() one by one: np.asarray of Python ints mixing values below and above 2**63 gives floats
        for row, (x, op, y) in enumerate(zip([int(v) for v in a], ops, [int(v) for v in b], strict=True)):
            src = vocab.encode_tokens(self.source_tokens(x, op, y))
            source[row, : len(src)] = src
            answer = vocab.encode(self.answer_text(solve(x, op, y), self.width(x, y), op))
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
        if self.long_rows:
            return long_rows.read_product(self.vocabulary.decode_tokens(ids), self.digits)
        return self.parse_answer(self.vocabulary.decode(ids))

    def training_batch(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``n`` fresh training problems (never held out) as :meth:`encode`'s arrays; with
        ``mixed_lengths`` only as wide as the longest training problem (``train_digits``
        columns), so every batch has one shape."""
        a, ops, b = self._training_digits(rng, n)
        if self.long_rows:
            wide = np.zeros((n, self.digits), dtype=np.uint8)
            return self._encode_long_rows(*(np.concatenate([x, wide[:, x.shape[1]:]], axis=1) for x in (a, b)))
        if self.source_style not in COLUMN_STYLES or not self.reverse_answer:
            return self.encode(columns.to_ints(a), ops, columns.to_ints(b))
        if self.mixed_lengths:
            widths = np.maximum(columns.lengths_of(a), columns.lengths_of(b))
            return self._encode_columns(a, ops, b, widths, self.most_trained)
        wide = np.zeros((n, self.digits), dtype=np.uint8)
        a, b = (np.concatenate([x, wide[:, x.shape[1]:]], axis=1) for x in (a, b))
        return self._encode_columns(a, ops, b, np.full(n, self.digits), self.digits)

    def _encode_columns(self, a, ops, b, widths, pad: int):
        """Columns-style, reversed-answer arrays of digit rows ``a``/``b`` ``(n, >= pad)``, each
        problem written at its ``widths`` entry, padded to ``pad`` columns."""
        vocab = self.vocabulary
        n = len(a)
        rows = np.arange(n)
        ids = {token: vocab.encode_tokens([token])[0] for token in ("0", *OPERATORS, "0+0", "0|0")}
        a, b = a[:, :pad], b[:, :pad]
        digits, negative, places = self._answer_columns(a, ops, b, widths)
        a, b, digits = (x.astype("int32") for x in (a, b, digits))
        operator = operator_index(ops)
        column = np.arange(pad)[None, :]
        source = np.zeros((n, pad + 1), dtype="int32")
        if self.source_style == "op_columns":  # "x+y" / "x-y" / "x*y" tokens, then [END]
            tokens = ids["0+0"] + COLUMN_PAIRS * operator[:, None] + 10 * a + b
            source[:, :pad] = np.where(column < widths[:, None], tokens, 0)
            source[rows, widths] = END_ID
        else:  # the operator, then "x|y" tokens
            source[:, 0] = np.array([ids[op] for op in OPERATORS], dtype="int32")[operator]
            source[:, 1:] = np.where(column < widths[:, None], ids["0|0"] + 10 * a + b, 0)
        answer_columns = digits.shape[1]
        target_out = np.zeros((n, answer_columns + 2), dtype="int32")
        column = np.arange(answer_columns)[None, :]
        target_out[:, :answer_columns] = np.where(column < places[:, None], ids["0"] + digits, 0)
        target_out[rows, places] = np.where(negative, ids["-"], ids["+"])
        target_out[rows, places + 1] = END_ID
        target_in = np.zeros_like(target_out)
        target_in[:, 0] = START_ID
        target_in[:, 1:] = np.where(target_out[:, :-1] == END_ID, 0, target_out[:, :-1])
        return source, target_in, target_out

    def _encode_long_rows(self, a, b):
        """Long-multiplication arrays of digit rows ``a``/``b`` ``(n, digits)``."""
        ids = {token: self.vocabulary.encode_tokens([token])[0] for token in ("0*0", "0|0")}
        source, target_out = long_rows.encode(a, b, ids["0*0"], ids["0|0"], END_ID)
        target_in = np.concatenate([np.full((len(a), 1), START_ID, dtype="int32"), target_out[:, :-1]], axis=1)
        return source, target_in, target_out

    def _answer_columns(self, a, ops, b, widths):
        """Reversed answers of digit rows ``a``/``b`` ``(n, pad)``: ``(digits (n, C), negative (n,),
        places (n,))``, row ``i``'s answer being its first ``places[i]`` digits (:meth:`answer_places`
        at ``widths[i]``); ``C`` is ``pad + 1``, or ``2 * pad`` when products are among the ops."""
        digits, negative = columns.answer_digits(a, b, ops == "-")
        places = widths + 1
        if not self.multiplies:
            return digits, negative, places
        times = ops == MULTIPLY
        products = columns.product_digits(a, b)
        sums = np.zeros_like(products)
        sums[:, : digits.shape[1]] = digits
        return np.where(times[:, None], products, sums), negative & ~times, np.where(times, 2 * widths, places)

    # --- sampling ---------------------------------------------------------------------------

    def is_held_out(self, a, ops, b) -> np.ndarray:
        """Bool per problem: does it belong to the held-out slice? (ints of any size)"""
        return self._held_out(columns.int_chunks(a), ops, columns.int_chunks(b))

    def _held_out(self, a_pieces, ops, b_pieces) -> np.ndarray:
        codes = (operator_index(ops) + 1).astype(np.uint64)  # '+' 1, '-' 2 (as always), '*' 3
        return (columns.problem_hash(a_pieces, codes, b_pieces) % np.uint64(self.holdout_modulus)) == 0

    def _draw_ops(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.array(list(self.ops))[rng.integers(0, len(self.ops), size=n)]

    def _training_digits(self, rng: np.random.Generator, n: int):
        """Digit rows ``(a, ops, b)`` of ``n`` training problems outside the held-out slice."""
        most = self.most_trained

        def draw(count):
            if self.mixed_lengths or self.long_rows:  # every length 1..most, then uniform digits of that length
                return tuple(columns.draw_operands(rng, count, most, rng.integers(1, most + 1, size=count), True)
                             for _ in range(2))
            return tuple(columns.draw_operands(rng, count, most, most, False) for _ in range(2))

        a, b = draw(n)
        ops = self._draw_ops(rng, n)
        while True:
            bad = np.nonzero(self._held_out(columns.chunks(a), ops, columns.chunks(b)))[0]
            if not len(bad):
                return a, ops, b
            (a[bad], b[bad]), ops[bad] = draw(len(bad)), self._draw_ops(rng, len(bad))

    def sample_training(self, rng: np.random.Generator, n: int):
        """``n`` random problems ``(a, ops, b)`` outside the held-out slice (operands of at most
        ``train_digits`` digits when that is set); ints as NumPy arrays (object arrays of Python
        ints beyond 18 digits)."""
        a, ops, b = self._training_digits(rng, n)
        dtype = np.int64 if self.most_trained <= columns.CHUNK else object
        return np.array(columns.to_ints(a), dtype=dtype), ops, np.array(columns.to_ints(b), dtype=dtype)

    def held_out_problems(self, n: int, seed: int = 2026) -> list[tuple[int, str, int]]:
        """``n`` distinct problems from the held-out slice with operands below
        ``10**train_digits`` (uniform; all of the slice, shuffled, if it is smaller)."""
        most = self.most_trained
        return self._held_out_sample(n, seed, 0, 10**most,
                                     lambda rng, m: columns.draw_operands(rng, m, most, most, False))

    def length_problems(self, length: int, n: int, seed: int = 2026) -> list[tuple[int, str, int]]:
        """``n`` distinct held-out problems whose two operands have exactly ``length`` digits
        (all of them, shuffled, if there are fewer)."""
        if not 1 <= length <= self.digits:
            raise KformerError(f"an operand length must be between 1 and {self.digits}, not {length}")
        low = 0 if length == 1 else 10 ** (length - 1)
        return self._held_out_sample(n, seed + length, low, 10**length,
                                     lambda rng, m: columns.draw_operands(rng, m, length, length, True))

    def _held_out_sample(self, n: int, seed: int, low: int, high: int, draw) -> list[tuple[int, str, int]]:
        """``n`` distinct held-out problems with operands in ``[low, high)``: listed whole when the
        space is small, else drawn ``draw(rng, m)`` (digit rows) in batches of up to a million."""
        rng = np.random.default_rng(seed)
        span = high - low
        if len(self.ops) * span * span <= _ENUMERATE:
            a, b = (grid.ravel() + low for grid in np.meshgrid(np.arange(span), np.arange(span), indexing="ij"))
            a, b = np.tile(a, len(self.ops)), np.tile(b, len(self.ops))
            ops = np.repeat(np.array(list(self.ops)), span * span)
            keep = rng.permutation(np.nonzero(self.is_held_out(a, ops, b))[0])[:n]
            return [(int(a[i]), str(ops[i]), int(b[i])) for i in keep]
        chosen: dict[tuple[int, str, int], None] = {}
        while len(chosen) < n:
            size = int(min(1_000_000, max(65_536, 2 * (n - len(chosen)) * self.holdout_modulus)))
            a, b, ops = draw(rng, size), draw(rng, size), self._draw_ops(rng, size)
            rows = np.nonzero(self._held_out(columns.chunks(a), ops, columns.chunks(b)))[0]
            for x, op, y in zip(columns.to_ints(a[rows]), ops[rows].tolist(), columns.to_ints(b[rows]), strict=True):
                chosen.setdefault((x, op, y), None)
                if len(chosen) >= n:
                    break
        return list(chosen)


def operator_index(ops) -> np.ndarray:
    """Each operator's place in :data:`OPERATORS` (``"+"`` 0, ``"-"`` 1, ``"*"`` 2) as an int64 array."""
    ops = np.asarray(ops)
    index = np.zeros(ops.shape, dtype=np.int64)
    for place, op in enumerate(OPERATORS[1:], 1):
        index[ops == op] = place
    return index


def solve(a: int, op: str, b: int) -> int:
    if op == MULTIPLY:
        return a * b
    return a + b if op == "+" else a - b


def parse_problem(text: str) -> tuple[int, str, int]:
    """``"1234+4567"`` (spaces allowed) -> ``(1234, "+", 4567)``; KformerError if it is not one."""
    compact = text.replace(" ", "")
    for position in range(1, len(compact)):
        if compact[position] in OPERATORS:
            left, right = compact[:position], compact[position + 1 :]
            if _is_digits(left) and _is_digits(right):
                return int(left), compact[position], int(right)
    raise KformerError(f"'{text}' is not a problem like 1234+4567, 1234-4567 or 12*34 (non-negative whole numbers)")


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
