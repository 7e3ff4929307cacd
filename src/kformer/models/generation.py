"""Greedy and beam-search decoding for :class:`~kformer.models.seq2seq.Seq2SeqTransformer`.

Both decode incrementally by default: the encoder runs once, each decoder block's cross-attention
keys/values are computed once, and decoder self-attention keeps a key/value cache, so every step
processes one new token. ``use_cache=False`` recomputes the whole model on the whole prefix at
every step (the textbook translate loop); it exists to check the cache and to measure the gain.

Outputs follow one contract: int array ``(batch, <= max_length)`` of generated ids (no START),
each row ending with END (unless it hit its length limit) and padded with PAD after it. Besides the
batch's ``max_length``, ``row_limits`` (``(batch,)`` ints) may cap each row on its own -- e.g. a
translation by its source's length (:meth:`kformer.tasks.translate.Translator.decode_limits`), so
an undertrained model that never says END stops early on a short source instead of looping to the
longest sentence the batch allows. A row that reaches its limit is finished (no END, PAD after).
``max_repeat`` (0 = off) forbids any span of 1 to :data:`REPEAT_SPAN` tokens to be generated more
than that many times in a row -- the loop an undertrained decoder falls into (``20% 20% 20% 20%``,
``0 0 0 0 0``): the token that would complete the extra copy is never chosen.

Compiled decoding never recompiles per request: sources are decoded in chunks padded to a few
*decode shapes* -- batch rounded up to one of :data:`BATCH_BUCKETS`, width to one of
:func:`decode_widths` (a quarter, half or all of the model's longest source) -- and the
generation buffers are sized to a width bucket of ``max_length``, the real ``max_length`` being
applied inside the loop. :func:`decode_shapes` lists them all, so a server can warm each one.
"""

from __future__ import annotations

import weakref

import keras
import numpy as np
from keras import ops

from kformer.data.batching import BATCH_BUCKETS, bucket_width
from kformer.errors import BadInput
from kformer.text.specials import END_ID, PAD_ID, START_ID

# Ids a decoder may never emit.
_FORBIDDEN = (PAD_ID, START_ID)
_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Graph-compile the per-step functions (TensorFlow backend). False runs them eagerly: slower per
# step but no tracing, which is quicker for a handful of steps (tests, debugging).
COMPILE = True
# Beam scores inside the compiled loop (the reference search keeps float64 in numpy).
_SCORE_DTYPE = "float32"
# The compiled functions XLA compiles (jit_compile); the others run as plain TensorFlow graphs.
_XLA = ("step", "greedy_loop", "beam_loop")
# Longest span (in tokens) whose back-to-back copies ``max_repeat`` limits: a word of up to 8 pieces.
REPEAT_SPAN = 8


def greedy_decode(model, source_ids, max_length, use_cache=True, stop_at_end=True, row_limits=None, max_repeat=0):
    """Pick the most likely next token at every step.

    Args:
        model: a ``Seq2SeqTransformer``.
        source_ids: ``(batch, S)`` int (padded with 0).
        max_length: most tokens to generate per row (END included).
        use_cache: incremental decoding (default) or full recomputation per step.
        stop_at_end: stop once every row has finished (END or its limit); ``False`` always runs
            ``max_length`` steps (for timing).
        row_limits: optional ``(batch,)`` ints, most tokens for each row (at most ``max_length``;
            default ``max_length`` for every row).
        max_repeat: most back-to-back copies of any span of 1..``REPEAT_SPAN`` tokens (0: no limit).

    Returns:
        int32 ``(batch, <= max_length)``.
    """
    max_repeat = _check_repeat(max_repeat)
    source = _as_ids(source_ids)
    max_length = _check_length(model, max_length)
    limits = _row_limits(row_limits, source.shape[0], max_length)
    if use_cache:
        compiled = _compiled(model)
        buffer = _buffer_length(model, max_length)
        parts = []
        for padded, rows, start in _decode_chunks(model, source):
            compiled["shapes"].add((*padded.shape, buffer))
            chunk_limits = _pad_limits(limits[start : start + rows], padded.shape[0])
            out = compiled["greedy_loop"](ops.convert_to_tensor(padded), ops.convert_to_tensor(max_length, "int32"),
                                          ops.convert_to_tensor(chunk_limits), buffer, bool(stop_at_end), max_repeat)
            parts.append(np.asarray(out)[:rows, :max_length])
        return _trim(np.concatenate(parts))
    stepper = _FullStepper(model, source, max_length)
    batch = source.shape[0]
    tokens = np.full((batch, 1), START_ID, dtype="int32")
    finished = np.zeros(batch, dtype=bool)
    generated = []
    for index in range(max_length):
        logits = stepper.next_logits(tokens)
        logits[:, list(_FORBIDDEN)] = -np.inf
        _forbid_repeats(logits, np.stack(generated, axis=1) if generated else np.zeros((batch, 0), "int32"), max_repeat)
        next_ids = np.argmax(logits, axis=-1).astype("int32")
        next_ids = np.where(finished, PAD_ID, next_ids)
        generated.append(next_ids)
        finished |= (next_ids == END_ID) | (index + 1 >= limits)
        if stop_at_end and finished.all():
            break
        tokens = next_ids[:, None]
    return _trim(np.stack(generated, axis=1))


