"""`kformer train classify` -> `predict` -> `evaluate`, and every bad input.

Training and one `predict` (texts on stdin) run as new processes, the way a user runs them; the
other commands on the trained folder run in-process through :func:`kformer.cli.main` (the same
exit status and output at a fraction of a process's start-up: TensorFlow loads once).

The data is generated: three ticket queues (label names with spaces and '&', kept as written),
each with its own keywords among shared filler words, so a tiny encoder learns it in a few
epochs. One training text has 50,000 words (it must be truncated, not crash).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TICKET_QUEUES as QUEUES
from conftest import cli, write_tickets
from conftest import write_csv as _write_csv

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KFORMER_DEBUG": ""}


def kformer(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kformer", *map(str, args)], input=stdin, capture_output=True,
                          text=True, env=ENV, timeout=300)


def _assert_one_line_error(done: subprocess.CompletedProcess, *fragments: str, code: int = 2) -> None:
    lines = [line for line in done.stderr.splitlines() if line.strip() and "kformer: warning" not in line]
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    assert len(lines) == 1 and lines[0].startswith("kformer: error: "), done.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("classify")
    train = write_tickets(root / "train.csv", 360, seed=1, long_text=True)
    test = write_tickets(root / "test.csv", 90, seed=2)
    model = root / "model"
    done = kformer("train", "classify", "--data", train, "--test", test, "--out", model, "--epochs", "6",
                   "--max-length", "24", "--vocab-size", "300", "--batch-size", "16", "--learning-rate", "0.003",
                   "--quiet", "--seed", "7", "--no-wide")  # the network alone: the --threshold 0.9999 test leans on it
    assert done.returncode == 0, done.stderr
    return root, model, test


def test_train_writes_a_complete_model_folder(trained):
    root, model, _ = trained
    for name in ("kformer.json", "model.keras", "vocab.txt", "metrics.json", "curves.png", "confusion_valid.png"):
        assert (model / name).is_file(), name
    assert (model / "training" / "logs").is_dir() and (model / "training" / "history.csv").is_file()
    manifest = json.loads((model / "kformer.json").read_text(encoding="utf-8"))
    assert manifest["task"] == "classify" and manifest["labels"] == sorted(QUEUES)
    metrics = json.loads((model / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["test"]["accuracy"] >= 0.9 and metrics["test"]["n"] == 90
    assert metrics["splits"]["train"] + metrics["splits"]["valid"] == 361 and metrics["splits"]["test"] == 90
    assert metrics["train_seconds"] > 0 and metrics["command"][:3] == ["kformer", "train", "classify"]
    assert metrics["recipe"]["max_length"] == 24
    assert not [p for p in root.iterdir() if p.name.startswith(".model")]  # no staging folder left


def in_process(capsys, *args) -> str:
    """:func:`conftest.cli`'s stdout; the exit status must be 0."""
    code, out, err = cli(capsys, *args)
    assert code == 0, err
    return out


def test_predict_arguments_stdin_csv_and_threshold(trained, capsys):
    _, model, _ = trained
    out = in_process(capsys, "predict", model, "my laptop screen will not boot", "refund the invoice", "--top-k", "2")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["label"] for r in rows] == ["Hardware", "Billing & Payments"]
    for row in rows:
        probs = [t["probability"] for t in row["top_k"]]
        assert len(probs) == 2 and probs[0] >= probs[1] and sum(probs) <= 1.0 + 1e-5
        assert row["probability"] == probs[0] and row["unknown"] is False

    done = kformer("predict", model, "--format", "csv", "--threshold", "0.9999", "--unknown-label", "human",
                   stdin="vpn password locked\n" + "word " * 50_000 + "\n")
    assert done.returncode == 0, done.stderr
    csv.field_size_limit(10**7)  # the 50,000-word text is echoed back
    table = list(csv.DictReader(done.stdout.splitlines()))
    assert len(table) == 2
    # A clear ticket keeps its queue; filler words with no queue keyword go to the human route.
    assert (table[0]["label"], table[0]["unknown"]) == ("Access", "False")
    assert (table[1]["label"], table[1]["unknown"]) == ("human", "True")
    assert float(table[1]["probability"]) < 0.9999 and table[1]["top_k"].count(":") == 1


