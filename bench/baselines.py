"""Shared pieces of the classification benchmarks: linear TF-IDF baselines and a kformer run.

Each benchmark (bench/imdb.py, bench/banking77.py, bench/tickets.py) trains the strong linear
baseline and kformer on the same data in the same run and reports accuracy, macro-F1, training
seconds and prediction throughput (texts/s) side by side.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from bench.harness import Timer, record_results, results_table

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


# the tuned linear baseline's grid: features x model x C, every point scored on the validation split
TUNED_FEATURES = {"word 1-2 grams": ("word", (1, 2)), "char 2-5 grams": ("char_wb", (2, 5))}
TUNED_C = {"svm": (0.1, 0.3, 1.0, 3.0), "lr": (1.0, 3.0, 10.0, 30.0, 100.0)}  # each model's usual range for TF-IDF


TUNED_JOBS = 2  # processes for the grid search (the benchmark machine's cores)


def _valid_accuracy(model: str, c: float, x_train, y_train, x_valid, y_valid) -> float:
    from sklearn.metrics import accuracy_score

    return float(accuracy_score(y_valid, _linear_model(model, c).fit(x_train, y_train).predict(x_valid)))


def _linear_model(model: str, c: float):
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    return LogisticRegression(C=c, max_iter=1000) if model == "lr" else LinearSVC(C=c)


def _vectorizer(analyzer: str, ngrams):
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(analyzer=analyzer, ngram_range=ngrams, sublinear_tf=True, min_df=2, lowercase=True,
                           max_features=None if analyzer == "word" else 500_000)


def tuned_linear_baseline(train, valid, test) -> dict:
    """TF-IDF + a linear model, its features (word 1-2 or char 2-5 grams), model (logistic
    regression or linear SVM) and C chosen by accuracy on ``valid`` (each a ``(texts, labels)``
    pair; :data:`TUNED_FEATURES` x :data:`TUNED_C`), then fitted again on
    training + validation texts and scored once on ``test``; one result row (``train_s``: the
    search and the final fit)."""
    from joblib import Parallel, delayed
    from sklearn.metrics import accuracy_score, f1_score
    from sklearn.pipeline import make_pipeline

    scores = {}
    with Timer() as fit_timer:
        for feature, (analyzer, ngrams) in TUNED_FEATURES.items():
            vectorizer = _vectorizer(analyzer, ngrams)
            x_train, x_valid = vectorizer.fit_transform(train[0]), vectorizer.transform(valid[0])
            grid = [(model, c) for model, values in TUNED_C.items() for c in values]
            # the grid's points are independent fits: one process per core (the result is the same)
            accuracies = Parallel(n_jobs=TUNED_JOBS)(
                delayed(_valid_accuracy)(model, c, x_train, train[1], x_valid, valid[1]) for model, c in grid)
            scores.update({(feature, model, c): accuracy for (model, c), accuracy in zip(grid, accuracies, strict=True)})
        feature, model, c = max(scores, key=lambda key: scores[key])  # ties: the first in grid order
        pipeline = make_pipeline(_vectorizer(*TUNED_FEATURES[feature]), _linear_model(model, c))
        pipeline.fit(list(train[0]) + list(valid[0]), list(train[1]) + list(valid[1]))
    with Timer() as predict_timer:
        predicted = pipeline.predict(test[0])
    return {
        "system": "tuned linear baseline",
        "accuracy": float(accuracy_score(test[1], predicted)),
        "macro_f1": float(f1_score(test[1], predicted, average="macro")),
        "train_s": fit_timer.seconds,
        "texts_per_s": len(test[0]) / predict_timer.seconds,
        "chosen": f"{feature}, {'logistic regression' if model == 'lr' else 'linear SVM'}, C={c:g}",
        "valid_accuracy": scores[(feature, model, c)],
    }


def kformer_run(name: str, train_path: Path, test_path: Path, recipe: str | Path | None = None,
                settings: dict | None = None, out_dir: Path | None = None, throughput_texts: int = 5000,
                valid_path: Path | None = None) -> dict:
    """Train with ``kformer.tasks.classify.train`` (in this process), then timed prediction on the test file.

    ``recipe`` (name or TOML path) then ``settings`` (``{name: value}``) configure the run;
    ``valid_path`` is the validation file (default: kformer's stratified hold-out of the training file).
    Accuracy comes from the test set, scored by kformer itself; throughput is measured by loading
    the saved folder and predicting the first ``throughput_texts`` test texts.
    """
    from kformer.config import make_config
    from kformer.data.readers import read_labelled
    from kformer.tasks import classify

    out_dir = out_dir or Path(tempfile.mkdtemp(prefix="kformer-bench-"))
    config = make_config(classify.ClassifyConfig, "classify", recipe, settings)
    print(f"+ {name}: recipe {recipe}, settings {settings or {}}, out {out_dir}", flush=True)
    with Timer() as wall:
        metrics = classify.train(config, train_path, out_dir, valid=valid_path, test=test_path,
                                 progress=_epoch_lines).metrics

    texts = read_labelled(test_path).texts[:throughput_texts]
    classifier = classify.load(out_dir)
    classifier.warmup()  # compile every width bucket outside the timing
    with Timer() as timer:
        classifier.probabilities(texts, batch_size=256)
    return {
        "system": name,
        "accuracy": metrics["test"]["accuracy"],
        "macro_f1": metrics["test"]["macro_f1"],
        "train_s": metrics["train_seconds"],
        "texts_per_s": len(texts) / timer.seconds,
        "epochs": metrics["epochs_run"],
        "run_wall_s": wall.seconds,
    }


def _epoch_lines(event) -> None:
    """Progress of a benchmark run: the settings chosen, then one line per epoch."""
    if event.stage == "settings":
        print(event.message, flush=True)
    elif event.stage == "epoch":
        print(event.line(), flush=True)


def parse_settings(items: list[str]) -> dict:
    """``["epochs=3", "backbone='minilm'"]`` (TOML values; bare words are text) -> ``{name: value}``."""
    import tomllib

    settings = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            settings[key.strip()] = tomllib.loads(f"v = {value.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            settings[key.strip()] = value.strip()
    return settings


def report(title: str, rows: list[dict], notes: str, record: bool = True) -> None:
    """Record ``rows`` (the first is the linear baseline) with ratios against that baseline
    (``record=False``: print them only, for smoke runs)."""
    if not record:
        print(results_table(rows, rows[0]["system"], RATIO_KEYS) + "\n\n" + notes)
        return
    record_results(f"{title} (issue 3)", rows, notes=notes, baseline=rows[0]["system"], ratio_keys=RATIO_KEYS)


def wide_columns(out_dir: Path) -> dict:
    """A kformer row's columns for each part of a run with a wide n-gram part (metrics.json
    ``"wide"``): test accuracy of the Transformer alone and of the wide part alone (the row's own
    accuracy is their mix), the mix weight, the wide part's ``C`` (and naive-Bayes scaling) and its
    fitting seconds (the fit, plus the refit on training + validation texts where the run made one:
    both inside max_minutes). ``{"wide weight": "off"}`` for a run without one."""
    import json

    wide = json.loads((Path(out_dir) / "metrics.json").read_text(encoding="utf-8")).get("wide") or {}
    tested = wide.get("test_accuracy") or {}
    if not tested:
        return {"wide weight": "off" if not wide else f"skipped: {wide.get('skipped')}"}
    return {"transformer alone": tested["transformer"], "wide alone": tested["wide"], "wide weight": wide["weight"],
            "wide C": f"{wide.get('C', '')}{' NB' if wide.get('naive_bayes') else ''}",
            "wide_fit_s": wide["fit_seconds"] + (wide.get("refit") or {}).get("seconds", 0.0)}


def limited_copy(path: Path, limit: int | None, folder: Path) -> Path:
    """``path`` itself, or a CSV in ``folder`` of ``limit`` of its rows taken from each label in
    turn (files may be sorted by label; every label keeps rows for a stratified hold-out): smoke runs."""
    import csv

    if limit is None:
        return path
    texts, labels = load(path)
    by_label: dict[str, list[str]] = {}
    for text, label in zip(texts, labels, strict=True):
        by_label.setdefault(label, []).append(text)
    rows = [(group[i], label) for i in range(max(map(len, by_label.values())))
            for label, group in by_label.items() if i < len(group)][:limit]
    out = folder / (path.name.split(".")[0] + ".csv")
    with open(out, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    return out