def beam_search(model, source_ids, max_length, beam_width=4, length_penalty=0.6, use_cache=True, stop_at_end=True,
                row_limits=None, max_repeat=0):
    """Keep the ``beam_width`` best prefixes per example; return the best finished sequence.

    Prefixes are ranked by total log-probability while searching; at the end each example's
    candidates are ranked by ``log_prob / ((5 + length) / 6) ** length_penalty`` (Wu et al.
    2016; ``length`` counts generated tokens including END; 0 = no length normalisation).
    Finished candidates stay in the beam with their score frozen; a candidate reaching its
    example's ``row_limits`` entry (``(batch,)``, default ``max_length``) is finished there.
    ``stop_at_end=False`` runs all ``max_length`` steps even when every candidate has ended (for timing).
    ``max_repeat`` (0: no limit) caps back-to-back copies of any span of 1..``REPEAT_SPAN`` tokens
    in every candidate, as in :func:`greedy_decode`.

    With ``use_cache`` (the default) each chunk of sources is decoded by one compiled loop
    (:func:`_beam_loop`: scores, top-k, cache reordering and the final length-penalised choice
    all inside it); ``use_cache=False`` runs the step-by-step reference search
    (:func:`_reference_beam_search`) with full recomputation.

    Returns:
        int32 ``(batch, <= max_length)``, same contract as :func:`greedy_decode`.
    """
    width = _check_width(beam_width)
    max_repeat = _check_repeat(max_repeat)
    if not use_cache:
        return _reference_beam_search(model, source_ids, max_length, width, length_penalty, False, stop_at_end,
                                      row_limits, max_repeat)
    source = _as_ids(source_ids)
    max_length = _check_length(model, max_length)
    limits = _row_limits(row_limits, source.shape[0], max_length)
    compiled = _compiled(model)
    buffer = _buffer_length(model, max_length)
    parts = []
    for padded, rows, start in _decode_chunks(model, source):
        compiled["beam_shapes"].add((*padded.shape, buffer, width))
        chunk_limits = _pad_limits(limits[start : start + rows], padded.shape[0])
        out = compiled["beam_loop"](ops.convert_to_tensor(padded), ops.convert_to_tensor(max_length, "int32"),
                                    ops.convert_to_tensor(chunk_limits),
                                    ops.convert_to_tensor(float(length_penalty), _SCORE_DTYPE),
                                    buffer, width, bool(stop_at_end), max_repeat)
        parts.append(np.asarray(out)[:rows, :max_length])
    return _trim(np.concatenate(parts))


def _reference_beam_search(model, source_ids, max_length, beam_width=4, length_penalty=0.6, use_cache=True,
                           stop_at_end=True, row_limits=None, max_repeat=0):
    """:func:`beam_search` step by step in Python/numpy (float64 scores, one model call per step,
    through the caches or, ``use_cache=False``, by full recomputation): the reference the
    compiled loop is tested against. Same arguments and result as :func:`beam_search`."""
    width = _check_width(beam_width)
    source = _as_ids(source_ids)
    max_length = _check_length(model, max_length)
    limits = _row_limits(row_limits, source.shape[0], max_length)
    parts = [
        _beam_chunk(model, padded, max_length, width, length_penalty, use_cache, stop_at_end,
                    _pad_limits(limits[start : start + rows], padded.shape[0]), _check_repeat(max_repeat))[:rows]
        for padded, rows, start in _decode_chunks(model, source)
    ]
    return _trim(np.concatenate([np.pad(p, [(0, 0), (0, max_length - p.shape[1])]) for p in parts]))


