"""kformer: build, train, inspect and serve small Transformer models with Keras 3.

Importing kformer picks the TensorFlow backend unless ``KERAS_BACKEND`` is already set,
and quiets TensorFlow's C++ start-up chatter. Model code uses ``keras.ops`` only, so the
JAX and PyTorch backends work too.

``kformer.load(folder)`` opens any model folder as its task's object; the tasks themselves are
:mod:`kformer.tasks.classify`, :mod:`kformer.tasks.translate` and :mod:`kformer.tasks.arithmetic`.
"""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

__version__ = "0.1.0"


def load(folder):
    """Load any kformer model folder (see :func:`kformer.tasks.load`)."""
    from kformer.tasks import load as load_folder

    return load_folder(folder)
