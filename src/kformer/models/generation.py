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

The shapes decoding runs in are :mod:`kformer.models.decode_inputs`'s; the compiled loops are
:mod:`kformer.models.decode_loops`; this module holds the public functions, the compiled-function
cache per model, and the step-by-step reference search the compiled beam loop is tested against.
"""

from __future__ import annotations

import weakref

import keras
import numpy as np
from keras import ops

from kformer.data.batching import BATCH_BUCKETS
from kformer.errors import BadInput
from kformer.models.decode_inputs import (
    as_ids,
    buffer_length,
    check_length,
    check_repeat,
    check_width,
    decode_chunks,
    decode_shapes,
    decode_widths,
    limits_per_row,
    pad_limits,
    trim,
)
from kformer.models.decode_loops import FORBIDDEN, REPEAT_SPAN, SCORE_DTYPE, beam_loop, greedy_loop
from kformer.text.specials import END_ID, PAD_ID, START_ID

__all__ = ["BATCH_BUCKETS", "COMPILE", "REPEAT_SPAN", "beam_search", "compiled_functions", "decode_shapes",
           "decode_widths", "drop_compiled", "greedy_decode", "greedy_loop", "reference_beam_search", "strip_special"]

_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Graph-compile the per-step functions (TensorFlow backend). False runs them eagerly: slower per
# step but no tracing, which is quicker for a handful of steps (tests, debugging).
COMPILE = True
# The compiled functions XLA compiles (jit_compile); the others run as plain TensorFlow graphs.
_XLA = ("step", "greedy_loop", "beam_loop")


def greedy_decode(model, source_ids, max_length, use_cache=True, stop_at_end=True, row_limits=None, max_repeat=0,
                  knn=None, knn_k=0):
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
        knn, knn_k: kNN-MT retrieval (:class:`~kformer.models.retrieval.Knn` and the neighbours
            per step; None: off); cached decoding only.

    Returns:
        int32 ``(batch, <= max_length)``.
    """
    max_repeat = check_repeat(max_repeat)
    source = as_ids(source_ids)
    max_length = check_length(model, max_length)
    limits = limits_per_row(row_limits, source.shape[0], max_length)
    check_knn(knn, knn_k, use_cache)
    knn = searched(knn)
    if use_cache:
        compiled = compiled_functions(model)
        buffer = buffer_length(model, max_length)
        parts = []
        for padded, rows, start in decode_chunks(model, source):
            compiled["shapes"].add((*padded.shape, buffer))
            chunk_limits = pad_limits(limits[start : start + rows], padded.shape[0])
            out = compiled["greedy_loop"](ops.convert_to_tensor(padded), ops.convert_to_tensor(max_length, "int32"),
                                          ops.convert_to_tensor(chunk_limits), buffer, bool(stop_at_end), max_repeat,
                                          knn, int(knn_k))
            parts.append(np.asarray(out)[:rows, :max_length])
        return trim(np.concatenate(parts))
    stepper = FullStepper(model, source, max_length)
    batch = source.shape[0]
    tokens = np.full((batch, 1), START_ID, dtype="int32")
    finished = np.zeros(batch, dtype=bool)
    generated = []
    for index in range(max_length):
        logits = stepper.next_logits(tokens)
        logits[:, list(FORBIDDEN)] = -np.inf
        forbid_repeats(logits, np.stack(generated, axis=1) if generated else np.zeros((batch, 0), "int32"), max_repeat)
        next_ids = np.argmax(logits, axis=-1).astype("int32")
        next_ids = np.where(finished, PAD_ID, next_ids)
        generated.append(next_ids)
        finished |= (next_ids == END_ID) | (index + 1 >= limits)
        if stop_at_end and finished.all():
            break
        tokens = next_ids[:, None]
    return trim(np.stack(generated, axis=1))