def test_evaluate_json_matches_training_metrics(trained, capsys):
    _, model, test = trained
    report = json.loads(in_process(capsys, "evaluate", model, "--data", test, "--json"))
    metrics = json.loads((model / "metrics.json").read_text(encoding="utf-8"))
    assert report["n"] == 90
    assert report["accuracy"] == pytest.approx(metrics["test"]["accuracy"], abs=1e-6)
    assert report["macro_f1"] == pytest.approx(metrics["test"]["macro_f1"], abs=1e-6)
    assert set(report["per_class"]) == set(QUEUES)
    assert (model / "eval" / "confusion.png").is_file()


def _bad_inputs(root: Path) -> dict[str, tuple[Path, tuple[str, ...]]]:
    good = [("a b c", "x"), ("d e f", "y"), ("g h", "x"), ("i j", "y")]
    cases = {
        "missing_text": (_write_csv(root / "cols.csv", good, ("body", "label")),
                         ("no column 'text' in cols.csv; columns found: body, label", "--text-column")),
        "empty_file": (root / "empty.csv", ("empty.csv is empty",)),
        "empty_texts": (_write_csv(root / "blank.csv", [("", "x"), ("  ", "y")]), ("empty text",)),
        "single_example": (_write_csv(root / "single.csv", [*good, ("k l", "lonely")]), ("'lonely'", "--valid")),
        "bad_bytes": (root / "bytes.csv", ("line 3 is not valid UTF-8",)),
        "single_label": (_write_csv(root / "one.csv", [("a", "x"), ("b", "x"), ("c", "x")]), ("single label 'x'",)),
    }
    (root / "empty.csv").write_bytes(b"")
    (root / "bytes.csv").write_bytes(b"text,label\nfine,x\nbad \xfe\xff,y\n")
    return cases


@pytest.mark.slow
def test_bad_training_input_is_one_line_and_leaves_nothing(tmp_path):
    cases = _bad_inputs(tmp_path)
    # Started together: each process mostly waits on its imports.
    running = {
        name: subprocess.Popen([sys.executable, "-m", "kformer", "train", "classify", "--data", str(path),
                                "--out", str(tmp_path / f"out-{name}")], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=ENV)
        for name, (path, _) in cases.items()
    }
    missing_label = kformer("train", "classify", "--data", cases["missing_text"][0], "--text-column", "body",
                            "--label-column", "queue", "--out", tmp_path / "out-label")
    _assert_one_line_error(missing_label, "no column 'queue'", "--label-column")
    for name, process in running.items():
        stdout, stderr = process.communicate(timeout=300)
        _assert_one_line_error(subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr),
                               *cases[name][1])
        assert not (tmp_path / f"out-{name}").exists(), name
    assert not (tmp_path / "out-label").exists()


def test_predict_on_bad_model_folders(trained, tmp_path, capsys):
    from kformer.cli import main

    _, model, _ = trained
    not_model = tmp_path / "not-a-model"
    not_model.mkdir()
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("kformer.json", "vocab.txt"):
        (broken / name).write_bytes((model / name).read_bytes())
    (broken / "model.keras").write_bytes(b"PK\x03\x04 this is not a zip")
    cases = [(["predict", not_model, "hello"], 3, "not a kformer model folder"),
             (["predict", broken, "hello"], 4, "corrupt"),
             (["evaluate", not_model, "--data", tmp_path / "none.csv"], 3, "not a kformer model folder")]
    for argv, code, fragment in cases:  # in-process: the exit code and the one line are the same
        assert main([str(a) for a in argv]) == code
        err = capsys.readouterr().err.strip()
        assert err.startswith("kformer: error: ") and "\n" not in err and fragment in err


def test_attention_maps_for_a_text(trained, capsys):
    _, model, _ = trained
    lines = in_process(capsys, "attention", model, "my laptop screen").splitlines()
    assert lines[0] == "model output: Hardware"
    written = [Path(line.strip()) for line in lines if line.strip().endswith(".png")]
    assert {p.name for p in written} == {"encoder_layer1.png", "encoder_grid.png"}
    assert all(p.is_file() and p.stat().st_size > 1000 for p in written)
