"""--ood-score: the unknown route thresholds a distance of the pooled text vector (Mahalanobis to the
nearest training class mean, or the k-th nearest training vector), fitted after training, kept in
the folder without pickle, calibrated like the probability and used by predict, the CLI, the
service, the onnx runtimes and both export formats (the score computed in the graph)."""

from __future__ import annotations

import asyncio
import json
import random

import numpy as np
import pytest
from conftest import write_csv
from server_helpers import LOAD_WAIT_S

from kformer.cli import main
from kformer.errors import BadInput
from kformer.tasks.classify.calibration import choose_threshold
from kformer.tasks.classify.ood import (
    OodScore,
    fit_score,
    knn_distance,
    mahalanobis_distances,
    mahalanobis_stats,
)

INTENTS = {
    "balance": ["balance", "statement", "savings", "overdraft", "funds", "total"],
    "card": ["card", "debit", "visa", "chip", "pin", "contactless"],
    "loan": ["loan", "mortgage", "interest", "borrow", "repay", "credit"],
    "transfer": ["transfer", "wire", "iban", "sepa", "payee", "send"],
}
HELD_OUT = ("weather", ["weather", "rain", "forecast", "sunny", "snow", "umbrella"])  # never in training
FILLER = "please can you help me with my the a today now thanks".split()


def _rows(per_label: int, seed: int, intents) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    return [(" ".join(rng.sample(FILLER, 3) + rng.sample(words, 4)), label)
            for label, words in intents for _ in range(per_label)]


# --- the math ------------------------------------------------------------------------------------------


def test_mahalanobis_matches_a_direct_numpy_computation():
    from sklearn.covariance import LedoitWolf

    rng = np.random.default_rng(0)
    labels = np.repeat([0, 1, 2], 20)
    vectors = rng.normal(size=(60, 5)) + labels[:, None] * 3.0
    stats = mahalanobis_stats(vectors, labels, 3)
    means = np.stack([vectors[labels == c].mean(axis=0) for c in range(3)])
    np.testing.assert_allclose(stats["means"], means)
    covariance = LedoitWolf(assume_centered=True).fit(vectors - means[labels]).covariance_
    np.testing.assert_allclose(stats["precision"], np.linalg.inv(covariance), rtol=1e-6, atol=1e-8)
    queries = rng.normal(size=(7, 5)) * 4
    direct = np.array([[(x - m) @ stats["precision"] @ (x - m) for m in means] for x in queries])  # (7, 3)
    np.testing.assert_allclose(mahalanobis_distances(queries, means, stats["precision"]), direct, rtol=1e-9)
    score = fit_score("mahalanobis", vectors, labels, 3)
    np.testing.assert_allclose(score(queries), -direct.min(axis=1), rtol=1e-9)  # higher = more in scope
    assert score(means).max() == pytest.approx(0.0, abs=1e-9) and (score(queries) <= 0).all()


def test_knn_is_the_kth_nearest_normalised_training_vector():
    rng = np.random.default_rng(1)
    bank, queries = rng.normal(size=(30, 4)), rng.normal(size=(5, 4))
    unit = bank / np.linalg.norm(bank, axis=1, keepdims=True)
    direct = np.array([np.sort(np.linalg.norm(unit - q / np.linalg.norm(q), axis=1))[2] for q in queries])
    np.testing.assert_allclose(knn_distance(queries, unit, 3), direct, atol=1e-6)
    score = fit_score("knn", bank, np.zeros(30, dtype=int), 1, k=3)
    np.testing.assert_allclose(score(queries), -direct, atol=1e-6)
    assert score.manifest()["k"] == 3 and score.manifest()["rows"] == 30


