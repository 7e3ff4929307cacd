"""Greedy and beam decoding: cache = full recomputation, beam 1 = greedy, beam finds the best sequence."""

import itertools

import numpy as np
import pytest

from kformer.errors import KformerError
from kformer.models import decode_inputs, decode_loops, generation
from kformer.models.generation import beam_search, greedy_decode, strip_special
from kformer.models.seq2seq import Seq2SeqTransformer
from kformer.text.specials import END_ID, PAD_ID, START_ID

SOURCE = np.array([[5, 6, 7, 8, 0, 0], [9, 4, 4, 0, 0, 0], [6, 6, 5, 9, 8, 7]], dtype="int32")


def _model(vocab=12, seed=0, **overrides):
    import keras

    keras.utils.set_random_seed(seed)
    settings = dict(dim=16, heads=2, ff_dim=32, encoder_layers=1, decoder_layers=2, dropout=0.0,
                    max_source_length=8, max_target_length=9)
    settings.update(overrides)
    return Seq2SeqTransformer(10, vocab, **settings)


def _sharpen(model, scale=4.0):
    """Scale the output layer so the random model is confident (long, varied outputs, END reachable)."""
    kernel, bias = model.output_projection.get_weights()
    bias[END_ID] -= 1.0  # delay END a little so sequences are several tokens long
    model.output_projection.set_weights([kernel * scale, bias])
    return model


@pytest.fixture(scope="module")
def model():
    """Decoded through the graph-compiled step functions (the default)."""
    return _sharpen(_model())


@pytest.fixture
def eager(monkeypatch):
    """Run the decoding steps eagerly: no tracing, quicker for models used only a few times."""
    monkeypatch.setattr(generation, "COMPILE", False)


def _check_contract(tokens, max_length):
    assert tokens.dtype == np.int32 and tokens.ndim == 2 and tokens.shape[1] <= max_length
    for row in tokens:
        ends = np.nonzero(row == END_ID)[0]
        if len(ends):
            assert (row[ends[0] + 1 :] == PAD_ID).all()
            assert (row[: ends[0]] != PAD_ID).all()
        assert not (row == START_ID).any()


@pytest.mark.slow
def test_cached_greedy_equals_full_recomputation(model):
    cached = greedy_decode(model, SOURCE, 9)
    full = greedy_decode(model, SOURCE, 9, use_cache=False)
    np.testing.assert_array_equal(cached, full)
    _check_contract(cached, 9)
    assert cached.shape[1] >= 3  # the check covers several cached steps


@pytest.mark.slow
def test_greedy_without_stopping_runs_max_length(model):
    tokens = greedy_decode(model, SOURCE, 9, stop_at_end=False)
    assert tokens.shape[1] <= 9
    np.testing.assert_array_equal(tokens, greedy_decode(model, SOURCE, 9, use_cache=False, stop_at_end=False))


@pytest.mark.slow
@pytest.mark.parametrize("width", [2, 4])
def test_compiled_beam_equals_the_reference_search(model, width):
    """The compiled beam loop (the default) = the step-by-step reference, cached and full recomputation."""
    compiled = beam_search(model, SOURCE, 9, beam_width=width)
    full = beam_search(model, SOURCE, 9, beam_width=width, use_cache=False)
    np.testing.assert_array_equal(compiled, full)
    np.testing.assert_array_equal(compiled, generation.reference_beam_search(model, SOURCE, 9, width))
    _check_contract(compiled, 9)
    assert compiled.shape[1] >= 3  # several steps, so parents were reordered
    called = generation.compiled_functions(model)["beam_shapes"]
    assert (4, 8, 9, width) in called and {(b, w) for b, w, *_ in called} <= set(generation.decode_shapes(model))


