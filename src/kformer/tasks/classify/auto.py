"""The ``auto`` settings of a classify run: rules from the shape of the training data to settings.

Two pure functions, no Keras: :func:`data_stats` measures the training split (rows, classes,
word-token lengths, distinct words) and :func:`choose` turns those statistics and a
:class:`~kformer.tasks.classify.ClassifyConfig` into the same config with every ``"auto"``
setting chosen, plus what was chosen and why (:class:`~kformer.auto.AutoChoices`, written to
``metrics.json["auto"]`` and printed in one line by ``kformer train classify``). Settings given
explicitly (a recipe, a flag, an argument) always win, and later rules build on them (an explicit
``dim`` sets ``heads`` and ``ff_dim`` around it; an explicit ``batch_size`` sets the epochs).

The rules for kformer's own encoder (``backbone`` scratch or bert-scratch), in the order applied:

=================  ===========================================================================
max_length         the 95th percentile of the texts' token counts, rounded up to a width
                   bucket (16, 24, 32, 48, 64, 96, 128, 192, 256), within 16..256
truncation         head_tail when more than 5 % of the texts are longer (so cut), else head
vocab_size         the words seen at least twice in the training text, within 1,000..30,000 (the
                   rest become ``[UNK]``, so the model learns what an unseen word means);
                   60,000 with word bigrams (``ngrams = 2``)
dim, heads         128 and 4 heads; 64 and 2 heads below 2,000 rows or above 128 tokens per text
ff_dim             twice ``dim``
blocks             1; 2 from 100,000 rows of texts of at most 128 tokens
batch_size         32 below 20,000 rows, 64 below 100,000, else 128
learning_rate      2e-3 (1e-3 below 2,000 rows)
label_smoothing    0.1 from 10 classes, else 0
dropout            0.2 below 500 training rows per class, else 0.1
epochs             about 3,300 optimizer steps (within 3..40 epochs: a schedule that decays fully
                   before early stopping; HWU64's 18 planned epochs stopped at 12 with its best at
                   7, Transformer 84.4 %, while 12 planned gave 85.7 %), and no more than about
                   120,000 texts seen in all (large sets overfit sooner: IT tickets' 34,443 rows
                   with 7 planned epochs, Transformer 85.6 %; 4 epochs, 86.9 %); with ``max_minutes``, no
                   more than the estimated epochs in 90 % of the budget, rounded to the nearest
                   whole epoch (rounding down left IMDB a third of its 10 minutes unused)
patience           a quarter of the epochs, at least 3 (early stopping watches validation macro-F1)
wide               on: a TF-IDF n-gram + logistic regression part beside the network, mixed by
                   a weight chosen on validation (:mod:`kformer.tasks.classify_wide`)
=================  ===========================================================================

Pretrained backbones (``minilm`` or a folder) bring their own size and vocabulary: those settings
keep the values kformer used before ``auto`` (recorded as unused), batch 32, learning rate 1e-4,
6 epochs (fitted to ``max_minutes`` by the same estimate for a MiniLM-sized network), and no wide
part (nor with ``freeze``).

The time estimate is ``(3 x training + validation tokens) x multiply-adds per token / rate`` plus a
fixed cost per step, with ``rate`` = :data:`CPU_MACS_PER_SECOND` for a 2-core CPU; a faster machine
finishes early, and the time budget still stops a run that was underestimated (ending at a low
learning rate, which under ``max_minutes`` decays with the clock too).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from kformer.auto import AutoChoices
from kformer.data.batching import bucket_width
from kformer.text.vocabulary import RESERVED_TOKENS
from kformer.text.words import split_words

if TYPE_CHECKING:
    from kformer.tasks.classify import ClassifyConfig

RESERVED = len(RESERVED_TOKENS)  # the special tokens every vocabulary starts with
SAMPLE_ROWS = 50_000  # texts measured at most (evenly spaced), so a huge file costs no more
PIECES_PER_WORD = 1.3  # word pieces per word (wordpiece and pretrained tokenizers), for lengths
LENGTH_PERCENTILE = 95
LENGTH_RANGE = (16, 256)
VOCAB_RANGE = (1_000, 30_000)
SMALL_ROWS, LARGE_ROWS = 2_000, 100_000
LONG_TEXT = 128  # tokens per text above which a text counts as long (a narrow model)
BATCH_ROWS = ((20_000, 32), (100_000, 64))  # (fewer rows than, batch size); else 128
TARGET_STEPS = 3_300
TARGET_TEXTS_SEEN = 120_000  # epochs x training rows, at most (rounded up to a whole epoch)
EPOCH_RANGE = (3, 40)
MANY_CLASSES = 10
FEW_PER_CLASS = 500
MIN_PATIENCE = 3
BUDGET_SHARE, BUDGET_SETUP_S = 0.9, 20.0  # share of max_minutes planned for; seconds for compiling
# Measured on the 2-core CPU shared with other jobs (bench/auto_classify.py runs, BENCHMARKS.md):
# IMDB at 256 tokens, dim 64: ~2.8e9 multiply-adds/s; HWU64 and banking77 (short texts, batch 32):
# ~60 ms per step, mostly fixed cost. The rates below are twice that (the machine alone): under
# max_minutes the learning rate also decays with the clock, so planning a little too many epochs
# costs nothing, while planning too few leaves the budget unused.
CPU_MACS_PER_SECOND = 6.0e9  # multiply-adds per second of training
STEP_SECONDS = 0.03  # fixed cost of an optimizer step (dispatch, the AdamW update, bucketing)
PRETRAINED_SHAPE = (6, 384, 1536)  # layers, width, feed-forward width of all-MiniLM-L6-v2
# what a pretrained backbone ignores keeps the value kformer used before "auto"
UNUSED_WHY = "not used:"
UNUSED_BY_PRETRAINED = {"vocab_size": 8000, "dim": 64, "heads": 2, "ff_dim": 128, "blocks": 1, "truncation": "head"}


@dataclass(frozen=True)
class DataStats:
    """What the rules look at: the training split's ``rows`` and ``classes``, the
    ``length_quantiles`` (101 values: the 0th..100th percentile of word tokens per text),
    ``distinct_words``, the ``valid_rows`` scored each epoch, and ``sampled`` rows measured
    (``rows`` unless the data is larger than :data:`SAMPLE_ROWS`)."""

    rows: int
    classes: int
    length_quantiles: tuple[float, ...]
    distinct_words: int
    valid_rows: int = 0
    sampled: int = 0
    repeated_words: int | None = None  # distinct words seen at least twice (None: distinct_words)

    @property
    def kept_words(self) -> int:
        """The words worth a vocabulary entry: those seen at least twice."""
        return self.distinct_words if self.repeated_words is None else self.repeated_words

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile of word tokens per text (0..100)."""
        return float(np.interp(q, np.arange(101), self.length_quantiles))

    def mean_length(self, limit: float, scale: float = 1.0) -> float:
        """The mean tokens per text once each is cut to ``limit`` (lengths times ``scale``)."""
        return float(np.mean(np.minimum(np.asarray(self.length_quantiles) * scale, limit)))


