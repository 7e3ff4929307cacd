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

Several corpora (``groups``: each pair's corpus, ``weights``: one per corpus, a multiplier of the
corpus's natural share): epoch ``e`` trains on each pair ``int(weight)`` times and on a seeded
``weight - int(weight)`` share of its corpus's pairs once more, drawn afresh each epoch
(:func:`weighted_draw`), cut into ``steps`` batches as a curriculum level is.

Each width's last batch of an epoch is a remainder, and with weights or a curriculum its size
changes from epoch to epoch: a step compiled per batch shape (XLA) would compile anew each epoch.
:meth:`PairBatchPlan.full_rows` gives the size to fill such a batch up to (with empty pairs,
whose padding the masked loss leaves out), so each width meets the compiled step in one size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from kformer.data.batching import bucket_width, length_bucketed_batches, token_budget_batches


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
    groups: np.ndarray | None = None  # (pairs,) each pair's corpus, an index into weights
    weights: tuple[float, ...] | None = None  # per corpus; None: each pair once per epoch

    def __post_init__(self):
        if (self.batch_tokens is None) == (self.batch_size is None):
            raise ValueError("give exactly one of batch_tokens and batch_size")
        if (self.groups is None) != (self.weights is None):
            raise ValueError("give both groups and weights, or neither")
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
        """Batches per epoch: those of the whole set (with weights: of the first epoch's draw)."""
        return len(self._cut(self._drawn(0), None))

    def _drawn(self, number: int) -> np.ndarray:
        """The pairs epoch ``number`` trains on (every pair once, unless weighted)."""
        if self.weights is None:
            return np.arange(len(self.lengths))
        return weighted_draw(self.groups, self.weights, np.random.default_rng([self.seed, number, len(self.weights)]))

    def full_rows(self, batch: np.ndarray) -> int:
        """The rows of a full batch of ``batch``'s kind: ``batch_size``, or the rows
        ``batch_tokens`` packs at its width (as :func:`~kformer.data.batching.token_budget_batches`
        cuts them)."""
        if self.batch_size is not None:
            return self.batch_size
        return max(1, self.batch_tokens // bucket_width(max(int(self.lengths[batch].max()), 1)))

    def epoch(self, number: int) -> list[np.ndarray]:
        """The index batches of epoch ``number`` (0-based), ``steps`` of them."""
        rng = np.random.default_rng([self.seed, number]) if self.shuffle else None
        subset = self._drawn(number)
        if self.levels and number < len(self.levels) - 1:
            level = subset[np.isin(subset, self.levels[number])]
            subset = level if len(level) else subset  # a weighted draw may miss a level's few pairs
        elif self.weights is None:
            return self._cut(subset, rng)
        batches: list[np.ndarray] = []
        while len(batches) < self.steps:
            batches += self._cut(subset, rng)
        return batches[: self.steps]


def weighted_draw(groups: np.ndarray, weights: Sequence[float], rng: np.random.Generator) -> np.ndarray:
    """Sorted pair indices: each pair of group ``g`` ``int(weights[g])`` times, and ``round(fraction
    x size)`` of the group's pairs, picked by ``rng`` without replacement, once more."""
    groups = np.asarray(groups)
    parts = []
    for group, weight in enumerate(weights):
        members = np.flatnonzero(groups == group)
        whole = int(weight)
        parts += [np.tile(members, whole), rng.choice(members, round((weight - whole) * len(members)), replace=False)]
    return np.sort(np.concatenate(parts)).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


def pair_lengths(sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]) -> np.ndarray:
    """``(pairs,)``: the longer of each source and its ``[START] + target``."""
    return np.array([max(len(s), len(t) + 1) for s, t in zip(sources, targets, strict=True)], dtype=np.int64)
