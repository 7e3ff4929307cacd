"""Retrieval-augmented decoding (kNN-MT) end to end on a tiny translator: the datastore, greedy and
beam decoding with it, its place in the folder, tuning on the validation pairs only, the CLI.

One tiny training run (one module fixture, about a second of training) on pairs the model cannot
learn that fast: each source's target is an arbitrary string of Tamil number words.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from conftest import NUMBER_WORDS, write_tsv_pairs

from kformer.cli import main
from kformer.errors import BadInput, ModelNotFound, Unsupported
from kformer.tasks import translate
from kformer.tasks.translate import retrieval

TINY = {"vocab_size": 300, "dim": 16, "heads": 2, "ff_dim": 32, "encoder_layers": 1, "decoder_layers": 1,
        "dropout": 0.0, "batch_size": 8, "learning_rate": 0.01, "label_smoothing": 0.0, "epochs": 1}
pytestmark = pytest.mark.usefixtures("eager_decoding")


def arbitrary_pairs(count: int, seed: int) -> list[tuple[str, str]]:
    """Distinct two-word English sources, each with three unrelated Tamil number words."""
    rng = random.Random(seed)
    english, tamil = list(NUMBER_WORDS), list(NUMBER_WORDS.values())
    sources = rng.sample([f"{a} {b}" for a in english for b in english], count)
    return [(source, " ".join(rng.choice(tamil) for _ in range(3))) for source in sources]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("retrieval")
    pairs = arbitrary_pairs(40, seed=3)
    train, valid, test = pairs[:30], pairs[30:35], pairs[35:]
    files = {name: write_tsv_pairs(root / f"{name}.tsv", rows) for name, rows in
             (("train", train), ("valid", valid), ("test", test))}
    tuned_on = []
    real = retrieval.tune_on_pairs
    with pytest.MonkeyPatch.context() as patch:  # retrieval "on": built and tuned at the end of training
        patch.setattr(retrieval, "tune_on_pairs", lambda translator, store, pairs, *a, **k: (
            tuned_on.append([(p.source, p.target) for p in pairs]), real(translator, store, pairs, *a, **k))[1])
        result = translate.train({**TINY, "retrieval": "on"}, files["train"], root / "model", valid=files["valid"],
                                 test=files["test"])
    return {"root": root, "train": train, "valid": valid, "test": test, "files": files, "folder": result.folder,
            "result": result, "tuned_on": tuned_on}


def test_training_with_retrieval_on_writes_a_tuned_datastore(tiny):
    assert tiny["tuned_on"] == [tiny["valid"]]  # the validation pairs, never the test pairs
    manifest = json.loads((tiny["folder"] / "kformer.json").read_text(encoding="utf-8"))
    entry, metrics = manifest["retrieval"], tiny["result"].metrics
    assert entry["tuning"]["valid_pairs"] == 5 and metrics["retrieval"]["lambda"] == entry["lambda"]
    assert (tiny["folder"] / "retrieval" / "values.npy").is_file() and metrics["test"]["retrieval"] is True
    assert translate.load(tiny["folder"]).retrieval.entries == entry["entries"]


@pytest.fixture(scope="module")
def built(tiny):
    """The translator with a datastore over its training pairs, tuned on the validation pairs."""
    return translate.load(tiny["folder"]).with_retrieval(None).build_retrieval(tiny["train"], valid=tiny["valid"],
                                                                                write=False)


def test_one_entry_per_target_token(tiny, built):
    store = built.retrieval
    targets = built.target_vocab.encode([t for _, t in tiny["train"]])
    assert store.entries == sum(len(t) + 1 for t in targets)  # each target token and [END]
    assert store.keys.shape == (store.entries, built.model.dim) and store.keys.dtype == np.float16
    assert store.values.dtype == np.int32 and set(store.values) <= set(np.concatenate(targets).tolist()) | {3}


def test_lambda_one_reproduces_the_training_targets(tiny, built):
    sources, targets = [s for s, _ in tiny["train"]], [t for _, t in tiny["train"]]
    alone = built.translate(sources, retrieval=False)
    assert alone != targets  # one epoch: the model alone has not learned them
    memory = built.with_retrieval(built.retrieval.with_settings(lam=1.0, temperature=1e-3 * built.retrieval.scale))
    assert memory.translate(sources) == targets
    assert memory.translate(sources, beam=3) == targets  # beam search mixes the same way


def test_lambda_zero_is_the_model_alone(tiny, built):
    sources = [s for s, _ in tiny["train"] + tiny["test"]]
    silent = built.with_retrieval(built.retrieval.with_settings(lam=0.0))
    assert silent.translate(sources) == built.translate(sources, retrieval=False)
    assert silent.translate(sources[:4], beam=2) == built.translate(sources[:4], beam=2, retrieval=False)


def test_tuning_picks_grid_values_on_the_validation_pairs_only(tiny, monkeypatch):
    seen = []
    real = retrieval.tune_on_pairs
    monkeypatch.setattr(retrieval, "tune_on_pairs", lambda translator, store, pairs, *a, **k: (
        seen.append(list(pairs)), real(translator, store, pairs, *a, **k))[1])
    scored = []
    real_score = translate.Translator.score
    monkeypatch.setattr(translate.Translator, "score", lambda self, pairs, **k: (
        scored.extend(p.source for p in pairs), real_score(self, pairs, **k))[1])
    tuned = translate.load(tiny["folder"]).build_retrieval(tiny["train"], valid=tiny["valid"], write=False).retrieval
    assert [(p.source, p.target) for p in seen[0]] == tiny["valid"]
    assert set(scored) == {s for s, _ in tiny["valid"]}  # no test (nor training) source was decoded
    values = retrieval.grid(tuned)
    assert tuned.lam in values["lam"] and tuned.temperature in values["temperature"] and tuned.k in values["k"]
    assert tuned.tuning["valid_pairs"] == 5 and {"chrf_with", "chrf_without", "scores"} <= set(tuned.tuning)
    assert tuned.tuning["chrf_with"] == max(row["chrf"] for row in tuned.tuning["scores"])


def test_the_folder_keeps_it_and_reloads_in_safe_mode(tiny, tmp_path):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(tiny["folder"], folder)
    written = translate.load(folder).build_retrieval(tiny["train"], lam=0.5, k=4)
    manifest = json.loads((folder / "kformer.json").read_text(encoding="utf-8"))
    assert manifest["retrieval"]["lambda"] == 0.5 and manifest["retrieval"]["k"] == 4
    assert np.load(folder / "retrieval" / "keys.npy", allow_pickle=False).dtype == np.float16
    reloaded = translate.load(folder)  # safe mode, no pickles
    sources = [s for s, _ in tiny["train"] + tiny["test"]]
    assert reloaded.retrieval.entries == written.retrieval.entries
    assert reloaded.translate(sources) == written.translate(sources)
    assert reloaded.metadata()["retrieval"]["k"] == 4
    translate.remove_retrieval(folder)
    assert translate.load(folder).retrieval is None and not (folder / "retrieval").exists()


def test_an_index_probing_every_list_decodes_as_brute_force(tiny, built):
    exact = built.retrieval
    assert exact.search == "exact" and exact.index is None  # "auto": too few entries for an index
    indexed = retrieval.with_search(exact, "ivf")
    assert indexed.search == "ivf" and indexed.index.recall[indexed.nprobe] >= 0.95
    assert sorted(map(tuple, indexed.keys.tolist())) == sorted(map(tuple, exact.keys.tolist()))
    every_list = built.with_retrieval(indexed.with_settings(nprobe=indexed.index.lists))
    sources = [s for s, _ in tiny["train"][:12] + tiny["test"]]
    assert every_list.translate(sources) == built.translate(sources)
    assert every_list.translate(sources[:4], beam=2) == built.translate(sources[:4], beam=2)
    one_list = built.with_retrieval(indexed.with_settings(nprobe=1, k=16))  # fewer entries than k: padding
    assert len(one_list.translate(sources[:4])) == 4


def test_an_indexed_folder_round_trips_and_an_old_folder_still_decodes(tiny, tmp_path, monkeypatch):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(tiny["folder"], folder)
    sources = [s for s, _ in tiny["train"][:12] + tiny["test"]]
    manifest_path = folder / "kformer.json"
    old = json.loads(manifest_path.read_text(encoding="utf-8"))
    old["retrieval"] = {key: value for key, value in old["retrieval"].items() if key not in ("search", "nprobe")}
    manifest_path.write_text(json.dumps(old), encoding="utf-8")  # as written before the index existed
    before = translate.load(folder)
    assert before.retrieval.search == "exact" and before.translate(sources) == translate.load(tiny["folder"]).translate(sources)

    monkeypatch.setattr(retrieval, "IVF_FROM", 10)  # "auto" indexes this tiny datastore
    written = translate.load(folder).build_retrieval(tiny["train"], lam=0.5, k=4, nprobe=2)
    entry = json.loads(manifest_path.read_text(encoding="utf-8"))["retrieval"]
    assert entry["search"] == "ivf" and entry["nprobe"] == 2 and entry["ivf"]["lists"] == written.retrieval.index.lists
    assert np.load(folder / "retrieval" / "offsets.npy", allow_pickle=False)[-1] == entry["entries"]
    reloaded = translate.load(folder)
    assert reloaded.retrieval.nprobe == 2 and reloaded.metadata()["retrieval"]["search"] == "ivf"
    assert np.array_equal(reloaded.retrieval.index.centroids, written.retrieval.index.centroids)
    assert reloaded.translate(sources) == written.translate(sources)
    translate.load(folder).build_retrieval(tiny["train"], lam=0.5, k=4, search="exact")
    assert translate.load(folder).retrieval.index is None and not (folder / "retrieval" / "centroids.npy").exists()


@pytest.mark.slow
def test_exports_carry_the_datastore_and_translate_as_the_folder(tiny, tmp_path, monkeypatch):
    """Both formats decode with the datastore inside their graphs: kformer.load of each export and
    the reference ONNX client give the folder's greedy translations, searching exactly (SavedModel)
    and through an IVF index probing 2 of its lists (both formats). The ONNX conversion here runs
    as a large datastore's does, collecting the converter's garbage between its passes (else a
    million entries ran out of memory), and leaves tf2onnx's pass table as it was."""
    import gc
    import shutil

    from export_helpers import docs_module
    from tf2onnx import optimizer

    import kformer
    from kformer.export import export

    folder = tmp_path / "model"
    shutil.copytree(tiny["folder"], folder)
    sources = [s for s, _ in tiny["train"] + tiny["valid"] + tiny["test"]]
    exact = translate.load(folder)
    assert exact.translate(sources) != exact.translate(sources, retrieval=False)  # the datastore matters here
    export(folder, tmp_path / "exact", format="saved_model")
    assert kformer.load(tmp_path / "exact").translate(sources) == exact.translate(sources)

    monkeypatch.setattr(retrieval, "IVF_FROM", 10)
    monkeypatch.setattr("kformer.export.COLLECT_FROM_BYTES", 0)
    collections, passes = [], optimizer._optimizers
    monkeypatch.setattr(gc, "collect", lambda *args: collections.append(args) or 0)  # counted, not run: ~0.6 s each here
    indexed = translate.load(folder).build_retrieval(tiny["train"], lam=0.5, k=4, nprobe=2)
    assert indexed.retrieval.search == "ivf"
    expected = indexed.translate(sources)
    for format in ("saved_model", "onnx"):
        collections.clear()
        export(folder, tmp_path / format, format=format)
        assert format == "saved_model" or len(collections) >= 2 * len(passes)  # each pass of both files
        assert optimizer._optimizers is passes
        exported = kformer.load(tmp_path / format)
        assert exported.translate(sources) == expected, format
        assert exported.metadata()["retrieval"] == indexed.metadata()["retrieval"]
    assert docs_module("onnx_translate_client").OnnxTranslator(tmp_path / "onnx").translate(sources) == expected
    with pytest.raises(Unsupported, match="always decodes with it"):
        exported.translate(sources[:1], retrieval=False)


