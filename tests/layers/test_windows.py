"""Windowed (local) attention for long texts (``kformer.layers.windows``): ``SplitWindows`` and
``WindowedAverage``, alone and around an encoder block.

The classifier built with ``window=`` is tested in ``tests/test_classify_long_texts.py``.
"""

import keras
import numpy as np
from layer_helpers import assert_config_round_trip, numpy, random, save_and_load

from kformer.layers import (
    EncoderBlock,
    MaskedGlobalAveragePooling,
    SplitWindows,
    TokenAndPositionEmbedding,
    WindowedAverage,
)


def test_split_windows_pads_the_last_window_with_zeros():
    ids = np.arange(1, 23, dtype="int32").reshape(2, 11)
    rows = numpy(SplitWindows(4)(ids))
    assert rows.shape == (6, 4)  # 2 texts x ceil(11 / 4) windows
    np.testing.assert_array_equal(rows[:3].reshape(-1), np.append(ids[0], 0))
    np.testing.assert_array_equal(rows[3:].reshape(-1), np.append(ids[1], 0))
    assert numpy(SplitWindows(4)(ids[:, :8])).shape == (4, 4)  # a whole number of windows: no padding


def test_windowed_average_is_the_mean_over_real_tokens_of_all_windows():
    ids = np.array([[3, 4, 5, 6, 7, 0, 0], [8, 9, 0, 0, 0, 0, 0], [0] * 7], dtype="int32")
    window_ids = numpy(SplitWindows(3)(ids))  # (9, 3): three windows per text
    real = window_ids != 0
    x = random(9, 3, 4)
    pooled = numpy(WindowedAverage()([x, window_ids, ids]))
    assert pooled.shape == (3, 4)
    np.testing.assert_allclose(pooled[0], x[:3][real[:3]].mean(0), atol=1e-6)
    np.testing.assert_allclose(pooled[1], x[3:6][real[3:6]].mean(0), atol=1e-6)
    np.testing.assert_array_equal(pooled[2], np.zeros(4))  # nothing real: zeros, not NaN
    changed = x.copy()
    changed[~real] = random(int((~real).sum()), 4)  # what sits at padded positions does not count
    np.testing.assert_allclose(numpy(WindowedAverage()([changed, window_ids, ids])), pooled, atol=1e-6)
    assert WindowedAverage().compute_mask([x, window_ids, ids]) is None


def test_config_round_trips():
    ids = np.array([[3, 4, 5, 6, 7], [8, 9, 0, 0, 0]], dtype="int32")
    assert_config_round_trip(SplitWindows(2, name="windows"), ids)
    assert_config_round_trip(WindowedAverage(name="pooling"), [random(6, 2, 4), numpy(SplitWindows(2)(ids)), ids])


def _windowed_and_full_encoders(window):
    """Two models sharing one embedding and one block: local attention within ``window``-token
    windows, and full attention over the whole text."""
    embedding = TokenAndPositionEmbedding(30, window, 16)
    block = EncoderBlock(16, 2, 32, dropout=0.0)
    ids = keras.Input(shape=(None,), dtype="int32")
    windows = SplitWindows(window)(ids)
    windowed = keras.Model(ids, WindowedAverage()([block(embedding(windows)), windows, ids]))
    full = keras.Model(ids, MaskedGlobalAveragePooling()(block(embedding(ids))))
    return windowed, full


def test_windowed_encoder_matches_full_attention_within_one_window_and_ignores_padding(tmp_path):
    # Every block call sees (2 windows, 4, 16) on purpose: under JAX each new shape compiles again.
    keras.utils.set_random_seed(0)
    windowed, full = _windowed_and_full_encoders(window=4)
    short = np.array([[2, 3, 4, 5], [4, 5, 6, 0]], dtype="int32")
    pooled = numpy(windowed(short))
    np.testing.assert_allclose(pooled, numpy(full(short)), atol=1e-5)
    # More padding, one more (empty) window: same answer.
    np.testing.assert_allclose(numpy(windowed(np.array([[4, 5, 6, 0, 0, 0, 0, 0]])))[0], pooled[1], atol=1e-5)
    # A text spanning two windows differs from its first window alone (the later window counts).
    long = np.array([[2, 3, 4, 5, 6, 7, 8, 0]], dtype="int32")
    spanning = numpy(windowed(long))
    assert np.abs(spanning[0] - pooled[0]).max() > 1e-4
    np.testing.assert_allclose(numpy(save_and_load(windowed, tmp_path)(long)), spanning, atol=1e-6)