def _check_repeat(max_repeat) -> int:
    if isinstance(max_repeat, bool) or int(max_repeat) != max_repeat or int(max_repeat) < 0:
        raise BadInput(f"max repeat ({{field}}) must be a whole number of at least 0 (0: no limit), not {max_repeat!r}",
                       field="max_repeat")
    return int(max_repeat)


def _check_width(beam_width) -> int:
    if int(beam_width) < 1:
        raise BadInput(f"beam width ({{field}}) must be at least 1, not {beam_width}", field="beam")
    return int(beam_width)


def _beam_chunk(model, source, max_length, width, length_penalty, use_cache, stop_at_end, limits, max_repeat=0):
    """Beam search over one padded chunk of sources (``limits``: ``(batch,)`` most tokens per
    example): ``(batch, <= max_length)``."""
    batch = source.shape[0]
    if use_cache:
        stepper = _CachedStepper(model, np.repeat(source, width, axis=0), _buffer_length(model, max_length))
    else:
        stepper = _FullStepper(model, np.repeat(source, width, axis=0), max_length)
    scores = np.full((batch, width), -np.inf)
    scores[:, 0] = 0.0
    sequences = np.zeros((batch, width, 0), dtype="int32")
    finished = np.zeros((batch, width), dtype=bool)
    lengths = np.zeros((batch, width), dtype="int64")
    tokens = np.full((batch * width, 1), START_ID, dtype="int32")
    rows = np.arange(batch)[:, None]
    for index in range(max_length):
        logits = stepper.next_logits(tokens).astype("float64")
        log_probs = logits - _logsumexp(logits)
        log_probs[:, list(_FORBIDDEN)] = -np.inf
        _forbid_repeats(log_probs, sequences.reshape(batch * width, -1), max_repeat)
        log_probs = log_probs.reshape(batch, width, -1)
        # A finished candidate may only continue with PAD, at no cost.
        log_probs[finished] = -np.inf
        log_probs[finished, PAD_ID] = 0.0
        vocab = log_probs.shape[-1]
        candidates = (scores[..., None] + log_probs).reshape(batch, width * vocab)
        best = _top_k(candidates, width)
        parents, next_ids = best // vocab, (best % vocab).astype("int32")
        scores = np.take_along_axis(candidates, best, axis=-1)
        sequences = np.concatenate([sequences[rows, parents], next_ids[..., None]], axis=-1)
        was_finished = finished[rows, parents]
        lengths = lengths[rows, parents] + (~was_finished)
        finished = was_finished | (next_ids == END_ID) | (index + 1 >= limits[:, None])
        stepper.reorder((rows * width + parents).reshape(-1))
        if stop_at_end and finished.all():
            break
        tokens = next_ids.reshape(-1, 1)
    penalty = ((5.0 + np.maximum(lengths, 1)) / 6.0) ** float(length_penalty)
    choice = np.argmax(scores / penalty, axis=-1)
    return sequences[np.arange(batch), choice]


def _forbid_repeats(logits: np.ndarray, sequences: np.ndarray, max_repeat: int) -> None:
    """Set to -inf, in place, each row's ``logits`` ``(rows, vocab)`` of the ids that would complete
    copy ``max_repeat + 1`` of a span of 1..``REPEAT_SPAN`` tokens at the end of that row of
    ``sequences`` ``(rows, steps)``: the definition, step by step (the compiled loops keep running
    counts instead, :func:`_repeat_penalty`)."""
    if not max_repeat:
        return
    steps = sequences.shape[1]
    for row, sequence in enumerate(sequences):
        for span in range(1, REPEAT_SPAN + 1):
            window = (max_repeat + 1) * span - 1  # all of the copies but the token that would end the last
            tail = sequence[steps - window :]
            if steps >= window and (tail[span:] == tail[:-span]).all():
                logits[row, sequence[steps - span]] = -np.inf


def strip_special(ids) -> list[int]:
    """One generated row -> its token ids up to (not including) END, without PAD/START."""
    out = []
    for token in np.asarray(ids).tolist():
        if token == END_ID:
            break
        if token not in (PAD_ID, START_ID):
            out.append(int(token))
    return out


