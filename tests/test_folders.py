"""Model folders: the manifest's checks, the format version, atomic writing, the error classes."""

import json

import keras
import numpy as np
import pytest

from kformer import folders
from kformer.artifacts import MANIFEST_NAME
from kformer.errors import BadInput, CorruptModel, ModelNotFound, Unsupported


def _manifest(folder, **fields):
    folder.mkdir(exist_ok=True)
    (folder / MANIFEST_NAME).write_text(json.dumps(fields), encoding="utf-8")
    return folder


def test_read_manifest_names_each_problem_with_its_error_class(tmp_path):
    with pytest.raises(ModelNotFound, match="is not a folder"):
        folders.read_manifest(tmp_path / "missing")
    with pytest.raises(ModelNotFound, match="not a kformer model folder"):
        folders.read_manifest(tmp_path)
    (tmp_path / MANIFEST_NAME).write_text("{broken")
    with pytest.raises(CorruptModel, match="corrupt"):
        folders.read_manifest(tmp_path)
    newer = _manifest(tmp_path / "newer", task="classify", format_version=folders.FORMAT_VERSION + 1)
    with pytest.raises(Unsupported, match="newer kformer"):
        folders.read_manifest(newer)
    other = _manifest(tmp_path / "other", task="translate", format_version=1)
    with pytest.raises(BadInput, match="holds a 'translate' model, not a 'classify' one") as caught:
        folders.read_manifest(other, task="classify")
    assert caught.value.field == "model_dir"
    with pytest.raises(CorruptModel, match="missing labels"):
        folders.read_manifest(other, task="translate", required=["labels"])


def test_folders_without_a_format_version_are_version_0_and_still_read(tmp_path):
    old = _manifest(tmp_path / "old", task="classify", labels=["a", "b"])
    assert folders.read_manifest(old, task="classify", required=["labels"])["labels"] == ["a", "b"]


def test_write_model_folder_is_complete_and_carries_no_optimizer_state(tmp_path):
    ids = keras.Input((3,))
    model = keras.Model(ids, keras.layers.Dense(2)(ids))
    model.compile(optimizer="adam", loss="mse")
    model.fit(np.ones((4, 3)), np.ones((4, 2)), verbose=0)
    assert model.optimizer.iterations.numpy() == 1

    def extra(stage):
        (stage / "vocab.txt").write_text("a\nb\n")

    out = folders.write_model_folder(tmp_path / "m", "classify", model, {"labels": ["x", "y"]}, {"n": 4}, extra)
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert manifest["format_version"] == folders.FORMAT_VERSION and manifest["task"] == "classify"
    assert manifest["model_file"] == folders.MODEL_FILE and manifest["labels"] == ["x", "y"]
    assert json.loads((out / folders.METRICS_FILE).read_text()) == {"n": 4}
    assert (out / "vocab.txt").read_text() == "a\nb\n"
    loaded = folders.load_keras_model(out / folders.MODEL_FILE)
    assert int(loaded.optimizer.iterations.numpy()) == 0  # the step counter and moments were not saved
    np.testing.assert_allclose(loaded.predict(np.ones((1, 3)), verbose=0), model.predict(np.ones((1, 3)), verbose=0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no staging folder left behind


def test_a_failed_write_leaves_the_old_folder_as_it_was(tmp_path):
    ids = keras.Input((3,))
    model = keras.Model(ids, keras.layers.Dense(2)(ids))
    out = folders.write_model_folder(tmp_path / "m", "classify", model, {}, {"run": 1})

    def fail(stage):
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        folders.write_model_folder(out, "classify", model, {}, {"run": 2}, fail)
    assert json.loads((out / folders.METRICS_FILE).read_text()) == {"run": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
