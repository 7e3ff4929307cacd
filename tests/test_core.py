"""The package basics: the command answers, artefacts are written atomically and load safely."""

import argparse
import gzip
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import kformer
from kformer import artifacts, folders
from kformer.cli import build_parser, main
from kformer.data.io import read_text_lines
from kformer.errors import KformerError
from kformer.layers import EncoderBlock, TokenAndPositionEmbedding


def run_kformer(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "kformer", *args], capture_output=True, text=True, timeout=120, **kwargs)


def test_version_and_help_answer_in_a_new_process():
    version = run_kformer("--version")
    assert version.returncode == 0
    assert version.stdout.strip() == f"kformer {kformer.__version__}"
    helped = run_kformer("--help")
    assert helped.returncode == 0
    for command in ("train", "evaluate", "attention"):
        assert command in helped.stdout
    assert "Traceback" not in helped.stderr


def test_every_option_and_argument_has_help_text():
    def undocumented(parser):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from undocumented(sub)
            elif not action.help:
                yield f"{parser.prog} {action.dest}"

    assert list(undocumented(build_parser())) == []


def test_not_a_model_folder_is_a_one_line_error(tmp_path):
    result = run_kformer("evaluate", str(tmp_path), "--data", "x.csv")
    assert result.returncode == 3  # ModelNotFound
    assert result.stderr.strip().count("\n") == 0
    assert "not a kformer model folder" in result.stderr
    assert "Traceback" not in result.stderr


def test_main_reports_kformer_errors_without_traceback(tmp_path, capsys):
    assert main(["attention", str(tmp_path / "missing"), "1+1"]) == 3  # ModelNotFound
    err = capsys.readouterr().err
    assert err.startswith("kformer: error: ") and "Traceback" not in err


def test_write_json_atomic_leaves_no_temporary_files(tmp_path):
    target = tmp_path / "out" / "metrics.json"
    artifacts.write_json_atomic(target, {"accuracy": np.float32(0.5), "n": np.int64(3)})
    assert json.loads(target.read_text()) == {"accuracy": 0.5, "n": 3}
    assert [p.name for p in target.parent.iterdir()] == ["metrics.json"]


def test_staged_folder_replaces_only_on_success(tmp_path):
    final = tmp_path / "model"
    with artifacts.staged_folder(final) as staging:
        (staging / "a.txt").write_text("first")
    assert (final / "a.txt").read_text() == "first"
    with pytest.raises(RuntimeError), artifacts.staged_folder(final) as staging:
        (staging / "a.txt").write_text("half-written")
        raise RuntimeError("crash while writing")
    assert (final / "a.txt").read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_staged_folder_removes_what_a_killed_writer_left(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    final = tmp_path / "model"
    left = tmp_path / f".model.stage-{dead.pid}-abc"  # a writer killed mid-write (kill -9)
    parked = tmp_path / f".model.old-{dead.pid}-abc"
    busy = tmp_path / f".model.stage-{os.getpid()}-xyz"  # a live writer's: not touched
    other = tmp_path / f".other.stage-{dead.pid}-abc"  # another folder's
    for folder in (left, parked, busy, other):
        folder.mkdir()
        (folder / "model.keras").write_text("half")
    with artifacts.staged_folder(final) as staging:
        (staging / "a.txt").write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["model", busy.name, other.name])
    assert (final / "a.txt").read_text() == "new"


def test_keras_model_round_trip_and_corrupt_file(tmp_path):
    ids = keras.Input(shape=(None,), dtype="int32")
    model = keras.Model(ids, EncoderBlock(8, 2, 16)(TokenAndPositionEmbedding(20, 6, 8)(ids)))
    path = tmp_path / "model.keras"
    artifacts.save_keras_atomic(model, path)
    loaded = folders.load_keras_model(path)
    sample = np.array([[3, 4, 0]])
    np.testing.assert_allclose(np.asarray(loaded(sample)), np.asarray(model(sample)), atol=1e-6)
    corrupt = tmp_path / "corrupt.keras"
    corrupt.write_bytes(path.read_bytes()[:200])
    with pytest.raises(KformerError, match="corrupt"):
        folders.load_keras_model(corrupt)


