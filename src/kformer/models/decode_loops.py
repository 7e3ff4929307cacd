"""Cached greedy and beam decoding, each as one loop of ``keras.ops`` (compiled whole by
:func:`kformer.models.generation.compiled_functions`): no Python or dispatch between steps.

Both loops encode the sources once, compute each decoder block's cross-attention keys/values
once, and decode one token per iteration through the self-attention caches. ``max_repeat``
(0 = off) forbids any span of 1 to :data:`REPEAT_SPAN` tokens to be generated more than that many
times in a row: running counters per row (:func:`track_repeats`) mark the ids that would complete
an extra copy (:func:`repeat_penalty`).
"""

from __future__ import annotations

import numpy as np
from keras import ops

from kformer.models.retrieval import mixed_log_probs
from kformer.text.specials import END_ID, PAD_ID, START_ID

# Ids a decoder may never emit.
FORBIDDEN = (PAD_ID, START_ID)
# Beam scores inside the compiled loop (the reference search keeps float64 in numpy).
SCORE_DTYPE = "float32"
# Longest span (in tokens) whose back-to-back copies ``max_repeat`` limits: a word of up to 8 pieces.
REPEAT_SPAN = 8


def greedy_loop(model, source, max_length, limits, buffer: int, stop_at_end: bool, max_repeat: int = 0,
                knn=None, knn_k: int = 0):
    """Cached greedy decoding as one loop of ``keras.ops`` (compiled whole by :func:`~kformer.models.generation.compiled_functions`).

    Same arithmetic as the step-by-step path: encoder and cross-attention keys/values once, then
    one token per iteration through the self-attention caches. ``buffer`` (a Python int: part
    of the compiled shape) sizes the caches and the output; ``max_length`` (a tensor, so it costs
    no recompile) stops the loop, and ``limits`` (``(batch,)`` int32 tensor) finishes each row at
    its own limit; ``max_repeat`` (a Python int) as in :func:`~kformer.models.generation.greedy_decode`. With a
    ``knn`` (:class:`~kformer.models.retrieval.Knn`) and ``knn_k`` neighbours, each step picks from the
    kNN-MT mixture (:func:`~kformer.models.retrieval.mixed_log_probs`). Returns ``(batch, buffer)``.
    """
    encoder_outputs, source_mask = model.encode(source, training=False)
    cross_caches = model.cross_attention_caches(encoder_outputs)
    batch = ops.shape(source)[0]
    self_caches = model.empty_self_attention_caches(batch, buffer)
    forbidden = ops.convert_to_tensor(np.isin(np.arange(model.target_vocab_size), FORBIDDEN))

    def cond(index, tokens, generated, finished, repeats, caches):
        running = ops.less(index, max_length)
        if stop_at_end:
            running = ops.logical_and(running, ops.logical_not(ops.all(finished)))
        return running

    def body(index, tokens, generated, finished, repeats, caches):
        logits, caches = next_scores(model, tokens, index, caches, cross_caches, source_mask, knn, knn_k)
        logits = ops.where(forbidden[None, :], ops.cast(-np.inf, logits.dtype), logits)
        if max_repeat:
            logits = logits + ops.cast(repeat_penalty(*repeats, max_repeat, model.target_vocab_size), logits.dtype)
        next_ids = ops.cast(ops.argmax(logits, axis=-1), "int32")
        next_ids = ops.where(finished, ops.cast(PAD_ID, "int32"), next_ids)
        generated = ops.slice_update(generated, (0, index), next_ids[:, None])
        finished = ops.logical_or(finished, ops.equal(next_ids, END_ID))
        finished = ops.logical_or(finished, ops.greater_equal(index + 1, limits))
        return index + 1, next_ids[:, None], generated, finished, track_repeats(*repeats, next_ids), tuple(caches)

    start = (
        ops.convert_to_tensor(0, "int32"),
        ops.full((batch, 1), START_ID, dtype="int32"),
        ops.zeros((batch, buffer), dtype="int32"),
        ops.zeros((batch,), dtype="bool"),
        no_repeats((batch,)),
        tuple(self_caches),
    )
    return ops.while_loop(cond, body, start)[2]


def next_scores(model, tokens, index, caches, cross_caches, source_mask, knn, knn_k: int):
    """One decoder step: ``(scores (rows, vocab), new caches)``, the scores the model's logits, or
    with a ``knn`` the kNN-MT mixture's log-probabilities (the step's state is the query)."""
    if knn is None:
        logits, caches = model.decode_step(tokens, index, list(caches), cross_caches, source_mask)
        return logits, caches
    states, caches = model.decode_state_step(tokens, index, list(caches), cross_caches, source_mask)
    return mixed_log_probs(states, model.project(states), knn, knn_k), caches


