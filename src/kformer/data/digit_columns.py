"""Numbers as arrays of digits, ones first: drawing operands of any length, the held-out hash,
answers with carries and borrows, products, and the column encoding of whole batches at once.

An operand array is ``(n, width)`` uint8, column ``i`` holding the digit of ``10**i``: numbers of
any length (NumPy integers stop at 19 digits), and a whole batch is worked column by column, as
written addition is, without a Python loop per problem.
"""

from __future__ import annotations

import numpy as np

CHUNK = 18  # digits per uint64 chunk of the hash (10**18 < 2**64)
_SALT_A, _SALT_HIGH = np.uint64(0x51ED27), np.uint64(0xA5A5_1234_5678_9ABC)
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def draw_operands(rng: np.random.Generator, n: int, width: int, lengths, leading_nonzero: bool) -> np.ndarray:
    """``n`` operands ``(n, width)`` with ``lengths[i]`` digits each (uniform digits below that,
    zeros above); ``leading_nonzero`` makes the top digit 1-9 where the length is above 1, so the
    number has exactly that many digits."""
    lengths = np.broadcast_to(np.asarray(lengths, dtype=np.int64), (n,))
    digits = rng.integers(0, 10, size=(n, width), dtype=np.uint8)
    column = np.arange(width)[None, :]
    digits[column >= lengths[:, None]] = 0
    if leading_nonzero:
        rows = np.nonzero(lengths > 1)[0]
        digits[rows, lengths[rows] - 1] = rng.integers(1, 10, size=len(rows), dtype=np.uint8)
    return digits


def to_ints(digits: np.ndarray) -> list[int]:
    """``(n, width)`` digit rows -> Python ints."""
    if not digits.shape[1]:
        return [0] * len(digits)
    text = (digits[:, ::-1] + ord("0")).astype(np.uint8)
    return [int(row.tobytes()) for row in text]


def from_ints(values, width: int) -> np.ndarray:
    """Non-negative ints (below ``10**width``) -> ``(n, width)`` digit rows, ones first."""
    rows = [f"{int(v):0{width}d}"[::-1].encode() for v in values]
    if not rows:
        return np.zeros((0, width), dtype=np.uint8)
    return (np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(len(rows), width) - ord("0")).astype(np.uint8)


def lengths_of(digits: np.ndarray) -> np.ndarray:
    """How many digits each row's number has (0 counts as one digit)."""
    nonzero = digits != 0
    top = digits.shape[1] - np.argmax(nonzero[:, ::-1], axis=1)
    return np.where(nonzero.any(axis=1), top, 1)


def chunks(digits: np.ndarray) -> list[np.ndarray]:
    """The number in uint64 pieces of :data:`CHUNK` digits, lowest first (at least one piece)."""
    powers = (np.uint64(10) ** np.arange(CHUNK, dtype=np.uint64))
    pieces = []
    for start in range(0, max(digits.shape[1], 1), CHUNK):
        part = digits[:, start : start + CHUNK].astype(np.uint64)
        pieces.append((part * powers[: part.shape[1]]).sum(axis=1, dtype=np.uint64) if part.shape[1]
                      else np.zeros(len(digits), dtype=np.uint64))
    return pieces


def int_chunks(values) -> list[np.ndarray]:
    """:func:`chunks` of ints: a NumPy integer array, or Python ints of any size (never through
    ``np.asarray``, which turns a list mixing ints below and above ``2**63`` into floats)."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        return [values.astype(np.uint64)]
    values = [int(v) for v in values]
    count = max((len(str(v)) for v in values), default=1)
    return chunks(from_ints(values, max(count, 1)))


def problem_hash(a_pieces: list[np.ndarray], codes: np.ndarray, b_pieces: list[np.ndarray]) -> np.ndarray:
    """A well-spread 64-bit hash of each problem ``(a, op, b)`` from the operands' uint64 pieces.

    For numbers below ``10**18`` (one piece) it is the hash kformer has always used, so the
    held-out slice of short problems did not move when longer numbers came."""
    h = mix(a_pieces[0] + _SALT_A)
    for piece in a_pieces[1:]:
        h = np.where(piece != 0, mix(h ^ (piece + _SALT_HIGH)), h)
    h = mix(h ^ b_pieces[0])
    for piece in b_pieces[1:]:
        h = np.where(piece != 0, mix(h ^ piece ^ _SALT_HIGH), h)
    return mix(h ^ codes)


def mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser: a well-spread 64-bit hash of each element (wrapping arithmetic)."""
    x = np.asarray(x, dtype=np.uint64).copy()
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK64
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return x


def answer_digits(a: np.ndarray, b: np.ndarray, minus: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a + b`` (or ``a - b`` where ``minus``) column by column, ones first, with carries and
    borrows: ``(digits (n, width + 1), negative (n,))``. A negative difference comes out in ten's
    complement (``10**(width+1) + a - b``), as hand subtraction leaves it; its low ``w + 1``
    digits are also its complement at any narrower width ``w`` the operands fit in."""
    n, width = a.shape
    out = np.zeros((n, width + 1), dtype=np.uint8)
    carry = np.zeros(n, dtype=np.int16)
    sign = np.where(minus, -1, 1).astype(np.int16)
    for column in range(width):
        total = a[:, column].astype(np.int16) + sign * b[:, column] + carry
        out[:, column] = total % 10
        carry = total // 10  # +1 carry, -1 borrow, 0
    out[:, width] = carry % 10  # 1 after a last carry, 9 after a last borrow
    return out, carry < 0


def product_digits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a * b`` of digit rows ``a`` ``(n, wa)`` and ``b`` ``(n, wb)``, ones first: ``(n, wa + wb)``
    digits (the most such a product has), as long multiplication works: the digit products of
    each place summed, then the carries taken up from the ones."""
    n, width_a = a.shape
    width = width_a + b.shape[1]
    totals = np.zeros((n, width), dtype=np.int64)
    for column in range(width_a):
        totals[:, column : column + b.shape[1]] += a[:, column : column + 1].astype(np.int64) * b
    out = np.zeros((n, width), dtype=np.uint8)
    carry = np.zeros(n, dtype=np.int64)
    for column in range(width):
        total = totals[:, column] + carry
        out[:, column] = total % 10
        carry = total // 10
    return out
