"""Seq2SeqTransformer: shapes, masking, teacher-forced training, attention maps, .keras round trip,
dtype policy."""

import numpy as np
import pytest

from kformer.artifacts import save_keras_atomic
from kformer.folders import load_keras_model
from kformer.models.generation import greedy_decode
from kformer.models.seq2seq import Seq2SeqTransformer, compile_seq2seq


def _model(**overrides):
    import keras

    keras.utils.set_random_seed(1)
    settings = dict(dim=16, heads=2, ff_dim=32, encoder_layers=2, decoder_layers=2, dropout=0.0)
    settings.update(overrides)
    return Seq2SeqTransformer(13, 11, 10, 8, **settings)


def _batch():
    rng = np.random.default_rng(0)
    source = rng.integers(4, 13, size=(3, 6)).astype("int32")
    source[1, 4:] = 0
    target_in = rng.integers(4, 11, size=(3, 5)).astype("int32")
    target_in[:, 0] = 2
    target_in[2, 3:] = 0
    return source, target_in


@pytest.mark.parametrize("options", [{}, {"tie_embeddings": True, "norm_first": True, "positions": "sinusoidal"},
                                     {"positions": "abacus", "attention_window": 2}])
def test_logits_shape_and_padding_does_not_leak(options):
    model = _model(**options)
    source, target_in = _batch()
    logits = np.asarray(model({"source": source, "target_in": target_in}))
    assert logits.shape == (3, 5, 11)
    # Extra source padding, or different ids at padded source positions, change nothing.
    padded = np.concatenate([source, np.zeros((3, 3), "int32")], axis=1)
    again = np.asarray(model({"source": padded, "target_in": target_in}))
    np.testing.assert_allclose(again, logits, atol=1e-5)
    # Causality: changing a later target token leaves earlier positions' logits alone.
    changed = target_in.copy()
    changed[0, 3] = 7 if target_in[0, 3] != 7 else 8
    later = np.asarray(model({"source": source, "target_in": changed}))
    np.testing.assert_allclose(later[0, :3], logits[0, :3], atol=1e-5)
    assert np.abs(later[0, 3:] - logits[0, 3:]).max() > 1e-4


@pytest.mark.slow  # decodes greedily with and without the cache: seconds
@pytest.mark.parametrize("positions", ["abacus", "randomized"])
def test_extrapolating_positions_are_random_while_training_only_and_decode_alike_with_the_cache(positions,
                                                                                                 monkeypatch):
    from kformer.models import generation

    monkeypatch.setattr(generation, "COMPILE", False)
    model = _model(positions=positions, attention_window=2)
    assert model.source_embedding.max_length == model.target_embedding.max_length == model.position_ids.max_positions
    source, target_in = _batch()
    inputs = {"source": source, "target_in": target_in}
    inference = np.asarray(model(inputs))
    np.testing.assert_array_equal(np.asarray(model(inputs)), inference)
    assert np.abs(np.asarray(model(inputs, training=True)) - inference).max() > 1e-4  # no dropout: the ids moved
    np.testing.assert_array_equal(greedy_decode(model, source, 7), greedy_decode(model, source, 7, use_cache=False))