def beam_search(model, source_ids, max_length, beam_width=4, length_penalty=0.6, use_cache=True, stop_at_end=True,
                row_limits=None, max_repeat=0, knn=None, knn_k=0):
    """Keep the ``beam_width`` best prefixes per example; return the best finished sequence.

    Prefixes are ranked by total log-probability while searching; at the end each example's
    candidates are ranked by ``log_prob / ((5 + length) / 6) ** length_penalty`` (Wu et al.
    2016; ``length`` counts generated tokens including END; 0 = no length normalisation).
    Finished candidates stay in the beam with their score frozen; a candidate reaching its
    example's ``row_limits`` entry (``(batch,)``, default ``max_length``) is finished there.
    ``stop_at_end=False`` runs all ``max_length`` steps even when every candidate has ended (for timing).
    ``max_repeat`` (0: no limit) caps back-to-back copies of any span of 1..``REPEAT_SPAN`` tokens
    in every candidate, as in :func:`greedy_decode`; so do ``knn`` and ``knn_k`` (kNN-MT).

    With ``use_cache`` (the default) each chunk of sources is decoded by one compiled loop
    (:func:`beam_loop`: scores, top-k, cache reordering and the final length-penalised choice
    all inside it); ``use_cache=False`` runs the step-by-step reference search
    (:func:`reference_beam_search`) with full recomputation.

    Returns:
        int32 ``(batch, <= max_length)``, same contract as :func:`greedy_decode`.
    """
    width = check_width(beam_width)
    max_repeat = check_repeat(max_repeat)
    check_knn(knn, knn_k, use_cache)
    knn = searched(knn)
    if not use_cache:
        return reference_beam_search(model, source_ids, max_length, width, length_penalty, False, stop_at_end,
                                      row_limits, max_repeat)
    source = as_ids(source_ids)
    max_length = check_length(model, max_length)
    limits = limits_per_row(row_limits, source.shape[0], max_length)
    compiled = compiled_functions(model)
    buffer = buffer_length(model, max_length)
    parts = []
    for padded, rows, start in decode_chunks(model, source):
        compiled["beam_shapes"].add((*padded.shape, buffer, width))
        chunk_limits = pad_limits(limits[start : start + rows], padded.shape[0])
        out = compiled["beam_loop"](ops.convert_to_tensor(padded), ops.convert_to_tensor(max_length, "int32"),
                                    ops.convert_to_tensor(chunk_limits),
                                    ops.convert_to_tensor(float(length_penalty), SCORE_DTYPE),
                                    buffer, width, bool(stop_at_end), max_repeat, knn, int(knn_k))
        parts.append(np.asarray(out)[:rows, :max_length])
    return trim(np.concatenate(parts))


def reference_beam_search(model, source_ids, max_length, beam_width=4, length_penalty=0.6, use_cache=True,
                           stop_at_end=True, row_limits=None, max_repeat=0):
    """:func:`beam_search` step by step in Python/numpy (float64 scores, one model call per step,
    through the caches or, ``use_cache=False``, by full recomputation): the reference the
    compiled loop is tested against. Same arguments and result as :func:`beam_search`."""
    width = check_width(beam_width)
    source = as_ids(source_ids)
    max_length = check_length(model, max_length)
    limits = limits_per_row(row_limits, source.shape[0], max_length)
    parts = [
        _beam_chunk(model, padded, max_length, width, length_penalty, use_cache, stop_at_end,
                    pad_limits(limits[start : start + rows], padded.shape[0]), check_repeat(max_repeat))[:rows]
        for padded, rows, start in decode_chunks(model, source)
    ]
    return trim(np.concatenate([np.pad(p, [(0, 0), (0, max_length - p.shape[1])]) for p in parts]))


def _beam_chunk(model, source, max_length, width, length_penalty, use_cache, stop_at_end, limits, max_repeat=0):
    """Beam search over one padded chunk of sources (``limits``: ``(batch,)`` most tokens per
    example): ``(batch, <= max_length)``."""
    batch = source.shape[0]
    if use_cache:
        stepper = CachedStepper(model, np.repeat(source, width, axis=0), buffer_length(model, max_length))
    else:
        stepper = FullStepper(model, np.repeat(source, width, axis=0), max_length)
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
        log_probs[:, list(FORBIDDEN)] = -np.inf
        forbid_repeats(log_probs, sequences.reshape(batch * width, -1), max_repeat)
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


