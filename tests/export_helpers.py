"""What every classifier export must do, checked on a folder the calling test trained: both formats
give ``kformer predict``'s labels, probabilities (within 1e-4) and in-scope scores (``ood_score``:
the best probability, minus a distance, the TF-IDF novelty or the combined rule, within 1e-4
relative and absolute) on the test's texts, with the
labels, the threshold, the score and how to tokenise in the metadata; the reference ONNX client
(docs/onnx_classify_client.py) tokenises to kformer's ids and answers as ``predict``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ATOL = 1e-4
DOCS = Path(__file__).resolve().parents[1] / "docs"


def docs_module(name: str):
    """``docs/<name>.py`` as a module (the reference clients import no kformer)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_same_routes(labels_a, labels_b, scores, threshold: float | None, tolerance: float, *,
                       relative: bool = True, probabilities=None, probability_tolerance: float | None = None,
                       ranks: int = 1, least: float = 0.5) -> np.ndarray:
    """Two runtimes' routed labels agree on every row whose route cannot flip within the tolerance
    their scores are compared to: the in-scope score (``scores``, the reference runtime's) farther
    from ``threshold`` than ``tolerance`` (relative and absolute, as ``assert_allclose(rtol=atol=
    tolerance)`` compares them; absolute only without ``relative``), and with ``probabilities`` (the reference's, ``(n, labels)``) the
    two most likely labels more than twice ``probability_tolerance`` (default ``tolerance``) apart
    (with ``ranks`` k: each of the k + 1 most likely from the next, for top-k lists).

    A row near the threshold, or with two labels near a tie, may go either way in a quantised or
    differently ordered computation; every other row must not. At least ``least`` of the rows
    (a fraction, or a count when >= 1) must be compared, so the check cannot pass on no rows.
    Returns the mask of compared rows."""
    labels_a, labels_b = list(labels_a), list(labels_b)
    assert len(labels_a) == len(labels_b) == len(scores), (len(labels_a), len(labels_b), len(scores))
    scores = np.asarray(scores, dtype="float64")
    clear = np.ones(len(scores), dtype=bool)
    if threshold is not None:
        clear &= np.abs(scores - threshold) > tolerance + (tolerance * np.abs(scores) if relative else 0.0)
    if probabilities is not None:
        top = -np.sort(-np.asarray(probabilities, dtype="float64"), axis=1)[:, : ranks + 1]  # most likely first
        gaps = -np.diff(top, axis=1) if top.shape[1] > 1 else top
        clear &= (gaps > 2 * (tolerance if probability_tolerance is None else probability_tolerance)).all(axis=1)
    needed = least if least >= 1 else least * len(scores)
    assert clear.sum() >= needed, f"only {clear.sum()} of {len(scores)} rows are clear of the threshold/ties"
    differ = [(i, a, b) for i, (a, b, c) in enumerate(zip(labels_a, labels_b, clear, strict=True)) if c and a != b]
    assert not differ, f"routed differently (row, one, other): {differ}"
    return clear