def test_attention_maps_shapes_and_masking():
    model = _model()
    source, target_in = _batch()
    maps = model.attention_maps(source[1:2], target_in[1:2])
    assert maps["encoder"].shape == (1, 2, 2, 6, 6)
    assert maps["decoder_self"].shape == (1, 2, 2, 5, 5)
    assert maps["cross"].shape == (1, 2, 2, 5, 6)
    # Every real query's weights sum to 1 (padded source queries 4, 5 are never read).
    np.testing.assert_allclose(maps["encoder"][..., :4, :].sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(maps["decoder_self"].sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(maps["cross"].sum(-1), 1.0, atol=1e-5)
    # Row 1 has source padding at positions 4, 5: no weight there; decoder is causal.
    assert np.abs(maps["encoder"][..., 4:]).max() < 1e-6
    assert np.abs(maps["cross"][..., 4:]).max() < 1e-6
    assert np.abs(np.triu(maps["decoder_self"][0, 0, 0], k=1)).max() < 1e-6


def test_one_token_inputs_have_maps_without_a_warning_equal_to_a_longer_inputs_first_rows():
    import warnings

    model = _model()
    source, target_in = _batch()
    longer = model.attention_maps(source[:1], target_in[:1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Keras warns of a softmax over a single key
        first = model.attention_maps(source[:1], target_in[:1, :1])
        single = model.attention_maps(source[:1, :1], target_in[:1, :1])
    assert first["decoder_self"].shape == (1, 2, 2, 1, 1) and single["encoder"].shape == (1, 2, 2, 1, 1)
    np.testing.assert_allclose(first["decoder_self"], 1.0, atol=1e-6)
    np.testing.assert_allclose(single["encoder"], 1.0, atol=1e-6)
    np.testing.assert_allclose(single["cross"], 1.0, atol=1e-6)
    np.testing.assert_allclose(first["cross"], longer["cross"][..., :1, :], atol=1e-6)  # causal: row 0 sees token 0 alone
    np.testing.assert_allclose(first["encoder"], longer["encoder"], atol=1e-6)


@pytest.mark.slow
def test_keras_round_trip_keeps_logits_and_decoded_tokens(tmp_path):
    model = _model(tie_embeddings=True)
    compile_seq2seq(model, learning_rate=1e-3, warmup_steps=5, total_steps=40, label_smoothing=0.1)
    source, target_in = _batch()
    path = tmp_path / "model.keras"
    save_keras_atomic(model, path)
    loaded = load_keras_model(path)
    assert isinstance(loaded, Seq2SeqTransformer)
    assert loaded.get_config() == model.get_config()
    inputs = {"source": source, "target_in": target_in}
    np.testing.assert_array_equal(np.asarray(loaded(inputs)), np.asarray(model(inputs)))
    np.testing.assert_array_equal(greedy_decode(loaded, source, 7), greedy_decode(model, source, 7))


@pytest.mark.slow  # saves and reloads a .keras model: seconds
def test_dtype_policy_survives_the_config_and_a_keras_round_trip(tmp_path):
    model = _model(encoder_layers=1, decoder_layers=1, dtype="mixed_bfloat16")
    assert model.dtype_policy.name == "mixed_bfloat16"
    config = model.get_config()
    clone = Seq2SeqTransformer.from_config(config)
    assert clone.dtype_policy.name == "mixed_bfloat16"
    assert clone.get_config() == config
    path = tmp_path / "model.keras"
    save_keras_atomic(model, path)
    loaded = load_keras_model(path)
    assert loaded.dtype_policy.name == "mixed_bfloat16"
    assert loaded.get_config() == config


def test_dtype_policy_reaches_the_blocks():
    model = _model(encoder_layers=1, decoder_layers=1, dtype="mixed_bfloat16")
    layers = [model.source_embedding, model.encoder_blocks[0], model.decoder_blocks[0]]
    assert {layer.dtype_policy.name for layer in layers} == {"mixed_bfloat16"}
    assert model.output_projection.dtype_policy.name == "float32"  # logits stay float32


@pytest.mark.slow
def test_shared_embeddings_are_one_table_for_source_target_and_output(tmp_path):
    """share_embeddings + tie_embeddings: one (vocab, dim) table; a training step moves it from both
    sides; a .keras round trip keeps it shared and the logits equal."""
    import keras

    keras.utils.set_random_seed(1)
    settings = dict(dim=16, heads=2, ff_dim=32, encoder_layers=1, decoder_layers=1, dropout=0.0, tie_embeddings=True)
    separate = Seq2SeqTransformer(11, 11, 10, 8, **settings)
    shared = Seq2SeqTransformer(11, 11, 10, 8, share_embeddings=True, **settings)
    assert separate.count_params() - shared.count_params() == 11 * 16  # the source table is gone
    table = shared.target_embedding.token_embedding.embeddings
    assert shared.source_embedding.token_embedding.embeddings is table
    source, target_in = _batch()
    source, target_in = 8 + source % 3, np.where(target_in > 3, 4 + target_in % 4, target_in)  # ids 8-10 vs 2-7
    # untied (own output layer): rows 8-10 of the one table get gradient only through the source side
    untied = Seq2SeqTransformer(11, 11, 10, 8, share_embeddings=True, **{**settings, "tie_embeddings": False})
    compile_seq2seq(untied, learning_rate=1e-2, warmup_steps=1, total_steps=10)
    one = untied.target_embedding.token_embedding.embeddings
    before = np.array(one.numpy())
    untied.train_on_batch({"source": source, "target_in": target_in}, target_in)
    moved = np.abs(np.asarray(one.numpy()) - before).sum(axis=1) > 0
    assert moved[8:].all() and moved[4:8].all() and not moved[[1, 3]].any()
    path = tmp_path / "shared.keras"
    save_keras_atomic(shared, path)
    loaded = load_keras_model(path)
    assert loaded.share_embeddings and loaded.source_embedding.token_embedding is loaded.target_embedding.token_embedding
    inputs = {"source": source, "target_in": target_in}
    np.testing.assert_allclose(np.asarray(loaded(inputs)), np.asarray(shared(inputs)), atol=1e-6)
    with pytest.raises(ValueError, match="one vocabulary"):
        Seq2SeqTransformer(13, 11, 10, 8, share_embeddings=True, **settings)


def test_empty_pairs_filling_a_training_batch_change_neither_its_loss_nor_its_gradient():
    """Translation fills a remainder batch with empty pairs for a compiled step (``full_rows``):
    all padding, so the masked loss, the accuracy and the gradient (hence every update) are those
    of the real pairs alone (within float32 reordering of the longer sums)."""
    import tensorflow as tf

    from kformer.data.pair_batches import PairBatchPlan, pair_lengths
    from kformer.metrics import MaskedAccuracy, MaskedSparseCategoricalCrossentropy
    from kformer.tasks.translate.batches import dataset

    sources = [[4, 5, 6], [7, 8], [9, 10, 11, 12], [5, 5]]
    targets = [[4, 6], [7, 7, 8], [9], [10, 4, 5]]
    plan = PairBatchPlan(pair_lengths(sources, targets), batch_tokens=64, shuffle=False)
    assert plan.steps == 1 and plan.full_rows(plan.epoch(0)[0]) == 8  # 4 pairs of width 8: 4 rows short
    model, loss_fn = _model(encoder_layers=1, decoder_layers=1), MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    seen = {}
    for full in (False, True):
        x, y = next(iter(dataset((sources, targets), plan, full_rows=full)))
        assert len(y) == (8 if full else 4)
        with tf.GradientTape() as tape:
            logits = model(x, training=False)
            loss = loss_fn(y, logits)
        accuracy = MaskedAccuracy()
        accuracy.update_state(y, logits)
        seen[full] = [float(loss), float(accuracy.result()), *map(tf.convert_to_tensor, tape.gradient(loss, model.trainable_variables))]
    assert sum(float(np.abs(grad).sum()) for grad in seen[False][2:]) > 0  # the real pairs move the weights
    for filled, alone in zip(seen[True], seen[False], strict=True):
        np.testing.assert_allclose(np.asarray(filled), np.asarray(alone), rtol=1e-5, atol=1e-7)