@pytest.mark.slow
def test_compiled_beam_equals_the_reference_on_random_models(eager):
    """Random models, sources, row limits, length penalties, widths and ``stop_at_end``: the
    compiled loop's answers are the reference search's (run eagerly: the same ops, no tracing)."""
    rng = np.random.default_rng(11)
    searches = {0: [(3, 0.6, True), (2, 1.5, True)], 1: [(5, 0.0, False), (4, 0.6, True)]}
    for seed, settings in searches.items():
        model = _sharpen(_model(vocab=16, seed=seed), scale=rng.uniform(1.0, 4.0))
        sources = rng.integers(4, 10, size=(5, 6)).astype("int32")
        sources[rng.random(sources.shape) < 0.3] = PAD_ID
        sources[:, 0] = rng.integers(4, 10, size=5)
        limits = rng.integers(1, 10, size=5)
        for width, penalty, stop in settings:
            kwargs = dict(beam_width=width, length_penalty=penalty, stop_at_end=stop, row_limits=limits)
            compiled = beam_search(model, sources, 9, **kwargs)
            np.testing.assert_array_equal(compiled, generation.reference_beam_search(model, sources, 9, **kwargs))
            _check_contract(compiled, 9)
            assert ((compiled != PAD_ID).sum(axis=1) <= limits).all()


def test_the_beam_loop_stops_once_no_answer_can_change(eager, monkeypatch):
    """The compiled loop ends when every example's answer is decided, before all candidates end,
    and still answers as the reference search, which runs until every candidate has ended."""
    model = _sharpen(_model(vocab=16, seed=3))
    reference_steps, loop_steps = [], []
    real_next = generation.CachedStepper.next_logits
    monkeypatch.setattr(generation.CachedStepper, "next_logits",
                        lambda stepper, tokens: (reference_steps.append(1), real_next(stepper, tokens))[1])
    reference = generation.reference_beam_search(model, SOURCE, 9, 3)
    real_step = model.decode_step
    monkeypatch.setattr(model, "decode_step", lambda *args: (loop_steps.append(1), real_step(*args))[1])
    np.testing.assert_array_equal(beam_search(model, SOURCE, 9, beam_width=3), reference)
    assert len(reference_steps) == 9 and 1 <= len(loop_steps) < 9


@pytest.mark.parametrize(("unfinished", "length_penalty", "decided"), [
    (-2.0, 0.0, True),    # the finished -1.0 beats every continuation of -2.0
    (-0.5, 0.0, False),   # a continuation may still outrank it
    (-2.0, 1.0, False),   # -1.0 / (7/6) = -0.857 vs -2.0 / (14/6) = -0.857 at length 9: a tie is not decided
    (-2.1, 1.0, True),    # -2.1 / (14/6) = -0.9
])
def test_an_example_is_decided_only_when_no_continuation_can_win(eager, unfinished, length_penalty, decided):
    from keras import ops

    scores = np.array([[-1.0, unfinished]], "float32")
    finished, lengths = np.array([[True, False]]), np.array([[2, 2]], "int32")

    def penalty(length):
        return ops.power((5.0 + ops.cast(length, "float32")) / 6.0, length_penalty)

    result = decode_loops.settled(scores, finished, lengths, penalty, np.int32(2), np.array([9], "int32"), -np.inf)
    assert np.asarray(result).tolist() == [decided]


@pytest.mark.slow
def test_beam_width_one_is_greedy(model):
    np.testing.assert_array_equal(beam_search(model, SOURCE, 9, beam_width=1), greedy_decode(model, SOURCE, 9))


@pytest.mark.slow
def test_batched_beam_equals_one_example_at_a_time(eager):
    model = _sharpen(_model(seed=5))
    batched = beam_search(model, SOURCE, 9, beam_width=3)
    for row, source in enumerate(SOURCE):
        single = beam_search(model, source[None], 9, beam_width=3)[0]
        assert strip_special(single) == strip_special(batched[row])


LIMITS = [2, 5, 9]  # one per SOURCE row


def _unended():
    """A model that rarely says END (its END logit pushed down): rows run to their limits."""
    model = _sharpen(_model(seed=7))
    kernel, bias = model.output_projection.get_weights()
    bias[END_ID] -= 50.0
    model.output_projection.set_weights([kernel, bias])
    return model


