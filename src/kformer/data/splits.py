"""Stratified hold-out splits with a seed, with a clear error when a label is too rare to split."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from kformer.errors import KformerError


def check_label_counts(labels: Sequence[str], minimum: int = 2, why: str = "training needs") -> None:
    """Raise a KformerError naming the first label with fewer than ``minimum`` examples."""
    counts = Counter(labels)
    rare = sorted(label for label, count in counts.items() if count < minimum)
    if rare:
        shown = ", ".join(f"'{label}'" for label in rare[:5]) + (" ..." if len(rare) > 5 else "")
        raise KformerError(
            f"label {shown} has fewer than {minimum} examples; {why} at least {minimum} per label: "
            "add examples, remove the label, or pass --valid FILE"
        )


def stratified_split(labels: Sequence[str], fraction: float = 0.1, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``(keep, held_out)``: about ``fraction`` of each label held out, shuffled by ``seed``.

    Every label keeps at least one example on each side, so each label must have two.
    """
    labels = list(labels)
    check_label_counts(labels, 2, "a stratified hold-out needs")
    rng = np.random.default_rng(seed)
    by_label: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        by_label.setdefault(label, []).append(i)
    keep, held = [], []
    for label in sorted(by_label):
        rows = rng.permutation(by_label[label])
        n_held = min(max(int(round(fraction * len(rows))), 1), len(rows) - 1)
        held.extend(rows[:n_held])
        keep.extend(rows[n_held:])
    return np.sort(np.array(keep, dtype=int)), np.sort(np.array(held, dtype=int))
