"""``kformer serve``: parse the options into a :class:`~kformer.server.ServeConfig`, run uvicorn.

The service itself is :mod:`kformer.server` (imported only when the command runs, so
``kformer --help`` stays instant): in this process (:func:`kformer.server.runner.run_app`), or
with ``--workers N`` as N worker processes under this one (:mod:`kformer.server.workers`).
SIGTERM drains in-flight requests and exits 0; SIGHUP reloads every model from its folder.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys

from kformer.errors import BadInput

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


# `kformer serve` runs classifiers on ONNX Runtime unless told otherwise (create_app's default stays keras)
SERVE_RUNTIME = "onnx"


def register(commands, train_tasks) -> None:
    """Add ``serve`` to the CLI."""
    from kformer.auto import AUTO
    from kformer.server.config import AUTO_WORKERS_RULE, ServeConfig, auto_workers
    from kformer.tasks.classify.runtimes import RUNTIMES

    defaults = ServeConfig()
    serve = commands.add_parser(
        "serve",
        help="serve model folders over HTTP (REST API, web page, metrics)",
        description="Serve model folders as a REST service with micro-batching (TensorFlow Serving's "
        "paths: POST /v1/models/NAME:predict, :explain, :reload; KServe's /v2/health/live and "
        "/ready; Prometheus /metrics; OpenAPI /docs) and a web page at /. SIGTERM finishes "
        "in-flight requests and exits; SIGHUP reloads every model from its folder.",
        epilog="example: kformer serve --model tickets=runs/tickets --model en-ta=runs/en-ta --port 8000",
    )
    serve.add_argument("--model", dest="models", action="append", required=True, metavar="NAME=DIR",
                       help="serve the model folder DIR -- or an export folder (kformer export's --out), which "
                       "answers on the runtime it was exported for -- as NAME (repeat for more models)")
    serve.add_argument("--host", default=defaults.host, help=f"address to listen on (default {defaults.host}; "
                       "0.0.0.0 exposes the service to the network)")
    serve.add_argument("--port", type=int, default=defaults.port, help=f"port (default {defaults.port})")
    serve.add_argument("--max-batch", type=int, default=defaults.max_batch, metavar="N",
                       help=f"most instances per model call (default {defaults.max_batch})")
    serve.add_argument("--batch-wait-ms", type=float, default=defaults.batch_wait_ms, metavar="MS",
                       help="how long a batch waits for more requests while they are arriving (default "
                       f"{defaults.batch_wait_ms:g}: never; a batch is what queued while the previous call ran)")
    serve.add_argument("--no-batching", dest="batching", action="store_false",
                       help="one model call per request (for comparison)")
    serve.add_argument("--max-queue", type=int, default=defaults.max_queue, metavar="N",
                       help=f"requests that may wait; more get 503 + Retry-After (default {defaults.max_queue})")
    serve.add_argument("--timeout-s", type=float, default=defaults.timeout_s, metavar="S",
                       help=f"answer 504 after S seconds (default {defaults.timeout_s:g})")
    serve.add_argument("--max-body-bytes", type=int, default=defaults.max_body_bytes, metavar="N",
                       help=f"larger bodies get 413 (default {defaults.max_body_bytes})")
    serve.add_argument("--max-instances", type=int, default=defaults.max_instances, metavar="N",
                       help=f"most instances per request (default {defaults.max_instances})")
    serve.add_argument("--max-chars", type=int, default=defaults.max_chars, metavar="N",
                       help=f"most characters per instance (default {defaults.max_chars})")
    serve.add_argument("--api-key-env", default=None, metavar="VAR",
                       help="require 'Authorization: Bearer KEY' (KEY from environment variable VAR) on every "
                       "route but health and the page")
    serve.add_argument("--cors-origin", dest="cors_origins", action="append", default=[], metavar="ORIGIN",
                       help="allow browser pages from ORIGIN to call the API (repeatable; default: no CORS)")
    serve.add_argument("--shutdown-grace-s", type=float, default=defaults.shutdown_grace_s, metavar="S",
                       help=f"on SIGTERM, time allowed for in-flight requests (default {defaults.shutdown_grace_s:g})")
    serve.add_argument("--read-timeout-s", type=float, default=defaults.read_timeout_s, metavar="S",
                       help="close a connection whose request (head and body) has not fully arrived S seconds "
                       f"after connecting or after its previous answer: slow clients (default {defaults.read_timeout_s:g})")
    serve.add_argument("--workers", type=_workers, default=AUTO, metavar="N|auto",
                       help=f"processes serving the port (default auto: {AUTO_WORKERS_RULE}; {auto_workers()} here). "
                       "Each worker loads its own copy of the models -- about 1-1.4 GB resident per worker for a Keras "
                       "model -- and has its own inference thread and KFORMER_THREADS threads (default: the cores / N). "
                       "More than one puts the requests' HTTP handling on more than one core: on 2 cores at 64 clients, "
                       "2 workers reached 64 %% (ONNX) / 88 %% (Keras) of the raw model's throughput against 41 %% / 51 %% "
                       "for 1, with a lower p99 (python -m bench.serve_workers). /metrics sums over the workers; a reload "
                       "switches every worker or none; send SIGHUP and SIGTERM to this command's process")
    serve.add_argument("--access-log", action="store_true", help="log every request")
    serve.add_argument("--runtime", choices=RUNTIMES, default=SERVE_RUNTIME,
                       help=f"where classifiers' :predict runs (default {SERVE_RUNTIME}: converted to ONNX Runtime once "
                       "per folder version and kept in the folder's runtimes/, faster than Keras at batch 1, the "
                       "service's usual batch (BENCHMARKS.md, \"Export runtimes\"); onnx-int8: the same with 8-bit weights, "
                       "faster for large networks such as a fine-tuned MiniLM at a small accuracy cost; :explain still "
                       "uses Keras; other tasks stay on Keras)")
    serve.set_defaults(handler=_serve)


def _workers(value: str) -> int | str:
    """``--workers``: a whole number (ServeConfig checks its range) or ``auto``, which ServeConfig
    turns into :func:`kformer.server.config.auto_workers`."""
    if value.strip().lower() == "auto":
        from kformer.auto import AUTO

        return AUTO
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes a whole number or 'auto', not {value!r}") from None


def parse_models(specs: list[str]) -> dict[str, str]:
    """``["tickets=runs/tickets", ...]`` -> ``{"tickets": "runs/tickets"}``; each folder's manifest
    (a model folder) or metadata (an export folder) checked."""
    from kformer.folders import read_export_metadata, read_manifest

    models: dict[str, str] = {}
    for spec in specs:
        name, sep, folder = spec.partition("=")
        if not sep or not folder:
            raise BadInput(f"{{field}} takes NAME=DIR, e.g. tickets=runs/tickets, not {spec!r}", field="models")
        if not NAME.fullmatch(name):
            raise BadInput(f"model name {name!r} (in {{field}}) may hold only letters, digits, '.', '_' and '-'",
                           field="models")
        if name in models:
            raise BadInput(f"model name {name!r} is given twice to {{field}}", field="models")
        if read_export_metadata(folder) is None:
            read_manifest(folder)  # a missing or foreign folder fails now, not after start-up
        models[name] = folder
    return models


def config_from_args(args: argparse.Namespace):
    """The :class:`~kformer.server.ServeConfig` of the parsed options."""
    from kformer.server.config import ServeConfig

    return ServeConfig(
        host=args.host, port=args.port, max_batch=args.max_batch, batch_wait_ms=args.batch_wait_ms,
        max_queue=args.max_queue, timeout_s=args.timeout_s, max_body_bytes=args.max_body_bytes,
        max_instances=args.max_instances, max_chars=args.max_chars, api_key_env=args.api_key_env,
        cors_origins=tuple(args.cors_origins), batching=args.batching, shutdown_grace_s=args.shutdown_grace_s,
        read_timeout_s=args.read_timeout_s,
        access_log=args.access_log, runtime=args.runtime, freeze_heap=True, workers=args.workers,
    )


def _serve(args: argparse.Namespace) -> int:
    import logging

    from kformer.extras import EXTRAS, require

    # the [serve] extra brings [export] along: the onnx runtimes convert classifiers at load
    require("kformer serve", "serve", EXTRAS["serve"] + (EXTRAS["export"] if args.runtime != "keras" else ()))
    models = parse_models(args.models)
    config = config_from_args(args)
    config.api_key()  # a missing key fails now, in this process, whatever --workers says
    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(message)s", stream=sys.stderr)
    workers = f" with {config.workers} workers" if config.workers > 1 else ""
    if args.workers != config.workers:  # --workers auto
        workers = f" with {config.workers} worker{'s' * (config.workers > 1)} (--workers auto)"
    print(f"kformer serve: loading {', '.join(models)}{workers}; http://{config.host}:{config.port}/ "
          "(ready when /v2/health/ready says 200)", file=sys.stderr, flush=True)
    if config.workers > 1:
        from kformer.server.workers import serve_workers

        serve_workers(models, config)
        return 0
    from kformer.server import create_app
    from kformer.server.runner import run_app

    app = create_app(models, config)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, lambda sig, frame: app.state.service.reload_all_in_background())
    run_app(app)
    return 0