# --- steppers: "give me the logits of the next position" with or without caches ---------------


class _CachedStepper:
    """Encoder and cross-attention keys/values once; one token per step through the caches."""

    def __init__(self, model, source, max_length):
        compiled = _compiled(model)
        encoder_outputs, self.source_mask = compiled["encode"](ops.convert_to_tensor(source))
        self.cross_caches = compiled["cross_caches"](encoder_outputs)
        self.self_caches = model.empty_self_attention_caches(source.shape[0], max_length)
        self.step = compiled["step"]
        self.index = 0

    def next_logits(self, tokens):
        logits, self.self_caches = self.step(
            ops.convert_to_tensor(tokens), ops.convert_to_tensor(self.index, "int32"),
            self.self_caches, self.cross_caches, self.source_mask,
        )
        self.index += 1
        return np.array(ops.convert_to_numpy(logits), dtype="float32")

    def reorder(self, rows):
        # Rows only move within one example's beam, so cross caches and masks stay as they are.
        rows = ops.convert_to_tensor(rows, "int32")
        self.self_caches = [ops.take(cache, rows, axis=0) for cache in self.self_caches]


class _FullStepper:
    """Run the whole model on the whole prefix at every step (no caches at all)."""

    def __init__(self, model, source, max_length):
        self.forward = _compiled(model)["forward"]
        self.source = ops.convert_to_tensor(source)
        self.prefix = np.zeros((source.shape[0], 0), dtype="int32")

    def next_logits(self, tokens):
        self.prefix = np.concatenate([self.prefix, tokens], axis=1)
        logits = self.forward(self.source, ops.convert_to_tensor(self.prefix))
        return np.array(ops.convert_to_numpy(logits), dtype="float32")

    def reorder(self, rows):
        self.prefix = self.prefix[rows]


def greedy_loop(model, source, max_length, limits, buffer: int, stop_at_end: bool, max_repeat: int = 0):
    """Cached greedy decoding as one loop of ``keras.ops`` (compiled whole by :func:`_compiled`).

    Same arithmetic as the step-by-step path: encoder and cross-attention keys/values once, then
    one token per iteration through the self-attention caches. ``buffer`` (a Python int: part
    of the compiled shape) sizes the caches and the output; ``max_length`` (a tensor, so it costs
    no recompile) stops the loop, and ``limits`` (``(batch,)`` int32 tensor) finishes each row at
    its own limit; ``max_repeat`` (a Python int) as in :func:`greedy_decode`. Returns ``(batch, buffer)``.
    """
    encoder_outputs, source_mask = model.encode(source, training=False)
    cross_caches = model.cross_attention_caches(encoder_outputs)
    batch = ops.shape(source)[0]
    self_caches = model.empty_self_attention_caches(batch, buffer)
    forbidden = ops.convert_to_tensor(np.isin(np.arange(model.target_vocab_size), _FORBIDDEN))

    def cond(index, tokens, generated, finished, repeats, caches):
        running = ops.less(index, max_length)
        if stop_at_end:
            running = ops.logical_and(running, ops.logical_not(ops.all(finished)))
        return running

    def body(index, tokens, generated, finished, repeats, caches):
        logits, caches = model.decode_step(tokens, index, list(caches), cross_caches, source_mask)
        logits = ops.where(forbidden[None, :], ops.cast(-np.inf, logits.dtype), logits)
        if max_repeat:
            logits = logits + ops.cast(_repeat_penalty(*repeats, max_repeat, model.target_vocab_size), logits.dtype)
        next_ids = ops.cast(ops.argmax(logits, axis=-1), "int32")
        next_ids = ops.where(finished, ops.cast(PAD_ID, "int32"), next_ids)
        generated = ops.slice_update(generated, (0, index), next_ids[:, None])
        finished = ops.logical_or(finished, ops.equal(next_ids, END_ID))
        finished = ops.logical_or(finished, ops.greater_equal(index + 1, limits))
        return index + 1, next_ids[:, None], generated, finished, _track_repeats(*repeats, next_ids), tuple(caches)

    start = (
        ops.convert_to_tensor(0, "int32"),
        ops.full((batch, 1), START_ID, dtype="int32"),
        ops.zeros((batch, buffer), dtype="int32"),
        ops.zeros((batch,), dtype="bool"),
        _no_repeats((batch,)),
        tuple(self_caches),
    )
    return ops.while_loop(cond, body, start)[2]