def test_the_threshold_rule_takes_any_score_higher_meaning_in_scope():
    best = np.array([-2.0, -3.0, -4.0, -9.0, -5.0])  # minus distances of in-scope rows
    correct = np.array([True, True, True, False, True])
    oos = np.array([-30.0, -8.0, -4.5, -60.0])
    summary = choose_threshold(best, correct, oos, floor=None)
    # at -5: 4 kept right + 3 routed = 7 of 9, tied with -4 (3 + 4): ties take the lowest, as with probabilities
    assert summary["threshold"] == pytest.approx(-5.0)
    assert summary["out_of_scope_recall"] == 0.75 and summary["in_scope_accuracy"] == pytest.approx(4 / 5)
    # out-of-scope rows nearer than every in-scope one: the lowest score seen routes nothing
    nothing = choose_threshold(best, correct, np.array([-1.0]), floor=None)
    assert nothing["threshold"] == -9.0 and nothing["out_of_scope_recall"] == 0.0
    keep = choose_threshold(-np.linspace(1, 100, 100), np.ones(100, dtype=bool), floor=None)
    assert keep["threshold"] == pytest.approx(-96.0) and keep["in_scope_accuracy"] == pytest.approx(0.96)  # >= 95 %


def test_bad_values_are_one_line_errors(capsys):
    from kformer.tasks.classify import ClassifyConfig

    with pytest.raises(BadInput, match="ood_score"):
        ClassifyConfig(ood_score="nonsense")
    with pytest.raises(SystemExit) as exit_:
        main(["train", "classify", "--data", "x.csv", "--ood-score", "nonsense"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "--ood-score" in err and "nonsense" in err and len(err.splitlines()) == 1


def test_auto_falls_back_on_the_benchmarks_best_score_without_out_of_scope_texts():
    from kformer.tasks.classify import ClassifyConfig
    from kformer.tasks.classify.auto import RULES, data_stats

    texts, labels = zip(*_rows(5, 0, INTENTS.items()), strict=True)
    stats = data_stats(list(texts), list(labels))
    scratch, chosen = RULES.resolve(ClassifyConfig(calibrate=True), stats)
    assert scratch.ood_score == "probability" and "bench/ood.py" in chosen.to_json()["ood_score"]["why"]
    fine_tuned = RULES.resolve(ClassifyConfig(calibrate=True, backbone="minilm"), stats)[0]
    assert fine_tuned.ood_score == "mahalanobis"
    frozen = RULES.resolve(ClassifyConfig(calibrate=True, backbone="minilm", freeze=True), stats)[0]
    assert frozen.ood_score == "probability"
    assert RULES.resolve(ClassifyConfig(), stats)[0].ood_score == "probability"
    assert "validation AUROC" in RULES.summary("ood_score")


@pytest.mark.slow
def test_auto_takes_the_score_validation_separates_best(tmp_path):
    """With out-of-scope validation texts, auto fits every score and keeps the one of highest
    validation AUROC; metrics.json's auto entry and the folder say which, and the AUROCs it
    compared are those of the scores themselves (recomputed here with sklearn)."""
    from sklearn.metrics import roc_auc_score

    from kformer.data.readers import read_labelled
    from kformer.tasks.classify import load

    train = write_csv(tmp_path / "train.csv", _rows(30, 1, INTENTS.items()))
    valid = write_csv(tmp_path / "valid.csv", _rows(10, 2, INTENTS.items()) + _rows(8, 3, [HELD_OUT]))
    out = tmp_path / "model"
    assert main(["train", "classify", "--data", str(train), "--valid", str(valid), "--out", str(out), "--calibrate",
                 "--no-wide", "--epochs", "3", "--max-length", "16", "--dim", "16", "--ff-dim", "32",
                 "--batch-size", "16", "--learning-rate", "0.003", "--quiet"]) == 0
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    chosen = metrics["auto"]["ood_score"]
    recorded = metrics["calibration"]["auroc_of_each_score"]
    assert set(recorded) == {"probability", "mahalanobis", "knn", "mahalanobis_layers"}  # no wide part: no tfidf
    classifier = load(out)
    assert (classifier.ood is None) == (chosen["value"] == "probability")
    assert metrics["calibration"]["ood_score"] == chosen["value"]

    # every score fitted again from the training texts' vectors, scored on the validation texts
    training = read_labelled(train)
    layers = classifier.with_vectors(layers=True).text_vectors(training.texts)  # (n, blocks * dim)
    vectors = classifier.with_vectors().text_vectors(training.texts)
    blocks = layers.shape[1] // vectors.shape[1]
    np.testing.assert_allclose(layers[:, -vectors.shape[1]:], vectors, atol=1e-6)  # the last block's: the text vector
    label_ids = np.array([classifier.labels.index(label) for label in training.labels])
    rows = read_labelled(valid)
    inside = [t for t, lb in zip(rows.texts, rows.labels, strict=True) if lb != HELD_OUT[0]]
    outside = [t for t, lb in zip(rows.texts, rows.labels, strict=True) if lb == HELD_OUT[0]]
    assert (len(inside), len(outside)) == (40, 8)
    truth = np.r_[np.ones(len(inside)), np.zeros(len(outside))]
    own = {}
    for kind in recorded:
        ood = None if kind == "probability" else fit_score(kind, layers if kind == "mahalanobis_layers" else vectors,
                                                           label_ids, len(classifier.labels), layers=blocks)
        scorer = classifier.with_parts(wide=classifier.wide, threshold=None, ood=ood)
        own[kind] = roc_auc_score(truth, scorer.scored(inside + outside)[1])
    assert recorded == pytest.approx(own, abs=1e-3)
    # the pick is the best of them (ties within the recomputation's noise allowed), clearly above chance
    assert own[chosen["value"]] >= max(own.values()) - 1e-3 and own[chosen["value"]] >= 0.8
    assert f"({recorded[chosen['value']]:.3f})" in chosen["why"]


def test_the_graphs_tfidf_novelty_is_the_kth_cosine_distance_to_the_sparse_bank():
    """The TF-IDF novelty as graph operations -- TensorFlow: the SparseTensor bank times the batch;
    ONNX Runtime: a text at a time under Scan, its n-grams' slices of the bank by column added
    into the bank rows; then TopK -- against SciPy's kth_cosine_distance on a random sparse bank:
    an empty text, one whose n-grams no bank row has, a bank row's own vector; k over the rows;
    an empty batch."""
    import onnx
    import onnxruntime as ort
    import tensorflow as tf
    from onnx import TensorProto, helper
    from scipy import sparse

    from kformer.tasks.classify.ood_text import TfidfNovelty, kth_cosine_distance, unit_rows
    from kformer.tasks.classify.ood_text_graph import onnx_text_score, tf_text_score
    from kformer.tasks.classify.wide_graph import OnnxGraph

    bank = sparse.random(40, 60, density=0.15, random_state=1, dtype="float32").tolil()
    bank[:, 50:] = 0.0  # n-grams no bank row has
    bank = unit_rows(bank)
    queries = sparse.random(7, 60, density=0.15, random_state=2, dtype="float32").tolil()
    queries[0, :] = 0.0  # no n-gram at all: the novelty is -1
    queries[1, :] = bank[3].toarray() * 2.0  # a bank row's own vector, scaled (unit_rows scales it back)
    queries[2, :50], queries[2, 55] = 0.0, 1.0  # n-grams, none in the bank: -1 too
    queries = sparse.csr_matrix(queries)
    coo = queries.tocoo()
    features = tf.SparseTensor(np.stack([coo.row, coo.col], axis=1).astype("int64"), coo.data, queries.shape)
    for k in (3, 50):
        novelty = TfidfNovelty(None, bank, k)
        expected = -kth_cosine_distance(unit_rows(queries), bank, k)
        assert expected[0] == expected[2] == -1.0
        np.testing.assert_allclose(tf_text_score(novelty)(features).numpy(), expected, rtol=0, atol=1e-6)
        g = OnnxGraph("test_")
        out = onnx_text_score(g, novelty, "features", "")
        model = helper.make_model(helper.make_graph(
            g.nodes, "novelty", [helper.make_tensor_value_info("features", TensorProto.FLOAT, [None, 60])],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, [None])], g.initializers),
            opset_imports=[helper.make_opsetid("", 17)])
        onnx.checker.check_model(model)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(session.run(None, {"features": queries.toarray()})[0], expected, rtol=0, atol=1e-6)
    none = tf.SparseTensor(np.zeros((0, 2), dtype="int64"), np.zeros(0, dtype="float32"), (0, 60))  # an empty batch
    nothing = session.run(None, {"features": np.zeros((0, 60), dtype="float32")})[0]
    assert tf_text_score(novelty)(none).shape == nothing.shape == (0,)