def searched(knn):
    """``knn`` with its index (if any) read the way the decode loops run: a loop of slices when
    they are compiled, one gather when they run eagerly (:func:`~kformer.models.ivf.ivf_nearest`)."""
    if knn is None or knn.ivf is None:
        return knn
    return knn._replace(ivf=knn.ivf._replace(loop=bool(COMPILE and keras.backend.backend() == "tensorflow")))


def check_knn(knn, knn_k, use_cache: bool) -> None:
    """Retrieval needs the cached loops (they query with the step's decoder state) and ``knn_k``
    neighbours, at least 1, no more than the datastore holds."""
    if knn is None:
        return
    if not use_cache:
        raise BadInput("retrieval (kNN-MT) decodes through the cached loops only; use_cache must be True",
                       field="retrieval")
    entries = int(ops.shape(knn.values)[0])
    if isinstance(knn_k, bool) or not 1 <= int(knn_k) <= entries:
        raise BadInput(f"{{field}} must be between 1 and the datastore's {entries} entries, not {knn_k!r}", field="k")


def forbid_repeats(logits: np.ndarray, sequences: np.ndarray, max_repeat: int) -> None:
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


class CachedStepper:
    """Encoder and cross-attention keys/values once; one token per step through the caches."""

    def __init__(self, model, source, max_length):
        compiled = compiled_functions(model)
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


class FullStepper:
    """Run the whole model on the whole prefix at every step (no caches at all)."""

    def __init__(self, model, source, max_length):
        self.forward = compiled_functions(model)["forward"]
        self.source = ops.convert_to_tensor(source)
        self.prefix = np.zeros((source.shape[0], 0), dtype="int32")

    def next_logits(self, tokens):
        self.prefix = np.concatenate([self.prefix, tokens], axis=1)
        logits = self.forward(self.source, ops.convert_to_tensor(self.prefix))
        return np.array(ops.convert_to_numpy(logits), dtype="float32")

    def reorder(self, rows):
        self.prefix = self.prefix[rows]


def compiled_functions(model) -> dict:
    """Graph-compiled encode / step / forward functions for ``model`` (built once per model)."""
    functions = _COMPILED.get(model)
    if functions is None:
        functions = {
            "encode": lambda source: model.encode(source, training=False),
            "cross_caches": model.cross_attention_caches,
            "step": model.decode_step,
            "forward": lambda source, prefix: model({"source": source, "target_in": prefix}, training=False)[:, -1, :],
            "greedy_loop": lambda source, max_length, limits, buffer, stop_at_end, max_repeat, knn, knn_k: greedy_loop(
                model, source, max_length, limits, buffer, stop_at_end, max_repeat, knn, knn_k),
            "beam_loop": lambda source, max_length, limits, length_penalty, buffer, width, stop_at_end, max_repeat, knn,
            knn_k: beam_loop(model, source, max_length, limits, length_penalty, buffer, width, stop_at_end, max_repeat,
                             knn, knn_k),
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


def _top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest entries of each row, best first (ties: lower index first)."""
    part = np.argpartition(-scores, k - 1, axis=-1)[:, :k]
    order = np.lexsort((part, -np.take_along_axis(scores, part, axis=-1)), axis=-1)
    return np.take_along_axis(part, order, axis=-1)


def _logsumexp(x):
    top = x.max(axis=-1, keepdims=True)
    return top + np.log(np.exp(x - top).sum(axis=-1, keepdims=True))


def drop_compiled(model) -> None:
    """Forget ``model``'s compiled functions, so the next decode compiles them again (benchmarks
    that time decoding with its compilation)."""
    _COMPILED.pop(model, None)
