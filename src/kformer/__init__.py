"""kformer: build, train, inspect and serve small Transformer models with Keras 3.

Importing kformer picks the TensorFlow backend unless ``KERAS_BACKEND`` is already set,
and quiets TensorFlow's C++ start-up chatter. Model code uses ``keras.ops`` only, so the
JAX and PyTorch backends work too.
"""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

__version__ = "0.1.0"
