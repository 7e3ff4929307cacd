"""Parallel text: reading ``source<TAB>target`` files and splitting them for training.

Both sides are NFC-normalised (so a Tamil letter typed as base + combining marks and the same
letter typed precomposed are one string) and their whitespace collapsed. Splits are
reproducible: a random hold-out with a fixed seed, a hold-out by source sentence that takes every
pair of a held-out source out of training (corpora such as Anki translate one English sentence
several ways, so a random hold-out leaves a quarter of its test sources in training), or a
document-level hold-out that keeps whole documents out of training (sentences of one document
share names and terms, so holding out sentences at random would flatter the model).
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kformer.data.io import read_text_lines
from kformer.errors import KformerError


@dataclass(frozen=True)
class Pair:
    """One sentence pair, the line it came from (1-based) and the name of its corpus (None: the
    only one, or pairs that belong to none, such as given validation pairs; :mod:`.corpora`)."""

    source: str
    target: str
    line: int = 0
    corpus: str | None = None


def normalize_text(text: str) -> str:
    """NFC-normalise ``text`` and collapse runs of whitespace to single spaces."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def read_pairs(path: str | os.PathLike) -> list[Pair]:
    """Read ``source<TAB>target`` lines (plain or ``.gz``); columns after the second are ignored.

    Blank lines are skipped. A line without a tab, or with an empty side, is a KformerError
    naming the line; so are undecodable bytes and a file without any pair.
    """
    pairs = []
    for line_number, line in read_text_lines(path):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2:
            raise KformerError(
                f"{path}: line {line_number} has no tab; each line must be source<TAB>target"
            )
        source, target = normalize_text(fields[0]), normalize_text(fields[1])
        if not source or not target:
            side = "source" if not source else "target"
            raise KformerError(f"{path}: line {line_number} has an empty {side}; fill it in or delete the line")
        pairs.append(Pair(source, target, line_number))
    if not pairs:
        raise KformerError(f"{path} holds no sentence pairs (only blank lines); expected source<TAB>target per line")
    return pairs


def write_pairs(path: str | os.PathLike, pairs: Sequence[Pair]) -> None:
    """Write pairs as UTF-8 ``source<TAB>target`` lines (for handing splits to the CLI)."""
    Path(path).write_text("".join(f"{p.source}\t{p.target}\n" for p in pairs), encoding="utf-8")


def random_holdout(pairs: Sequence[Pair], size: int, seed: int = 0) -> tuple[list[Pair], list[Pair]]:
    """Split into ``(train, held_out)`` with ``size`` pairs held out at random (fixed ``seed``).

    The input order does not matter (files sorted by length are shuffled first); both parts
    keep the input order among themselves.
    """
    if not 0 < size < len(pairs):
        raise KformerError(f"cannot hold out {size} of {len(pairs)} pairs; choose fewer than the file holds")
    held = np.zeros(len(pairs), dtype=bool)
    held[np.random.default_rng(seed).permutation(len(pairs))[:size]] = True
    return [p for p, h in zip(pairs, held, strict=True) if not h], [p for p, h in zip(pairs, held, strict=True) if h]


def source_holdout(pairs: Sequence[Pair], size: int, seed: int = 0) -> tuple[list[Pair], list[Pair]]:
    """Split into ``(train, held_out)`` by source sentence: ``size`` distinct sources picked at
    random (fixed ``seed``), each held out with one pair (its first); the other pairs of a held-out
    source are dropped, so no held-out source is seen in training with another translation.

    Both parts keep the input order among themselves.
    """
    first_of: dict[str, int] = {}
    for index, pair in enumerate(pairs):
        first_of.setdefault(pair.source, index)
    if not 0 < size < len(first_of):
        raise KformerError(f"cannot hold out {size} of {len(first_of)} distinct source sentences; choose fewer")
    sources = list(first_of)
    chosen = {sources[i] for i in np.random.default_rng(seed).permutation(len(sources))[:size]}
    held_lines = {first_of[source] for source in chosen}
    train = [p for p in pairs if p.source not in chosen]
    return train, [p for i, p in enumerate(pairs) if i in held_lines]


