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


def run_network(classifier, ids) -> None:
    """The network on pre-tokenised ``ids`` ``(batch, max_length)``, in the calls the classifier
    cuts such a batch into (:func:`kformer.tasks.classify.batch_plan.plan`)."""
    from kformer.tasks.classify.batch_plan import plan

    for rows, width in plan((ids != 0).sum(axis=1), ids.shape[1], len(ids), classifier.predictor.costs):
        classifier._probabilities_of_ids(ids[rows, :width])


def parts(classifier, texts: list[str], bodies: list[bytes], batch: int, repeats: int = 20) -> dict[str, float]:
    """CPU ms per request of each part, for requests of one text answered in batches of ``batch``
    (the mean over consecutive batches of the texts)."""
    from kformer.server.validation import check_instances, check_parameters

    chunks = [texts[i:i + batch] for i in range(0, min(len(texts), 20 * batch) - batch + 1, batch)]
    answer = {"model": "tickets", "version": "0123456789ab", "predictions": classifier.predict(texts[:1])}
    ids = [classifier.features(chunk) for chunk in chunks]

    def validate():
        for body in bodies[:batch]:
            data = json.loads(body)
            check_instances(data, 64, 10_000)
            classifier.check_parameters(check_parameters(data))

    def each(run):
        return lambda: [run(*item) for item in zip(chunks, ids, strict=True)]

    per_request = len(chunks) * batch
    costs = {
        "JSON": _cpu_ms(lambda: [json.loads(body) for body in bodies[:batch]]
                        + [json.dumps(answer, ensure_ascii=False) for _ in range(batch)], repeats) / batch,
        "validation": _cpu_ms(validate, repeats) / batch,
        "tokenising": _cpu_ms(each(lambda chunk, _: classifier.features(chunk)), repeats) / per_request,
        "network": _cpu_ms(each(lambda _, chunk_ids: run_network(classifier, chunk_ids)), repeats) / per_request,
    }
    if classifier.wide is not None:
        costs["wide part"] = _cpu_ms(each(lambda chunk, _: classifier.wide.part.probabilities(chunk)),
                                     repeats) / per_request
    whole = _cpu_ms(each(lambda chunk, _: classifier.predict(chunk)), repeats) / per_request
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
