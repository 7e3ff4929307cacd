"""Side-by-side benchmarks (``python -m bench.NAME``); :mod:`bench.harness` runs and records them.

Every benchmark runs as the ``kformer`` command would: :func:`kformer.setup` (backend, TensorFlow's
log level and thread pools) runs here, before any benchmark imports Keras.
"""

import kformer

kformer.setup()