def data_stats(texts: Sequence[str], labels: Sequence[str], valid_rows: int = 0) -> DataStats:
    """Measure the training texts (word tokens, as kformer's word tokenizer splits them)."""
    rows = len(texts)
    step = max(1, math.ceil(rows / SAMPLE_ROWS))
    words: Counter = Counter()
    lengths = []
    for text in texts[::step]:
        tokens = split_words(text)
        lengths.append(len(tokens))
        words.update(tokens)
    quantiles = np.percentile(np.asarray(lengths or [0], dtype="float64"), np.arange(101))
    repeated = sum(1 for count in words.values() if count >= 2)
    return DataStats(rows, len(set(labels)), tuple(float(q) for q in quantiles), len(words), int(valid_rows),
                     len(lengths), repeated)


def choose(config: ClassifyConfig, stats: DataStats,
           macs_per_second: float = CPU_MACS_PER_SECOND) -> tuple[ClassifyConfig, AutoChoices]:
    """``config`` with every ``"auto"`` setting chosen from ``stats``, and the choices with reasons."""
    auto = AutoChoices()
    scratch = config.scratch
    # tokens per word: word pieces are shorter than words; with bigrams every word adds one more
    scale = (1.0 if scratch and config.tokenizer == "word" else PIECES_PER_WORD) * config.ngrams
    config = auto.resolve(config, max_length=_max_length(stats, scale))
    if scratch:
        config = auto.resolve(config, truncation=_truncation(stats, config.max_length, scale))
        config = auto.resolve(config, vocab_size=_vocab_size(stats, config.ngrams))
        config = auto.resolve(config, dim=_dim(stats, config.max_length))
        config = auto.resolve(config, heads=_heads(config.dim), ff_dim=(2 * config.dim, f"twice dim {config.dim}"))
        config = auto.resolve(config, blocks=_blocks(stats, config.max_length))
    else:
        unused = f"{UNUSED_WHY} backbone {config.backbone} brings its own"
        config = auto.resolve(config, **{name: (value, unused) for name, value in UNUSED_BY_PRETRAINED.items()})
    config = auto.resolve(config, batch_size=_batch_size(stats, scratch))
    config = auto.resolve(config, learning_rate=_learning_rate(stats, config.backbone, scratch))
    config = auto.resolve(config, label_smoothing=_label_smoothing(stats), dropout=_dropout(stats))
    config = auto.resolve(config, epochs=_epochs(stats, config, scale, macs_per_second))
    config = auto.resolve(config, patience=_patience(config.epochs))
    config = auto.resolve(config, wide=_wide(config))
    return config, auto