def _no_repeats(shape) -> tuple:
    """The repeat counters of :func:`_track_repeats` before any token: ``recent`` (the last
    ``REPEAT_SPAN`` tokens, newest first; -1 = none yet) and ``runs``, each ``(*shape, REPEAT_SPAN)`` int32."""
    return ops.full((*shape, REPEAT_SPAN), -1, dtype="int32"), ops.zeros((*shape, REPEAT_SPAN), dtype="int32")


def _track_repeats(recent, runs, next_ids) -> tuple:
    """Counters after ``next_ids`` (``(...,)``): ``runs[..., p - 1]`` counts the latest tokens in a row
    that equal the token ``p`` before them, so the last ``runs + p`` tokens repeat a ``p``-token span."""
    same = ops.equal(recent, next_ids[..., None])
    runs = ops.where(same, runs + 1, ops.zeros_like(runs))
    return ops.concatenate([next_ids[..., None], recent[..., :-1]], axis=-1), runs


def _repeat_penalty(recent, runs, max_repeat: int, vocab: int):
    """``(rows, vocab)`` float32: -inf for each id that would complete copy ``max_repeat + 1`` of a
    span of ``p`` tokens (the last ``(max_repeat + 1) * p - 1`` tokens repeat it: ``runs >=
    max_repeat * p - 1``; the id is then the token ``p`` back), 0 elsewhere. ``recent``/``runs``:
    ``(rows, REPEAT_SPAN)``; the same rule as :func:`_forbid_repeats`."""
    spans = ops.arange(1, REPEAT_SPAN + 1, dtype="int32")
    active = ops.logical_and(ops.greater_equal(runs, max_repeat * spans - 1), ops.greater_equal(recent, 0))
    rows = ops.shape(recent)[0]
    row_ids = ops.repeat(ops.arange(rows, dtype="int32")[:, None], REPEAT_SPAN, axis=1)
    indices = ops.reshape(ops.stack([row_ids, ops.maximum(recent, 0)], axis=-1), (-1, 2))
    values = ops.reshape(ops.where(active, -np.inf, 0.0), (-1,))
    return ops.scatter(indices, ops.cast(values, "float32"), (rows, vocab))


