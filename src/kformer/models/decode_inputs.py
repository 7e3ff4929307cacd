"""The shapes decoding runs in, and the checks of its arguments.

Compiled decoding never recompiles per request: sources are decoded in chunks padded to a few
*decode shapes* -- batch rounded up to one of :data:`~kformer.data.batching.BATCH_BUCKETS`, width
to one of :func:`decode_widths` (a quarter, half or all of the model's longest source) -- and the
generation buffers are sized to a width bucket of ``max_length``, the real ``max_length`` being
applied inside the loop. :func:`decode_shapes` lists them all, so a server can warm each one.
"""

from __future__ import annotations

import numpy as np

from kformer.data.batching import BATCH_BUCKETS, bucket_width
from kformer.errors import BadInput
from kformer.text.specials import END_ID, PAD_ID


def decode_widths(max_source_length: int) -> tuple[int, ...]:
    """The source widths decoding pads to: a quarter, a half and all of ``max_source_length``
    (multiples of 8 where that fits)."""
    longest = int(max_source_length)
    return tuple(sorted({min(longest, -(-max(longest * k // 4, 1) // 8) * 8) for k in (1, 2, 4)}))


def decode_shapes(model) -> list[tuple[int, int]]:
    """Every ``(batch, width)`` the compiled decoders are called with for ``model``."""
    return [(batch, width) for batch in BATCH_BUCKETS for width in decode_widths(model.max_source_length)]


def decode_chunks(model, source: np.ndarray):
    """``(padded, rows, start)`` per chunk of at most ``BATCH_BUCKETS[-1]`` sources (``start``: its
    first row in ``source``): the chunk padded to a decode shape, extra rows copying its first row
    (so they end when it ends)."""
    widths = decode_widths(model.max_source_length)
    for start in range(0, len(source), BATCH_BUCKETS[-1]):
        chunk = source[start : start + BATCH_BUCKETS[-1]]
        rows, length = chunk.shape
        batch = next(b for b in BATCH_BUCKETS if b >= rows)
        width = next((w for w in widths if w >= length), length)
        padded = np.zeros((batch, width), dtype="int32")
        padded[:rows, :length] = chunk
        padded[rows:] = padded[0]
        yield padded, rows, start


def limits_per_row(row_limits, batch: int, max_length: int) -> np.ndarray:
    """``(batch,)`` int32: each row's most tokens, within 1..``max_length`` (all ``max_length`` if None)."""
    if row_limits is None:
        return np.full(batch, max_length, dtype="int32")
    limits = np.asarray(row_limits)
    if limits.shape != (batch,):
        raise BadInput(f"row limits must be one per source row ({batch}), got shape {limits.shape}")
    return np.clip(limits, 1, max_length).astype("int32")


def pad_limits(limits: np.ndarray, rows: int) -> np.ndarray:
    """A chunk's limits for its padded rows (copies of the first, as :func:`decode_chunks` pads)."""
    return np.concatenate([limits, np.repeat(limits[:1], rows - len(limits))]).astype("int32")


def buffer_length(model, max_length: int) -> int:
    """Generation buffers hold a width bucket of ``max_length`` (at most the model's longest target)."""
    return bucket_width(max_length, model.max_target_length)


def as_ids(source_ids) -> np.ndarray:
    source = np.asarray(source_ids)
    if source.ndim != 2 or source.shape[0] == 0:
        raise BadInput(f"source ids must be a non-empty (batch, length) array, got shape {source.shape}")
    return source.astype("int32")


def check_length(model, max_length) -> int:
    max_length = int(max_length)
    if not 1 <= max_length <= model.max_target_length:
        raise BadInput(
            f"max length {max_length} is outside 1..{model.max_target_length} (the model's max_target_length)"
        )
    return max_length


def check_repeat(max_repeat) -> int:
    if isinstance(max_repeat, bool) or int(max_repeat) != max_repeat or int(max_repeat) < 0:
        raise BadInput(f"max repeat ({{field}}) must be a whole number of at least 0 (0: no limit), not {max_repeat!r}",
                       field="max_repeat")
    return int(max_repeat)


def check_width(beam_width) -> int:
    if int(beam_width) < 1:
        raise BadInput(f"beam width ({{field}}) must be at least 1, not {beam_width}", field="beam")
    return int(beam_width)


def trim(generated: np.ndarray) -> np.ndarray:
    """Pad after the first END and drop columns that are padding in every row."""
    generated = generated.astype("int32")
    ended = np.cumsum(generated == END_ID, axis=-1)
    after_end = (ended - (generated == END_ID)) > 0
    generated = np.where(after_end, PAD_ID, generated)
    used = (generated != PAD_ID).any(axis=0)
    width = int(np.nonzero(used)[0].max()) + 1 if used.any() else 1
    return generated[:, :width]