@pytest.mark.slow
def test_row_limits_cut_each_row_where_its_limit_says(model):
    """Greedy with per-row limits = the unlimited decode cut at each limit (cached, full and beam 1)."""
    unended = _unended()
    whole = greedy_decode(unended, SOURCE, 9)
    assert (whole != PAD_ID).sum(axis=1).tolist() == [9, 9, 9]  # no END: every row runs to max_length
    for use_cache in (True, False):
        limited = greedy_decode(unended, SOURCE, 9, use_cache=use_cache, row_limits=LIMITS)
        _check_contract(limited, 9)
        assert (limited != PAD_ID).sum(axis=1).tolist() == LIMITS
        for row, limit in enumerate(LIMITS):
            np.testing.assert_array_equal(limited[row, :limit], whole[row, :limit])
    np.testing.assert_array_equal(beam_search(unended, SOURCE, 9, beam_width=1, row_limits=LIMITS),
                                  greedy_decode(unended, SOURCE, 9, row_limits=LIMITS))
    # a row that ends before its limit is unchanged
    np.testing.assert_array_equal(greedy_decode(model, SOURCE, 9, row_limits=[9, 9, 9]), greedy_decode(model, SOURCE, 9))


@pytest.mark.slow
def test_beam_row_limits_equal_a_shorter_max_length_per_row(eager):
    unended = _unended()
    limited = beam_search(unended, SOURCE, 9, beam_width=3, row_limits=LIMITS)
    for row, limit in enumerate(LIMITS):
        alone = beam_search(unended, SOURCE[row : row + 1], limit, beam_width=3)[0]
        assert strip_special(limited[row]) == strip_special(alone) and len(strip_special(alone)) == limit
    with pytest.raises(KformerError, match="row limits"):
        greedy_decode(unended, SOURCE, 9, row_limits=[3, 3])


def _sequence_log_probs(model, source, sequences):
    """Sum of log p(token | prefix) of each sequence, by one full forward pass over all of them
    (padded: the decoder is causal, so later padding cannot change earlier positions)."""
    width = max(len(seq) for seq in sequences)
    target_in = np.zeros((len(sequences), width), dtype="int32")
    for row, seq in enumerate(sequences):
        target_in[row, : len(seq)] = [START_ID, *seq[:-1]]
    sources = np.repeat(source[None], len(sequences), axis=0)
    logits = np.asarray(model({"source": sources, "target_in": target_in}), dtype="float64")
    logits[..., [PAD_ID, START_ID]] = -np.inf
    top = logits.max(-1, keepdims=True)
    logp = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    return [float(sum(logp[row, i, t] for i, t in enumerate(seq))) for row, seq in enumerate(sequences)]


@pytest.mark.slow
def test_beam_search_finds_the_best_sequence_by_brute_force(eager):
    # Vocabulary: PAD UNK START END + 2 tokens; emittable: UNK(1), END(3), 4, 5. Max length 3.
    tiny = _sharpen(_model(vocab=6, seed=3), scale=3.0)
    words = [1, 4, 5]
    max_length = 3
    candidates = [[*seq, END_ID] for n in range(max_length) for seq in itertools.product(words, repeat=n)]
    candidates += [list(seq) for seq in itertools.product(words, repeat=max_length)]  # cut off, no END
    for source in SOURCE[:2]:
        log_probs = _sequence_log_probs(tiny, source, candidates)
        for length_penalty in (0.0, 1.0):
            normalised = [lp / ((5.0 + len(seq)) / 6.0) ** length_penalty for lp, seq in zip(log_probs, candidates, strict=True)]
            best = candidates[int(np.argmax(normalised))]
            # A beam wider than all prefixes keeps every candidate, so it must return the best one.
            found = beam_search(tiny, source[None], max_length, beam_width=64, length_penalty=length_penalty)[0]
            assert strip_special(found) == strip_special(best)
            assert list(found[: len(best)]) == best


def test_bad_lengths_and_widths_are_clear_errors(model, eager):
    with pytest.raises(KformerError, match="max length"):
        greedy_decode(model, SOURCE, 10)
    with pytest.raises(KformerError, match="beam width"):
        beam_search(model, SOURCE, 5, beam_width=0)
    with pytest.raises(KformerError, match="source ids"):
        greedy_decode(model, np.zeros((0, 3), "int32"), 5)


