"""The models a service holds: each loaded, warmed and versioned; reloaded and swapped in safely.

A model's version is a fingerprint of its folder's files (:func:`kformer.folders.folder_version`),
so the same folder always reports the same version and a retrained one a new one.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kformer.errors import KformerError, ModelNotFound
from kformer.folders import folder_version

log = logging.getLogger("kformer.server")

Loader = Callable[[Path], Any]  # folder -> TaskModel (kformer.tasks.load)


def settle_heap() -> None:
    """Collect the garbage, then freeze what is left -- the loaded models, TensorFlow's and Keras'
    millions of objects -- out of the garbage collector's sight (``gc.freeze``). Otherwise every
    full collection walks that whole heap: 100-600 ms with the whole service stopped, several
    times a minute under load (a large part of the tail latency; BENCHMARKS.md "Serving"). Each load
    unfreezes first, so what a reload left behind is collected then."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


@dataclass(frozen=True)
class Served:
    """One loaded model as the service holds it."""

    name: str
    model: Any  # a kformer.tasks.base.TaskModel
    version: str
    loaded_at: float


@dataclass
class ModelSlot:
    """A served name: where it loads from and what it serves now (None while loading)."""

    name: str
    folder: Path | None
    current: Served | None = None
    error: str | None = None  # the last load/reload failure, shown in status and logs


class ModelRegistry:
    """Name -> served model. Loads and warms outside the inference thread; swaps under a lock.

    ``sources`` maps names to model folders (loaded with ``loader``, which defaults to
    :func:`kformer.tasks.load`) or to already loaded TaskModel objects. ``settle``:
    :func:`settle_heap` after every load.
    """

    def __init__(self, sources: Mapping[str, Any], loader: Loader | None = None, settle: bool = False):
        self._loader = loader
        self._settle = settle  # settle_heap() after loading
        self._lock = threading.Lock()
        self._reload_lock = threading.Lock()  # one load at a time: they share the CPU with requests
        self._preloaded: dict[str, Any] = {}
        self.slots: dict[str, ModelSlot] = {}
        for name, source in sources.items():
            if isinstance(source, str | os.PathLike):
                self.slots[name] = ModelSlot(name, Path(source))
            else:
                self._preloaded[name] = source
                folder = getattr(source, "folder", None)
                self.slots[name] = ModelSlot(name, Path(folder) if folder else None)

    # --- reading ----------------------------------------------------------------------------------

    def names(self) -> list[str]:
        return list(self.slots)

    def slot(self, name: str) -> ModelSlot:
        """The slot of ``name``; an unknown name is ModelNotFound (404)."""
        try:
            return self.slots[name]
        except KeyError:
            known = ", ".join(self.slots) or "none"
            raise ModelNotFound(f"no model named '{name}' is served here; served: {known}", field="model") from None

    def get(self, name: str) -> Served | None:
        """What ``name`` serves now (None while it is still loading)."""
        with self._lock:
            return self.slot(name).current

    def ready(self) -> bool:
        return all(slot.current is not None for slot in self.slots.values())

    # --- loading ----------------------------------------------------------------------------------

    def _load(self, name: str, *, preloaded: bool) -> Served:
        slot = self.slots[name]
        started = time.perf_counter()
        if preloaded:
            model = self._preloaded.pop(name)
        else:
            loader = self._loader
            if loader is None:
                from kformer.tasks import load as loader
            model = loader(slot.folder)
        model.warmup()
        version = folder_version(slot.folder) if slot.folder and slot.folder.is_dir() else "1"
        log.info("model %s (%s, version %s) loaded and warmed in %.1f s", name, getattr(model, "task", "?"),
                 version, time.perf_counter() - started)
        return Served(name, model, version, time.time())

    def load_all(self) -> None:
        """Load and warm every model that is not loaded yet (the service's start-up)."""
        for name, slot in self.slots.items():
            if slot.current is None:
                served = self._load(name, preloaded=name in self._preloaded)
                with self._lock:
                    slot.current, slot.error = served, None
        if self._settle:
            settle_heap()

    def reload(self, name: str) -> tuple[Served, Served | None]:
        """Load ``name``'s folder again, warm it, swap it in; return ``(new, old)``.

        Requests keep being answered by the old model until the swap. If the folder fails to
        load, the old model keeps serving and the error is raised (and remembered in the slot).
        """
        with self._reload_lock:
            served = self.prepare(name)
            return served, self.swap(name, served)

    def prepare(self, name: str) -> Served:
        """Load and warm ``name``'s folder again without swapping it in (the first half of
        :meth:`reload`; with ``--workers N`` every worker prepares before any swaps). A failure is
        remembered in the slot, logged and raised; the old model keeps serving."""
        slot = self.slot(name)
        if slot.folder is None:
            raise ModelNotFound(f"model '{name}' was not loaded from a folder, so it cannot be reloaded", field="model")
        try:
            return self._load(name, preloaded=False)
        except KformerError as exc:
            slot.error = str(exc)
            log.error("reloading model %s from %s failed, still serving the old one: %s", name, slot.folder, exc)
            raise
        except Exception as exc:
            slot.error = f"{type(exc).__name__}: {exc}"
            log.exception("reloading model %s from %s failed, still serving the old one", name, slot.folder)
            raise

    def swap(self, name: str, served: Served) -> Served | None:
        """Serve ``served`` (from :meth:`prepare`) as ``name`` from now on; returns the model it replaced."""
        slot = self.slot(name)
        with self._lock:
            old, slot.current, slot.error = slot.current, served, None
        if self._settle:
            settle_heap()
        log.info("model %s: version %s swapped in (was %s)", name, served.version, old.version if old else "none")
        return old

    def keep(self, name: str, error: str) -> None:
        """Keep serving the old model after a reload failed elsewhere (another worker); ``error`` is
        shown in the model's status, as a failure here would be."""
        self.slot(name).error = error
        log.error("reloading model %s failed, still serving the old one: %s", name, error)

    def reload_all(self) -> dict[str, str]:
        """Reload every model loaded from a folder (SIGHUP); returns name -> new version or error."""
        results = {}
        for name, slot in self.slots.items():
            if slot.folder is None:
                continue
            try:
                results[name] = self.reload(name)[0].version
            except Exception as exc:  # logged by reload; the other models still reload
                results[name] = f"error: {exc}"
        return results