def no_repeats(shape) -> tuple:
    """The repeat counters of :func:`track_repeats` before any token: ``recent`` (the last
    ``REPEAT_SPAN`` tokens, newest first; -1 = none yet) and ``runs``, each ``(*shape, REPEAT_SPAN)`` int32."""
    return ops.full((*shape, REPEAT_SPAN), -1, dtype="int32"), ops.zeros((*shape, REPEAT_SPAN), dtype="int32")


def track_repeats(recent, runs, next_ids) -> tuple:
    """Counters after ``next_ids`` (``(...,)``): ``runs[..., p - 1]`` counts the latest tokens in a row
    that equal the token ``p`` before them, so the last ``runs + p`` tokens repeat a ``p``-token span."""
    same = ops.equal(recent, next_ids[..., None])
    runs = ops.where(same, runs + 1, ops.zeros_like(runs))
    return ops.concatenate([next_ids[..., None], recent[..., :-1]], axis=-1), runs


def repeat_penalty(recent, runs, max_repeat: int, vocab: int):
    """``(rows, vocab)`` float32: -inf for each id that would complete copy ``max_repeat + 1`` of a
    span of ``p`` tokens (the last ``(max_repeat + 1) * p - 1`` tokens repeat it: ``runs >=
    max_repeat * p - 1``; the id is then the token ``p`` back), 0 elsewhere. ``recent``/``runs``:
    ``(rows, REPEAT_SPAN)``; the same rule as :func:`~kformer.models.generation.forbid_repeats`."""
    spans = ops.arange(1, REPEAT_SPAN + 1, dtype="int32")
    active = ops.logical_and(ops.greater_equal(runs, max_repeat * spans - 1), ops.greater_equal(recent, 0))
    rows = ops.shape(recent)[0]
    row_ids = ops.repeat(ops.arange(rows, dtype="int32")[:, None], REPEAT_SPAN, axis=1)
    indices = ops.reshape(ops.stack([row_ids, ops.maximum(recent, 0)], axis=-1), (-1, 2))
    values = ops.reshape(ops.where(active, -np.inf, 0.0), (-1,))
    return ops.scatter(indices, ops.cast(values, "float32"), (rows, vocab))