def test_read_text_lines_names_the_undecodable_line(tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_bytes(b"ok\tfine\n" + b"bad \xff byte\n")
    with pytest.raises(KformerError, match="line 2 is not valid UTF-8"):
        list(read_text_lines(path))


def test_read_text_lines_reads_gzip_and_drops_bom(tmp_path):
    path = tmp_path / "pairs.tsv.gz"
    with gzip.open(path, "wb") as handle:
        handle.write("\ufeffhello\tவணக்கம்\r\nbye\tபோ\n".encode())
    assert list(read_text_lines(path)) == [(1, "hello\tவணக்கம்"), (2, "bye\tபோ")]


@pytest.mark.parametrize("content", [None, b""])
def test_missing_or_empty_file(tmp_path, content):
    path = tmp_path / "data.csv"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(KformerError, match="does not exist|is empty"):
        list(read_text_lines(path))


def test_texts_may_follow_options(monkeypatch):
    import kformer.cli.translate as translate_commands

    argv = ["translate", "runs/x", "--beam", "4", "How are you?", "Bye."]
    assert build_parser().parse_known_args(argv)[1] == ["How are you?", "Bye."]  # argparse alone
    seen = {}
    monkeypatch.setattr(translate_commands, "translate_command", lambda args: seen.update(vars(args)) or 0)
    assert main(argv) == 0
    assert seen["texts"] == ["How are you?", "Bye."] and seen["beam"] == 4


def test_unknown_options_are_still_errors(capsys):
    with pytest.raises(SystemExit) as raised:
        main(["translate", "runs/x", "--no-such-flag", "text"])
    assert raised.value.code == 2
    assert "unrecognized arguments" in capsys.readouterr().err


PROCESS_WIDE = ("KERAS_BACKEND", "TF_CPP_MIN_LOG_LEVEL", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


def test_import_changes_no_environment_and_setup_does_what_the_command_needs():
    """`import kformer` leaves the environment alone; kformer.setup() picks TensorFlow, quiets its
    logs and sizes its thread pools (here to KFORMER_THREADS=3); a bad KFORMER_THREADS is BadInput."""
    env = {k: v for k, v in os.environ.items() if k not in (*PROCESS_WIDE, "KFORMER_THREADS")}
    script = (
        "import json, os, sys\n"
        "import kformer\n"
        f"names = {PROCESS_WIDE!r}\n"
        "print(os.environ.get('KERAS_BACKEND'))\n"
        "imported = [os.environ.get(name) for name in names]\n"
        "first = kformer.setup()\n"
        "again = kformer.setup()\n"
        "after = [os.environ.get(name) for name in names]\n"
        "os.environ['KFORMER_THREADS'] = 'many'\n"
        "try:\n"
        "    kformer.setup()\n"
        "except kformer.errors.BadInput as exc:\n"
        "    refused = str(exc)\n"
        "print(json.dumps([imported, [first.backend, first.threads], first == again, after, refused,\n"
        "                  'keras' in sys.modules]))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], env={**env, "KFORMER_THREADS": "3"},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    printed, report = result.stdout.splitlines()
    assert printed == "None"  # the check, as written
    imported, chosen, idempotent, after, refused, keras_imported = json.loads(report)
    assert imported == [None] * 4
    assert chosen == ["tensorflow", 3] and idempotent
    assert after == ["tensorflow", "3", "3", "2"]
    assert "KFORMER_THREADS" in refused and "'many'" in refused and "\n" not in refused
    assert not keras_imported  # setup() only sets variables: Keras reads them when it is imported


def test_setup_refuses_to_switch_the_backend_of_an_imported_keras():
    current = keras.backend.backend()
    other = "jax" if current != "jax" else "tensorflow"
    before = dict(os.environ)
    with pytest.raises(kformer.errors.Unsupported, match=f"already imported with the {current} backend") as raised:
        kformer.setup(backend=other)
    assert raised.value.field == "backend" and dict(os.environ) == before
    assert kformer.setup().backend == current  # the backend in use is kept


@pytest.mark.parametrize("argv, module, extra", [
    (["serve", "--model", "a=runs/a"], "fastapi", "serve"),
    (["serve", "--model", "a=runs/a"], "tf2onnx", "serve"),  # classifiers run on ONNX Runtime by default
    (["train", "arithmetic", "--out", "runs/a", "--distribute"], "jax", "jax"),
    (["export", "runs/a", "--out", "exported", "--format", "onnx"], "tf2onnx", "export"),
])
def test_a_command_whose_extra_is_missing_names_it_in_one_line(argv, module, extra, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    assert main(argv) == 5  # Unsupported
    err = capsys.readouterr().err
    assert err.startswith("kformer: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert f"{module}" in err and f"pip install 'kformer[{extra}]'" in err
    assert list(tmp_path.iterdir()) == []  # refused before anything was read or written