def _beam_loop(model, source, max_length, limits, length_penalty, buffer: int, width: int, stop_at_end: bool,
               max_repeat: int = 0):
    """Cached beam search over one chunk as one loop of ``keras.ops`` (compiled whole by :func:`_compiled`).

    The same search as :func:`_beam_chunk` with everything on the device: the encoder and the
    cross-attention keys/values run once per example (then repeated for its ``width``
    candidates); each iteration decodes one token for all ``batch * width`` candidates, takes the
    top ``width`` of ``(batch, width * vocab)`` scores, reorders the self-attention caches and
    the sequences by a gather of the chosen parents, and finishes candidates at END or their
    example's limit. ``buffer`` and ``width`` (Python ints) are part of the compiled shape;
    ``max_length`` (scalar int32), ``limits`` (``(batch,)`` int32) and ``length_penalty``
    (scalar) are tensors; ``max_repeat`` (a Python int) as in :func:`beam_search`. Scores are kept in ``_SCORE_DTYPE``. Returns ``(batch, buffer)`` int32:
    each example's best candidate by ``score / ((5 + length) / 6) ** length_penalty``.
    """
    encoder_outputs, source_mask = model.encode(source, training=False)
    cross_caches = [ops.repeat(cache, width, axis=0) for cache in model.cross_attention_caches(encoder_outputs)]
    source_mask = ops.repeat(source_mask, width, axis=0)
    batch = ops.shape(source)[0]
    vocab = model.target_vocab_size
    self_caches = model.empty_self_attention_caches(batch * width, buffer)
    ids = np.arange(vocab)
    forbidden = ops.convert_to_tensor(np.isin(ids, _FORBIDDEN))
    # What a finished candidate may add: PAD at no cost, nothing else.
    pad_only = ops.convert_to_tensor(np.where(ids == PAD_ID, 0.0, -np.inf), _SCORE_DTYPE)
    minus_inf = ops.convert_to_tensor(-np.inf, _SCORE_DTYPE)
    first_row = ops.arange(0, batch * width, width, dtype="int32")[:, None]  # (batch, 1): each example's row 0

    penalty_power = ops.cast(length_penalty, _SCORE_DTYPE)

    def penalty(length):
        return ops.power((5.0 + ops.cast(ops.maximum(length, 1), _SCORE_DTYPE)) / 6.0, penalty_power)

    def cond(index, tokens, sequences, scores, finished, decided, lengths, repeats, caches):
        running = ops.less(index, max_length)
        if stop_at_end:
            done = ops.logical_or(ops.all(finished, axis=-1), decided)
            running = ops.logical_and(running, ops.logical_not(ops.all(done)))
        return running

    def body(index, tokens, sequences, scores, finished, decided, lengths, repeats, caches):
        logits, caches = model.decode_step(tokens, index, list(caches), cross_caches, source_mask)
        logits = ops.cast(logits, _SCORE_DTYPE)
        log_probs = logits - ops.logsumexp(logits, axis=-1, keepdims=True)
        log_probs = ops.where(forbidden[None, :], minus_inf, log_probs)
        if max_repeat:
            recent, runs = (ops.reshape(counter, (-1, REPEAT_SPAN)) for counter in repeats)
            log_probs = log_probs + ops.cast(_repeat_penalty(recent, runs, max_repeat, vocab), _SCORE_DTYPE)
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
        repeats = _track_repeats(*(ops.take_along_axis(counter, parents[..., None], axis=1) for counter in repeats),
                                 next_ids)
        rows = ops.reshape(first_row + parents, (-1,))
        caches = tuple(ops.take(cache, rows, axis=0) for cache in caches)
        decided = ops.logical_or(decided, _decided(scores, finished, lengths, penalty, index + 1, limits, minus_inf))
        return index + 1, ops.reshape(next_ids, (-1, 1)), sequences, scores, finished, decided, lengths, repeats, caches

    only_first = ops.where(ops.equal(ops.arange(width), 0), 0.0, -np.inf)  # one live candidate to start
    start = (
        ops.convert_to_tensor(0, "int32"),
        ops.full((batch * width, 1), START_ID, dtype="int32"),
        ops.zeros((batch, width, buffer), dtype="int32"),
        ops.zeros((batch, width), dtype=_SCORE_DTYPE) + ops.cast(only_first, _SCORE_DTYPE)[None, :],
        ops.zeros((batch, width), dtype="bool"),
        ops.zeros((batch,), dtype="bool"),
        ops.zeros((batch, width), dtype="int32"),
        _no_repeats((batch, width)),
        tuple(self_caches),
    )
    _, _, sequences, scores, _, _, lengths, _, _ = ops.while_loop(cond, body, start)
    choice = ops.cast(ops.argmax(scores / penalty(lengths), axis=-1), "int32")
    return ops.take_along_axis(sequences, choice[:, None, None], axis=1)[:, 0, :]


def _decided(scores, finished, lengths, penalty, steps, limits, minus_inf):
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


def _compiled(model) -> dict:
    """Graph-compiled encode / step / forward functions for ``model`` (built once per model)."""
    functions = _COMPILED.get(model)
    if functions is None:
        functions = {
            "encode": lambda source: model.encode(source, training=False),
            "cross_caches": model.cross_attention_caches,
            "step": model.decode_step,
            "forward": lambda source, prefix: model({"source": source, "target_in": prefix}, training=False)[:, -1, :],
            "greedy_loop": lambda source, max_length, limits, buffer, stop_at_end, max_repeat: greedy_loop(
                model, source, max_length, limits, buffer, stop_at_end, max_repeat),
            "beam_loop": lambda source, max_length, limits, length_penalty, buffer, width, stop_at_end, max_repeat: (
                _beam_loop(model, source, max_length, limits, length_penalty, buffer, width, stop_at_end, max_repeat)),
        }
        if COMPILE and keras.backend.backend() == "tensorflow":
            import tensorflow as tf  # generation plumbing only; the model itself is keras.ops

            # The whole cached greedy and beam loops run as XLA-compiled graphs (a while loop each), so
            # a step costs no Python or dispatch time; the single-step functions serve the reference beam.
            functions = {
                name: tf.function(fn, reduce_retracing=True, jit_compile=name in _XLA)
                for name, fn in functions.items()
            }
        functions["shapes"] = set()  # (batch, width, buffer) the compiled greedy loop has been called with
        functions["beam_shapes"] = set()  # (batch, width, buffer, beam width) the compiled beam loop has been called with
        _COMPILED[model] = functions
    return functions


