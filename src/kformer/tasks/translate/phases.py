"""The phases of a translate run after training, each sized to the command's time budget
(:mod:`.budget`), timed into ``metrics.json["phases"]`` and reporting its progress (a bar in a
terminal, lines in ``train.log``) as :class:`~kformer.training.PhaseReporter` events: the
retrieval datastore, the choice of its weights, the test decoding."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kformer.tasks.translate import budget as budgets
from kformer.tasks.translate import retrieval
from kformer.tasks.translate.batches import target_tokens
from kformer.tasks.translate.pretrained import uses_pretrained
from kformer.tasks.translate.retrieval import TUNE_PAIRS, grid, most_settings

if TYPE_CHECKING:
    from kformer.data.pairs import Pair
    from kformer.tasks.translate.budget import CommandBudget
    from kformer.tasks.translate.retrieval import Datastore
    from kformer.training import Progress

DECODE_CHUNK = 64  # test pairs decoded between a progress report and the next look at the clock (a decode batch)


def sizes(config, train, valid_pairs: Sequence, test_pairs: Sequence) -> budgets.PhaseSizes:
    """What the phases after training will handle, for :func:`~.budget.estimate_phases`."""
    full, coarse = grid(None), grid(None, coarse=True)
    return budgets.PhaseSizes(
        target_tokens=target_tokens(train), tune_pairs=min(len(valid_pairs), TUNE_PAIRS),
        grid_settings=most_settings(full), coarse_settings=most_settings(coarse),
        grid_ks=len(full["k"]), coarse_ks=len(coarse["k"]),
        test_pairs=len(test_pairs), beam=config.beam, retrieval=config.retrieval == "on",
        backbone_runs=uses_pretrained(config) and config.encoder_learning_rate > 0)


def note(progress: Progress | None, text: str) -> None:
    """A one-line ``"phase_end"`` event of no items: what a phase gave up, and why."""
    if progress is not None:
        from kformer.training import ProgressEvent

        progress(ProgressEvent("phase_end", 1.0, message=text))


def _reporter(progress, name: str, total: int, budget: CommandBudget):
    from kformer.training import PhaseReporter

    return PhaseReporter(progress, name, total, deadline=budget.deadline, clock=budgets.now)


def datastore(translator, train, budget: CommandBudget, progress: Progress | None,
              order: Sequence[int] | None = None, encoder_states: Sequence | None = None) -> Datastore | None:
    """The datastore of the encoded training pairs ``train`` taken in ``order`` (default theirs:
    :func:`~.domains.datastore_order`), as many as the time left fits: planned by the per-token
    cost (encoding and indexing), then stopped between blocks when the time measured says the
    rest, and indexing what was encoded, would not fit (None when none fits). ``encoder_states``:
    a frozen pretrained encoder's outputs per training source, as training cached them (the
    encoder then does not run again)."""
    started, (sources, targets) = budgets.now(), train
    if order is not None:
        sources, targets = [sources[i] for i in order], [targets[i] for i in order]
        encoder_states = None if encoder_states is None else [encoder_states[i] for i in order]
    tokens = [len(target) + 1 for target in targets]
    count, left = len(tokens), budget.left_for("datastore")
    per_token = budget.costs.datastore_token + budget.costs.index_entry
    if left is not None:
        affordable, count = left / per_token + 1e-6, 0  # its own estimate fits whole
        while count < len(tokens) and affordable >= tokens[count]:
            affordable -= tokens[count]
            count += 1
    cut = None if count == len(tokens) else f"{count:,} of {len(tokens):,} training pairs"
    if not count:
        cut = "skipped: no time left for a datastore; decoding without retrieval"
        note(progress, f"datastore {cut}")
        budget.record("datastore", started, budget.estimates.get("datastore"), cut)
        return None
    reporter = _reporter(progress, "datastore (training pairs)", count, budget)
    encoded = [0]

    def advance(pairs: int) -> None:
        encoded[0] += pairs
        reporter.advance(pairs)

    def stop(entries: int) -> bool:  # the index over what is encoded must still fit
        return left is not None and budgets.now() + entries * budget.costs.index_entry > started + left

    store = retrieval.build_datastore(translator.model, sources[:count], targets[:count], on_batch=advance, stop=stop,
                                      encoder_states=None if encoder_states is None else encoder_states[:count])
    reporter.close()
    if encoded[0] < count:
        cut = f"{encoded[0]:,} of {len(tokens):,} training pairs (stopped at the phase's time)"
    budget.record("datastore", started, budget.estimates.get("datastore"), cut)
    return replace(store, tuning={"build_seconds": round(budgets.now() - started, 2)})


def tuning(translator, store: Datastore, valid_pairs: Sequence[Pair], budget: CommandBudget,
           progress: Progress | None) -> Datastore:
    """``store`` with its weights chosen on the validation pairs, as many and on as fine a grid as
    the time left allows (:func:`~.budget.tune_size`); the search stops early when the decodes
    measured so far say the next setting would not fit; none fitting: the default weights."""
    started = budgets.now()
    grids = grid(store), grid(store, coarse=True)
    full, coarse = (most_settings(values) for values in grids)
    size = budgets.tune_size(budget.left_for("tuning"), budget.costs.decode_pair, min(len(valid_pairs), TUNE_PAIRS),
                             full, coarse, fixed=tuple(budget.costs.tune_compile * len(values["k"]) for values in grids))
    if not size.pairs:
        note(progress, f"retrieval tuning {size.cut}")
        budget.record("tuning", started, budget.estimates.get("tuning"), size.cut)
        return replace(store, tuning={**store.tuning, "skipped": size.cut})
    reporter = _reporter(progress, "retrieval tuning (validation pairs decoded)",
                         size.pairs * (coarse if size.coarse else full), budget)
    last, rates = [budgets.now()], []

    def scored(pairs: int, with_retrieval: bool) -> None:
        # a decode after a new k, or the first without retrieval, includes compiling its loop: the
        # fastest decode with retrieval is the rate per pair (compilations are costed apart:
        # tune_compile here, decode_fixed for the test decoding)
        at = budgets.now()
        if with_retrieval:
            rates.append((at - last[0]) / pairs)
            budget.measured(min(rates))
        last[0] = at
        reporter.advance(pairs)

    def stop() -> bool:
        left = budget.left_for("tuning")
        return left is not None and left < budget.costs.decode_pair * size.pairs

    tuned = retrieval.tune_on_pairs(translator.with_retrieval(None), store, valid_pairs, size.pairs, coarse=size.coarse,
                          stop=stop, on_score=scored)
    reporter.close()
    stopped = tuned.tuning.get("stopped_after")
    cut = "; ".join(filter(None, [size.cut, stopped and f"the search stopped after {stopped} settings"])) or None
    budget.record("tuning", started, budget.estimates.get("tuning"), cut)
    return replace(tuned, tuning={**tuned.tuning, **store.tuning})


def kept(store: Datastore | None, progress: Progress | None) -> Datastore | None:
    """``store``, or None when its tuning scored the validation pairs lower with retrieval than
    without it (a datastore of far-off corpora, a model too weak to search with): the folder then
    decodes without one, and ``store.tuning`` says why (:meth:`Translate.evaluate` records it)."""
    tuning = {} if store is None else store.tuning
    with_it, without = tuning.get("chrf_with"), tuning.get("chrf_without")
    if with_it is None or without is None or with_it >= without:
        return store
    note(progress, f"retrieval left out: validation chrF {with_it:.2f} with it, {without:.2f} without "
         f"({tuning.get('valid_pairs')} pairs, greedy); the folder decodes without a datastore")
    return None


def evaluation(translator, pairs: Sequence[Pair], beam: int, budget: CommandBudget, progress: Progress | None,
               domains: Sequence[str | None] | None = None) -> tuple[dict[str, Any], list[Pair], list[str]]:
    """Scores of the test pairs that fit the time left (a prefix of them: the split is random),
    decoded in rounds: each round a further slice of the pairs, as many as the rate so far says fit
    (the first at the planned rate, after the loop's compilation; the later ones in whole chunks:
    :func:`_more_pairs`), shortest first in :data:`DECODE_CHUNK`s, stopping early when the rate
    measured says the next chunk would not fit (:func:`_seconds_per_pair`: the first chunk also
    compiles the loop). The scores say how many were ``scored`` of how many ``held_out`` and whether
    the budget ``cut`` them. ``domains``: each pair's tag (None: all neutral), as
    :meth:`~.model.Translator.translate`'s ``domain``. Returns ``(scores, pairs scored, their
    translations)``."""
    from kformer.tasks.translate.model import MAX_REPEAT

    started, planned = budgets.now(), budget.costs.decode_pair * beam
    count = budgets.pairs_that_fit(budget.decoding_seconds("evaluation"), planned, len(pairs))
    reporter = _reporter(progress, "test decoding (held-out pairs)", count, budget)
    done: list[int] = []
    translations: list[str] = []
    warm, rounds_from = None, 0  # warm: (clock, pairs done) after the first chunk

    def rate() -> float:
        return _seconds_per_pair(len(done), warm, started, planned, budget.costs.decode_fixed)

    while rounds_from < count:
        chosen, rounds_from = sorted(range(rounds_from, count), key=lambda i: len(pairs[i].source)), count
        for at in range(0, len(chosen), DECODE_CHUNK):
            chunk, left = chosen[at: at + DECODE_CHUNK], budget.left_for("evaluation")
            if done and left is not None and left < rate() * len(chunk):
                break
            translations += translator.translate([pairs[i].source for i in chunk], beam=beam,
                                                 domain=None if domains is None else [domains[i] for i in chunk])
            done += chunk
            warm = warm or (budgets.now(), len(done))
            reporter.advance(len(chunk))
        else:  # the whole round fitted: the rate measured may leave time for more of the pairs
            count += _more_pairs(budget.left_for("evaluation"), rate(), len(pairs) - count) if done else 0
            reporter.extend(count - rounds_from)
    reporter.close()
    order = sorted(range(len(done)), key=lambda j: done[j])  # back into the pairs' order
    scored, translations = [pairs[done[j]] for j in order], [translations[j] for j in order]
    scores = translator.scores_of(scored, translations, beam=beam, max_repeat=MAX_REPEAT, retrieval=True,
                                  seconds=budgets.now() - started)
    cut = None if len(scored) == len(pairs) else f"{len(scored):,} of {len(pairs):,} test pairs"
    scores.update(scored=len(scored), held_out=len(pairs), cut_by_budget=cut is not None)
    budget.record("evaluation", started, budget.estimates.get("evaluation"), cut)
    return scores, scored, translations


def _more_pairs(left: float | None, seconds_per_pair: float, remaining: int) -> int:
    """How many of the ``remaining`` test pairs a further round decodes: all that fit when that is
    all of them, else whole :data:`DECODE_CHUNK`s only (a batch of a new size compiles its loop
    again, which can cost more than a few pairs are worth)."""
    fit = budgets.pairs_that_fit(left, seconds_per_pair, remaining)
    return fit if fit == remaining else fit - fit % DECODE_CHUNK


def _seconds_per_pair(done: int, warm: tuple[float, int], started: float, planned: float,
                      compiling: float) -> float:
    """The test decoding's rate after ``done`` pairs: that of the chunks after the first (``warm``:
    the clock and the pairs done when it ended); after the first alone, its time less the loop's
    estimated ``compiling`` seconds, at least the ``planned`` rate."""
    if done > warm[1]:
        return (budgets.now() - warm[0]) / (done - warm[1])
    return max(planned, (warm[0] - started - compiling) / done)