# --- a tiny classifier with one intent held out of training -------------------------------------------


@pytest.fixture(scope="module")
def ood_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("ood")
    train = write_csv(root / "train.csv", _rows(40, 1, INTENTS.items()))
    valid = write_csv(root / "valid.csv", _rows(25, 2, INTENTS.items()) + _rows(10, 3, [HELD_OUT]))
    out = root / "model"
    # --contrastive-weight 0: these tests are of the scores; the term (auto: on, out-of-scope validation texts
    # being present) is tests/test_classify_contrastive.py's
    assert main(["train", "classify", "--data", str(train), "--valid", str(valid), "--out", str(out), "--calibrate",
                 "--ood-score", "mahalanobis", "--no-wide", "--epochs", "4", "--max-length", "16", "--dim", "16",
                 "--ff-dim", "32", "--batch-size", "16", "--learning-rate", "0.003", "--contrastive-weight", "0",
                 "--quiet"]) == 0
    return out


def _texts():
    in_scope = _rows(2, 11, INTENTS.items())
    held_out = [text for text, _ in _rows(6, 12, [HELD_OUT])]
    return in_scope, held_out


def test_held_out_intent_goes_to_unknown_from_python_and_the_cli(ood_folder, capsys):
    from kformer.tasks.classify import load

    in_scope, held_out = _texts()
    classifier = load(ood_folder)
    assert classifier.ood.kind == "mahalanobis" and classifier.threshold < 0
    answers = classifier.predict([t for t, _ in in_scope] + held_out)
    assert [a["label"] for a in answers[: len(in_scope)]] == [label for _, label in in_scope]
    assert all(a["label"] == "unknown" and a["unknown"] for a in answers[len(in_scope):])
    assert all((a["ood_score"] < classifier.threshold) == a["unknown"] for a in answers)
    assert not any(a["unknown"] for a in classifier.predict(held_out, threshold=-1e12))  # the user's, in its units

    capsys.readouterr()
    assert main(["predict", str(ood_folder), *held_out[:3], in_scope[0][0]]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["label"] for line in lines] == ["unknown"] * 3 + [in_scope[0][1]]
    # the same network, batched otherwise: the same scores to float32 rounding
    assert [line["ood_score"] for line in lines] == pytest.approx(
        [a["ood_score"] for a in classifier.predict(held_out[:3] + [in_scope[0][0]])], rel=1e-5, abs=1e-5)