def check_classifier_exports(folder: Path, texts: list[str], out: Path) -> dict[str, dict]:
    """Export ``folder`` as a SavedModel and as ONNX into ``out``; assert both give what the loaded
    classifier gives on ``texts``; return the two metadata.json dicts by format."""
    import onnxruntime as ort
    import tensorflow as tf

    from kformer import load
    from kformer.export import export
    from kformer.tasks.classify.wide import MAX_CHARS

    classifier = load(folder)
    expected, expected_scores = classifier.scored(texts)
    labels = [classifier.labels[i] for i in expected.argmax(axis=1)]  # the most likely, no unknown route
    ids = classifier.features(texts)
    # the export takes the texts where the wide part is mixed in or the score reads their TF-IDF vectors
    wide = classifier.wide is not None and (classifier.wide.weight > 0 or classifier.ood_kind in ("tfidf", "combined"))
    metadata = {}

    export(folder, out / "saved_model", "saved_model")
    loaded = tf.saved_model.load(str(out / "saved_model" / "1"))
    inputs = {"token_ids": tf.constant(ids), **({"texts": tf.constant(texts)} if wide else {})}
    answers = [loaded.signatures["serving_default"](**inputs)]
    texts_model = loaded if "texts" in loaded.signatures else None
    if (out / "saved_model" / "texts" / "1").is_dir():  # a tokenizer on TensorFlow Text's ops: its own SavedModel
        import tensorflow_text  # noqa: F401  (registers the ops texts/1 needs)

        assert "texts" not in loaded.signatures
        texts_model = tf.saved_model.load(str(out / "saved_model" / "texts" / "1"))
    if texts_model is not None:
        answers.append(texts_model.signatures["texts"](texts=tf.constant(texts)))
    assert len(answers) == 2 or classifier.kind == "encoder"  # only a word-pair vocabulary lacks an in-graph tokenizer
    for answer in answers:
        np.testing.assert_allclose(answer["probabilities"].numpy(), expected, atol=ATOL)
        np.testing.assert_allclose(answer["ood_score"].numpy(), expected_scores, rtol=ATOL, atol=ATOL)
        # the most likely label: the same wherever the two most likely are not tied within ATOL
        assert_same_routes([label.decode() for label in answer["labels"].numpy()], labels, expected_scores, None,
                           ATOL, probabilities=expected)

    export(folder, out / "onnx", "onnx")
    session = ort.InferenceSession(str(out / "onnx" / "model.onnx"))
    feed = {"token_ids": ids, **({"texts": np.array([t[:MAX_CHARS] for t in texts], dtype=object)} if wide else {})}
    assert {i.name for i in session.get_inputs()} == set(feed)
    probabilities, onnx_labels, scores = session.run(["probabilities", "labels", "ood_score"], feed)
    np.testing.assert_allclose(probabilities, expected, atol=ATOL)
    np.testing.assert_allclose(scores, expected_scores, rtol=ATOL, atol=ATOL)
    assert_same_routes(list(onnx_labels), labels, expected_scores, None, ATOL, probabilities=expected)

    client = docs_module("onnx_classify_client").OnnxClassifier(out / "onnx")
    np.testing.assert_array_equal(client.token_ids(texts), ids)
    served = [load(out / kind) for kind in ("saved_model", "onnx")]  # what `kformer serve` does with an export
    predicted = classifier.predict(texts, top_k=2)
    # a calibrated threshold is some validation text's score: that text, or a copy, may fall either side of it
    # in float32; every other row must be routed as the folder routes it

    def routes(answers):
        return [(a["label"], a["unknown"], [t["label"] for t in a["top_k"]]) for a in answers]

    for answers in (client.predict(texts, top_k=2), *(model.predict(texts, top_k=2) for model in served)):
        assert_same_routes(routes(answers), routes(predicted), expected_scores, classifier.threshold, ATOL,
                           probabilities=expected, ranks=2)
        np.testing.assert_allclose([a["probability"] for a in answers], expected.max(axis=1), atol=ATOL)

    for kind in ("saved_model", "onnx"):
        metadata[kind] = json.loads((out / kind / "metadata.json").read_text(encoding="utf-8"))
        assert metadata[kind]["labels"] == classifier.labels and metadata[kind]["threshold"] == classifier.threshold
        assert metadata[kind]["tokenizer"]["max_length"] == classifier.max_length
        assert (metadata[kind]["wide"] is not None) == wide
        assert metadata[kind]["ood"]["score"] == classifier.ood_kind and metadata[kind]["ood"]["output"] == "ood_score"
    return metadata