def describe(stats: DataStats | None, chosen: dict[str, dict]) -> str:
    """One line naming the data's shape and each auto value the network uses (the reasons, and
    the values a pretrained backbone ignores, are in metrics.json)."""
    used = {name: item for name, item in chosen.items() if not item["why"].startswith(UNUSED_WHY)}
    values = ", ".join(f"{name}={item['value']:g}" if isinstance(item["value"], float) else f"{name}={item['value']}"
                       for name, item in used.items()) or "none (every setting is given)"
    shape = ("auto settings (as the run began)" if stats is None else
             f"auto settings for {stats.rows:,} training rows, {stats.classes} classes, "
             f"{stats.percentile(50):.0f} words per text (median)")
    return f"{shape}: {values} (reasons: metrics.json \"auto\")"


def _rows_text(stats: DataStats) -> str:
    return f"{stats.rows:,} training rows"


def _max_length(stats: DataStats, scale: float) -> tuple[int, str]:
    low, high = LENGTH_RANGE
    words = stats.percentile(LENGTH_PERCENTILE)
    tokens = math.ceil(words * scale)
    value = min(high, max(low, bucket_width(max(tokens, 1))))
    pieces = "" if scale == 1.0 else f" (~{tokens} tokens)"
    return value, (f"{LENGTH_PERCENTILE}th percentile of the training texts' lengths is {words:.0f} words{pieces}: "
                   f"the width bucket holding it, within {low}..{high}")


def _truncation(stats: DataStats, max_length: int, scale: float) -> tuple[str, str]:
    cut = 100.0 - float(np.interp(max_length / scale, stats.length_quantiles, np.arange(101)))
    if cut > 100 - LENGTH_PERCENTILE:
        return "head_tail", (f"{cut:.0f} % of the training texts are longer than max_length {max_length}: keep their "
                             "beginning and end (reviews and tickets often conclude at the end)")
    return "head", f"{cut:.0f} % of the training texts are longer than max_length {max_length}"


def _vocab_size(stats: DataStats, ngrams: int) -> tuple[int, str]:
    low, high = VOCAB_RANGE
    if ngrams == 2:
        return 2 * high, f"words and word bigrams (ngrams 2): twice the words' limit of {high:,}"
    value = min(high, max(low, stats.kept_words + RESERVED))
    sample = "" if stats.sampled >= stats.rows else f" in a sample of {stats.sampled:,} texts"
    if value >= stats.distinct_words + RESERVED:
        return value, f"{stats.distinct_words:,} distinct words{sample}: all of them fit"
    return value, (f"{stats.distinct_words:,} distinct words{sample}, {stats.kept_words:,} seen at least twice: "
                   f"the {value - RESERVED:,} most frequent (within {low:,}..{high:,}); the rest become [UNK], "
                   "which training then teaches, as it will meet unseen words")


def _dim(stats: DataStats, max_length: int) -> tuple[int, str]:
    if stats.rows < SMALL_ROWS:
        return 64, f"{_rows_text(stats)} (below {SMALL_ROWS:,}): a small model overfits less"
    if max_length > LONG_TEXT:
        return 64, f"long texts (max_length {max_length} > {LONG_TEXT}): a narrow model keeps each step affordable"
    return 128, f"{_rows_text(stats)} of texts of at most {max_length} tokens"


def _heads(dim: int) -> tuple[int, str]:
    heads = 4 if dim >= 128 else 2
    if dim % heads:
        return 1, f"dim {dim} is not divisible by {heads}"
    return heads, f"{dim // heads} dimensions per head at dim {dim}"


def _blocks(stats: DataStats, max_length: int) -> tuple[int, str]:
    if stats.rows >= LARGE_ROWS and max_length <= LONG_TEXT:
        return 2, f"{_rows_text(stats)} (at least {LARGE_ROWS:,}) of short texts: a second block pays"
    return 1, f"{_rows_text(stats)}, max_length {max_length}: one block is enough and fast"


def _batch_size(stats: DataStats, scratch: bool) -> tuple[int, str]:
    if not scratch:
        return 32, "fine-tuning a pretrained backbone: small batches"
    for below, size in BATCH_ROWS:
        if stats.rows < below:
            return size, f"{_rows_text(stats)} (below {below:,})"
    return 128, f"{_rows_text(stats)} (at least {BATCH_ROWS[-1][0]:,})"


