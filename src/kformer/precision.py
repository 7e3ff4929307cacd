"""Numeric precision of a model: ``float32`` or ``mixed_bfloat16`` (a recipe's ``precision``).

``mixed_bfloat16`` computes activations in bfloat16 while weights stay float32 (Keras' mixed
precision); kformer's output layers (class softmax, seq2seq logits) stay float32. Unlike
float16, bfloat16 has float32's range, so no loss scaling is needed. The policy is stored in the
saved model's config, so a loaded model computes as it was trained.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

PRECISIONS = ("float32", "mixed_bfloat16")


@contextlib.contextmanager
def precision_scope(precision: str) -> Iterator[None]:
    """Layers created inside the block get the dtype policy ``precision``; the previous global
    policy is restored after it."""
    import keras

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)