def test_folder_keeps_the_statistics_without_pickle_and_reloads_identically(ood_folder):
    from kformer.tasks.classify import load

    manifest = json.loads((ood_folder / "kformer.json").read_text(encoding="utf-8"))
    entry = manifest["ood"]
    assert entry["score"] == "mahalanobis" and entry["files"] == {"means": "ood/means.npy", "precision": "ood/precision.npy"}
    means = np.load(ood_folder / entry["files"]["means"], allow_pickle=False)
    precision = np.load(ood_folder / entry["files"]["precision"], allow_pickle=False)
    assert means.shape == (4, entry["dim"]) and precision.shape == (entry["dim"], entry["dim"])
    in_scope, held_out = _texts()
    texts = [t for t, _ in in_scope] + held_out
    first, second = load(ood_folder), load(ood_folder)
    scores = first.scored(texts)[1]
    np.testing.assert_array_equal(scores, second.scored(texts)[1])
    direct = -mahalanobis_distances(first.text_vectors(texts), means, precision).min(axis=1)
    np.testing.assert_allclose(scores, direct, rtol=1e-9)
    with pytest.raises(BadInput, match="threshold"):
        first.predict(texts[:1], threshold=float("nan"))


def test_metrics_record_auroc_of_both_scores(ood_folder):
    calibration = json.loads((ood_folder / "metrics.json").read_text(encoding="utf-8"))["calibration"]
    assert calibration["ood_score"] == "mahalanobis" and calibration["labels_out_of_scope"] == ["weather"]
    assert set(calibration["auroc"]) == {"mahalanobis", "probability"}
    assert calibration["auroc"]["mahalanobis"] >= 0.9
    # both AUROCs are those of the folder's scores on its validation texts (the probability: the best one)
    from sklearn.metrics import roc_auc_score

    from kformer.tasks.classify import load

    classifier = load(ood_folder)
    inside, held = [t for t, _ in _rows(25, 2, INTENTS.items())], [t for t, _ in _rows(10, 3, [HELD_OUT])]
    truth = np.r_[np.ones(len(inside)), np.zeros(len(held))]
    assert calibration["auroc"]["mahalanobis"] == pytest.approx(
        roc_auc_score(truth, classifier.scored(inside + held)[1]), abs=1e-3)
    assert calibration["auroc"]["probability"] == pytest.approx(
        roc_auc_score(truth, classifier.probabilities(inside + held).max(axis=1)), abs=1e-3)
    assert calibration["out_of_scope_recall"] >= 0.9 and calibration["in_scope_accuracy"] >= 0.9
    manifest = json.loads((ood_folder / "kformer.json").read_text(encoding="utf-8"))
    assert manifest["threshold"] == calibration["threshold"]


