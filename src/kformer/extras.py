"""The optional parts of kformer (``pip install 'kformer[EXTRA]'``) and the check for them.

The base install trains, predicts, evaluates and runs the demo. ``pyproject.toml`` lists each
extra's packages; :data:`EXTRAS` names the modules a command imports from them, so a command
whose extra is missing says which extra to install in one line (:func:`require`), never a
traceback from deep inside an import.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from kformer.errors import Unsupported

EXTRAS: dict[str, tuple[str, ...]] = {
    "serve": ("fastapi", "uvicorn", "prometheus_client"),  # `kformer serve`, kformer.server.create_app
    "export": ("onnx", "onnxruntime", "tf2onnx"),  # ONNX export and the onnx runtimes
    "jax": ("jax",),  # `--distribute`
}


def missing_modules(modules: Sequence[str]) -> list[str]:
    """Those of ``modules`` that cannot be imported (not installed)."""
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package missing, or a module set to None
            found = False
        if not found:
            missing.append(name)
    return missing


def require(what: str, extra: str, modules: Sequence[str] | None = None, field: str | None = None) -> None:
    """Unsupported naming ``pip install 'kformer[extra]'`` when ``what`` (e.g. ``"kformer serve"``)
    lacks one of ``modules`` (default: all of the extra's)."""
    missing = missing_modules(EXTRAS[extra] if modules is None else modules)
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise Unsupported(f"{what} needs {', '.join(missing)}, which {verb} not installed: "
                          f"pip install 'kformer[{extra}]'", field=field)
