"""How a classifier cuts a batch of texts into network calls: the plan of least measured cost.

A batch mixes lengths (a service's micro-batch is whatever requests arrived together), and a call
runs every row at the width of its longest; Keras also pads the rows up to a batch bucket (1, 4,
16, 64: the shapes its warmup compiled), so 17 short texts and one long one cost 64 long rows.
That is what made micro-batched serving slower than one call per request, with a tail of calls
that took several times the naive ones (BENCHMARKS.md "Serving").

So the rows, sorted by length, are cut into runs of whole width buckets, each run into calls whose
row counts the runtime runs well (Keras: bucket sizes, e.g. 21 rows = 16 + 4 + 1; ONNX Runtime:
any count), choosing the cuts of least total cost (:func:`plan`). The costs are the runtime's own:
:class:`CallCosts` holds the seconds of one call per (rows, width) measured at warmup (the
classifier's warmup runs every shape anyway) and estimates a shape it has not seen from the
nearest measured row counts; before any measurement a rows x width estimate stands in.
"""

from __future__ import annotations

import numpy as np

from kformer.data.batching import BATCH_BUCKETS, batch_bucket, bucket_width

DEFAULT_CALL = 1.0  # the estimate before any measurement: a call's fixed cost, in units of ...
DEFAULT_ROW_TOKEN = 0.01  # ... one row token's


class CallCosts:
    """Seconds of one network call of ``rows`` rows at ``width`` tokens on one runtime.
    ``pads_rows``: the runtime runs a call padded to :func:`~kformer.data.batching.batch_bucket`
    rows (Keras: compiled shapes) rather than the rows as they are (ONNX Runtime)."""

    def __init__(self, pads_rows: bool):
        self.pads_rows = pads_rows
        self.measured: dict[tuple[int, int], float] = {}  # (rows, width) -> seconds
        self._splits: dict[tuple[int, int, int], tuple[float, tuple[int, ...]]] = {}

    def record(self, rows: int, width: int, seconds: float) -> None:
        self.measured[(rows, width)] = float(seconds)
        self._splits.clear()

    def call(self, rows: int, width: int) -> float:
        """One call's cost (rows padded to a bucket where the runtime pads them)."""
        rows = batch_bucket(rows) if self.pads_rows else rows
        known = sorted(r for r, w in self.measured if w == width)
        if not known:
            return DEFAULT_CALL + DEFAULT_ROW_TOKEN * rows * width
        if rows in known:
            return self.measured[(rows, width)]
        below = max((r for r in known if r < rows), default=None)
        above = min((r for r in known if r > rows), default=None)
        if above is None:  # beyond the largest measured: per row as there
            return self.measured[(below, width)] * rows / below
        if below is None:
            return self.measured[(above, width)]
        low, high = self.measured[(below, width)], self.measured[(above, width)]
        return low + (high - low) * (rows - below) / (above - below)

    def split(self, rows: int, width: int, most: int) -> tuple[float, tuple[int, ...]]:
        """The cheapest way to run ``rows`` rows at ``width`` in calls of at most ``most`` rows:
        ``(cost, row counts of the calls)``: calls of ``most`` rows, and the rest cut the
        cheapest way (Keras: into bucket sizes, or padded up to one)."""
        full, rest = divmod(rows, most)
        cost, counts = self._rest(rest, width, most)
        return cost + full * self.call(most, width), (most,) * full + counts

    def _rest(self, rows: int, width: int, most: int) -> tuple[float, tuple[int, ...]]:
        key = (rows, width, most)
        if key not in self._splits:
            best: list[tuple[float, tuple[int, ...]]] = [(0.0, ())]
            sizes = {b for b in BATCH_BUCKETS if b <= most} if self.pads_rows else set()
            for n in range(1, rows + 1):
                best.append(min((best[n - k][0] + self.call(k, width), best[n - k][1] + (k,))
                                for k in {n, *sizes} if k <= n))
            self._splits[key] = best[rows]
        return self._splits[key]


def plan(lengths: np.ndarray, limit: int, most: int, costs: CallCosts) -> list[tuple[np.ndarray, int]]:
    """Calls ``(row indices, width)`` covering every row once, of least total cost: rows sorted by
    length, cut into runs of whole width buckets (a run goes at its longest row's width), each run
    into :meth:`CallCosts.split`'s calls of at most ``most`` rows."""
    order = np.argsort(np.asarray(lengths), kind="stable")
    widths = [bucket_width(max(int(n), 1), limit) for n in np.asarray(lengths)[order]]
    edges = [0] + [i for i in range(1, len(order)) if widths[i] != widths[i - 1]] + [len(order)]
    groups = len(edges) - 1
    best: list[tuple[float, int]] = [(0.0, 0)] + [(np.inf, 0)] * groups  # (cost, where the last run starts)
    for end in range(1, groups + 1):
        for start in range(end):
            rows = edges[end] - edges[start]
            cost = best[start][0] + costs.split(rows, widths[edges[end] - 1], most)[0]
            if cost < best[end][0]:
                best[end] = (cost, start)
    calls, end = [], groups
    while end > 0:
        start = best[end][1]
        width, first = widths[edges[end] - 1], edges[start]
        for count in costs.split(edges[end] - first, width, most)[1]:
            calls.append((order[first:first + count], width))
            first += count
        end = start
    return calls[::-1]