def test_the_service_routes_by_the_same_score(ood_folder):
    import httpx

    from kformer.server import create_app
    from kformer.tasks.classify import load

    in_scope, held_out = _texts()
    texts = [in_scope[0][0], held_out[0]]

    async def ask():
        app = create_app({"m": ood_folder})
        async with app.router.lifespan_context(app):
            assert await asyncio.to_thread(app.state.service.loaded.wait, LOAD_WAIT_S)
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://k") as client:
                return (await client.post("/v1/models/m:predict", json={"instances": texts})).json()

    answer = asyncio.run(ask())
    assert [p["label"] for p in answer["predictions"]] == [in_scope[0][1], "unknown"]
    assert [p["ood_score"] for p in answer["predictions"]] == pytest.approx(  # batched by the service: float32 rounding
        [a["ood_score"] for a in load(ood_folder).predict(texts)], rel=1e-5, abs=1e-5)


def test_exports_and_onnx_runtimes_route_by_the_same_distance(ood_folder, tmp_path):
    import shutil

    from export_helpers import assert_same_routes, check_classifier_exports

    from kformer import load

    in_scope, held_out = _texts()
    texts = [t for t, _ in in_scope] + held_out
    metadata = check_classifier_exports(ood_folder, texts, tmp_path)  # ood_score to 1e-4, unknown routes equal
    assert metadata["onnx"]["ood"]["score"] == "mahalanobis" and "Mahalanobis" in metadata["onnx"]["ood"]["units"]
    assert [a["label"] for a in load(tmp_path / "onnx").predict(held_out)] == ["unknown"] * len(held_out)

    copy = tmp_path / "folder"  # the runtimes keep their conversion in the folder
    shutil.copytree(ood_folder, copy)
    folder = load(copy)
    texts += [t for t, _ in _rows(2, 1, INTENTS.items())]  # and training texts: near a class mean
    expected, probabilities = folder.predict(texts), folder.probabilities(texts)
    scores = np.array([a["ood_score"] for a in expected])
    answers = load(copy, runtime="onnx").predict(texts)
    np.testing.assert_allclose([a["ood_score"] for a in answers], scores, rtol=1e-4, atol=1e-4)
    assert_same_routes([a["label"] for a in answers], [a["label"] for a in expected], scores, folder.threshold, 1e-4,
                       probabilities=probabilities, least=0.9)

    # 8-bit weights (and activations quantised per batch) move this tiny network's 16-number text vectors
    # enough that the Mahalanobis distance, through the precision matrix, changes by a factor of up to
    # about 2.6 (measured on these texts): compared as log2 distances, within 2 (a factor of 4). Only a
    # row whose distance is more than that factor from the threshold's, and whose two likeliest labels are
    # more than 2 x 0.05 apart, must route as the folder routes it: here the held-out intent's texts
    def log2_distance(values):  # the scores are minus distances
        return np.log2(-np.asarray(values, dtype="float64"))

    int8 = load(copy, runtime="onnx-int8").predict(texts)
    assert not np.allclose([a["ood_score"] for a in int8], scores, rtol=1e-3)  # not the float network
    np.testing.assert_allclose(log2_distance([a["ood_score"] for a in int8]), log2_distance(scores), rtol=0, atol=2.0)
    clear = assert_same_routes([a["label"] for a in int8], [a["label"] for a in expected], log2_distance(scores),
                               float(log2_distance(folder.threshold)), 2.0, relative=False,
                               probabilities=probabilities, probability_tolerance=0.05, least=3)
    assert any(a["label"] == "unknown" for a, c in zip(expected, clear, strict=True) if c)


