"""How a classifier cuts a batch into network calls (kformer.tasks.classify.batch_plan): by the
costs its runtime measured, never padding a mixed batch up to the longest row and the next batch
bucket when separate calls cost less."""

from __future__ import annotations

import numpy as np

from kformer.tasks.classify.batch_plan import CallCosts, plan


def measured(pads_rows: bool, fixed: float = 1.0, per_token: float = 0.01) -> CallCosts:
    """Costs of a runtime whose call costs ``fixed`` + ``per_token`` x rows x width, measured at
    every batch bucket and width bucket (as a classifier's warmup measures them)."""
    costs = CallCosts(pads_rows)
    for width in (8, 16, 24, 32, 48, 64, 96, 128):
        for rows in (1, 4, 16, 64):
            costs.record(rows, width, fixed + per_token * rows * width)
    return costs


def calls_of(lengths, costs, most=64):
    calls = plan(np.array(lengths), 128, most, costs)
    assert sorted(i for rows, _ in calls for i in rows) == list(range(len(lengths)))  # every row once
    for rows, width in calls:
        assert width >= max(lengths[i] for i in rows)
    return sorted((len(rows), width) for rows, width in calls)


def test_a_long_row_does_not_pull_short_ones_to_its_width_and_keras_rows_are_not_padded_past_need():
    lengths = [5] * 17 + [120]
    # Keras pads a call's rows to 1, 4, 16 or 64: 17 short rows go as 16 + 1, the long one alone
    assert calls_of(lengths, measured(pads_rows=True)) == [(1, 8), (1, 128), (16, 8)]
    # ONNX Runtime runs any row count: the 17 short rows in one call
    assert calls_of(lengths, measured(pads_rows=False)) == [(1, 128), (17, 8)]


def test_when_calls_are_dear_one_wider_call_is_cheaper_than_many():
    lengths = [7, 15, 23, 31]  # four width buckets
    assert calls_of(lengths, measured(pads_rows=False, fixed=100.0)) == [(4, 32)]
    assert calls_of(lengths, measured(pads_rows=False, fixed=0.01)) == [(1, 8), (1, 16), (1, 24), (1, 32)]


def test_large_inputs_go_in_calls_of_at_most_the_batch_size_and_unmeasured_costs_are_estimated():
    costs = CallCosts(pads_rows=True)  # before warmup: rows x width estimates
    # 150 rows: two calls of 64, and 22 as 16 + 4 + 2 (padded to 4) rather than one call padded to 64
    assert calls_of([10] * 150, costs, most=64) == [(2, 16), (4, 16), (16, 16), (64, 16), (64, 16)]
    costs.record(64, 16, 1.0)
    assert costs.call(32, 16) == 1.0  # padded up to 64 rows: the measured call
    onnx = CallCosts(pads_rows=False)
    onnx.record(16, 16, 1.0)
    onnx.record(64, 16, 4.0)
    assert onnx.call(40, 16) == 2.5 and onnx.call(128, 16) == 8.0  # between and beyond the measured rows