def test_a_datastore_too_large_for_one_onnx_file_is_refused_in_one_line(tiny, tmp_path, monkeypatch, capsys):
    """One .onnx file holds at most 2 GB (protobuf's limit): a folder whose weights reach it is
    refused before anything is converted, pointing to the SavedModel, and nothing is written. The
    limit is lowered to this datastore's float16 keys (its weights hold them as float32: more)."""
    from kformer.models import export_plan

    keys = np.load(tiny["folder"] / "retrieval" / "keys.npy", allow_pickle=False)
    monkeypatch.setattr(export_plan, "ONNX_FILE_LIMIT", keys.nbytes)
    assert main(["export", str(tiny["folder"]), "--format", "onnx", "--out", str(tmp_path / "onnx")]) == 5
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("kformer: error: the model and its retrieval datastore hold ") and \
        err.endswith("one ONNX file can hold; export it with --format saved_model, which has no such limit"), err
    assert not (tmp_path / "onnx").exists()


def test_bad_settings_are_one_typed_error(tiny, built):
    with pytest.raises(BadInput, match="between 0 and 1"):
        built.retrieval.with_settings(lam=1.5)
    with pytest.raises(BadInput, match="above 0"):
        built.retrieval.with_settings(temperature=0)
    with pytest.raises(BadInput, match="entries"):
        built.retrieval.with_settings(k=10**9)
    with pytest.raises(BadInput, match="needs an index"):
        built.retrieval.with_settings(search="ivf", nprobe=1)
    with pytest.raises(BadInput, match="search ivf or auto"):
        retrieval.with_search(built.retrieval, "exact", nprobe=4)
    with pytest.raises(BadInput, match="lists"):
        retrieval.with_search(built.retrieval, "ivf", nprobe=10**6)
    with pytest.raises(ModelNotFound):
        translate.build_retrieval(tiny["root"] / "missing", data=tiny["files"]["train"])
    with pytest.raises(BadInput, match="records no training data"):  # trained from Python: no command recorded
        translate.build_retrieval(tiny["folder"], lam=0.5)


def test_cli_build_translate_evaluate(tiny, tmp_path, capsys):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(tiny["folder"], folder)
    files = tiny["files"]
    assert main(["retrieval", "build", str(folder), "--data", str(files["train"]), "--valid", str(files["valid"]),
                 "--test", str(files["test"]), "--search", "ivf", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "entries" in out and "validation chrF" in out and "search: ivf" in out
    assert main(["evaluate", str(folder), "--data", str(files["test"]), "--json", "--out", str(tmp_path / "on")]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["retrieval"] is True
    assert main(["evaluate", str(folder), "--data", str(files["test"]), "--json", "--retrieval", "off",
                 "--out", str(tmp_path / "off")]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["retrieval"] is False
    assert main(["translate", str(folder), "--retrieval", "off", tiny["train"][0][0]]) == 0
    capsys.readouterr()
    assert main(["retrieval", "build", str(tmp_path / "missing"), "--data", str(files["train"])]) != 0
    assert main(["retrieval", "build", str(folder), "--data", str(files["train"]), "--lambda", "1.5"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and all(line.startswith("kformer: error:") for line in errors)
    assert "--lambda must be between 0 and 1" in errors[1]
    assert main(["retrieval", "remove", str(folder)]) == 0
