"""Where a served request's time goes (``bench.serve``): the CPU the service spent per request,
against the CPU of each part of answering it, measured alone in this process on the same texts
in batches of the size the service ran.

The parts: JSON (parsing the body, writing the answer), validation (the request checks),
tokenising, the wide n-gram part, the network on its runtime, and the rest of ``predict``
(ranking, the answer dicts). What the service spent beyond their sum is HTTP and the framework
(uvicorn's parsing, FastAPI's routing, asyncio, the handover to the inference thread). CPU time
(``time.process_time``: every thread of the process), so the shares add up as the service's do.
"""

from __future__ import annotations

import json
import time


def _cpu_ms(run, repeats: int) -> float:
    """CPU milliseconds of one ``run()``, the mean over ``repeats`` after one untimed call."""
    run()
    started = time.process_time()
    for _ in range(repeats):
        run()
    return 1000 * (time.process_time() - started) / repeats


def parts(classifier, texts: list[str], bodies: list[bytes], batch: int, repeats: int = 20) -> dict[str, float]:
    """CPU ms per request of each part, for requests of one text answered in batches of ``batch``."""
    from kformer.data.batching import bucket_width
    from kformer.server.validation import check_instances, check_parameters

    chunk = texts[:batch]
    answer = {"model": "tickets", "version": "0123456789ab", "predictions": classifier.predict(chunk[:1])}

    def tokenise():
        return classifier.features(chunk)

    ids = tokenise()
    ids = ids[:, : bucket_width(max(int((ids != 0).sum(axis=1).max()), 1), ids.shape[1])]

    def validate():
        for body in bodies[:batch]:
            data = json.loads(body)
            check_instances(data, 64, 10_000)
            classifier.check_parameters(check_parameters(data))

    costs = {
        "JSON": _cpu_ms(lambda: [json.loads(body) for body in bodies[:batch]]
                        + [json.dumps(answer, ensure_ascii=False) for _ in chunk], repeats) / batch,
        "validation": _cpu_ms(validate, repeats) / batch,
        "tokenising": _cpu_ms(tokenise, repeats) / batch,
        "network": _cpu_ms(lambda: classifier._probabilities_of_ids(ids), repeats) / batch,
    }
    if classifier.wide is not None:
        costs["wide part"] = _cpu_ms(lambda: classifier.wide.part.probabilities(chunk), repeats) / batch
    whole = _cpu_ms(lambda: classifier.predict(chunk), repeats) / batch
    costs["rest of predict"] = max(whole - costs["tokenising"] - costs["network"] - costs.get("wide part", 0.0), 0.0)
    return costs


def costs_per_request(classifier, texts: list[str], bodies: list[bytes], row: dict) -> str:
    """A sentence: the service's CPU ms per request in ``row`` (a ``bench.serve`` row) and its parts."""
    batch = max(1, round(row["mean_batch"]))
    spent = 10 * row["service_cpu_%"] / row["req_per_s"]  # (cpu % / 100) s per s / (req / s) -> ms
    costs = parts(classifier, texts, bodies, batch)
    http = spent - sum(costs.values())
    shown = ", ".join(f"{name} {ms:.3f} ms ({100 * ms / spent:.0f} %)" for name, ms in costs.items())
    return (f"Where a request's time goes (service CPU per request {spent:.3f} ms at mean batch {batch}): {shown}; "
            f"HTTP and the framework (uvicorn, FastAPI, asyncio, the hand-over to the inference thread) "
            f"{http:.3f} ms ({100 * http / spent:.0f} %).")
