"""Shared pieces of the classification benchmarks: linear TF-IDF baselines and a kformer run.

Each benchmark (bench/imdb.py, bench/banking77.py, bench/tickets.py) trains the strong linear
baseline and kformer on the same data in the same run and reports accuracy, macro-F1, training
seconds and prediction throughput (texts/s) side by side.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import ROOT, Timer, record_results

RATIO_KEYS = ("accuracy", "macro_f1", "train_s", "texts_per_s")


def load(path: Path):
    """Texts and string labels of a shared-data CSV, through kformer's own reader."""
    from kformer.data.readers import read_labelled

    data = read_labelled(path)
    return data.texts, data.labels


def linear_baseline(name: str, train, test, analyzer: str = "word", ngrams=(1, 2), model: str = "lr") -> dict:
    """TF-IDF + logistic regression or linear SVM; one result row."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score
    from sklearn.pipeline import make_pipeline
    from sklearn.svm import LinearSVC

    vectorizer = TfidfVectorizer(
        analyzer=analyzer, ngram_range=ngrams, sublinear_tf=True, min_df=2, lowercase=True,
        max_features=None if analyzer == "word" else 500_000,
    )
    classifier = LogisticRegression(C=10.0, max_iter=2000) if model == "lr" else LinearSVC(C=0.5)
    pipeline = make_pipeline(vectorizer, classifier)
    with Timer() as fit_timer:
        pipeline.fit(train[0], train[1])
    with Timer() as predict_timer:
        predicted = pipeline.predict(test[0])
    return {
        "system": name,
        "accuracy": float(accuracy_score(test[1], predicted)),
        "macro_f1": float(f1_score(test[1], predicted, average="macro")),
        "train_s": fit_timer.seconds,
        "texts_per_s": len(test[0]) / predict_timer.seconds,
    }


def kformer_run(name: str, train_path: Path, test_path: Path, flags: list[str], out_dir: Path | None = None,
                throughput_texts: int = 5000) -> dict:
    """``kformer train classify`` in a new process, then timed prediction on the test file.

    Accuracy comes from the test set (``--test``), scored by kformer itself; throughput is
    measured here by loading the saved folder and predicting the first ``throughput_texts`` test texts.
    """
    out_dir = out_dir or Path(tempfile.mkdtemp(prefix="kformer-bench-"))
    command = [sys.executable, "-m", "kformer", "train", "classify", "--data", str(train_path),
               "--test", str(test_path), "--out", str(out_dir), "--quiet", *flags]
    print("+", " ".join(command), flush=True)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    started = time.perf_counter()
    finished = subprocess.run(command, cwd=ROOT, env=env)
    if finished.returncode != 0:
        raise SystemExit(f"{name}: kformer exited with {finished.returncode}")
    wall = time.perf_counter() - started
    metrics = json.loads((out_dir / "metrics.json").read_text(encoding="utf-8"))

    from kformer.data.readers import read_labelled
    from kformer.models.classifier import load_classifier

    texts = read_labelled(test_path).texts[:throughput_texts]
    classifier = load_classifier(out_dir)
    classifier.probabilities(texts[:64], batch_size=64)  # compile once, outside the timing
    with Timer() as timer:
        classifier.probabilities(texts, batch_size=256)
    return {
        "system": name,
        "accuracy": metrics["test"]["accuracy"],
        "macro_f1": metrics["test"]["macro_f1"],
        "train_s": metrics["train_seconds"],
        "texts_per_s": len(texts) / timer.seconds,
        "epochs": metrics["epochs_run"],
        "run_wall_s": wall,
    }


def report(title: str, rows: list[dict], notes: str) -> None:
    """Record ``rows`` (the first is the linear baseline) with ratios against that baseline."""
    record_results(f"{title} (issue 3)", rows, notes=notes, baseline=rows[0]["system"], ratio_keys=RATIO_KEYS)
