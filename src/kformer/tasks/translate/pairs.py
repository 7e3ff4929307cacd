"""Sentence pairs in: reading them from files or from memory, and splitting off the held-out ones."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace

from kformer.data.corpora import Corpus, is_paths, read_corpora
from kformer.data.pairs import Pair
from kformer.errors import BadInput

# A path to source<TAB>target lines, several paths, a folder of pair files or a manifest of corpora
# (kformer.data.corpora); or (source, target) tuples / Pairs in memory.
PairData = str | os.PathLike | Sequence[str | os.PathLike] | Sequence[Pair | tuple[str, str]]
IN_MEMORY = "data"  # the name of the corpus of pairs given in memory without one


def read_pair_data(data: PairData, name: str = "data") -> list[Pair]:
    """Pairs from a path (``source<TAB>target`` lines, ``.gz`` fine, more columns ignored), several
    paths, a folder or a manifest (their pairs one after another), or from ``(source, target)``
    tuples / :class:`Pair` objects, NFC-normalised; errors name ``name``. Validation and test pairs
    given are neutral, except :class:`Pair` objects in memory that name their corpus: they keep it,
    so a model trained with corpus tags is validated and tested on them with that corpus's tag."""
    named = not is_paths(data)
    return [pair if named and pair.corpus != IN_MEMORY else replace(pair, corpus=None)
            for pair in read_training_data(data, name)[0]]


def read_training_data(data: PairData, name: str = "data") -> tuple[list[Pair], list[Corpus]]:
    """``(pairs, corpora)``: every pair of ``data`` (as :func:`read_pair_data`) carrying its
    corpus's name, and the corpora in order. Pairs in memory are one corpus (:data:`IN_MEMORY`)
    unless they are :class:`Pair` objects that name theirs."""
    if is_paths(data):
        read = read_corpora(data, name)
        return [pair for _, pairs in read for pair in pairs], [corpus for corpus, _ in read]
    if data is None or isinstance(data, bytes | str):
        raise BadInput("{field} must be a path or a list of (source, target) pairs", field=name)
    pairs = [_pair(item, f"{name}[{i}]", i + 1) for i, item in enumerate(data)]
    if not pairs:
        raise BadInput("{field} holds no sentence pairs", field=name)
    return pairs, [Corpus(corpus) for corpus in dict.fromkeys(pair.corpus for pair in pairs)]


def _pair(item, field: str, line: int) -> Pair:
    from kformer.data.pairs import normalize_text

    if isinstance(item, Pair):
        sides = (item.source, item.target)
    elif isinstance(item, Sequence) and not isinstance(item, str) and len(item) == 2:
        sides = tuple(item)
    else:
        raise BadInput("{field} must be a (source, target) pair of strings", field=field)
    if not all(isinstance(side, str) for side in sides):
        raise BadInput("{field} must be a (source, target) pair of strings", field=field)
    source, target = (normalize_text(side) for side in sides)
    if not source or not target:
        raise BadInput(f"{{field}} has an empty {'source' if not source else 'target'}", field=field)
    corpus = item.corpus if isinstance(item, Pair) and item.corpus else IN_MEMORY
    return Pair(source, target, line, corpus)


def split_pairs(config, train: list[Pair], valid: list[Pair] | None, test: list[Pair] | None):
    """``(train, valid, test)``: given pairs as they are, missing ones held out of ``train`` by
    source sentence (``config.holdout`` test pairs, at most a tenth of the distinct sources;
    ``config.valid_size`` validation pairs, at most a twentieth of the rest): every pair of a held-out
    source leaves training, so a source translated several ways is never scored on a translation
    of itself it was trained on."""
    from kformer.data.pairs import source_holdout

    if test is None:
        size = min(config.holdout, len({p.source for p in train}) // 10)
        if size < 1:
            raise BadInput(f"the training data has only {len(train)} pairs, too few to hold out test pairs; "
                           "pass {field} pairs or give at least 10", field="test")
        train, test = source_holdout(train, size, seed=config.seed)
    if valid is None:
        size = min(config.valid_size, len({p.source for p in train}) // 20)
        if size < 1:
            raise BadInput(f"the training data has only {len(train)} pairs left, too few to hold out validation "
                           "pairs; pass {field} pairs", field="valid")
        train, valid = source_holdout(train, size, seed=config.seed + 1)
    return train, valid, test