def check_classifier_graphs(folder: Path, texts: list[str], out: Path) -> dict:
    """What :func:`check_classifier_exports` checks of the numbers, at a fraction of its cost: the
    export plan's ``serving_default`` function (the SavedModel's graph, called without saving it)
    and ``model.onnx`` (converted into ``out``, on ONNX Runtime) give the loaded classifier's
    probabilities (within ATOL) and in-scope scores (within ATOL relative and absolute) on
    ``texts``. Returns what both exports' metadata.json would say beyond their files and
    signatures (the plan's ``info``: labels, threshold, ``ood``, ``wide``, ...)."""
    import onnxruntime as ort
    import tensorflow as tf

    from kformer import load
    from kformer.models.export_plan import onnx_file
    from kformer.tasks.classify.wide import MAX_CHARS

    classifier = load(folder)
    expected, expected_scores = classifier.scored(texts)
    ids, cut = classifier.features(texts), [text[:MAX_CHARS] for text in texts]
    plan = classifier.export_plan()
    endpoint = plan.endpoints[0]
    reads_texts = [tensor.name for tensor in endpoint.inputs] == ["token_ids", "texts"]
    answer = endpoint.fn(tf.constant(ids), *([tf.constant(cut)] if reads_texts else []))
    onnx_file(endpoint, out / "model.onnx", classifier.model)
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    feed = {"token_ids": ids, **({"texts": np.array(cut, dtype=object)} if reads_texts else {})}
    onnx = dict(zip(["probabilities", "ood_score"], session.run(["probabilities", "ood_score"], feed), strict=True))
    for probabilities, scores in ((answer["probabilities"].numpy(), answer["ood_score"].numpy()),
                                  (onnx["probabilities"], onnx["ood_score"])):
        np.testing.assert_allclose(probabilities, expected, atol=ATOL)
        np.testing.assert_allclose(scores, expected_scores, rtol=ATOL, atol=ATOL)
    return plan.info


LOAD_SCRIPT = r"""
import json, sys
import numpy as np
calls = json.loads(sys.stdin.read())
results = {}
for call in calls:
    inputs = {name: np.array(value, dtype=dtype) for name, (value, dtype) in call["inputs"].items()}
    exec(call["line"])
    results[call["signature"]] = {name: np.asarray(value).tolist() if np.asarray(value).dtype != object else
                                  [v.decode() if isinstance(v, bytes) else v for v in np.asarray(value).ravel()]
                                  for name, value in outputs.items()}
results["tensorflow_text imported"] = "tensorflow_text" in sys.modules
print(json.dumps(results))
"""


def load_as_the_readme_says(folder: Path, calls: dict[str, dict[str, list]]) -> dict[str, dict[str, np.ndarray]]:
    """In a fresh Python, run each named signature's (or ONNX file's) ``load:`` line of the export's
    README.txt -- the folder put in for ``<this folder>`` -- on its inputs ({input name: nested
    list}); return ``{signature: {output name: array}}``. Fails if TensorFlow Text got imported
    though no line said to import it."""
    import os
    import subprocess
    import sys

    readme = (folder / "README.txt").read_text(encoding="utf-8").splitlines()
    metadata = json.loads((folder / "metadata.json").read_text(encoding="utf-8"))
    jobs = []
    for signature, inputs in calls.items():
        line = readme[readme.index(signature) + 1]
        assert line.startswith("  load: "), line
        dtypes = {name: spec["dtype"].replace("string", "object")
                  for name, spec in metadata["signatures"][signature]["inputs"].items()}
        jobs.append({"signature": signature, "line": line.removeprefix("  load: ").replace("<this folder>", str(folder)),
                     "inputs": {name: (value, dtypes[name]) for name, value in inputs.items()}})
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": ""}  # no kformer on the path
    done = subprocess.run([sys.executable, "-c", LOAD_SCRIPT], input=json.dumps(jobs), capture_output=True, text=True,
                          env=env, timeout=300, cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results.pop("tensorflow_text imported") == any("import tensorflow_text" in job["line"] for job in jobs)
    return {signature: {name: np.asarray(value) for name, value in outputs.items()}
            for signature, outputs in results.items()}
