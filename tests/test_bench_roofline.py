"""bench.roofline's counting: the FLOPs of a training step come from its matrix products' shapes."""

import numpy as np
import pytest

from bench import roofline


@pytest.mark.parametrize(("kind", "options", "shapes", "output", "expected"), [
    ("MatMul", {"transpose_a": "False"}, [(4, 3), (3, 5)], (4, 5), 2 * 4 * 3 * 5),
    ("MatMul", {"transpose_a": "True"}, [(3, 4), (3, 5)], (4, 5), 2 * 4 * 3 * 5),
    ("BatchMatMulV2", {"adj_x": "False"}, [(2, 4, 3), (2, 3, 5)], (2, 4, 5), 2 * 2 * 4 * 3 * 5),
    ("Einsum", {"equation": "abc,cde->abde"}, [(2, 7, 8), (8, 4, 16)], (2, 7, 4, 16), 2 * 2 * 7 * 8 * 4 * 16),
    ("Einsum", {"equation": "...c,cd->...d"}, [(2, 7, 8), (8, 3)], (2, 7, 3), 2 * 2 * 7 * 8 * 3),
    ("Relu", {}, [(4, 3)], (4, 3), 0),
])
def test_flops_of_a_product_are_twice_its_dimensions(kind, options, shapes, output, expected):
    assert roofline._flops_of(kind, options, shapes, output) == expected


def test_a_dense_layers_step_counts_forward_and_both_gradients():
    import keras

    batch, width, units = 8, 16, 4
    model = keras.Sequential([keras.Input((width,)), keras.layers.Dense(units, use_bias=False)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.ones((batch, width), "float32")
    y = np.zeros((batch, units), "float32")
    # forward x @ W, and backward dL/dW = x^T @ g; the input needs no gradient
    assert roofline.step_flops(model, x, y) == 2 * (2 * batch * width * units)