def test_knn_exports_compute_the_kth_neighbour_distance(ood_folder, tmp_path):
    """The same network with a knn score in place of its Mahalanobis statistics: both formats'
    graphs give the folder's scores (TopK in ONNX; saving, loading and serving an export are
    checked on the Mahalanobis score above)."""
    import shutil

    from export_helpers import check_classifier_graphs

    from kformer.tasks.classify import load

    folder = tmp_path / "knn"
    shutil.copytree(ood_folder, folder)
    classifier = load(folder)
    in_scope, held_out = _texts()
    train = [t for t, _ in _rows(40, 1, INTENTS.items())]
    vectors = classifier.text_vectors(train)
    knn = fit_score("knn", vectors, np.zeros(len(train), dtype=int), 1, k=3)
    knn.save(folder)
    manifest = json.loads((folder / "kformer.json").read_text(encoding="utf-8"))
    manifest.update(ood=knn.manifest(), threshold=float(np.median(knn(vectors))))  # routes some texts
    (folder / "kformer.json").write_text(json.dumps(manifest), encoding="utf-8")
    assert load(folder).ood_kind == "knn"
    metadata = check_classifier_graphs(folder, [t for t, _ in in_scope] + held_out, tmp_path / "graphs")
    assert metadata["ood"]["score"] == "knn"


def test_an_ood_score_of_unknown_kind_is_a_corrupt_folder(tmp_path):
    from kformer.errors import CorruptModel
    from kformer.tasks.classify.ood import load_score

    score = OodScore("mahalanobis", {"means": np.zeros((2, 3)), "precision": np.eye(3)})
    score.save(tmp_path)
    assert load_score(tmp_path, score.manifest()).dim == 3
    with pytest.raises(CorruptModel, match="ood"):
        load_score(tmp_path, {**score.manifest(), "score": "psychic"})


# --- issue 34 part 2: the layer-wise distance and the scores that read the wording, in a folder -------------


def _with_score(ood_folder, folder, score, **manifest_items):
    """A copy ``folder`` of the trained folder whose unknown route reads ``score`` instead (its
    statistics saved beside the network), with the threshold routing half of the training texts."""
    import shutil

    shutil.copytree(ood_folder, folder)
    score.save(folder)
    manifest = json.loads((folder / "kformer.json").read_text(encoding="utf-8"))
    manifest.update(ood=score.manifest(), **manifest_items)
    (folder / "kformer.json").write_text(json.dumps(manifest), encoding="utf-8")
    return folder


def _training(classifier):
    """``(texts, class indices (n,), every block's vectors (n, L * D), L)`` of the fixture's training texts."""
    texts, labels = zip(*_rows(40, 1, INTENTS.items()), strict=True)
    layers = classifier.with_vectors(layers=True).text_vectors(list(texts))
    blocks = layers.shape[1] // classifier.with_vectors().text_vectors(list(texts[:1])).shape[1]
    return list(texts), np.array([classifier.labels.index(label) for label in labels]), layers, blocks


def test_layer_wise_mahalanobis_is_computed_alike_by_both_exports_and_the_onnx_runtime(ood_folder, tmp_path):
    """The same network with mahalanobis_layers statistics: the SavedModel's graph and model.onnx
    give the folder's scores within 1e-4 relative and absolute (check_classifier_graphs' tolerance;
    saving, loading and serving both exports of a layer-wise score: the next test's combined score,
    which holds one). Why that holds in float32: each block's distance
    is a squared Euclidean distance of whitened vectors of moderate size (relative rounding
    ~1e-6 of a distance of tens), and standardising subtracts the block's training mean and
    divides by its deviation (here of the size of the distances themselves), so a score near 0
    keeps an absolute error of some 1e-5: measured 3.5e-5 at most, a fifth of the 1e-4 + 1e-4 |s|
    allowed. The routes must agree wherever a score is farther than that from the threshold
    (assert_same_routes in check_classifier_exports)."""
    from export_helpers import check_classifier_graphs

    from kformer.tasks.classify import load
    from kformer.tasks.classify.ood import LAYERS

    classifier = load(ood_folder)
    texts, label_ids, layers, blocks = _training(classifier)
    score = fit_score(LAYERS, layers, label_ids, len(classifier.labels), layers=blocks)
    folder = _with_score(ood_folder, tmp_path / "layers", score, threshold=float(np.median(score(layers))))
    layered = load(folder)
    assert layered.ood_kind == LAYERS and layered.predictor.vectors == "layers"
    in_scope, held_out = _texts()
    asked = [t for t, _ in in_scope] + held_out + texts[:8]
    scores = layered.scored(asked)[1]
    np.testing.assert_allclose(scores, score(layered.text_vectors(asked)), rtol=1e-9)
    assert scores[len(in_scope):len(in_scope) + len(held_out)].max() < scores[:len(in_scope)].min()  # held out: lower

    check_classifier_graphs(folder, asked, tmp_path / "graphs")