def read_document_ids(meta_path: str | os.PathLike) -> list[str]:
    """One document id per pair from a TICO-19 style ``line<TAB>tuid<TAB>source_url`` file (with header).

    The document is the source URL; where that is empty, the tuid before its colon
    (``PubMed_7:123`` -> ``PubMed_7``).
    """
    documents = []
    for line_number, line in read_text_lines(meta_path):
        fields = line.split("\t")
        if line_number == 1 and fields[0].strip().lower() == "line":
            continue
        if len(fields) < 2:
            raise KformerError(f"{meta_path}: line {line_number} should be line<TAB>tuid<TAB>source_url")
        url = fields[2].strip() if len(fields) > 2 else ""
        documents.append(url or fields[1].split(":")[0].strip())
    return documents


def read_segment_ids(meta_path: str | os.PathLike) -> list[str]:
    """One ``seg_id`` per pair from a ``seg_id<TAB>...`` metadata file with a header line (the
    Joshua Indian Parallel Corpora's ``en-ta.meta.tsv``: ``seg_id orig_split ref_index``)."""
    segments = []
    for line_number, line in read_text_lines(meta_path):
        fields = line.split("\t")
        if line_number == 1:
            if fields[0].strip() != "seg_id":
                raise KformerError(f"{meta_path}: the first line should be the header seg_id<TAB>...")
            continue
        if not fields[0].strip():
            raise KformerError(f"{meta_path}: line {line_number} has no seg_id")
        segments.append(fields[0].strip())
    return segments


def read_joshua_ipc(folder: str | os.PathLike) -> tuple[list[Pair], list[str]]:
    """``(pairs, seg_ids)`` of a Joshua IPC folder (``en-ta.tsv`` and the line-aligned
    ``en-ta.meta.tsv``). One source sentence has up to four crowd translations, all under one
    ``seg_id``: split by it (:func:`document_holdout` with the seg_ids as documents) so that no
    sentence is on both sides of a split."""
    folder = Path(folder)
    pairs = read_pairs(folder / "en-ta.tsv")
    segments = read_segment_ids(folder / "en-ta.meta.tsv")
    if len(segments) != len(pairs):
        raise KformerError(f"{folder}/en-ta.meta.tsv names {len(segments)} lines but en-ta.tsv has {len(pairs)} pairs; "
                           "they must match line for line")
    return pairs, segments


def document_holdout(
    pairs: Sequence[Pair], documents: Sequence[str], fraction: float = 0.15, seed: int = 0
) -> tuple[list[Pair], list[Pair], list[str]]:
    """Hold out whole documents, picked at random (fixed ``seed``), until ``fraction`` of the pairs is held.

    Returns ``(train, held_out, held_out_document_ids)``. Documents bigger than twice the
    remaining need are passed over, so one huge document cannot swallow the test set.
    """
    if len(documents) != len(pairs):
        raise KformerError(f"the metadata names {len(documents)} lines but the pair file has {len(pairs)}; they must match line for line")
    sizes: dict[str, int] = {}
    for doc in documents:
        sizes[doc] = sizes.get(doc, 0) + 1
    if len(sizes) < 2:
        raise KformerError("document hold-out needs at least two documents in the metadata")
    want = max(1, round(fraction * len(pairs)))
    chosen: list[str] = []
    held_count = 0
    for index in np.random.default_rng(seed).permutation(len(sizes)):
        doc = list(sizes)[index]
        need = want - held_count
        if need <= 0:
            break
        if sizes[doc] <= 2 * need and held_count + sizes[doc] < len(pairs):
            chosen.append(doc)
            held_count += sizes[doc]
    held_docs = set(chosen)
    train = [p for p, d in zip(pairs, documents, strict=True) if d not in held_docs]
    held = [p for p, d in zip(pairs, documents, strict=True) if d in held_docs]
    return train, held, chosen


def curriculum_levels(lengths: Sequence[int], levels: int = 3) -> list[np.ndarray]:
    """Index sets for curriculum training, short examples first.

    Level ``k`` (0-based) holds the examples no longer than the ``(k+1)/levels`` length quantile,
    so each level adds longer examples and the last level is the whole set.
    """
    lengths = np.asarray(lengths)
    if levels < 1:
        raise KformerError("curriculum levels must be at least 1")
    cuts = [np.quantile(lengths, (k + 1) / levels) for k in range(levels - 1)] + [np.inf]
    return [np.flatnonzero(lengths <= cut) for cut in cuts]

