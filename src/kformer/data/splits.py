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
    from sklearn.model_selection import train_test_split

    labels = list(labels)
    check_label_counts(labels, 2, "a stratified hold-out needs")
    n, n_labels = len(labels), len(set(labels))
    n_held = min(max(int(round(fraction * n)), n_labels), n - n_labels)
    if n_held < n_labels:
        raise KformerError(f"{n} examples are too few to hold out one per label for {n_labels} labels; pass --valid FILE")
    keep, held = train_test_split(np.arange(n), test_size=n_held, stratify=labels, random_state=seed)
    return np.sort(keep), np.sort(held)