def _learning_rate(stats: DataStats, backbone: str, scratch: bool) -> tuple[float, str]:
    if not scratch:
        return 1e-4, f"backbone {backbone}: pretrained weights fine-tuned (AdamW 1e-4 reached 93.4 % on banking77 with MiniLM)"
    if stats.rows < SMALL_ROWS:
        return 1e-3, f"backbone {backbone}: a network learned from scratch on few rows ({stats.rows:,})"
    return 2e-3, f"backbone {backbone}: a network learned from scratch (warmup, then decay)"


def _label_smoothing(stats: DataStats) -> tuple[float, str]:
    if stats.classes >= MANY_CLASSES:
        return 0.1, f"{stats.classes} classes (at least {MANY_CLASSES}): close classes, softer targets"
    return 0.0, f"{stats.classes} classes (below {MANY_CLASSES})"


def _dropout(stats: DataStats) -> tuple[float, str]:
    per_class = stats.rows / max(stats.classes, 1)
    if per_class < FEW_PER_CLASS:
        return 0.2, f"{per_class:.0f} training rows per class (below {FEW_PER_CLASS}): more regularisation"
    return 0.1, f"{per_class:.0f} training rows per class"


def macs_per_token(config: ClassifyConfig, width: float) -> float:
    """Forward multiply-adds per token of the encoder (at a sequence ``width``)."""
    if config.scratch:
        blocks, dim, ff_dim = config.blocks, config.dim, config.ff_dim
    else:
        blocks, dim, ff_dim = PRETRAINED_SHAPE
    return blocks * (4 * dim * dim + 2 * dim * ff_dim + 2 * width * dim)


def epoch_seconds(stats: DataStats, config: ClassifyConfig, scale: float = 1.0,
                  macs_per_second: float = CPU_MACS_PER_SECOND) -> float:
    """Estimated seconds of one epoch: training (forward and backward, 3x) and validation."""
    width = stats.mean_length(config.max_length, scale) + 2  # length-bucketed batches pad little
    work = (3 * stats.rows + stats.valid_rows) * width * macs_per_token(config, width)
    steps = math.ceil(stats.rows / config.batch_size)
    return work / macs_per_second + steps * STEP_SECONDS


def _epochs(stats: DataStats, config: ClassifyConfig, scale: float, macs_per_second: float) -> tuple[int, str]:
    steps = math.ceil(stats.rows / config.batch_size)
    if config.scratch:
        low, high = EPOCH_RANGE
        by_steps, by_texts = math.ceil(TARGET_STEPS / steps), math.ceil(TARGET_TEXTS_SEEN / stats.rows)
        epochs = min(high, max(low, min(by_steps, by_texts)))
        why = (f"{steps} steps per epoch: about {TARGET_STEPS:,} steps in all" if by_steps <= by_texts else
               f"{stats.rows:,} rows: about {TARGET_TEXTS_SEEN:,} texts seen in all (large sets overfit sooner)")
        why += f", within {low}..{high} epochs"
    else:
        epochs, why = 6, "fine-tuning a pretrained backbone: a few epochs"
    if config.max_minutes is not None:
        seconds = epoch_seconds(stats, config, scale, macs_per_second)
        plan = max(config.max_minutes * 60.0 * BUDGET_SHARE - BUDGET_SETUP_S, 0.0)
        fit = max(1, round(plan / seconds))  # the nearest whole number: an epoch begun is mostly run
        if fit < epochs:
            epochs = fit
            why += (f"; cut to {fit} to fit max_minutes {config.max_minutes:g} (about {seconds:.0f} s per epoch "
                    "estimated on a 2-core CPU)")
        else:
            why += f"; fits max_minutes {config.max_minutes:g} (about {seconds:.0f} s per epoch estimated on a 2-core CPU)"
    return epochs, why


def _wide(config: ClassifyConfig) -> tuple[bool, str]:
    if config.freeze:
        return False, "freeze: the fast path stays a cached text vector and a small head"
    if not config.scratch:
        return False, f"backbone {config.backbone} is pretrained: it already knows the words an n-gram part would add"
    return True, (f"backbone {config.backbone} learns from this data alone: TF-IDF n-grams + logistic regression "
                  "beside it, mixed by a weight chosen on validation (metrics.json \"wide\")")


def _patience(epochs: int) -> tuple[int, str]:
    value = max(MIN_PATIENCE, math.ceil(epochs / 4))
    return value, f"a quarter of {epochs} epochs, at least {MIN_PATIENCE}: validation macro-F1 may rise late"
