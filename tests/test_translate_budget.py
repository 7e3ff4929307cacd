"""``--max-minutes`` bounds a whole translate command (:mod:`kformer.tasks.translate.budget`):
training gets what the later phases' estimates leave, each later phase is cut to the time left,
``metrics.json["phases"]`` records it, and the phases report progress as training does.

Time is a fake clock throughout (the real one plus what the fakes charge), so nothing here
depends on how fast this machine is.
"""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import write_tsv_pairs
from test_translate_retrieval import TINY, arbitrary_pairs

from kformer.data.pairs import Pair
from kformer.tasks import translate
from kformer.tasks.translate import budget as budgets
from kformer.tasks.translate import phases, retrieval
from kformer.tasks.translate.settings import TranslateConfig
from kformer.training import PhaseReporter
from kformer.training.progress import log_to_file


class Clock:
    """A clock that moves only when told."""

    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_training_gets_the_budget_less_the_later_phases_and_a_margin():
    estimates = {"datastore": 60.0, "tuning": 300.0, "evaluation": 120.0, "writing": 10.0}
    # 30 minutes, 20 s spent reading: 1800 - 20 - 490 - 5% of 1800 (90)
    assert budgets.training_seconds(1800, 20, estimates) == pytest.approx(1200.0)
    # later phases estimated beyond the budget: training keeps its floor, the phases shrink later
    assert budgets.training_seconds(600, 0, {"tuning": 5000.0}) == pytest.approx(budgets.MIN_TRAINING_SHARE * 600)


