"""Which sentence pairs go into each training batch, epoch by epoch (translation).

A pair's *length* is the longer of its source and ``[START] + target`` (what the padded batch
holds). Batches are length-bucketed by :mod:`kformer.data.batching` -- packed to a token
budget (``batch_tokens``: rows x padded width per batch) or, as an override, a fixed number of
pairs (``batch_size``). Every epoch has the same number of batches (``steps``), that of the
whole training set, so ``model.fit`` sees a fixed epoch length.

Curriculum (the Tamil lesson's levels: single words, then phrases, then sentences): with
``levels`` (index arrays, short pairs first, the last the whole set; see
:func:`kformer.data.pairs.curriculum_levels`) epoch ``k`` draws only from level ``k``, cycling
through it to fill ``steps`` batches; from the last level on, epochs are ordinary (each pair once).
Epoch ``e`` is arranged by the seed ``(seed, e)``, so a run resumed at epoch ``e`` sees the order
an uninterrupted run would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from kformer.data.batching import length_bucketed_batches, token_budget_batches


@dataclass(frozen=True)
class PairBatchPlan:
    """Epoch-by-epoch index batches over pairs of the given ``lengths``.

    Exactly one of ``batch_tokens`` (token budget per batch) and ``batch_size`` (pairs per batch)
    is set. ``shuffle=False`` (validation) sorts by length and keeps the order.
    """

    lengths: np.ndarray  # (pairs,) padded length of each pair
    batch_tokens: int | None = None
    batch_size: int | None = None
    seed: int = 0
    shuffle: bool = True
    levels: tuple[np.ndarray, ...] | None = None

    def __post_init__(self):
        if (self.batch_tokens is None) == (self.batch_size is None):
            raise ValueError("give exactly one of batch_tokens and batch_size")
        object.__setattr__(self, "lengths", np.asarray(self.lengths))

    def _cut(self, subset: np.ndarray, rng) -> list[np.ndarray]:
        lengths = self.lengths[subset]
        if self.batch_tokens is not None:
            batches = token_budget_batches(lengths, self.batch_tokens, rng)
        else:
            batches = length_bucketed_batches(lengths, self.batch_size, rng)
        return [subset[batch] for batch in batches]

    @cached_property
    def steps(self) -> int:
        """Batches per epoch: those of the whole set."""
        return len(self._cut(np.arange(len(self.lengths)), None))

    def epoch(self, number: int) -> list[np.ndarray]:
        """The index batches of epoch ``number`` (0-based), ``steps`` of them."""
        rng = np.random.default_rng([self.seed, number]) if self.shuffle else None
        everything = np.arange(len(self.lengths))
        if not self.levels or number >= len(self.levels) - 1:
            return self._cut(everything, rng)
        subset, steps, batches = self.levels[number], self.steps, []
        while len(batches) < steps:
            batches += self._cut(subset, rng)
        return batches[:steps]


def pair_lengths(sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]) -> np.ndarray:
    """``(pairs,)``: the longer of each source and its ``[START] + target``."""
    return np.array([max(len(s), len(t) + 1) for s, t in zip(sources, targets, strict=True)], dtype=np.int64)
