"""Masked sequence loss and accuracy: padding positions never count."""

import numpy as np
import pytest

from kformer.metrics import MaskedAccuracy, MaskedSparseCategoricalCrossentropy


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_loss_is_mean_over_real_tokens_only():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 4, 6)).astype("float32")
    y = np.array([[4, 5, 3, 0], [2, 3, 0, 0]])
    logp = _log_softmax(logits)
    real = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    expected = -np.mean([logp[b, t, y[b, t]] for b, t in real])
    got = float(MaskedSparseCategoricalCrossentropy()(y, logits))
    assert got == pytest.approx(expected, rel=1e-5)
    # Changing the logits at padded positions changes nothing.
    logits2 = logits.copy()
    logits2[0, 3] += 100.0
    logits2[1, 2:] -= 50.0
    assert float(MaskedSparseCategoricalCrossentropy()(y, logits2)) == pytest.approx(expected, rel=1e-5)


def test_label_smoothing_matches_smoothed_targets():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(1, 3, 5)).astype("float32")
    y = np.array([[1, 4, 0]])
    eps = 0.1
    logp = _log_softmax(logits)
    target = np.full((1, 3, 5), eps / 5)
    for t in range(3):
        target[0, t, y[0, t]] += 1 - eps
    per_token = -(target * logp).sum(-1)[0, :2]
    got = float(MaskedSparseCategoricalCrossentropy(label_smoothing=eps)(y, logits))
    assert got == pytest.approx(per_token.mean(), rel=1e-5)


def test_all_padding_gives_zero_not_nan():
    logits = np.zeros((1, 2, 4), "float32")
    assert float(MaskedSparseCategoricalCrossentropy()(np.zeros((1, 2), int), logits)) == 0.0


def test_masked_accuracy_ignores_padding_and_accumulates():
    metric = MaskedAccuracy()
    y = np.array([[1, 2, 0, 0]])
    scores = np.zeros((1, 4, 3), "float32")
    scores[0, 0, 1] = 1  # right
    scores[0, 1, 1] = 1  # wrong
    scores[0, 2:, 0] = 1  # "right" at padding: must not count
    metric.update_state(y, scores)
    assert float(metric.result()) == pytest.approx(0.5)
    metric.update_state(np.array([[2, 0]]), np.eye(3, dtype="float32")[[2, 1]][None])
    assert float(metric.result()) == pytest.approx(2 / 3)
    metric.reset_state()
    assert float(metric.result()) == 0.0


def test_loss_gradient_is_softmax_minus_smoothed_target_over_real_tokens():
    import tensorflow as tf

    rng = np.random.default_rng(2)
    logits = tf.constant(rng.normal(size=(2, 3, 5)).astype("float32"))
    y = np.array([[1, 4, 0], [2, 0, 0]])
    eps = 0.2
    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss = MaskedSparseCategoricalCrossentropy(label_smoothing=eps)(y, logits)
    grad = tape.gradient(loss, logits).numpy()
    probs = np.exp(_log_softmax(logits.numpy()))
    target = np.full((2, 3, 5), eps / 5)
    for b, t in np.argwhere(y != 0):
        target[b, t, y[b, t]] += 1 - eps
    mask = (y != 0)[..., None]
    np.testing.assert_allclose(grad, (probs - target) * mask / mask.sum(), atol=1e-6)
