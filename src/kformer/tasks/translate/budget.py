"""The time budget of a whole ``kformer train translate`` command: ``max_minutes`` bounds
everything from reading the pairs to writing the folder, not training alone.

When the run starts, :class:`CommandBudget` sets the deadline (the start + ``max_minutes``).
Before training, :func:`estimate_phases` sizes each phase after it from what the run knows (the
training target tokens, the validation pairs tuning decodes, the size of the tuning grid, the test
pairs, the beam) at the per-item costs of :data:`COSTS`; training gets what is left after those
estimates and a margin (:func:`training_seconds`, at least :data:`MIN_TRAINING_SHARE` of the
budget). Each later phase is then sized to what is actually left when it starts, leaving the
later phases their estimates, or, when the time left is short of them all, their floors
(:func:`phase_floors`: the smallest useful size of each) (:meth:`CommandBudget.left_for`), so the
earlier phase comes first: the datastore covers the training
pairs that fit, tuning decodes fewer validation pairs (down to :data:`TUNE_FLOOR_PAIRS`), then a
coarser grid, then nothing (the default weights) (:func:`tune_size`), and the test decoding
scores the pairs that fit (:func:`pairs_that_fit`). ``metrics.json["phases"]`` records each
phase's estimate, its seconds and what was cut.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

PHASES = ("training", "datastore", "tuning", "evaluation", "writing")  # in the order they run


FIXED_COST_ENTRIES = 1_000_000  # the datastore size PhaseCosts.decode_fixed was measured at


@dataclass(frozen=True)
class PhaseCosts:
    """Seconds per item of the phases after training, on a 2-core CPU, before the run measures its own.

    Where they come from: the en-ta recipe on all seven English-Tamil corpora (73,476 pairs, 1.41
    million target tokens, frozen MiniLM encoder, 2-core AVX-512 CPU; two runs of 2026-12-07,
    BENCHMARKS.md "... the datastore built from the encoder outputs training cached"). The
    datastore pass, reading the frozen encoder's outputs that training cached, took 61 s (4.3e-5 s
    a target token; ~6.4e-5 with a scratch encoder, the en-ta levers benchmark, 2026-12-03):
    ``datastore_token`` 5e-5; where a pretrained encoder must run again (a fine-tuned one) it
    encoded 2,215 target tokens a second (3,000 Joshua IPC pairs), so ``backbone_token`` 1/2,000 is
    added. ``index_entry``: the IVF index's k-means and nprobe choice, 64 s over 1.41 million
    entries (4.6e-5 s an entry; ~1e-4 in an earlier run over 1.09 million); no index under 50,000
    entries (the estimate is then a little high). Tuning decoded its validation pairs greedily with
    retrieval at 0.032 s a pair in steady state (``decode_pair`` 0.04; beam search costs ``beam``
    times as much: the test decoding at beam 4 took 0.15 s a pair, its compilation included), and
    each k of its grid compiles the greedy loop over the validation batches first: 76-95 s in
    those runs, 7-8 s since the IVF search's inputs stay parameters (758a712: the 150 validation
    pairs' 3 shapes in 12.3 s cold, 4.5 warm, on the first run's folder), so ``tune_compile`` 15
    per k, as a plain decoding's. Writing: the model and ~1 KB of keys per datastore entry, at a
    disk's ~50 MB a second, plus a few seconds. ``decode_fixed``: what the test decoding spends
    before its first pair (its loop compiled for the beam, the datastore's keys made a tensor):
    the keys 5.5 s, and beam 4 over 64 pairs 9.4 s cold since 758a712 (11.6 before; up to ~75 s
    measured earlier on a million entries, compiling the search for each shape): 20. Tuning replaces ``decode_pair`` by the fastest of its own decodes with retrieval (the
    others include compiling a loop; the test decoding plans with it). These replace estimates that
    were 2-3x the datastore's and the test decoding's measured times and gave training only its
    floor (half of a 30-minute budget), the command then ending ~5 minutes early. A model without
    a datastore decodes far faster: the en-es recipe's 2,000 test pairs greedily in 11 s,
    compilation included (the same machine, 2026-12-06), so ``plain_decode_pair`` 0.01 and
    ``plain_decode_fixed`` 15 s (:meth:`for_run`). ``decode_fixed`` and ``tune_compile`` are a
    million-entry datastore's; a smaller one's are scaled down linearly towards the plain
    decoding's (:meth:`for_run`): its keys are fewer to make a tensor of and to index.
    """

    datastore_token: float = 5e-5
    backbone_token: float = 1 / 2000
    index_entry: float = 6e-5
    decode_pair: float = 0.04
    decode_fixed: float = 20.0
    tune_compile: float = 15.0
    plain_decode_pair: float = 0.01
    plain_decode_fixed: float = 15.0
    write_entry: float = 1 / 50_000
    write_fixed: float = 3.0

    def for_run(self, retrieval: bool, entries: int | None = None, backbone_runs: bool = False) -> PhaseCosts:
        """These costs for a run with a datastore of ``entries`` (None: a million or more) whose
        pass runs a pretrained encoder again when ``backbone_runs`` (``backbone_token`` added to
        ``datastore_token``), or (``retrieval`` False: the model decodes without one) with the
        plain decoding costs as ``decode_pair`` and ``decode_fixed``."""
        if not retrieval:
            return replace(self, decode_pair=self.plain_decode_pair, decode_fixed=self.plain_decode_fixed)
        costs = replace(self, datastore_token=self.datastore_token + self.backbone_token) if backbone_runs else self
        if entries is None or entries >= FIXED_COST_ENTRIES:
            return costs
        share = entries / FIXED_COST_ENTRIES
        return replace(costs, decode_fixed=self.plain_decode_fixed + share * (self.decode_fixed - self.plain_decode_fixed),
                       tune_compile=self.plain_decode_fixed + share * (self.tune_compile - self.plain_decode_fixed))


COSTS = PhaseCosts()
MARGIN_SHARE = 0.05  # of the budget, kept back: the validation pass after training's budget ends, the last batch
MIN_TRAINING_SHARE = 0.5  # training always gets this much of the budget; the later phases shrink to fit the rest
TUNE_FLOOR_PAIRS = 30  # tuning on fewer validation pairs than this measures noise: a coarser grid instead
EVALUATION_FLOOR_PAIRS = 100  # the test pairs the datastore and tuning leave time for (a chrF within a few points)


def now() -> float:
    """The clock every phase is timed with (tests replace it)."""
    return time.monotonic()


@dataclass(frozen=True)
class PhaseSizes:
    """What the phases after training will handle: training target tokens (the datastore's
    entries), validation pairs tuning may decode, the most settings of the full and the coarse
    grids, the test pairs and the beam; ``retrieval`` False: no datastore, no tuning."""

    target_tokens: int
    tune_pairs: int
    grid_settings: int
    coarse_settings: int
    test_pairs: int
    grid_ks: int = 1  # the ks of the full grid (each compiles tuning's decode loop: PhaseCosts.tune_compile)
    coarse_ks: int = 1
    beam: int = 1
    retrieval: bool = True
    backbone_runs: bool = False  # the datastore pass runs a pretrained encoder (fine-tuned: no cached outputs)


def estimate_phases(sizes: PhaseSizes, costs: PhaseCosts | None = None) -> dict[str, float]:
    """Estimated seconds of each phase after training (a phase the run skips: 0) at ``costs``
    (default :data:`COSTS`)."""
    costs, on = costs or COSTS, sizes.retrieval
    return {
        "datastore": sizes.target_tokens * (costs.datastore_token + costs.index_entry) if on else 0.0,
        "tuning": costs.tune_compile * sizes.grid_ks + sizes.tune_pairs * sizes.grid_settings * costs.decode_pair
        if on else 0.0,
        "evaluation": costs.decode_fixed + sizes.test_pairs * costs.decode_pair * sizes.beam,
        "writing": costs.write_fixed + (sizes.target_tokens * costs.write_entry if on else 0.0),
    }


def phase_floors(sizes: PhaseSizes, costs: PhaseCosts | None = None) -> dict[str, float]:
    """The least seconds of each phase after training worth leaving it: tuning's floor of pairs on
    the coarse grid, :data:`EVALUATION_FLOOR_PAIRS` test pairs, the datastore and writing whole."""
    costs, estimates = costs or COSTS, estimate_phases(sizes, costs)
    tune_floor = (costs.tune_compile * sizes.coarse_ks
                  + min(sizes.tune_pairs, TUNE_FLOOR_PAIRS) * sizes.coarse_settings * costs.decode_pair)
    evaluation_floor = costs.decode_fixed + min(sizes.test_pairs, EVALUATION_FLOOR_PAIRS) * costs.decode_pair * sizes.beam
    return {**estimates, "tuning": tune_floor if sizes.retrieval else 0.0, "evaluation": evaluation_floor}


def training_seconds(budget_seconds: float, spent_seconds: float, estimates: dict[str, float]) -> float:
    """Training's share of a whole-command budget: the budget less what is spent already (reading,
    vocabularies), the later phases' ``estimates`` and :data:`MARGIN_SHARE`; at least
    :data:`MIN_TRAINING_SHARE` of the budget (the later phases then shrink to fit what is left)."""
    left = budget_seconds - spent_seconds - sum(estimates.values()) - MARGIN_SHARE * budget_seconds
    return max(left, MIN_TRAINING_SHARE * budget_seconds)


@dataclass(frozen=True)
class TuneSize:
    """How much tuning fits: ``pairs`` validation pairs per setting on the ``coarse`` grid or the
    full one; ``pairs`` 0: none (the default weights); ``cut`` says what was given up."""

    pairs: int
    coarse: bool = False
    cut: str | None = None


def tune_size(seconds: float | None, per_pair: float, available: int, full_settings: int,
              coarse_settings: int, floor: int = TUNE_FLOOR_PAIRS, fixed: tuple[float, float] = (0.0, 0.0)) -> TuneSize:
    """What tuning does in ``seconds`` (None: no budget) at ``per_pair`` seconds a decoded pair, with
    ``available`` validation pairs, after ``fixed`` seconds of the full and of the coarse grid
    (compiling their decode loops): fewer pairs first (down to ``floor``), then the coarse grid,
    then nothing."""
    if seconds is None:
        return TuneSize(available)
    floor = min(floor, available)
    for settings, coarse, compiling in ((full_settings, False, fixed[0]), (coarse_settings, True, fixed[1])):
        fits = min(available, int((seconds - compiling) / max(per_pair * settings, 1e-9) + 1e-6))
        if fits >= max(floor, 1):
            cut = [] if fits == available else [f"{fits} of {available} validation pairs"]
            cut += [f"the coarse grid ({coarse_settings} settings, not {full_settings})"] if coarse else []
            return TuneSize(fits, coarse, "; ".join(cut) or None)
    return TuneSize(0, cut=f"skipped: {floor} validation pairs x {coarse_settings} settings need "
                    f"~{fixed[1] + floor * coarse_settings * per_pair:.0f} s, {max(seconds, 0):.0f} s left; default weights")


def pairs_that_fit(seconds: float | None, per_pair: float, available: int) -> int:
    """How many of ``available`` items of ``per_pair`` seconds fit in ``seconds`` (None: all)."""
    if seconds is None:
        return available
    return max(0, min(available, math.floor(seconds / max(per_pair, 1e-9) + 1e-6)))


@dataclass
class CommandBudget:
    """The deadline of a whole command (``deadline`` None: no budget), the later phases'
    estimates, the per-pair decode cost measured so far, and what each phase did (``phases``)."""

    deadline: float | None
    estimates: dict[str, float] = field(default_factory=dict)
    floors: dict[str, float] = field(default_factory=dict)  # a phase without one: its estimate
    costs: PhaseCosts = field(default_factory=lambda: COSTS)
    phases: list[dict] = field(default_factory=list)

    @classmethod
    def start(cls, max_minutes: float | None, started: float) -> CommandBudget:
        """The budget of a command launched at ``started`` (a :func:`now` time)."""
        return cls(None if max_minutes is None else started + max_minutes * 60.0)

    def plan(self, sizes: PhaseSizes) -> None:
        """Size the phases after training for ``sizes``: their costs (:meth:`PhaseCosts.for_run`),
        estimates and floors."""
        self.costs = COSTS.for_run(sizes.retrieval, sizes.target_tokens, sizes.backbone_runs)
        self.estimates, self.floors = estimate_phases(sizes, self.costs), phase_floors(sizes, self.costs)

    def left(self) -> float | None:
        """Seconds to the deadline (None: no budget)."""
        return None if self.deadline is None else self.deadline - now()

    def left_for(self, phase: str) -> float | None:
        """Seconds ``phase`` may take: to the deadline less the estimates of the phases after it, or,
        when what is left is short of them all, up to its own estimate less what the later phases'
        floors need."""
        if self.deadline is None:
            return None
        later = PHASES[PHASES.index(phase) + 1:]
        left, own = self.deadline - now(), self.estimates.get(phase, 0.0)
        estimated = sum(self.estimates.get(name, 0.0) for name in later)
        floors = sum(self.floors.get(name, self.estimates.get(name, 0.0)) for name in later)
        return max(left - estimated, min(own, left - floors))

    def decoding_seconds(self, phase: str) -> float | None:
        """What a decoding ``phase`` may spend on its pairs: :meth:`left_for` less the decode loop's
        compilation (``costs.decode_fixed``); None: no budget."""
        left = self.left_for(phase)
        return None if left is None else left - self.costs.decode_fixed

    def measured(self, seconds_per_pair: float) -> None:
        """Decoding measured at ``seconds_per_pair`` (greedy): what later sizing assumes."""
        self.costs = replace(self.costs, decode_pair=seconds_per_pair)

    def record(self, phase: str, started: float, estimated: float | None, cut: str | None = None) -> None:
        """``phase`` ran from ``started`` (a :func:`now` time) until now."""
        self.phases.append({"name": phase, "estimated_seconds": None if estimated is None else round(estimated, 1),
                            "seconds": round(now() - started, 2), "cut": cut})


def budget_line(max_minutes: float, training: float, estimates: dict[str, float]) -> str:
    """One line saying how ``max_minutes`` is split (the ``settings`` event before training)."""
    later = ", ".join(f"{name} ~{seconds:.0f} s" for name, seconds in estimates.items() if seconds)
    return (f"time budget {max_minutes:g} min for the whole command: training {training:.0f} s, then {later} "
            f"(estimated; each phase is cut to what is left), {MARGIN_SHARE:.0%} kept back")
