"""What the ``"auto"`` rules (:mod:`.auto`) read: the training pairs' shape before the
vocabularies (:class:`CorpusStats`) and their subword lengths after (:class:`EncodedStats`)."""

from __future__ import annotations

import math
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SCRIPT_SAMPLE = 2000  # sentences per side looked at for the script
# English function words that are not words of other Latin-script languages: about a fifth of the words of
# English text (measured: TICO-19's English side 22 %, Tatoeba's 24 %, 3,000 Anki sources 21 %; their
# Spanish and Tamil sides 0 %)
ENGLISH_MARKERS = frozenset("the of and to is that it for you with was are this have be not".split())


@dataclass(frozen=True)
class SideShape:
    """One side of the training pairs: words, distinct words and the script most letters are in."""

    words: int
    distinct_words: int
    script: str  # "LATIN", "TAMIL", ... (first word of the letters' Unicode names)
    english_share: float = 0.0  # share of the sampled words that are ENGLISH_MARKERS


def side_shape(texts: Sequence[str]) -> SideShape:
    """Word counts of ``texts``, the script of most letters and the share of English marker words
    in the first ``SCRIPT_SAMPLE``."""
    words, distinct = 0, set()
    for text in texts:
        split = text.split()
        words += len(split)
        distinct.update(split)
    sample = texts[:SCRIPT_SAMPLE]
    scripts = Counter(unicodedata.name(ch, "UNKNOWN").split()[0] for text in sample for ch in text if ch.isalpha())
    sampled = [word.strip(".,;:!?\"'()").lower() for text in sample for word in text.split()]
    english = sum(word in ENGLISH_MARKERS for word in sampled) / max(len(sampled), 1)
    return SideShape(words, len(distinct), scripts.most_common(1)[0][0] if scripts else "NONE", round(english, 4))


@dataclass(frozen=True)
class CorpusStats:
    """What the ``"corpus"`` rules read: the training pairs before any vocabulary."""

    distinct_pairs: int  # repeating a pair adds no new substring
    source: SideShape
    target: SideShape

    @classmethod
    def of(cls, pairs) -> CorpusStats:
        """The statistics of training :class:`~kformer.data.pairs.Pair` objects."""
        return cls(len({(p.source, p.target) for p in pairs}), side_shape([p.source for p in pairs]),
                   side_shape([p.target for p in pairs]))


@dataclass(frozen=True)
class EncodedStats:
    """What the ``"encoded"`` rules read: each training pair's subword count per side, ``(pairs,)``
    arrays without ``[START]``/``[END]``; the rules after ``max_length`` look at the pairs that fit it."""

    source_lengths: np.ndarray
    target_lengths: np.ndarray

    @classmethod
    def of(cls, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]) -> EncodedStats:
        return cls(np.array([len(ids) for ids in sources], dtype=np.int64),
                   np.array([len(ids) for ids in targets], dtype=np.int64))

    def percentile(self, q: float) -> tuple[int, int]:
        """The ``q``-th percentile of the source and of the target lengths, rounded up."""
        return tuple(math.ceil(np.percentile(side, q)) for side in (self.source_lengths, self.target_lengths))

    def fits(self, max_length: int) -> np.ndarray:
        """``(pairs,)`` bool: both sides 1..``max_length`` subwords (the pairs training keeps)."""
        sides = (self.source_lengths, self.target_lengths)
        return np.logical_and.reduce([(side > 0) & (side <= max_length) for side in sides])

    def target_tokens(self, max_length: int) -> int:
        """Target tokens of the pairs that fit, ``[END]`` included: what an epoch trains on."""
        return int((self.target_lengths[self.fits(max_length)] + 1).sum())

    def pair_lengths(self, max_length: int) -> np.ndarray:
        """The batch length of each pair that fits: the longer of its source and ``[START] + target``."""
        keep = self.fits(max_length)
        return np.maximum(self.source_lengths[keep], self.target_lengths[keep] + 1)