def test_tfidf_and_combined_scores_live_in_the_folder_and_both_exports(ood_folder, tmp_path):
    """A wide part (here of weight 0: the probabilities stay the network's) brings the TF-IDF
    novelty; combined adds it, standardised, to the layer-wise distance. Both are kept in ood/
    without pickle, read back with the folder's wide part, and computed on every runtime; both
    exports compute the combined score in their graph (the texts input taken for the novelty
    alone, nothing mixed in), within 1e-4 of the folder's, and route as it routes."""
    from export_helpers import assert_same_routes, check_classifier_exports

    from kformer.tasks.classify import load, wide_fit
    from kformer.tasks.classify.ood import LAYERS
    from kformer.tasks.classify.ood_text import COMBINED, combine, fit_tfidf
    from kformer.tasks.classify.wide import Mix

    classifier = load(ood_folder)
    texts, label_ids, layers, blocks = _training(classifier)
    part = wide_fit.fit(texts, [classifier.labels[i] for i in label_ids], classifier.labels)
    network = fit_score(LAYERS, layers, label_ids, len(classifier.labels), layers=blocks)
    combined = combine(network, network(layers), fit_tfidf(part, texts))
    assert combined.weight == 0.5  # no out-of-scope validation texts to choose it on: the fallback
    folder = tmp_path / "combined"
    _with_score(ood_folder, folder, combined, wide=Mix(part, 0.0).manifest(), threshold=-1.0)
    part.save(folder)
    loaded = load(folder)
    assert loaded.ood_kind == COMBINED and loaded.ood.network_kind == LAYERS
    in_scope, held_out = _texts()
    asked = [t for t, _ in in_scope] + held_out
    (c0, c1), (s0, s1) = combined.centre, combined.scale
    novelty = fit_tfidf(part, texts).of(None, None, asked)
    by_hand = 0.5 * (network(loaded.text_vectors(asked)) - c0) / s0 + 0.5 * (novelty - c1) / s1
    scores = loaded.scored(asked)[1]
    np.testing.assert_allclose(scores, by_hand, rtol=1e-9, atol=1e-12)
    assert scores[len(in_scope):].max() < scores[: len(in_scope)].min()
    assert json.loads((folder / "kformer.json").read_text(encoding="utf-8"))["ood"]["weight"] == 0.5
    onnx = load(folder, runtime="onnx").predict(asked)  # every block's vectors on ONNX Runtime, the novelty in NumPy
    np.testing.assert_allclose([a["ood_score"] for a in onnx], scores, rtol=1e-4, atol=1e-4)
    assert_same_routes([a["label"] for a in onnx], [a["label"] for a in loaded.predict(asked)], scores,
                       loaded.threshold, 1e-4, probabilities=loaded.probabilities(asked), least=0.9)

    metadata = check_classifier_exports(folder, asked + texts[:6], tmp_path / "exports")
    for exported in metadata.values():
        assert exported["ood"]["score"] == COMBINED and exported["ood"]["network"] == LAYERS
        assert exported["wide"]["weight"] == 0.0  # read for the novelty, not mixed in