def test_an_earlier_phase_comes_first_leaving_the_later_ones_their_floors(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(budgets, "now", clock)
    estimates = {"datastore": 30.0, "tuning": 200.0, "evaluation": 50.0, "writing": 5.0}
    floors = {**estimates, "tuning": 20.0, "evaluation": 10.0}
    short = budgets.CommandBudget(clock.t + 100, estimates, floors)
    assert short.left_for("datastore") == 30  # its estimate: the later floors (35 s) still fit in 100
    assert short.left_for("tuning") == 85  # all but the test decoding's and the writing's floors
    assert short.left_for("evaluation") == 95  # all but the writing's estimate
    assert budgets.CommandBudget(clock.t + 1000, estimates, floors).left_for("tuning") == 1000 - 55
    assert budgets.CommandBudget(None, estimates, floors).left_for("tuning") is None


def test_estimates_follow_the_sizes_and_the_costs():
    costs = budgets.PhaseCosts(datastore_token=0.001, decode_pair=0.5, write_entry=0.0001, write_fixed=2.0,
                               decode_fixed=7.0, index_entry=0.0005, tune_compile=11.0)
    sizes = budgets.PhaseSizes(target_tokens=10_000, tune_pairs=150, grid_settings=19, coarse_settings=4,
                               test_pairs=200, beam=4, grid_ks=2, coarse_ks=1)
    assert budgets.estimate_phases(sizes, costs) == pytest.approx(  # tuning compiles its loop once per k of the grid
        {"datastore": 10.0 + 5.0, "tuning": 2 * 11 + 150 * 19 * 0.5, "evaluation": 7 + 200 * 0.5 * 4, "writing": 3.0})
    floors = budgets.phase_floors(sizes, costs)  # each decoding phase compiles its loop, however few its pairs
    assert floors["tuning"] == pytest.approx(11 + 30 * 4 * 0.5) and floors["evaluation"] == pytest.approx(7 + 100 * 2)
    budget = budgets.CommandBudget(budgets.now() + 500, costs=costs)
    assert budget.decoding_seconds("evaluation") == pytest.approx(budget.left_for("evaluation") - 7, abs=0.1)
    off = budgets.estimate_phases(replace(sizes, retrieval=False), costs)
    assert off["datastore"] == off["tuning"] == 0 and off["writing"] == 2.0
    plain = replace(costs, plain_decode_pair=0.01, plain_decode_fixed=3.0).for_run(retrieval=False)
    assert costs.for_run(retrieval=True) is costs  # without a datastore decoding costs a fraction
    assert budgets.estimate_phases(replace(sizes, retrieval=False), plain)["evaluation"] == pytest.approx(3 + 200 * 0.01 * 4)
    planned = budgets.CommandBudget(None)
    planned.plan(replace(sizes, retrieval=False))  # what a run without retrieval sizes its test decoding with
    assert planned.costs.decode_pair == budgets.COSTS.plain_decode_pair < budgets.COSTS.decode_pair
    assert planned.estimates == budgets.estimate_phases(replace(sizes, retrieval=False), budgets.COSTS.for_run(False))
    planned.plan(sizes)  # 10,000 entries: 1 % of the way from the plain decoding's fixed cost to a million entries
    scaled = budgets.COSTS.plain_decode_fixed + 0.01 * (budgets.COSTS.decode_fixed - budgets.COSTS.plain_decode_fixed)
    assert planned.costs.decode_fixed == pytest.approx(scaled)
    assert replace(planned.costs, decode_fixed=budgets.COSTS.decode_fixed, tune_compile=budgets.COSTS.tune_compile) == budgets.COSTS
    assert planned.floors == budgets.phase_floors(sizes, planned.costs)


def test_a_datastore_that_runs_a_fine_tuned_encoder_again_is_costed_its_pass():
    """A frozen or scratch encoder's datastore pass costs the decoder's (the frozen one's outputs
    are training's cache); a fine-tuned pretrained encoder runs again for every pair."""

    costs = budgets.PhaseCosts(datastore_token=1e-4, backbone_token=5e-4, index_entry=1e-4)
    sizes = budgets.PhaseSizes(target_tokens=10_000, tune_pairs=10, grid_settings=19, coarse_settings=4, test_pairs=10)
    fine_tuned = replace(sizes, backbone_runs=True)
    assert budgets.estimate_phases(sizes, costs.for_run(True))["datastore"] == pytest.approx(2.0)
    assert budgets.estimate_phases(fine_tuned, costs.for_run(True, backbone_runs=True))["datastore"] == pytest.approx(7.0)
    planned = budgets.CommandBudget(None)
    planned.plan(fine_tuned)
    assert planned.costs.datastore_token == pytest.approx(budgets.COSTS.datastore_token + budgets.COSTS.backbone_token)
    pairs = [("one", "un")] * 3
    runs = {(encoder, rate): phases.sizes(TranslateConfig(encoder=encoder, encoder_learning_rate=rate, retrieval="on"),
                                          ([[5]] * 3, [[6]] * 3), pairs, pairs).backbone_runs
            for encoder, rate in (("scratch", 0.0), ("minilm", 0.0), ("minilm", 3e-5))}
    assert runs == {("scratch", 0.0): False, ("minilm", 0.0): False, ("minilm", 3e-5): True}


def test_a_smaller_datastore_is_costed_a_smaller_fixed_decoding_cost():
    costs = budgets.PhaseCosts(decode_fixed=45.0, plain_decode_fixed=15.0, tune_compile=75.0)
    fixed = {entries: costs.for_run(True, entries).decode_fixed for entries in (0, 250_000, 10**6, 3 * 10**6)}
    assert fixed == pytest.approx({0: 15.0, 250_000: 22.5, 10**6: 45.0, 3 * 10**6: 45.0})
    compiling = {entries: costs.for_run(True, entries).tune_compile for entries in (0, 250_000, 10**6, 3 * 10**6)}
    assert compiling == pytest.approx({0: 15.0, 250_000: 30.0, 10**6: 75.0, 3 * 10**6: 75.0})
    assert costs.for_run(True) is costs and costs.for_run(False, 10).decode_fixed == 15.0
    # 60,000 entries (a few thousand pairs): tuning's and the test decoding's floors leave the datastore
    # the 56.4 + 28.2 s that a million entries' fixed costs would have taken from it
    sizes = budgets.PhaseSizes(target_tokens=60_000, tune_pairs=150, grid_settings=19, coarse_settings=4, test_pairs=300)
    small, large = (budgets.phase_floors(sizes, c) for c in (costs.for_run(True, 60_000), costs))
    assert large["tuning"] - small["tuning"] == pytest.approx(56.4)
    assert large["evaluation"] - small["evaluation"] == pytest.approx(28.2)


def test_the_grid_sizes_tuning_plans_with():
    assert retrieval.most_settings(retrieval.grid(None)) == 9 + 3 + 1 + 8 + 1  # lambdas, other temperatures, other k, lambdas again, without
    assert retrieval.most_settings(retrieval.grid(None, coarse=True)) == 3 + 1
    pairs = [("one", "un")] * 3
    sizes = phases.sizes(TranslateConfig(retrieval="on"), ([[5]] * 3, [[6]] * 3), pairs, pairs)
    assert (sizes.grid_ks, sizes.coarse_ks) == (len(retrieval.KS), len(retrieval.COARSE_KS)) == (2, 1)


def test_tuning_shrinks_pairs_first_then_the_grid_then_skips():
    assert budgets.tune_size(None, 1.0, 150, 19, 4) == budgets.TuneSize(150)
    assert budgets.tune_size(19 * 150, 1.0, 150, 19, 4) == budgets.TuneSize(150)
    fewer = budgets.tune_size(19 * 60, 1.0, 150, 19, 4)
    assert (fewer.pairs, fewer.coarse) == (60, False) and "60 of 150" in fewer.cut
    coarse = budgets.tune_size(19 * 29, 1.0, 150, 19, 4)  # below the floor of 30 on the full grid
    assert coarse.coarse and coarse.pairs == min(150, 19 * 29 // 4) and "coarse" in coarse.cut
    skipped = budgets.tune_size(4 * 29, 1.0, 150, 19, 4)
    assert skipped.pairs == 0 and "default weights" in skipped.cut
    assert budgets.tune_size(4 * 5, 1.0, 5, 19, 4).pairs == 5  # fewer pairs than the floor: all of them
    # compiling: 2 ks of the full grid, 1 of the coarse one, 100 s each, before any pair is decoded
    compiled = budgets.tune_size(200 + 19 * 60, 1.0, 150, 19, 4, fixed=(200.0, 100.0))
    assert (compiled.pairs, compiled.coarse) == (60, False)
    only_coarse = budgets.tune_size(200 + 19 * 20, 1.0, 150, 19, 4, fixed=(200.0, 100.0))
    assert only_coarse.coarse and only_coarse.pairs == (200 + 19 * 20 - 100) // 4
    assert budgets.tune_size(100 + 4 * 29, 1.0, 150, 19, 4, fixed=(200.0, 100.0)).pairs == 0


def test_a_phase_reports_progress_and_the_log_gets_a_line_a_tenth(tmp_path):
    clock, events = Clock(), []
    log = tmp_path / "train.log"
    write = log_to_file(log)
    reporter = PhaseReporter(lambda e: (events.append(e), write(e)), "datastore", 100, deadline=clock.t + 50,
                             clock=clock, every_seconds=0.0)
    for _ in range(100):
        clock.t += 0.25
        reporter.advance(1)
    reporter.close()
    assert events[0].stage == "phase" and events[-1].stage == "phase_end" and events[-1].step == 100
    middle = events[50]  # 50 of 100 done in 12.5 s: 12.5 s more by the rate, within the deadline's 37.5
    assert middle.fraction == 0.5 and middle.seconds_left == pytest.approx(12.5)
    lines = log.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 11 and lines[-1].endswith("datastore 100/100 in 25 s")  # start, each tenth, the end


def test_a_phase_reports_at_most_every_half_second():
    clock, events = Clock(), []
    reporter = PhaseReporter(events.append, "tuning", 100, clock=clock)
    for _ in range(100):
        clock.t += 0.25
        reporter.advance(1)
    assert len(events) == 1 + 100 * 0.25 / 0.5


def test_tuning_that_cannot_fit_keeps_the_default_weights_and_says_so(monkeypatch):
    clock, events = Clock(), []
    monkeypatch.setattr(budgets, "now", clock)
    store = retrieval.Datastore(np.zeros((20, 4), "float16"), np.arange(20, dtype="int32"), k=8, temperature=1.0,
                                lam=0.3)
    budget = budgets.CommandBudget(deadline=clock.t + 10, estimates={"evaluation": 5.0})
    pairs = [Pair(f"s{i}", f"t{i}") for i in range(50)]
    budget.costs = budgets.PhaseCosts(decode_pair=0.5)
    tuned = phases.tuning(None, store, pairs, budget, events.append)  # 5 s at 0.5 s a pair: not 30 x 4
    assert (tuned.lam, tuned.k) == (0.3, 8) and "default weights" in tuned.tuning["skipped"]
    assert budget.phases[0]["name"] == "tuning" and "skipped" in budget.phases[0]["cut"]
    assert events[-1].stage == "phase_end" and "default weights" in events[-1].line()


@pytest.mark.parametrize(("with_it", "without", "kept"), [(20.0, 25.0, False), (25.0, 25.0, True), (26.0, 25.0, True)])
def test_a_datastore_that_scores_lower_than_none_on_validation_is_left_out(with_it, without, kept):
    store = retrieval.Datastore(np.zeros((4, 2), "float16"), np.arange(4, dtype="int32"), k=2, temperature=1.0, lam=0.3,
                                tuning={"chrf_with": with_it, "chrf_without": without, "valid_pairs": 40})
    events = []
    assert (phases.kept(store, events.append) is store) is kept
    assert bool(events) is not kept  # leaving it out is said, in one line
    assert kept or f"{with_it:.2f} with it, {without:.2f} without" in events[0].line()
    untimed = replace(store, tuning={"chrf_with": 1.0})  # no score without it (no time): kept
    assert phases.kept(untimed, None) is untimed and phases.kept(None, None) is None


def test_the_datastore_stops_between_blocks_when_its_time_is_up_keeping_the_first_pairs(monkeypatch):
    clock, events = Clock(), []
    monkeypatch.setattr(budgets, "now", clock)
    monkeypatch.setattr(retrieval, "ENTRY_BLOCK", 4)

    class Model:  # 3 s a batch: slower than the plan's per-token cost
        max_source_length = max_target_length = 8
        dim = 2

        def decoder_states(self, source, target_in):
            clock.t += 3.0
            return np.ones((*target_in.shape, 2), "float32") * source[:, :1, None]

    sources = [[i + 1] for i in range(10)]  # each pair's key says which pair it came from
    targets = [[5, 6] for _ in range(10)]
    budget = budgets.CommandBudget(deadline=clock.t + 7, costs=budgets.PhaseCosts(datastore_token=1e-3, index_entry=0.1))
    store = phases.datastore(SimpleNamespace(model=Model()), (sources, targets), budget, events.append,
                             order=list(range(9, -1, -1)))
    # planned all 10 pairs (30 tokens at 0.101 s: 3 s of 7); each block of 4 takes 3 s: after two, 6 s + 24 entries x 0.1 > 7
    assert store.entries == 8 * 3 and sorted(set(store.keys[:, 0].astype(int))) == [3, 4, 5, 6, 7, 8, 9, 10]
    assert budget.phases[0]["cut"] == "8 of 10 training pairs (stopped at the phase's time)"


def test_the_test_decoding_scores_what_fits_and_says_it_was_cut(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(budgets, "now", clock)

    def decode(texts, beam, domain=None):
        clock.t += 2.0 * len(texts)  # 2 s a pair: slower than estimated
        return [text.upper() for text in texts]

    fake = SimpleNamespace(translate=decode, scores_of=lambda pairs, hyps, **k: {"n": len(pairs)})
    budget = budgets.CommandBudget(deadline=clock.t + 300, estimates={"writing": 0.0})
    pairs = [Pair(f"source {i}", f"target {i}") for i in range(400)]
    scores, scored, translations = phases.evaluation(fake, pairs, 1, budget, None)
    # planned: 600 pairs at 0.5 s; after each 64-pair chunk the rate measured decides: 2 chunks fit in 300 s
    assert scores["scored"] == len(scored) == 128 and scores["held_out"] == 400 and scores["cut_by_budget"]
    assert clock.t - 1000.0 <= 300 and translations == [p.source.upper() for p in scored]
    assert budget.phases[0]["cut"] == "128 of 400 test pairs"
    late = budgets.CommandBudget(deadline=clock.t - 1)  # past the deadline: nothing decoded, said so
    scores, scored, _ = phases.evaluation(fake, pairs, 1, late, None)
    assert scored == [] and scores["scored"] == 0 and scores["cut_by_budget"]


def test_the_test_decoding_does_not_count_its_compilation_as_the_rate_per_pair(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(budgets, "now", clock)
    calls = []

    def decode(texts, beam, domain=None):  # 40 s compiling on the first call, then 0.1 s a pair
        clock.t += (40.0 if not calls else 0.0) + 0.1 * len(texts)
        calls.append(len(texts))
        return list(texts)

    fake = SimpleNamespace(translate=decode, scores_of=lambda pairs, hyps, **k: {"n": len(pairs)})
    budget = budgets.CommandBudget(deadline=clock.t + 90, estimates={"writing": 0.0},
                                   costs=budgets.PhaseCosts(decode_pair=0.1, decode_fixed=40.0))
    pairs = [Pair(f"source {i}", f"target {i}") for i in range(400)]
    scores, _, _ = phases.evaluation(fake, pairs, 1, budget, None)
    # 40 s + 400 x 0.1 s = 80 s fits 90; the first chunk's average (46.4 s / 64 pairs) would have stopped it at 64
    assert scores["scored"] == 400 and not scores["cut_by_budget"] and clock.t - 1000.0 == pytest.approx(80.0)


def test_the_test_decoding_goes_on_when_it_compiled_faster_than_planned(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(budgets, "now", clock)

    calls = []

    def decode(texts, beam, domain=None):  # 5 s compiling on the first call (45 planned), then 0.1 s a pair
        clock.t += (5.0 if not calls else 0.0) + 0.1 * len(texts)
        calls.append(len(texts))
        return list(texts)

    fake = SimpleNamespace(translate=decode, scores_of=lambda pairs, hyps, **k: {"n": len(pairs)})
    budget = budgets.CommandBudget(deadline=clock.t + 100, estimates={"writing": 0.0},
                                   costs=budgets.PhaseCosts(decode_pair=0.5, decode_fixed=45.0))
    pairs = [Pair(f"source {i}", f"target {i}") for i in range(400)]
    events = []
    scores, scored, _ = phases.evaluation(fake, pairs, 1, budget, events.append)
    # planned 110 pairs ((100 - 45) s at 0.5 s); they took 16 s, and the 0.1 s measured fits the other 290
    assert scores["scored"] == len(scored) == 400 and not scores["cut_by_budget"] and scored == pairs
    assert clock.t - 1000.0 == pytest.approx(45.0) and (events[-1].step, events[-1].total_steps) == (400, 400)
    clock.t, more = 1000.0, [Pair(f"source {i}", f"target {i}") for i in range(1000)]
    calls.clear()  # a new run: its first call compiles again
    budget = budgets.CommandBudget(deadline=clock.t + 100, estimates={"writing": 0.0},
                                   costs=budgets.PhaseCosts(decode_pair=0.5, decode_fixed=45.0))
    scores, scored, _ = phases.evaluation(fake, more, 1, budget, None)
    # of the other 890, the 84 s left fit 840: whole chunks of 64 only, 832 (99.2 s in all)
    assert scores["scored"] == 110 + 832 and scored == more[:942] and clock.t - 1000.0 == pytest.approx(99.2)


def test_tuning_plans_the_test_decoding_at_its_fastest_decode_with_retrieval(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(budgets, "now", clock)
    store = retrieval.Datastore(np.zeros((20, 4), "float16"), np.arange(20, dtype="int32"), k=8, temperature=1.0,
                                lam=0.3)

    def tune_on_pairs(translator, datastore, valid_pairs, limit, coarse, stop, on_score):
        # seconds per decode of 30 pairs: compiling for k 8, warm, compiling for k 16, without retrieval (compiling)
        for seconds, with_retrieval in ((33.0, True), (3.0, True), (30.0, True), (20.0, False)):
            clock.t += seconds
            on_score(30, with_retrieval)
        return datastore

    monkeypatch.setattr(retrieval, "tune_on_pairs", tune_on_pairs)
    budget = budgets.CommandBudget(deadline=None)
    phases.tuning(SimpleNamespace(with_retrieval=lambda store: None), store,
                  [Pair(f"s{i}", f"t{i}") for i in range(30)], budget, None)
    assert budget.costs.decode_pair == pytest.approx(0.1)


@pytest.mark.usefixtures("eager_decoding")
def test_a_budgeted_run_shrinks_training_cuts_tuning_and_fits_the_budget(tmp_path, monkeypatch):
    pairs = arbitrary_pairs(40, seed=5)
    files = [write_tsv_pairs(tmp_path / f"{name}.tsv", rows) for name, rows in
             (("train", pairs[:30]), ("valid", pairs[30:35]), ("test", pairs[35:]))]
    fake = {"seconds": 0.0}
    real_translate = translate.Translator.translate
    # the budget's clock moves only by what the fake decoding charges: the phases are sized alike on any machine
    monkeypatch.setattr(budgets, "now", lambda: 1000.0 + fake["seconds"])

    def slow_translate(self, texts, **options):  # decoding as slow as the en-ta recipe's: 1 s a pair
        fake["seconds"] += len(texts)
        return real_translate(self, texts, **options)

    monkeypatch.setattr(translate.Translator, "translate", slow_translate)
    monkeypatch.setattr(budgets, "COSTS", replace(budgets.COSTS, decode_pair=1.0, decode_fixed=0.0, plain_decode_fixed=0.0))
    events, started = [], budgets.now()
    result = translate.train({**TINY, "retrieval": "on", "max_minutes": 1.0}, files[0], tmp_path / "model",
                             valid=files[1], test=files[2], progress=events.append)
    elapsed = budgets.now() - started
    recorded = {phase["name"]: phase for phase in result.metrics["phases"]}
    assert list(recorded) == list(budgets.PHASES) and recorded["datastore"]["cut"] is None
    # tuning's full grid (5 pairs x 22 settings at 1 s) is beyond the budget: training keeps its floor
    assert recorded["training"]["estimated_seconds"] == pytest.approx(budgets.MIN_TRAINING_SHARE * 60, abs=0.1)
    assert "coarse grid" in recorded["tuning"]["cut"]
    assert result.metrics["retrieval"]["tuning"]["grid"]["lam"] == list(retrieval.COARSE_LAMBDAS)
    assert result.metrics["test"]["scored"] == 5 and not result.metrics["test"]["cut_by_budget"]
    # every phase is sized to end by the deadline less the writing's estimate (3 s; a tiny folder takes far less)
    assert elapsed <= 60.0
    saved = json.loads((result.folder / "metrics.json").read_text(encoding="utf-8"))
    assert saved["phases"] == result.metrics["phases"]
    stages = {(e.stage, e.message.split(" (")[0]) for e in events}
    assert {("phase", "datastore"), ("phase_end", "retrieval tuning"), ("phase_end", "test decoding")} <= stages
    assert any(e.stage == "settings" and "whole command" in e.message for e in events)
    log = (result.folder / "training" / "train.log").read_text(encoding="utf-8")
    assert "time budget 1 min" in log and "retrieval tuning (validation pairs decoded) 20/20" in log