def decode_widths(max_source_length: int) -> tuple[int, ...]:
    """The source widths decoding pads to: a quarter, a half and all of ``max_source_length``
    (multiples of 8 where that fits)."""
    longest = int(max_source_length)
    return tuple(sorted({min(longest, -(-max(longest * k // 4, 1) // 8) * 8) for k in (1, 2, 4)}))


def decode_shapes(model) -> list[tuple[int, int]]:
    """Every ``(batch, width)`` the compiled decoders are called with for ``model``."""
    return [(batch, width) for batch in BATCH_BUCKETS for width in decode_widths(model.max_source_length)]


def _decode_chunks(model, source: np.ndarray):
    """``(padded, rows, start)`` per chunk of at most ``BATCH_BUCKETS[-1]`` sources (``start``: its
    first row in ``source``): the chunk padded to a decode shape, extra rows copying its first row
    (so they end when it ends)."""
    widths = decode_widths(model.max_source_length)
    for start in range(0, len(source), BATCH_BUCKETS[-1]):
        chunk = source[start : start + BATCH_BUCKETS[-1]]
        rows, length = chunk.shape
        batch = next(b for b in BATCH_BUCKETS if b >= rows)
        width = next((w for w in widths if w >= length), length)
        padded = np.zeros((batch, width), dtype="int32")
        padded[:rows, :length] = chunk
        padded[rows:] = padded[0]
        yield padded, rows, start


def _row_limits(row_limits, batch: int, max_length: int) -> np.ndarray:
    """``(batch,)`` int32: each row's most tokens, within 1..``max_length`` (all ``max_length`` if None)."""
    if row_limits is None:
        return np.full(batch, max_length, dtype="int32")
    limits = np.asarray(row_limits)
    if limits.shape != (batch,):
        raise BadInput(f"row limits must be one per source row ({batch}), got shape {limits.shape}")
    return np.clip(limits, 1, max_length).astype("int32")


def _pad_limits(limits: np.ndarray, rows: int) -> np.ndarray:
    """A chunk's limits for its padded rows (copies of the first, as :func:`_decode_chunks` pads)."""
    return np.concatenate([limits, np.repeat(limits[:1], rows - len(limits))]).astype("int32")


def _buffer_length(model, max_length: int) -> int:
    """Generation buffers hold a width bucket of ``max_length`` (at most the model's longest target)."""
    return bucket_width(max_length, model.max_target_length)


def _as_ids(source_ids) -> np.ndarray:
    source = np.asarray(source_ids)
    if source.ndim != 2 or source.shape[0] == 0:
        raise BadInput(f"source ids must be a non-empty (batch, length) array, got shape {source.shape}")
    return source.astype("int32")


def _check_length(model, max_length) -> int:
    max_length = int(max_length)
    if not 1 <= max_length <= model.max_target_length:
        raise BadInput(
            f"max length {max_length} is outside 1..{model.max_target_length} (the model's max_target_length)"
        )
    return max_length


def _top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest entries of each row, best first (ties: lower index first)."""
    part = np.argpartition(-scores, k - 1, axis=-1)[:, :k]
    order = np.lexsort((part, -np.take_along_axis(scores, part, axis=-1)), axis=-1)
    return np.take_along_axis(part, order, axis=-1)


def _logsumexp(x):
    top = x.max(axis=-1, keepdims=True)
    return top + np.log(np.exp(x - top).sum(axis=-1, keepdims=True))


def _trim(generated: np.ndarray) -> np.ndarray:
    """Pad after the first END and drop columns that are padding in every row."""
    generated = generated.astype("int32")
    ended = np.cumsum(generated == END_ID, axis=-1)
    after_end = (ended - (generated == END_ID)) > 0
    generated = np.where(after_end, PAD_ID, generated)
    used = (generated != PAD_ID).any(axis=0)
    width = int(np.nonzero(used)[0].max()) + 1 if used.any() else 1
    return generated[:, :width]