@pytest.mark.parametrize("kind", ["tfidf", "combined"])
def test_text_scores_beside_a_mixed_wide_part_are_computed_alike_by_both_graphs(ood_folder, tmp_path, kind):
    """With the wide part mixed in (weight 0.5), the TF-IDF novelty, and combined on the best
    probability -- of the MIXED probabilities, as the folder reads it --, computed alike by the
    folder and by both export graphs (one pass of the wide part's features feeding the mix and
    the score). The graphs' numbers only (check_classifier_graphs): saving, loading and serving
    an export of a text score are the previous test's."""
    from export_helpers import check_classifier_graphs

    from kformer.tasks.classify import load, wide_fit
    from kformer.tasks.classify.ood_text import combine, fit_tfidf
    from kformer.tasks.classify.wide import Mix

    classifier = load(ood_folder)
    texts, labels = (list(column) for column in zip(*_rows(40, 1, INTENTS.items()), strict=True))
    part = wide_fit.fit(texts, labels, classifier.labels)
    mix = Mix(part, 0.5)
    mixed = mix(classifier.probabilities(texts), texts)
    tfidf = fit_tfidf(part, texts)
    score = tfidf if kind == "tfidf" else combine(None, mixed.max(axis=1), tfidf)
    folder = _with_score(ood_folder, tmp_path / kind, score, wide=mix.manifest(),
                         threshold=float(np.median(score.of(mixed, None, texts))))
    part.save(folder)
    loaded = load(folder)
    assert loaded.ood_kind == kind and loaded.wide.weight == 0.5
    assert getattr(loaded.ood, "network", None) is None  # combined: on the best probability
    in_scope, held_out = _texts()
    check_classifier_graphs(folder, [t for t, _ in in_scope] + held_out + texts[:6], tmp_path / "graphs")


def test_auto_compares_every_score_the_classifier_can_have(ood_folder):
    """With a wide part, auto's comparison on validation spans the four network scores, from
    one network pass each over the training, validation and out-of-scope texts, and keeps the
    highest AUROC; combined, asked for by name, takes the best weight of its grid and the best
    network score; a refitted wide part gets a novelty of its own columns, the combined weight and
    network score kept."""
    from kformer.data.readers import LabelledTexts
    from kformer.tasks.classify import ClassifyConfig, load, wide_fit
    from kformer.tasks.classify.calibration import auroc
    from kformer.tasks.classify.ood_fit import fit_ood
    from kformer.tasks.classify.ood_text import COMBINED_WEIGHTS, refit_tfidf
    from kformer.tasks.classify.wide import Mix

    classifier = load(ood_folder)
    texts, labels = (list(column) for column in zip(*_rows(40, 1, INTENTS.items()), strict=True))
    part = wide_fit.fit(texts, labels, classifier.labels)
    base = classifier.with_parts(wide=Mix(part, 0.0), threshold=None)
    valid = LabelledTexts(*(list(c) for c in zip(*_rows(25, 2, INTENTS.items()), strict=True)), "valid")
    outside = LabelledTexts(*(list(c) for c in zip(*_rows(10, 3, [HELD_OUT]), strict=True)), "valid")
    score, choice = fit_ood(base, ClassifyConfig(calibrate=True), LabelledTexts(texts, labels, "train"), 64, valid,
                            outside, auto=True)
    aurocs = choice["auroc"]
    assert list(aurocs) == ["probability", "mahalanobis", "knn", "mahalanobis_layers"]  # not tfidf or combined
    assert choice["score"] == max(aurocs, key=aurocs.get) and (score is None) == (choice["score"] == "probability")
    scored = base.with_parts(wide=base.wide, threshold=None, ood=score)  # the kept score is the one compared
    assert auroc(scored.scored(valid.texts)[1], scored.scored(outside.texts)[1]) == pytest.approx(
        aurocs[choice["score"]], abs=1e-6)

    forced, asked = fit_ood(base, ClassifyConfig(calibrate=True, ood_score="combined"), LabelledTexts(texts, labels, "t"),
                            64, valid, outside, auto=False)
    combined = asked["combined"]
    assert forced.kind == "combined" and forced.weight == combined["weight"] and combined["weight"] in COMBINED_WEIGHTS
    assert asked["auroc"]["combined"] == max(combined["auroc_by_weight"].values())
    assert combined["network"] == max(aurocs, key=aurocs.get)  # the same network scores as auto compared
    smaller = wide_fit.fit(texts, labels, classifier.labels, word_ngrams=1)
    again = refit_tfidf(forced, smaller, texts)
    assert again.weight == forced.weight and again.network is forced.network
    assert again.tfidf.bank.shape[1] == sum(len(block.terms) for block in smaller.blocks) != forced.tfidf.bank.shape[1]
