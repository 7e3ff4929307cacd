"""Products written as long multiplication: the rows a person writes, laid out so that every token
the model writes depends on three tokens at fixed distances.

Why our own layout: a product's digit depends on every operand digit at or below its place, so a
model that writes the answer directly has no local rule to learn (kformer's direct format reached
3 % exact on 2-digit products in 6 minutes). Long multiplication breaks the product into steps
that each need one digit product, one digit of the running sum and one carry.

For operands written at ``width`` columns (zero-padded; ``R = width + 1`` tokens per row):

- **Source** (``width * R + 1`` tokens): row ``j`` holds ``a``'s digits ``a_0 .. a_width`` (ones
  first, ``a_width = 0``) each paired with ``b``'s digit ``j``: tokens ``"a_t*b_j"``, then ``[END]``.
- **Target** (``width * R`` tokens, then ``[END]``): row ``j`` is the running sum
  ``S_j = a * (b mod 10**(j+1))`` at places ``j .. j + width``, worked from the ones: token ``t``
  is ``"d|c"`` with ``d = (S_{j-1}[j+t] + a_t * b_j + c_in) % 10`` and ``c`` the carry out (0-9),
  ``c_in`` the carry of the token before (0 at the row's start).

So target token ``i`` reads the source token ``i`` (its digit product), the target token ``i - 1``
(its carry) and the target token ``i - width`` (``S_{j-1}`` at the same place: row ``j - 1``
starts one place lower), whatever the operands. The product is read off the rows as a person
reads it: row ``j``'s first digit is the answer's digit ``j``, and the last row holds the rest.
"""

from __future__ import annotations

import numpy as np

PAIR_TOKENS = tuple(f"{x}*{y}" for x in range(10) for y in range(10))  # the source's "a_t*b_j"
STEP_TOKENS = tuple(f"{d}|{c}" for d in range(10) for c in range(10))  # the target's "digit|carry"


def row_length(width: int) -> int:
    """Tokens per row: the operand's ``width`` places and the carry left over."""
    return width + 1


def source_length(width: int) -> int:
    """Source tokens (with ``[END]``) of a problem written at ``width`` columns."""
    return width * row_length(width) + 1


def answer_length(width: int) -> int:
    """Target tokens (without ``[END]``)."""
    return width * row_length(width)


def encode(a: np.ndarray, b: np.ndarray, pair_id: int, step_id: int, end_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Digit rows ``a``, ``b`` ``(n, width)`` (ones first) -> ``(source (n, width*R + 1),
    target_out (n, width*R + 1))`` int32 ids; ``pair_id`` / ``step_id`` are the ids of ``"0*0"`` and
    ``"0|0"`` (the 100 tokens of each follow in order), ``end_id`` that of ``[END]``."""
    n, width = a.shape
    length = row_length(width)
    a_row = np.concatenate([a, np.zeros((n, 1), dtype=a.dtype)], axis=1).astype(np.int32)  # (n, R)
    source = np.empty((n, width, length), dtype=np.int32)
    steps = np.empty((n, width, length), dtype=np.int32)
    running = np.zeros((n, 2 * width + 1), dtype=np.int32)  # S_j, ones first
    for j in range(width):
        b_digit = b[:, j : j + 1].astype(np.int32)
        source[:, j] = pair_id + 10 * a_row + b_digit
        carry = np.zeros(n, dtype=np.int32)
        for t in range(length):
            total = running[:, j + t] + a_row[:, t] * b_digit[:, 0] + carry
            running[:, j + t], carry = total % 10, total // 10
            steps[:, j, t] = step_id + 10 * (total % 10) + carry
    end = np.full((n, 1), end_id, dtype=np.int32)
    return (np.concatenate([source.reshape(n, -1), end], axis=1),
            np.concatenate([steps.reshape(n, -1), end], axis=1))


def source_tokens(a_digits: str, b_digits: str) -> list[str]:
    """The source tokens (without ``[END]``) of operands given as equal-width digit strings, ones first."""
    a_digits = a_digits + "0"
    return [f"{x}*{y}" for y in b_digits for x in a_digits]


def read_product(tokens: list[str], width: int) -> int | None:
    """The product the target ``tokens`` (``"d|c"`` each, no specials) write, or None when they
    are not ``width`` whole rows of steps."""
    length = row_length(width)
    if len(tokens) != answer_length(width) or any(t not in _STEP_SET for t in tokens):
        return None
    rows = [tokens[j * length : (j + 1) * length] for j in range(width)]
    places = [row[0][0] for row in rows[:-1]] + [step[0] for step in rows[-1]]
    return int("".join(places)[::-1])


_STEP_SET = frozenset(STEP_TOKENS)