def beam_loop(model, source, max_length, limits, length_penalty, buffer: int, width: int, stop_at_end: bool,
               max_repeat: int = 0, knn=None, knn_k: int = 0):
    """Cached beam search over one chunk as one loop of ``keras.ops`` (compiled whole by :func:`~kformer.models.generation.compiled_functions`).

    The same search as :func:`~kformer.models.generation.reference_beam_search` with everything on the device: the encoder and the
    cross-attention keys/values run once per example (then repeated for its ``width``
    candidates); each iteration decodes one token for all ``batch * width`` candidates, takes the
    top ``width`` of ``(batch, width * vocab)`` scores, reorders the self-attention caches and
    the sequences by a gather of the chosen parents, and finishes candidates at END or their
    example's limit. ``buffer`` and ``width`` (Python ints) are part of the compiled shape;
    ``max_length`` (scalar int32), ``limits`` (``(batch,)`` int32) and ``length_penalty``
    (scalar) are tensors; ``max_repeat`` (a Python int) as in :func:`~kformer.models.generation.beam_search`;
    ``knn``/``knn_k`` as in :func:`greedy_loop`. Scores are kept in ``SCORE_DTYPE``. Returns ``(batch, buffer)`` int32:
    each example's best candidate by ``score / ((5 + length) / 6) ** length_penalty``.

    One function on purpose: the loop's state, its body and the constants the body closes over
    are one ``while_loop`` that XLA compiles whole; apart, they would travel as arguments.
    """
    encoder_outputs, source_mask = model.encode(source, training=False)
    cross_caches = [ops.repeat(cache, width, axis=0) for cache in model.cross_attention_caches(encoder_outputs)]
    source_mask = ops.repeat(source_mask, width, axis=0)
    batch = ops.shape(source)[0]
    vocab = model.target_vocab_size
    self_caches = model.empty_self_attention_caches(batch * width, buffer)
    ids = np.arange(vocab)
    forbidden = ops.convert_to_tensor(np.isin(ids, FORBIDDEN))
    # What a finished candidate may add: PAD at no cost, nothing else.
    pad_only = ops.convert_to_tensor(np.where(ids == PAD_ID, 0.0, -np.inf), SCORE_DTYPE)
    minus_inf = ops.convert_to_tensor(-np.inf, SCORE_DTYPE)
    first_row = ops.arange(0, batch * width, width, dtype="int32")[:, None]  # (batch, 1): each example's row 0

    penalty_power = ops.cast(length_penalty, SCORE_DTYPE)

    def penalty(length):
        return ops.power((5.0 + ops.cast(ops.maximum(length, 1), SCORE_DTYPE)) / 6.0, penalty_power)

    def cond(index, tokens, sequences, scores, finished, decided, lengths, repeats, caches):
        running = ops.less(index, max_length)
        if stop_at_end:
            done = ops.logical_or(ops.all(finished, axis=-1), decided)
            running = ops.logical_and(running, ops.logical_not(ops.all(done)))
        return running

    def body(index, tokens, sequences, scores, finished, decided, lengths, repeats, caches):
        logits, caches = next_scores(model, tokens, index, caches, cross_caches, source_mask, knn, knn_k)
        logits = ops.cast(logits, SCORE_DTYPE)
        log_probs = logits - ops.logsumexp(logits, axis=-1, keepdims=True)  # already normalised with knn
        log_probs = ops.where(forbidden[None, :], minus_inf, log_probs)
        if max_repeat:
            recent, runs = (ops.reshape(counter, (-1, REPEAT_SPAN)) for counter in repeats)
            log_probs = log_probs + ops.cast(repeat_penalty(recent, runs, max_repeat, vocab), SCORE_DTYPE)
        log_probs = ops.reshape(log_probs, (-1, width, vocab))
        log_probs = ops.where(finished[..., None], pad_only[None, None, :], log_probs)
        candidates = ops.reshape(scores[..., None] + log_probs, (-1, width * vocab))
        scores, best = ops.top_k(candidates, width)
        best = ops.cast(best, "int32")
        parents, next_ids = best // vocab, best % vocab
        sequences = ops.take_along_axis(sequences, parents[..., None], axis=1)
        sequences = ops.slice_update(sequences, (0, 0, index), next_ids[..., None])
        was_finished = ops.take_along_axis(finished, parents, axis=1)
        lengths = ops.take_along_axis(lengths, parents, axis=1) + ops.cast(ops.logical_not(was_finished), "int32")
        finished = ops.logical_or(was_finished, ops.equal(next_ids, END_ID))
        finished = ops.logical_or(finished, ops.greater_equal(index + 1, limits)[:, None])
        repeats = track_repeats(*(ops.take_along_axis(counter, parents[..., None], axis=1) for counter in repeats),
                                 next_ids)
        rows = ops.reshape(first_row + parents, (-1,))
        caches = tuple(ops.take(cache, rows, axis=0) for cache in caches)
        decided = ops.logical_or(decided, settled(scores, finished, lengths, penalty, index + 1, limits, minus_inf))
        return index + 1, ops.reshape(next_ids, (-1, 1)), sequences, scores, finished, decided, lengths, repeats, caches

    only_first = ops.where(ops.equal(ops.arange(width), 0), 0.0, -np.inf)  # one live candidate to start
    start = (
        ops.convert_to_tensor(0, "int32"),
        ops.full((batch * width, 1), START_ID, dtype="int32"),
        ops.zeros((batch, width, buffer), dtype="int32"),
        ops.zeros((batch, width), dtype=SCORE_DTYPE) + ops.cast(only_first, SCORE_DTYPE)[None, :],
        ops.zeros((batch, width), dtype="bool"),
        ops.zeros((batch,), dtype="bool"),
        ops.zeros((batch, width), dtype="int32"),
        no_repeats((batch, width)),
        tuple(self_caches),
    )
    _, _, sequences, scores, _, _, lengths, _, _ = ops.while_loop(cond, body, start)
    choice = ops.cast(ops.argmax(scores / penalty(lengths), axis=-1), "int32")
    return ops.take_along_axis(sequences, choice[:, None, None], axis=1)[:, 0, :]


def settled(scores, finished, lengths, penalty, steps, limits, minus_inf):
    """``(batch,)`` bool: examples whose answer no later step can change, so the beam loop need
    not wait for their unfinished candidates (the answer is the one the full search gives).

    ``scores``/``finished``/``lengths`` ``(batch, width)`` after ``steps`` steps; ``penalty``
    maps lengths to length penalties. Let ``f`` be the finished candidate the final choice would
    pick now and ``m`` the best raw score of an unfinished one. Adding a token never raises a raw
    score (log-probabilities are <= 0), so when ``score(f) > m`` no candidate can ever outrank
    ``f`` and push it out of the beam; and every later candidate ends with a raw score <= ``m``
    and a length in ``steps .. limit``, so its normalised score is at most ``m / penalty(L)`` at
    one end of that range (the penalty is monotonic). ``f`` stays the answer when its normalised
    score beats that bound (strictly: ties would go to the lower beam slot, as the final choice does).
    """
    normalised = ops.where(finished, scores / penalty(lengths), minus_inf)
    best = ops.cast(ops.argmax(normalised, axis=-1), "int32")[:, None]
    best_normalised = ops.take_along_axis(normalised, best, axis=1)[:, 0]
    best_score = ops.take_along_axis(scores, best, axis=1)[:, 0]
    unfinished = ops.max(ops.where(finished, minus_inf, scores), axis=-1)
    bound = ops.maximum(unfinished / penalty(steps + ops.zeros_like(limits)), unfinished / penalty(limits))
    any_finished = ops.any(finished, axis=-1)
    return ops.logical_and(any_finished, ops.logical_and(best_score > unfinished, best_normalised > bound))
