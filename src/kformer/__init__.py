"""kformer: build, train, inspect and serve small Transformer models with Keras 3.

Importing kformer picks the TensorFlow backend unless ``KERAS_BACKEND`` is already set,
quiets TensorFlow's C++ start-up chatter and sizes its thread pools to the usable cores
(``KFORMER_THREADS`` overrides; :mod:`kformer.threads`). Model code uses ``keras.ops`` only, so the
JAX and PyTorch backends work too.

``kformer.load(folder)`` opens any model folder as its task's object; the tasks themselves are
:mod:`kformer.tasks.classify`, :mod:`kformer.tasks.translate` and :mod:`kformer.tasks.arithmetic`.
"""

import os

USER_BACKEND = os.environ.get("KERAS_BACKEND")  # None: kformer chose (`--distribute` picks JAX instead)
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from kformer.threads import configure_threads  # noqa: E402  (TensorFlow's thread pools, before any op)

configure_threads(strict=False)

__version__ = "0.1.0"


def load(folder, **options):
    """Load any kformer model folder (see :func:`kformer.tasks.load`; ``runtime="onnx"``: a
    classifier predicting on ONNX Runtime)."""
    from kformer.tasks import load as load_folder

    return load_folder(folder, **options)
