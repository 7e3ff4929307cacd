"""Translation training batches and "auto" settings, as pure functions (no model, no TensorFlow):
token-budget packing, the epoch plan (resume order, curriculum), the auto rules on corpora of
different shapes, the repetition metric, and the Joshua IPC reader's split by segment."""

from __future__ import annotations

import numpy as np
import pytest

from kformer.data.batching import bucket_width, token_budget_batches
from kformer.data.pair_batches import PairBatchPlan
from kformer.data.pairs import Pair, curriculum_levels, document_holdout, read_joshua_ipc
from kformer.errors import KformerError
from kformer.metrics import repetition_share
from kformer.tasks.translate import auto as translate_auto
from kformer.tasks.translate.auto import training_rules, vocab_rules
from kformer.tasks.translate.stats import CorpusStats, EncodedStats, SideShape, side_shape

LENGTHS = np.random.default_rng(0).integers(1, 120, size=1000)


def _padded(batch, lengths=LENGTHS) -> int:
    return len(batch) * bucket_width(int(lengths[batch].max()))


@pytest.mark.parametrize("budget", [64, 512, 2048])
def test_token_batches_respect_the_budget_and_cover_every_row_once(budget):
    for rng in (None, np.random.default_rng(3)):
        batches = token_budget_batches(LENGTHS, budget, rng)
        rows = np.concatenate(batches)
        assert sorted(rows.tolist()) == list(range(len(LENGTHS)))  # every row exactly once
        for batch in batches:  # within the budget, unless one row alone is longer
            assert _padded(batch) <= budget or len(batch) == 1
        # packed: no batch could have taken its successor's shortest row... nearly all are full
        full = [b for b in batches if _padded(b) > budget // 2]
        assert len(full) >= len(batches) - 8
    shuffled = [len(b) for b in token_budget_batches(LENGTHS, budget, np.random.default_rng(4))]
    assert len(shuffled) == len(token_budget_batches(LENGTHS, budget))  # the same count every epoch


def test_short_rows_come_many_to_a_batch_and_long_ones_few_in_few_shapes():
    batches = token_budget_batches(LENGTHS, 1024, np.random.default_rng(1))
    shapes = {(len(b), bucket_width(int(LENGTHS[b].max()))) for b in batches}
    widths = {width for _, width in shapes}
    assert len(shapes) <= 2 * len(widths)  # per width: one full shape and at most one remainder
    for width in widths:
        assert max(rows for rows, w in shapes if w == width) == min(1024 // width, np.sum(
            [bucket_width(int(n)) == width for n in LENGTHS]))
    assert (1024 // 32, 32) in shapes and (1024 // 128, 128) in shapes  # 32 short rows a batch, 8 long ones


def test_epoch_plan_covers_every_pair_once_and_a_resume_sees_the_same_order():
    plan = PairBatchPlan(LENGTHS, batch_tokens=1024, seed=5)
    for epoch in range(3):
        batches = plan.epoch(epoch)
        assert len(batches) == plan.steps
        assert sorted(np.concatenate(batches).tolist()) == list(range(len(LENGTHS)))
    again = PairBatchPlan(LENGTHS, batch_tokens=1024, seed=5)  # a resumed run rebuilds the plan
    assert all(np.array_equal(a, b) for a, b in zip(plan.epoch(2), again.epoch(2), strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(plan.epoch(1), plan.epoch(2), strict=False))
    by_size = PairBatchPlan(LENGTHS, batch_size=32, seed=5)  # the --batch-size override
    assert by_size.steps == 32 and all(len(b) <= 32 for b in by_size.epoch(0))
    with pytest.raises(ValueError):
        PairBatchPlan(LENGTHS, batch_tokens=64, batch_size=8)


def test_weighted_epochs_fill_every_batch_of_a_width_to_one_size():
    """With corpus weights each epoch's remainder batches change size; filled up to ``full_rows``,
    a width has one batch size in every epoch (what an XLA step compiles once), never over the
    token budget, and the filling is only ever added to a remainder."""
    groups = np.arange(len(LENGTHS)) % 3
    plan = PairBatchPlan(LENGTHS, batch_tokens=1024, seed=5, groups=groups, weights=(0.5, 1.7, 3.2))
    sizes: dict[int, set] = {}
    remainders = set()
    for epoch in range(4):
        for batch in plan.epoch(epoch):
            width = bucket_width(int(LENGTHS[batch].max()))
            full = plan.full_rows(batch)
            assert len(batch) <= full and full * width <= 1024
            sizes.setdefault(width, set()).add(full)
            if len(batch) < full:
                remainders.add((width, len(batch)))
    assert all(len(full) == 1 for full in sizes.values())
    assert len(remainders) > len(sizes)  # without filling, the widths would meet more sizes than one each
    assert PairBatchPlan(LENGTHS, batch_size=32).full_rows(np.arange(5)) == 32


def test_curriculum_first_epochs_are_short_and_later_epochs_normal():
    levels = tuple(curriculum_levels(LENGTHS, 3))
    plan = PairBatchPlan(LENGTHS, batch_tokens=1024, seed=0, levels=levels)
    first = plan.epoch(0)
    assert len(first) == plan.steps
    cut = np.quantile(LENGTHS, 1 / 3)
    assert max(LENGTHS[b].max() for b in first) <= cut  # only the short third
    second = np.concatenate(plan.epoch(1))
    assert LENGTHS[second].max() <= np.quantile(LENGTHS, 2 / 3) < LENGTHS.max()
    for epoch in (2, 3):  # from the last level on: every pair once
        assert sorted(np.concatenate(plan.epoch(epoch)).tolist()) == list(range(len(LENGTHS)))


def test_vocab_rules_by_script_and_size():
    english = side_shape(["the patient has a fever", "wash your hands often"] * 50)
    spanish = side_shape(["el paciente tiene fiebre", "lávese las manos"] * 50)
    tamil = side_shape(["நோயாளிக்கு காய்ச்சல் உள்ளது", "கைகளை கழுவுங்கள்"] * 50)
    assert (english.script, tamil.script, english.distinct_words) == ("LATIN", "TAMIL", 9)
    same = vocab_rules(english, spanish)
    assert same["shared_vocab"][0] is True and same["vocab_size"][0] == 1000 and "target_vocab_size" not in same
    apart = vocab_rules(english, tamil)
    assert apart["shared_vocab"][0] is False and "Tamil" in apart["shared_vocab"][1]
    assert apart["vocab_size"][0] == apart["target_vocab_size"][0] == 1000
    forced = vocab_rules(english, spanish, shared=False)  # --no-shared-vocab: a size per side, nothing else
    assert set(forced) == {"vocab_size", "target_vocab_size"}
    words = vocab_rules(english, tamil, words=True)  # whole words: one vocabulary, as the Tamil lesson's
    assert set(words) == {"shared_vocab"} and words["shared_vocab"][0] is True
    big = vocab_rules(SideShape(10**6, 35_376, "LATIN"), SideShape(10**6, 17_303, "TAMIL"))
    assert big["vocab_size"][0] == 8000 and big["target_vocab_size"][0] == 4500  # /4, rounded to 500, capped


@pytest.mark.parametrize(("tokens", "epochs", "minutes", "dim"), [
    (600, 20, None, 64),               # a handful of pairs: the tiny model
    (135_000, 40, 3.0, 128),           # TICO-19 size, the 3-minute default run
    (1_200_000, 20, 30.0, 128),        # Anki size, 30 minutes: too few tokens for the base model
    (1_200_000, 20, None, 256),        # Anki size without a budget: the base model
])
def test_training_rules_fit_the_corpus_and_the_budget(tokens, epochs, minutes, dim):
    rules = training_rules(tokens, epochs, minutes)
    assert rules["dim"][0] == dim and all(why for _, why in rules.values())
    batch_tokens = rules["batch_tokens"][0]
    assert batch_tokens & (batch_tokens - 1) == 0 and 64 <= batch_tokens <= 4096  # a power of two in range
    size = next(s for s in translate_auto.SIZES if s.dim == dim)
    run = translate_auto.run_tokens(tokens, epochs, minutes, size)
    assert run / batch_tokens >= translate_auto.MIN_UPDATES or batch_tokens == 64  # enough updates
    assert tokens / batch_tokens >= translate_auto.MIN_BATCHES_PER_EPOCH or batch_tokens == 64
    assert 0 < rules["learning_rate"][0] <= size.learning_rate
    warmup, why = translate_auto.warmup_rule(round(run / batch_tokens))
    assert warmup == pytest.approx(max(1, 0.05 * run / batch_tokens), abs=1) and "5%" in why


def test_a_width_set_by_a_recipe_sizes_the_batch_for_that_width():
    auto = training_rules(8_000, 40, 3.0)  # the tiny model's throughput
    set_128 = training_rules(8_000, 40, 3.0, dim=128)
    assert auto["dim"][0] == 64 and set_128["dim"][0] == 128 and "width 128" in set_128["dim"][1]
    assert set_128["learning_rate"][0] == 2e-3 and auto["learning_rate"][0] == 3e-3  # each size's rate
    assert translate_auto.nearest_size(100).dim == 128 and translate_auto.nearest_size(300).dim == 256


def test_a_three_minute_run_reaches_its_peak_rate_early():
    rules = training_rules(135_000, 40, 3.0)
    size = translate_auto.SIZES[1]
    updates = translate_auto.run_tokens(135_000, 40, 3.0, size) / rules["batch_tokens"][0]
    warmup, _ = translate_auto.warmup_rule(round(updates))
    assert warmup <= 0.06 * updates and updates >= translate_auto.MIN_UPDATES


def test_early_stopping_watches_accuracy_only_when_the_loss_is_smoothed():
    assert translate_auto.early_stopping_rule(0.1)[0] == "accuracy"
    assert translate_auto.early_stopping_rule(0.0)[0] == "loss"
    assert all(translate_auto.early_stopping_rule(s)[1] for s in (0.0, 0.1))  # each says why


def test_repetition_share_counts_words_and_subwords_repeated_more_than_three_times():
    hypotheses = ["a a a a b", "a a a b", "x y", "அ-2000000"]
    assert repetition_share(hypotheses) == pytest.approx(1 / 4)  # only the first: 4 words in a row
    pieces = [[5], [5], [7, 8], [9, 4, 1, 1, 1, 1, 1, 1]]  # the digits as subwords
    assert repetition_share(hypotheses, pieces) == pytest.approx(2 / 4)
    assert repetition_share([]) == 0.0
    with pytest.raises(ValueError):
        repetition_share(["a"], [[1], [2]])


def test_joshua_reader_splits_by_segment(tmp_path):
    folder = tmp_path / "en-ta-joshua-ipc"
    folder.mkdir()
    rows = [(f"sentence {s} by worker {r}", f"வாக்கியம் {s}", f"doc{s // 3}_{s}", "dev", r)
            for s in range(12) for r in range(4)]
    (folder / "en-ta.tsv").write_text("".join(f"{en}\t{ta}\n" for en, ta, *_ in rows), encoding="utf-8")
    (folder / "en-ta.meta.tsv").write_text(
        "seg_id\torig_split\tref_index\n" + "".join(f"{seg}\t{split}\t{ref}\n" for *_, seg, split, ref in rows),
        encoding="utf-8")
    pairs, segments = read_joshua_ipc(folder)
    assert len(pairs) == len(segments) == 48 and segments[:2] == ["doc0_0", "doc0_0"]
    assert isinstance(pairs[0], Pair) and pairs[0].target == "வாக்கியம் 0"
    train, held, chosen = document_holdout(pairs, segments, fraction=0.25, seed=0)
    assert len(held) == 12 and len(chosen) == 3
    assert not {p.target for p in train} & {p.target for p in held}  # no Tamil sentence on both sides
    (folder / "en-ta.meta.tsv").write_text("seg_id\torig_split\tref_index\nx_1\tdev\t0\n", encoding="utf-8")
    with pytest.raises(KformerError, match="line for line"):
        read_joshua_ipc(folder)


def test_describe_is_one_line_with_every_choice():
    chosen = {"dim": {"value": 128, "why": "..."}, "learning_rate": {"value": 0.0014, "why": "..."}}
    line = translate_auto.describe(2804, 100_767, chosen)
    assert line == ('auto settings for 2,804 training pairs, 100,767 target tokens: dim=128, learning_rate=0.0014 '
                    '(reasons: metrics.json "auto")')


def test_decode_length_rule_fits_the_training_targets_and_caps_short_sources():
    rng = np.random.default_rng(0)
    sources = [[4] * n for n in rng.integers(1, 40, size=400)]
    targets = [[5] * int(round(1.5 * len(s))) for s in sources]  # targets 1.5 x their sources
    rule = translate_auto.decode_length_rule(sources, targets)
    assert rule["extra"] == translate_auto.DECODE_EXTRA and 1.0 <= rule["per_source_token"] <= 1.5
    fits = [len(t) + 1 <= np.ceil(rule["per_source_token"] * len(s)) + rule["extra"]
            for s, t in zip(sources, targets, strict=True)]
    assert np.mean(fits) >= translate_auto.DECODE_QUANTILE
    assert np.ceil(rule["per_source_token"] * 8) + rule["extra"] <= 18  # an 8-piece source: at most 18 tokens
    wild = translate_auto.decode_length_rule([[4]] * 10, [[5] * 60] * 10)  # absurd ratios stay within range
    assert wild["per_source_token"] == translate_auto.DECODE_RATIO_RANGE[1]
    assert translate_auto.decode_length_rule([], []) == translate_auto.DEFAULT_DECODE_LENGTH


def test_a_three_minute_tico_run_leaves_out_the_startup_and_packs_1024_token_batches():
    """TICO-19's ~100k target tokens in 3 minutes: the budget less the tracing startup at the small
    model's measured speed, 1,024-token batches (at least 400 updates) at the small model's full
    rate -- measured better than 256-token batches or a rate scaled down (translate_auto's docstring)."""
    small = translate_auto.SIZES[1]
    run = translate_auto.run_tokens(100_767, 20, 3.0, small)
    assert run == pytest.approx((180 - translate_auto.STARTUP_SECONDS) * small.tokens_per_second)
    rules = training_rules(100_767, 20, 3.0)
    assert rules["dim"][0] == 128 and rules["batch_tokens"][0] == 1024 and run / 1024 >= translate_auto.MIN_UPDATES
    assert rules["learning_rate"][0] == small.learning_rate == 2e-3
    assert training_rules(100_767, 20, 30.0)["batch_tokens"][0] == 4096  # a longer budget: larger batches
    # a budget shorter than the startup still plans a tenth of it, not nothing
    assert translate_auto.run_tokens(100_767, 20, 0.2, small) == pytest.approx(0.2 * 6 * small.tokens_per_second)


def test_batch_tokens_scale_scales_what_auto_picks_within_its_range_and_warmup_follows():
    """The en-ta recipe halves auto's batch (batch_tokens_scale 0.5): 30 minutes on 1.4 million target
    tokens packs 2,048-token batches instead of 4,096, with twice the warmup steps; the range's
    floor still holds; a batch_tokens set by hand is left as it is."""
    import kformer
    from kformer.tasks.translate import TranslateConfig

    assert kformer.recipe("en-ta").batch_tokens_scale == 0.5
    whole, half = training_rules(1_400_000, 40, 30.0), training_rules(1_400_000, 40, 30.0, batch_scale=0.5)
    assert (whole["batch_tokens"][0], half["batch_tokens"][0]) == (4096, 2048)
    assert "scaled by 0.5 (batch_tokens_scale)" in half["batch_tokens"][1] and "scaled" not in whole["batch_tokens"][1]
    assert training_rules(1_000, 40, 1.0, batch_scale=0.5)["batch_tokens"][0] == translate_auto.BATCH_TOKENS_RANGE[0]
    encoded = EncodedStats(np.full(20_000, 20), np.full(20_000, 30))
    warmups = []
    for scale in (1.0, 0.5):
        config, _ = translate_auto.RULES.resolve(TranslateConfig(max_minutes=30.0, batch_tokens_scale=scale), encoded,
                                                 phase="encoded")
        warmups.append(config.warmup_steps)
        assert config.batch_tokens == training_rules(20_000 * 31, 20, 30.0, batch_scale=scale)["batch_tokens"][0]
    assert warmups[1] == pytest.approx(2 * warmups[0], abs=1)
    config, _ = translate_auto.RULES.resolve(TranslateConfig(batch_tokens=512, batch_tokens_scale=0.5), encoded,
                                             phase="encoded")
    assert config.batch_tokens == 512
    with pytest.raises(KformerError, match="batch_tokens_scale must be positive"):
        TranslateConfig(batch_tokens_scale=0)


def test_xla_compiles_the_step_only_where_it_repays_the_compiles():
    least = translate_auto.XLA_MIN_UPDATES
    assert translate_auto.xla_rule(least, "tensorflow")[0] is True
    assert translate_auto.xla_rule(least - 1, "tensorflow")[0] is False
    frozen = translate_auto.XLA_MIN_UPDATES_FROZEN  # its compiles take longer: a higher bar
    assert frozen > least
    assert translate_auto.xla_rule(frozen, "tensorflow", "minilm")[0] is True
    assert translate_auto.xla_rule(frozen - 1, "tensorflow", "minilm")[0] is False
    assert translate_auto.xla_rule(10 * frozen, "tensorflow", "minilm", frozen=False)[0] is False  # not measured
    assert translate_auto.xla_rule(1, "jax")[0] is True  # op by op would be far slower


def test_the_registry_chooses_exactly_the_settings_that_may_be_auto_and_says_each_once():
    import dataclasses

    from kformer.auto import auto_settings, setting_help
    from kformer.tasks.translate import TranslateConfig

    summaries = TranslateConfig.rules.summaries()
    assert set(auto_settings(TranslateConfig)) == set(summaries)
    for field in dataclasses.fields(TranslateConfig):
        assert "auto" not in field.metadata["help"].lower(), field.name  # a rule's text lives in its summary
        if field.name in summaries:
            assert setting_help(TranslateConfig, field.name).endswith(f"(auto: {summaries[field.name]})")
    phases = {rule.phase for rule in translate_auto.RULES}
    assert phases == {"corpus", "encoded"}  # prepare resolves each phase once: before and after the vocabularies
    corpus = {name for rule in translate_auto.RULES if rule.phase == "corpus" for name in rule.settings}
    assert corpus == {"encoder", "retrieval", "tokens", "shared_vocab", "vocab_size", "target_vocab_size"}


def _pairs(sources, targets):
    return [Pair(s, t, i + 1) for i, (s, t) in enumerate(zip(sources, targets, strict=True))]


def test_resolving_both_phases_gives_what_the_calculations_give():
    """The registered rules only read the statistics and call the calculations: the vocabulary
    rules over the corpus, then the training rules over the pairs that fit max_length."""
    from kformer.tasks.translate import TranslateConfig

    english = [f"the patient {i} has a fever" for i in range(300)]
    tamil = [f"நோயாளிக்கு {i} காய்ச்சல் உள்ளது" for i in range(300)]
    corpus = CorpusStats.of(_pairs(english, tamil))
    config, choices = translate_auto.RULES.resolve(TranslateConfig(max_minutes=3.0), corpus, phase="corpus")
    expected = vocab_rules(side_shape(english), side_shape(tamil))
    small = "300 distinct training pairs: outside 500..20,000"  # English, but a toy corpus
    assert {name: (item["value"], item["why"]) for name, item in choices.chosen.items()} == {
        "encoder": ("scratch", small), "retrieval": ("off", small),
        "tokens": ("subwords", "300 distinct training pairs: at least 10"), **expected}
    assert config.dim == "auto" and all(item["rule"] for item in choices.chosen.values())

    rng = np.random.default_rng(0)
    sources, targets = rng.integers(1, 30, size=500), rng.integers(1, 40, size=500)
    sources[0], targets[1] = 200, 300  # two pairs longer than the 99th percentile: skipped
    encoded = EncodedStats(sources, targets)
    config, choices = translate_auto.RULES.resolve(config, encoded, choices, phase="encoded")
    assert config.max_length == max(np.ceil(np.percentile(sources, 99)), np.ceil(np.percentile(targets, 99)))
    fits = (sources <= config.max_length) & (targets <= config.max_length)
    assert encoded.target_tokens(config.max_length) == int((targets[fits] + 1).sum())
    rules = training_rules(int((targets[fits] + 1).sum()), config.epochs, 3.0)
    for name, (value, why) in rules.items():
        assert (choices.chosen[name]["value"], choices.chosen[name]["why"]) == (value, why) == (getattr(config, name), why)
    assert config.early_stopping == "accuracy" and config.batch_size == "auto" and 1 <= config.warmup_steps <= 1000


def test_a_batch_size_leaves_the_token_budget_auto_and_whole_words_need_no_size():
    from kformer.tasks.translate import TranslateConfig

    encoded = EncodedStats(np.full(100, 5), np.full(100, 6))
    config, choices = translate_auto.RULES.resolve(TranslateConfig(batch_size=16), encoded, phase="encoded")
    assert config.batch_tokens == "auto" and "batch_tokens" not in choices.chosen and config.max_length == 8
    few = CorpusStats.of(_pairs(["hello", "good"], ["வணக்கம்", "நல்ல"]))
    config, choices = translate_auto.RULES.resolve(TranslateConfig(), few, phase="corpus")
    assert (config.tokens, config.shared_vocab, config.vocab_size, config.target_vocab_size) == (
        "words", True, "auto", "auto")