def test_decoding_reaches_the_compiled_loop_with_a_few_shapes_only(eager):
    """50 sources of 50 distinct lengths at batch sizes 1..32: at most 12 (batch, width) shapes
    reach the compiled greedy loop, and bucketing changes no answer."""
    from kformer.data.batching import pad_batch

    wide = _sharpen(_model(max_source_length=64, decoder_layers=1))
    rng = np.random.default_rng(0)
    sources = [rng.integers(4, 10, size=length).tolist() for length in rng.permutation(np.arange(1, 51))]
    shapes = set()
    for batch_size in range(1, 33):
        for start in range(0, len(sources), batch_size):
            padded = pad_batch(sources[start : start + batch_size], limit=64)
            shapes |= {chunk.shape for chunk, *_ in decode_inputs.decode_chunks(wide, padded)}
    assert len(shapes) <= 12 and shapes <= set(generation.decode_shapes(wide))
    # What greedy_decode sends to the compiled loop is exactly those chunks, and padding rows
    # and columns change no answer.
    alone = [strip_special(greedy_decode(wide, np.array([s], "int32"), 4)[0]) for s in sources[:5]]
    together = greedy_decode(wide, pad_batch(sources[:5], limit=64), 4)
    assert [strip_special(row) for row in together] == alone
    called = generation.compiled_functions(wide)["shapes"]
    assert {(batch, width) for batch, width, _ in called} <= set(generation.decode_shapes(wide))


def _longest_repeat(row, span: int) -> int:
    """Most back-to-back copies of any ``span``-token span in ``row`` (the definition, brute force)."""
    row, best = list(row), 0
    for start in range(len(row)):
        copies = 1
        while row[start + copies * span : start + (copies + 1) * span] == row[start : start + span] and \
                len(row[start : start + span]) == span:
            copies += 1
        best = max(best, copies if len(row[start : start + span]) == span else 0)
    return best


def _looping(seed=3, vocab=9):
    """A model that loops: two ordinary tokens' logits raised, END's pushed down."""
    model = _sharpen(_model(vocab=vocab, seed=seed))
    kernel, bias = model.output_projection.get_weights()
    bias[END_ID] -= 50.0
    bias[[4, 5]] += 6.0
    model.output_projection.set_weights([kernel, bias])
    return model


@pytest.mark.slow
@pytest.mark.parametrize("max_repeat", [1, 2, 3])
def test_max_repeat_caps_back_to_back_copies_of_every_span(eager, max_repeat):
    """Unlimited, the looping model repeats a token or a span more than ``max_repeat`` times; with
    the limit no span of 1..REPEAT_SPAN tokens has more copies in a row -- greedy and beam, compiled
    loops equal to the step-by-step references (which apply the rule by its definition)."""
    looping = _looping()
    unlimited = greedy_decode(looping, SOURCE, 9)
    assert max(_longest_repeat(strip_special(row), span) for row in unlimited for span in (1, 2)) > max_repeat
    for decoded in (
        greedy_decode(looping, SOURCE, 9, max_repeat=max_repeat),
        beam_search(looping, SOURCE, 9, beam_width=3, max_repeat=max_repeat),
    ):
        _check_contract(decoded, 9)
        for row in decoded:
            assert len(strip_special(row)) == 9  # the limit forbids a token, it does not end the row
            for span in range(1, generation.REPEAT_SPAN + 1):
                assert _longest_repeat(strip_special(row), span) <= max_repeat
    np.testing.assert_array_equal(greedy_decode(looping, SOURCE, 9, max_repeat=max_repeat),
                                  greedy_decode(looping, SOURCE, 9, use_cache=False, max_repeat=max_repeat))
    np.testing.assert_array_equal(
        beam_search(looping, SOURCE, 9, beam_width=3, max_repeat=max_repeat),
        generation.reference_beam_search(looping, SOURCE, 9, 3, max_repeat=max_repeat))


@pytest.mark.slow
def test_max_repeat_changes_nothing_where_nothing_repeats_that_often(model):
    """A limit at the most copies greedy output already has is invisible; one less changes it."""
    unlimited = greedy_decode(model, SOURCE, 9)
    most = max(_longest_repeat(strip_special(row), span) for row in unlimited for span in range(1, 9))
    assert most >= 2
    np.testing.assert_array_equal(greedy_decode(model, SOURCE, 9, max_repeat=most), unlimited)
    assert not np.array_equal(greedy_decode(model, SOURCE, 9, max_repeat=most - 1), unlimited)
    with pytest.raises(KformerError, match="max repeat"):
        greedy_decode(model, SOURCE, 9, max_repeat=-1)
