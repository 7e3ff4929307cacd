"""Translation training batches: which encoded pairs train, how they are grouped, and the
``tf.data`` pipeline that feeds them to the model.

Pairs are ``(sources, targets)``: two lists of subword-id lists, no special tokens. A batch is
teacher forcing: the decoder reads ``[START] + target`` and learns ``target + [END]``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kformer.auto import AUTO

EncodedPairs = tuple[list[list[int]], list[list[int]]]  # (sources, targets) of subword ids


def fitting(sources: list[list[int]], targets: list[list[int]], max_length: int) -> EncodedPairs:
    """``(sources, targets)`` of the pairs whose sides are 1..``max_length`` subwords long."""
    rows = fitting_rows(sources, targets, max_length)
    return [sources[i] for i in rows], [targets[i] for i in rows]


def fitting_rows(sources: list[list[int]], targets: list[list[int]], max_length: int) -> list[int]:
    """The indices of the pairs :func:`fitting` keeps."""
    return [i for i, (s, t) in enumerate(zip(sources, targets, strict=True))
            if 0 < len(s) <= max_length and 0 < len(t) <= max_length]


def target_tokens(pairs: EncodedPairs) -> int:
    """Target tokens an epoch of ``pairs`` trains on, ``[END]`` included."""
    return sum(len(ids) + 1 for ids in pairs[1])


def batch_plan(config, lengths: Sequence[int] | np.ndarray, shuffle: bool, levels=None, batch_size: int | None = None,
               groups: np.ndarray | None = None, weights: tuple[float, ...] | None = None):
    """The :class:`~kformer.data.pair_batches.PairBatchPlan` of pairs of these batch ``lengths``
    (:func:`~kformer.data.pair_batches.pair_lengths`): packed by ``config.batch_tokens`` unless
    ``config.batch_size`` is set (or a ``batch_size`` is given); with ``weights`` (one per corpus,
    ``groups`` each pair's) the corpora sampled by them."""
    from kformer.data.pair_batches import PairBatchPlan

    batch_size = batch_size or (None if config.batch_size == AUTO else config.batch_size)
    return PairBatchPlan(lengths, batch_tokens=None if batch_size else config.batch_tokens, batch_size=batch_size,
                         seed=config.seed, shuffle=shuffle, levels=levels,
                         groups=None if weights is None else groups, weights=weights)


def dataset(pairs: EncodedPairs, plan, limits=(None, None), first_epoch: int = 0, states=None,
            full_rows: bool = False):
    """A ``tf.data`` pipeline of the teacher-forcing batches ``plan`` arranges, epoch by epoch.

    Yields ``({"source": (batch, S), "target_in": (batch, T)}, target_out (batch, T))`` with
    ``target_in = [START] + target`` and ``target_out = target + [END]``, each padded to its
    width bucket (at most ``limits``). ``first_epoch`` is where a resumed run starts, so it sees
    the order an uninterrupted run would. ``states`` (a frozen pretrained encoder's outputs, one
    ``(len(source), hidden)`` array per source) adds ``"encoder_states": (batch, S, hidden)``,
    zero-padded as the sources are. ``full_rows`` (for a step compiled per shape) fills each batch
    up to :meth:`~kformer.data.pair_batches.PairBatchPlan.full_rows` with empty pairs: all
    padding, which the masked loss and accuracy leave out.
    """
    import tensorflow as tf  # input pipeline only, outside the model

    from kformer.data.batching import pad_batch
    from kformer.text.specials import END_ID, START_ID

    sources, targets = pairs
    epoch = {"n": first_epoch}

    def generate():
        batches = plan.epoch(epoch["n"])
        epoch["n"] += 1
        for rows in batches:
            empty = [[]] * (plan.full_rows(rows) - len(rows) if full_rows else 0)
            source = pad_batch([sources[i] for i in rows] + empty, limit=limits[0])
            target_in = pad_batch([[START_ID, *targets[i]] for i in rows] + empty, limit=limits[1])
            target_out = pad_batch([[*targets[i], END_ID] for i in rows] + empty, limit=limits[1])
            inputs = {"source": source, "target_in": target_in}
            if states is not None:
                inputs["encoder_states"] = padded_states([states[i] for i in rows], source.shape[1], len(source))
            yield inputs, target_out

    spec = tf.TensorSpec((None, None), tf.int32)
    signature = {"source": spec, "target_in": spec}
    if states is not None:
        signature["encoder_states"] = tf.TensorSpec((None, None, states[0].shape[-1]), tf.float32)
    pipeline = tf.data.Dataset.from_generator(generate, output_signature=(signature, spec))
    return pipeline.apply(tf.data.experimental.assert_cardinality(plan.steps)).prefetch(2)


def padded_states(states: Sequence[np.ndarray], width: int, rows: int | None = None) -> np.ndarray:
    """``(rows, width, hidden)`` float32: each ``(length, hidden)`` array, zero-padded (``rows``:
    at least ``len(states)``; the rows past them all zeros)."""
    out = np.zeros((rows or len(states), width, states[0].shape[-1]), dtype="float32")
    for row, state in enumerate(states):
        out[row, : len(state)] = state
    return out
