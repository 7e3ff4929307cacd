"""kformer: build, train, inspect and serve small Transformer models with Keras 3.

Importing kformer changes no environment variable and no TensorFlow setting. ``kformer.setup()``
(:mod:`kformer.environment`) does what the ``kformer`` command and the server do at start-up: pick
the TensorFlow backend unless ``KERAS_BACKEND`` is set, quiet TensorFlow's C++ start-up chatter
and size its thread pools to the usable cores (``KFORMER_THREADS`` overrides). Model code uses
``keras.ops`` only, so the JAX and PyTorch backends work too.

``kformer.load(folder)`` opens any model folder as its task's object and ``kformer.recipe(name)``
a recipe as its task's settings object; the tasks themselves are
:mod:`kformer.tasks.classify`, :mod:`kformer.tasks.translate` and :mod:`kformer.tasks.arithmetic`.
"""

from kformer.environment import setup

__version__ = "0.1.0"
__all__ = ["__version__", "load", "recipe", "setup"]


def load(folder, **options):
    """Load any kformer model folder (see :func:`kformer.tasks.load`; ``runtime="onnx"``: a
    classifier predicting on ONNX Runtime)."""
    from kformer.tasks import load as load_folder

    return load_folder(folder, **options)


def recipe(name, **overrides):
    """A recipe (shipped name or TOML path) as its task's settings object, with ``overrides`` (see
    :func:`kformer.tasks.recipe`): ``kformer.recipe("tickets", epochs=2)`` is a ``ClassifyConfig``."""
    from kformer.tasks import recipe as task_recipe

    return task_recipe(name, **overrides)
