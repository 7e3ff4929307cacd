"""``kformer serve``: a REST service for model folders, with micro-batching and a web page.

    from kformer.server import ServeConfig, create_app
    app = create_app({"tickets": "runs/tickets"}, ServeConfig(max_batch=32))  # any ASGI server runs it

Modules, one job each: :mod:`.config` (settings), :mod:`.registry` (loading, versions, reload),
:mod:`.batching` (the inference thread), :mod:`.service` (readiness, shutdown, requests),
:mod:`.validation` (bodies and limits), :mod:`.http_errors`, :mod:`.auth`, :mod:`.metrics`,
:mod:`.app` (the app, health and kformer's own routes), :mod:`.tf_serving` (TensorFlow Serving's
REST API), :mod:`.open_inference` and :mod:`.v2_tensors` (the Open Inference Protocol, KServe v2),
:mod:`.outputs` (predictions as named tensors), :mod:`.replies` and ``static/`` (the page),
:mod:`.runner` (uvicorn as ``kformer serve`` runs it), :mod:`.workers` and :mod:`.cluster` (``--workers N``:
the supervisor and its worker processes). The server calls :mod:`kformer.tasks` for models.
"""

from __future__ import annotations

from kformer.server.config import ServeConfig

__all__ = ["ServeConfig", "create_app"]


def __getattr__(name: str):
    # FastAPI loads on first use, so `kformer --help` (which reads ServeConfig's defaults) stays fast
    if name == "create_app":
        from kformer.extras import require

        require("kformer.server.create_app", "serve")
        from kformer.server.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
