"""Prediction throughput of an exported classifier: ONNX Runtime and TF SavedModel vs kformer's Keras path,
and whether the exports answer as ``kformer predict`` on real texts.

Same run, same batches: the test texts are tokenized once, cut into batches of 1 and of 32 (each
padded to its width bucket, as kformer pads), and every runtime is timed on exactly those arrays
(and the batch's texts, which a classifier's wide n-gram part reads: kformer mixes it in with
scikit-learn, the exports in their graphs), the runtimes alternating per repeat. Reports texts/s
and per-batch latency (median, p95), the speed-up over Keras at the same batch size, and the
largest probability difference from Keras. Target: the fastest runtime >= 2x kformer's Keras path
at batch 1.

Fidelity (``--check``, default 1,000 test texts): the SavedModel's ``texts`` signature (raw strings
in) and ``model.onnx`` fed by the reference client ``docs/onnx_classify_client.py`` (which
tokenises itself) against ``Classifier.predict``: identical labels, probabilities within 1e-4.

    flock /tmp/kformer-bench.lock python -m bench.export                 # trains `tickets` briefly
    python -m bench.export --model runs/tickets --texts 64 --check 64 --no-record   # a smoke run
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.harness import interleaved_medians, record_results, require_shared_data, results_table
from bench.headlines import Headline

# This benchmark's rows in BENCHMARKS.md's summary (bench/headlines.py says how they are read)
HEADLINES = (
    Headline("speed, serving and memory", "Export runtimes", "texts_per_s", name="Exported classifier (ONNX) vs Keras, batch 1",
             kformer={"system": "^ONNX Runtime$", "batch": "^1$"},
             baseline={"system": "^kformer Keras$", "batch": "^1$"}, target=">= 2x baseline"),
)

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


def runtimes(classifier, work: Path) -> dict:
    """name -> (ids, texts) -> probabilities, for Keras, the exported SavedModel and ONNX Runtime."""
    import onnxruntime as ort
    import tensorflow as tf

    from kformer.threads import thread_count

    signature = tf.saved_model.load(str(work / "saved_model" / "1")).signatures["serving_default"]
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = thread_count(), 1
    session = ort.InferenceSession(str(work / "onnx" / "model.onnx"), options, providers=["CPUExecutionProvider"])
    wide = {"texts"} <= {i.name for i in session.get_inputs()}

    def keras_path(ids, texts):
        probs = classifier._probabilities_of_ids(ids)
        return probs if classifier.wide is None else classifier.wide(probs, texts)

    def saved_model(ids, texts):
        extra = {"texts": tf.constant(texts)} if wide else {}
        return signature(token_ids=tf.constant(ids), **extra)["probabilities"].numpy()

    def onnx(ids, texts):
        extra = {"texts": np.array(texts, dtype=object)} if wide else {}
        return session.run(["probabilities"], {"token_ids": ids, **extra})[0]

    return {"kformer Keras": keras_path, "TF SavedModel": saved_model, "ONNX Runtime": onnx}


def fidelity(classifier, texts: list[str], work: Path) -> list[dict]:
    """Rows: each export's labels and probabilities against ``Classifier.predict`` on ``texts``."""
    import importlib.util

    import tensorflow as tf

    from bench.harness import ROOT

    expected = classifier.probabilities(texts)
    labels = [p["label"] for p in classifier.predict(texts)]
    spec = importlib.util.spec_from_file_location("client", ROOT / "docs" / "onnx_classify_client.py")
    client = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(client)
    onnx = client.OnnxClassifier(work / "onnx")
    answers = {"ONNX (docs/onnx_classify_client.py)": (onnx.probabilities(texts), [a["label"] for a in
                                                                                   onnx.predict(texts)])}
    signatures = tf.saved_model.load(str(work / "saved_model" / "1")).signatures
    if "texts" in signatures:
        got = signatures["texts"](texts=tf.constant(texts))
        probs = got["probabilities"].numpy()
        threshold = classifier.threshold or 0.0
        answers["SavedModel texts signature"] = (probs, [label.decode() if p.max() >= threshold else "unknown"
                                                         for label, p in zip(got["labels"].numpy(), probs,
                                                                             strict=True)])
    return [{"system": name, "texts": len(texts), "same_labels": sum(a == b for a, b in zip(got, labels, strict=True)),
             "max_abs_diff": float(np.abs(probs - expected).max())} for name, (probs, got) in answers.items()]


def timed(run, batches: list[tuple[np.ndarray, list[str]]], latencies: list[float]) -> float:
    """Seconds to run every batch; each batch's seconds appended to ``latencies``."""
    start = time.perf_counter()
    for batch in batches:
        began = time.perf_counter()
        run(*batch)
        latencies.append(time.perf_counter() - began)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a classify folder (default: train `tickets` first)")
    parser.add_argument("--minutes", type=float, default=3.0, help="training budget without --model (default 3)")
    parser.add_argument("--texts", type=int, default=2000, help="test texts per batch size (default 2000)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per runtime (default 3)")
    parser.add_argument("--check", type=int, default=1000, help="test texts the exports' answers are compared on")
    parser.add_argument("--no-record", action="store_true", help="print only; do not append to BENCHMARKS.md")
    args = parser.parse_args()

    from kformer.tasks import classify

    model_dir = args.model or train_tickets(args.minutes)
    classifier = classify.load(model_dir)
    texts = test_texts(args.texts, classifier)
    with tempfile.TemporaryDirectory(prefix="kformer-bench-export-") as work:
        from kformer.export import export

        for kind in ("saved_model", "onnx"):
            export(model_dir, Path(work) / kind, kind)
        checked = fidelity(classifier, test_texts(args.check, classifier), Path(work))
        systems = runtimes(classifier, Path(work))
        rows = []
        for size in BATCHES:
            batches = list(zip(batches_of(classifier, texts, size),
                               (texts[i:i + size] for i in range(0, len(texts), size)), strict=True))
            reference = [systems["kformer Keras"](*batch) for batch in batches]  # also warms every width
            latencies: dict[str, list[float]] = {name: [] for name in systems}
            diffs = {name: max(float(np.abs(run(*batch) - ref).max()) for batch, ref in zip(batches, reference,
                                                                                            strict=True))
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
    agree = "; ".join(f"{r['system']}: {r['same_labels']}/{r['texts']} labels identical to predict's, probabilities "
                      f"within {r['max_abs_diff']:.1e}" for r in checked)
    notes = (f"{len(texts)} texts per batch size, {args.repeats} interleaved passes (median); model {model_dir}. "
             f"Tokenization excluded (the same ids for every runtime; a wide part reads the texts). Fastest at "
             f"batch 1: {fastest['system']} ({fastest['vs_keras']} Keras; target >= 2x). Fidelity on {args.check} "
             f"test texts, tokenising included: {agree} (target: all identical, within 1e-4).")
    if args.no_record:
        print(results_table(rows) + "\n\n" + notes)
    else:
        record_results("Export runtimes: classifier prediction throughput", rows, notes)


if __name__ == "__main__":
    main()
