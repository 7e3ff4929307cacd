"""``kformer.setup()``: the process-wide settings the ``kformer`` command and the server make.

``import kformer`` changes nothing outside kformer. The CLI (:func:`kformer.cli.main`) and the
server (:func:`kformer.server.create_app`) call :func:`setup` at their entry points; a program that
embeds kformer and wants the same calls it once, before anything imports Keras or TensorFlow.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from kformer.errors import BadInput, Unsupported
from kformer.threads import ENV as THREADS_ENV
from kformer.threads import configure_threads

DEFAULT_BACKEND = "tensorflow"


@dataclass(frozen=True)
class Setup:
    """What :func:`setup` settled: the Keras backend and TensorFlow's intra-op thread count."""

    backend: str
    threads: int


def setup(backend: str | None = None, threads: int | None = None, quiet: bool = True) -> Setup:
    """Choose the Keras backend, quiet TensorFlow's C++ logs and size its thread pools.

    - backend: ``backend``, else ``KERAS_BACKEND``, else the backend of a Keras already imported,
      else TensorFlow; written to ``KERAS_BACKEND``, which Keras reads once, when it is imported.
      Unsupported when Keras is already imported with another backend.
    - quiet: ``TF_CPP_MIN_LOG_LEVEL=3`` (TensorFlow's start-up notices), unless it is set.
    - threads: ``threads``, else ``KFORMER_THREADS``, else the cores this process may use
      (:mod:`kformer.threads`; a bad ``KFORMER_THREADS`` is BadInput). Like the log level it
      only takes effect before TensorFlow starts its runtime.

    Calling it again with the same arguments changes nothing.
    """
    loaded = _imported_backend()
    chosen = backend or os.environ.get("KERAS_BACKEND") or loaded or DEFAULT_BACKEND
    if loaded is not None and loaded != chosen:
        raise Unsupported(f"Keras is already imported with the {loaded} backend and cannot switch to {chosen}: "
                          "call kformer.setup() before importing Keras", field="backend")
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise BadInput(f"{{field}} must be a whole number of at least 1, not {threads!r}", field="threads")
        os.environ[THREADS_ENV] = str(threads)  # also what ONNX Runtime sessions use
    count = configure_threads()
    os.environ["KERAS_BACKEND"] = chosen
    if quiet:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return Setup(chosen, count)


def _imported_backend() -> str | None:
    """The backend of the Keras this process has imported; None before Keras is imported."""
    keras = sys.modules.get("keras")
    backend = getattr(getattr(keras, "backend", None), "backend", None)
    return backend() if callable(backend) else None


def silence_native_stderr() -> None:
    """Send C++ log lines (TensorFlow/XLA start-up notices such as "Could not find cuda drivers")
    to /dev/null while Python's own stderr (warnings, errors) keeps the terminal.

    TF_CPP_MIN_LOG_LEVEL no longer silences them: they are written before logging is set up.
    KFORMER_DEBUG=1 keeps them. The ``kformer`` command calls it first thing, and so does each worker
    process of ``kformer serve --workers N``.
    """
    if os.environ.get("KFORMER_DEBUG"):
        return
    try:
        sys.stderr.flush()
        python_stderr = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
        sys.stderr = os.fdopen(python_stderr, "w", buffering=1, encoding="utf-8", errors="replace")
    except (OSError, ValueError):  # no real file descriptor 2 (embedded use): leave it be
        pass
