"""Prediction throughput of an exported classifier: ONNX Runtime and TF SavedModel vs kformer's Keras path.

Same run, same batches: the test texts are tokenized once, cut into batches of 1 and of 32 (each
padded to its width bucket, as kformer pads), and every runtime is timed on exactly those arrays,
the runtimes alternating per repeat. Reports texts/s and per-batch latency (median, p95), the
speed-up over Keras at the same batch size, and the largest probability difference from Keras.
Target: the fastest runtime >= 2x kformer's Keras path at batch 1.

    flock /tmp/kformer-bench.lock python -m bench.export                 # trains `tickets` briefly
    python -m bench.export --model runs/tickets --texts 64 --no-record   # a smoke run
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.harness import interleaved_medians, record_results, require_shared_data, results_table

BATCHES = (1, 32)


def train_tickets(minutes: float) -> Path:
    """A tickets classifier from the `tickets` recipe, trained for at most ``minutes``."""
    from kformer.config import make_config
    from kformer.tasks import classify

    folder = require_shared_data("it-service-tickets")
    out = Path(tempfile.mkdtemp(prefix="kformer-bench-export-")) / "tickets"
    config = make_config(classify.ClassifyConfig, "classify", "tickets", {"max_minutes": minutes})
    classify.train(config, folder / "train.csv.gz", out)
    return out


def test_texts(n: int, classifier) -> list[str]:
    """``n`` texts: the tickets test split when present, else the model's own vocabulary words."""
    from bench.harness import SHARED_DATA

    path = SHARED_DATA / "it-service-tickets" / "test.csv.gz"
    if path.exists():
        from kformer.data.readers import read_labelled

        return read_labelled(path).texts[:n]
    words = classifier.tokenizer.get_vocabulary()[7:]
    rng = np.random.default_rng(0)
    return [" ".join(rng.choice(words, size=int(rng.integers(3, 40)))) for _ in range(n)]


def batches_of(classifier, texts: list[str], size: int) -> list[np.ndarray]:
    """Consecutive batches of ``size`` texts' ids, each cut to its width bucket (kformer's rule)."""
    from kformer.data.batching import bucket_width

    ids = classifier.features(texts)
    lengths = (ids != 0).sum(axis=1)
    out = []
    for start in range(0, len(texts), size):
        rows = slice(start, start + size)
        out.append(ids[rows, : bucket_width(max(int(lengths[rows].max()), 1), ids.shape[1])])
    return out


def runtimes(classifier, model_dir: Path, work: Path) -> dict:
    """name -> ids -> probabilities, for Keras, the exported SavedModel and ONNX Runtime."""
    import onnxruntime as ort
    import tensorflow as tf

    from kformer.export import export
    from kformer.threads import thread_count

    export(model_dir, work / "saved_model", "saved_model")
    export(model_dir, work / "onnx", "onnx")
    signature = tf.saved_model.load(str(work / "saved_model" / "1")).signatures["serving_default"]
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = thread_count(), 1
    session = ort.InferenceSession(str(work / "onnx" / "model.onnx"), options, providers=["CPUExecutionProvider"])
    return {
        "kformer Keras": classifier._probabilities_of_ids,
        "TF SavedModel": lambda ids: signature(token_ids=tf.constant(ids))["probabilities"].numpy(),
        "ONNX Runtime": lambda ids: session.run(None, {"token_ids": ids})[0],
    }


def timed(run, batches: list[np.ndarray], latencies: list[float]) -> float:
    """Seconds to run every batch; each batch's seconds appended to ``latencies``."""
    start = time.perf_counter()
    for ids in batches:
        began = time.perf_counter()
        run(ids)
        latencies.append(time.perf_counter() - began)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a classify folder (default: train `tickets` first)")
    parser.add_argument("--minutes", type=float, default=3.0, help="training budget without --model (default 3)")
    parser.add_argument("--texts", type=int, default=2000, help="test texts per batch size (default 2000)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per runtime (default 3)")
    parser.add_argument("--no-record", action="store_true", help="print only; do not append to BENCHMARKS.md")
    args = parser.parse_args()

    from kformer.tasks import classify

    model_dir = args.model or train_tickets(args.minutes)
    classifier = classify.load(model_dir)
    texts = test_texts(args.texts, classifier)
    with tempfile.TemporaryDirectory(prefix="kformer-bench-export-") as work:
        systems = runtimes(classifier, model_dir, Path(work))
        rows = []
        for size in BATCHES:
            batches = batches_of(classifier, texts, size)
            reference = [systems["kformer Keras"](ids) for ids in batches]  # also warms every width
            latencies: dict[str, list[float]] = {name: [] for name in systems}
            diffs = {name: max(float(np.abs(run(ids) - ref).max()) for ids, ref in zip(batches, reference, strict=True))
                     for name, run in systems.items()}
            seconds = interleaved_medians({name: (lambda r=run, b=batches, lat=latencies[name]: timed(r, b, lat))
                                           for name, run in systems.items()}, args.repeats)
            keras_rate = len(texts) / statistics.median(seconds["kformer Keras"])
            for name in systems:
                rate = len(texts) / statistics.median(seconds[name])
                rows.append({"system": name, "batch": size, "texts_per_s": rate,
                             "latency_ms_p50": 1000 * statistics.median(latencies[name]),
                             "latency_ms_p95": 1000 * float(np.percentile(latencies[name], 95)),
                             "vs_keras": f"{rate / keras_rate:.2f}×", "max_abs_diff": diffs[name]})
    fastest = max((r for r in rows if r["batch"] == 1), key=lambda r: r["texts_per_s"])
    notes = (f"{len(texts)} texts per batch size, {args.repeats} interleaved passes (median); model {model_dir}. "
             f"Tokenization excluded (the same ids for every runtime). Fastest at batch 1: {fastest['system']} "
             f"({fastest['vs_keras']} Keras; target >= 2x).")
    if args.no_record:
        print(results_table(rows) + "\n\n" + notes)
    else:
        record_results("Export runtimes: classifier prediction throughput", rows, notes)


if __name__ == "__main__":
    main()
