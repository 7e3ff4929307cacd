"""Helpers shared by the layer tests (a plain module, not a ``conftest.py``: ``tests/conftest.py``
is imported by name elsewhere, and a second ``conftest`` module here would shadow it)."""

from __future__ import annotations

import warnings
from contextlib import contextmanager

import keras
import numpy as np
from keras import ops

import kformer  # noqa: F401  (sets the default backend before Keras loads)

rng = np.random.default_rng(0)


def random(*shape):
    return rng.normal(size=shape).astype("float32")


def numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


@contextmanager
def no_mask_destroying_warning():
    """Fail if Keras warns that a layer will "destroy the mask" inside the block."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    assert not [w for w in caught if "destroy" in str(w.message)]


def assert_config_round_trip(layer, *args, **kwargs):
    """``get_config`` -> ``from_config`` gives the same config and, with the same weights, the same
    outputs for ``layer(*args, **kwargs)`` (KerasHub's serialization test, by hand)."""
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    expected = layer(*args, **kwargs)
    build_config = layer.get_build_config()
    if build_config is not None:  # layers with weights: build the clone as a .keras load does
        clone.build_from_config(build_config)
    clone.set_weights(layer.get_weights())
    actual = clone(*args, **kwargs)
    for want, got in zip(keras.tree.flatten(expected), keras.tree.flatten(actual), strict=True):
        np.testing.assert_array_equal(numpy(got), numpy(want))
    return clone


def gradient(layer, variable, loss_of_outputs, *args, **kwargs):
    """d loss / d ``variable`` as a numpy array, where loss = ``loss_of_outputs(layer(*args,
    **kwargs))``, under whichever backend runs the tests (TensorFlow's tape or ``jax.grad`` over
    ``layer.stateless_call``)."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = loss_of_outputs(layer(*args, **kwargs))
        return numpy(tf.convert_to_tensor(tape.gradient(loss, variable)))
    if backend == "jax":
        import jax

        trainable = [v.value for v in layer.trainable_variables]
        non_trainable = [v.value for v in layer.non_trainable_variables]
        index = next(i for i, v in enumerate(layer.trainable_variables) if v is variable)

        def loss(values):
            outputs, _ = layer.stateless_call(values, non_trainable, *args, **kwargs)
            return loss_of_outputs(outputs)

        return numpy(jax.grad(loss)(trainable)[index])
    raise NotImplementedError(f"gradient() has no {backend} branch")


def save_and_load(model, tmp_path):
    """``model`` written to a ``.keras`` file and read back with ``safe_mode=True``."""
    path = tmp_path / "model.keras"
    model.save(path)
    return keras.saving.load_model(path, safe_mode=True)
