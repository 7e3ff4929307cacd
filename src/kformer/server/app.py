"""The FastAPI app: TensorFlow Serving's REST API, the Open Inference Protocol, metrics, the page.

Routes (every one except health and the page's static files needs the API key when one is set):

- ``GET /v2/health/live``, ``GET /v2/health/ready``
- ``GET /v1/models``; ``POST /v1/models/{name}:explain``, ``:reload``
- TensorFlow Serving's status, metadata and ``:predict`` (:mod:`kformer.server.tf_serving`)
- the Open Inference Protocol's metadata, readiness and ``infer`` (:mod:`kformer.server.open_inference`)
- ``GET /metrics`` (Prometheus), ``GET /docs`` (OpenAPI), ``GET /`` (the web page)
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from kformer import __version__, setup
from kformer.errors import BadInput
from kformer.server.auth import bearer_check
from kformer.server.cluster import WorkerLink
from kformer.server.config import ServeConfig
from kformer.server.http_errors import install_error_handlers
from kformer.server.open_inference import open_inference_routes
from kformer.server.registry import Loader
from kformer.server.replies import disconnected, json_response
from kformer.server.service import Service
from kformer.server.tf_serving import tf_serving_routes
from kformer.server.validation import check_instances, check_parameters, parse_json, read_body

STATIC_DIR = Path(__file__).resolve().parent / "static"

_TEXTS = {"type": "array", "items": {"type": "string"}, "minItems": 1}
EXPLAIN_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"type": "object", "properties": {"instances": {**_TEXTS, "maxItems": 1}}},
                                         "example": {"instances": ["1234+4567"]}}},
    }
}


def create_app(models: Mapping[str, Any], config: ServeConfig | None = None, *, loader: Loader | None = None,
               link: WorkerLink | None = None) -> FastAPI:
    """An ASGI app serving ``models``: name -> model folder (loaded in safe mode with
    :func:`kformer.tasks.load`, or ``loader``) or an already loaded TaskModel.

    Models load in the background when the app starts (its lifespan), never at import or here.
    Calls :func:`kformer.setup` first (a no-op when the process has already done it). ``link``:
    this process is one worker of ``kformer serve --workers N`` (:mod:`kformer.server.workers`).
    """
    setup()
    config = config or ServeConfig()
    service = Service(models, config, loader, link)
    api_key = config.api_key()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        service.start()
        try:
            yield
        finally:
            service.stop()

    app = FastAPI(title="kformer", version=__version__, lifespan=lifespan,
                  description="Classify, translate and solve with kformer model folders.")
    app.state.service = service
    install_error_handlers(app)
    if config.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(config.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    app.add_middleware(MetricsMiddleware, service=service)
    if link is not None:
        app.add_middleware(WorkerHeader, index=link.index)
    app.include_router(_health_routes(service))
    app.include_router(_model_routes(service), dependencies=[Depends(bearer_check(api_key))])
    app.include_router(tf_serving_routes(service), dependencies=[Depends(bearer_check(api_key))])
    app.include_router(open_inference_routes(service), dependencies=[Depends(bearer_check(api_key))])
    app.include_router(_inference_routes(service), dependencies=[Depends(bearer_check(api_key))])
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html")

    return app


class MetricsMiddleware:
    """Counts every request by model, route and status, and times it (a plain ASGI middleware)."""

    def __init__(self, app, service: Service):
        self.app = app
        self.service = service

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), 500
        self.service.metrics.request_started()

        async def send_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            name = scope.get("path_params", {}).get("name", "")
            model = name if name in self.service.registry.slots else "-"
            self.service.metrics.observe_request(model, getattr(route, "path", "unmatched"), status, started)


class WorkerHeader:
    """Names the worker that answered, ``X-Kformer-Worker: 0`` to ``N-1``, on every answer of a
    worker of ``kformer serve --workers N`` (a plain ASGI middleware)."""

    def __init__(self, app, index: int):
        self.app = app
        self.header = (b"x-kformer-worker", str(index).encode())

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_named(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self.header]}
            await send(message)

        await self.app(scope, receive, send_named)


def _health_routes(service: Service) -> APIRouter:
    router = APIRouter(tags=["health"])

    @router.get("/v2/health/live")
    async def live() -> dict:
        """The process answers (KServe's liveness path)."""
        return {"live": True}

    @router.get("/v2/health/ready")
    async def ready() -> JSONResponse:
        """200 once every model is loaded and warmed (in every worker); 503 before that and once shutdown began."""
        body = {
            "ready": service.ready,
            "shutting_down": service.shutting_down,
            "loading": [name for name, slot in service.registry.slots.items() if slot.current is None],
        }
        if service.link is not None:
            body["workers_started"] = service.link.started.is_set()
        if service.failed is not None:
            body["error"] = str(service.failed)
        headers = {} if service.ready else {"Retry-After": "1"}
        return JSONResponse(body, status_code=200 if service.ready else 503, headers=headers)

    return router


def _model_routes(service: Service) -> APIRouter:
    """What is served: the models, their status and metadata, and the Prometheus metrics."""
    router = APIRouter(tags=["models"])
    registry = service.registry

    @router.get("/v1/models")
    async def list_models() -> dict:
        """Every served model: name, task, version, state."""
        models = []
        for name, slot in registry.slots.items():
            current = slot.current
            models.append({
                "name": name,
                "task": getattr(current.model, "task", None) if current else None,
                "version": current.version if current else None,
                "state": "AVAILABLE" if current else "LOADING",
            })
        return {"models": models}

    @router.get("/metrics", tags=["metrics"])
    async def metrics() -> Response:
        """Prometheus metrics: requests, latency, batch sizes, queue depth, process."""
        return Response(service.metrics.exposition(), media_type=service.metrics.content_type)

    return router


def _inference_routes(service: Service) -> APIRouter:
    """Using a model: predict, explain, reload."""
    router = APIRouter(tags=["models"])
    config = service.config
    registry = service.registry

    @router.post("/v1/models/{name}:explain", openapi_extra=EXPLAIN_BODY)
    async def explain(name: str, request: Request) -> Response:
        """Tokens and attention weights (per map, layer and head) for one instance."""
        registry.slot(name)
        with service.arrival():
            data = parse_json(await read_body(request, config.max_body_bytes))
            instances = check_instances(data, 1, config.max_chars)
            if check_parameters(data):
                raise BadInput("explain takes no parameters", field="parameters")
            pending = service.submit_explain(name, instances[0])
        (maps,), version = await service.answer(pending, disconnected(request))
        return json_response({"model": name, "version": version, **maps})

    @router.post("/v1/models/{name}:reload")
    async def reload(name: str) -> dict:
        """Load the model's folder again, warm it and swap it in; the old one serves until then."""
        version, previous = await service.reload(name)
        return {"model": name, "version": version, "previous_version": previous, "changed": version != previous}

    return router
