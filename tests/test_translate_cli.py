"""The translate CLI end to end on tiny generated English->Tamil data.

train translate (a new process, flat recipe of kformer 0.1) -> translate (arguments in a new
process, stdin in this one) -> evaluate --json, attention PNGs, and one-line errors with the exit
status of their kind and no half-written folder for bad input (in this process: one TensorFlow
start fewer each).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import unicodedata

import pytest
from conftest import NUMBER_WORDS as NUMBERS
from conftest import number_pairs, write_tsv_pairs

from kformer.cli import main
from kformer.metrics import translation_scores

TINY_RECIPE = """\
vocab_size = 300
shared_vocab = true
tie_embeddings = false
norm_first = false
dim = 32
heads = 2
ff_dim = 64
encoder_layers = 1
decoder_layers = 1
dropout = 0.0
epochs = 8
batch_tokens = 256
learning_rate = 0.01
warmup_steps = 20
label_smoothing = 0.0
valid_size = 20
"""
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
pytestmark = pytest.mark.usefixtures("eager_decoding")  # for the commands run in this process


def kformer(*args, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kformer", *map(str, args)], input=stdin, capture_output=True,
                          text=True, env=ENV, timeout=300)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("translate")
    write_tsv_pairs(folder / "train.tsv", number_pairs(400, seed=1))
    test = number_pairs(30, seed=2)
    write_tsv_pairs(folder / "test.tsv", test)
    (folder / "tiny.toml").write_text(TINY_RECIPE, encoding="utf-8")
    done = kformer("train", "translate", "--data", folder / "train.tsv", "--test", folder / "test.tsv",
                   "--recipe", folder / "tiny.toml", "--out", folder / "model", "--quiet", "--curriculum")
    assert done.returncode == 0, done.stderr[-2000:]
    return folder, test, done


def test_train_writes_a_complete_folder(trained):
    folder, test, done = trained
    model = folder / "model"
    manifest = json.loads((model / "kformer.json").read_text(encoding="utf-8"))
    assert manifest["task"] == "translate" and manifest["vocab"]["shared"] is True
    assert (model / "model.keras").is_file() and (model / "vocab.spm").is_file()
    metrics = json.loads((model / "metrics.json").read_text(encoding="utf-8"))
    # a twentieth of the distinct sources held out for validation, with every other pair of theirs
    # (number_pairs repeats sources: 400 pairs of 91)
    sources = {source for source, _ in number_pairs(400, seed=1)}
    assert metrics["splits"]["test"] == len(test) and metrics["splits"]["valid"] == len(sources) // 20
    assert 300 < metrics["splits"]["train"] < 400 - metrics["splits"]["valid"]
    assert metrics["command"][:3] == ["kformer", "train", "translate"] and metrics["recipe"]["dim"] == 32
    assert metrics["recipe"]["curriculum"] is True and metrics["recipe"]["batch_size"] == "auto"  # packed by tokens
    assert metrics["batches_per_epoch"] * 256 >= metrics["train_target_tokens"]
    assert metrics["train_seconds"] > 0 and metrics["test"]["n"] == len(test)
    # a word-for-word mapping of ten words is learned well in 8 tiny epochs (short pairs first)
    assert metrics["test"]["exact_match"] >= 0.6, metrics["test"]
    assert "test BLEU" in done.stdout and "repetition" in done.stdout
    # repetition: the share of test outputs repeating a word more than 3 times in a row; an output of
    # ten words learned this well repeats none (the repeat limit would stop a 4th copy anyway)
    assert metrics["test"]["repetition"] == 0.0, metrics["test"]


def test_translate_arguments_stdin_and_evaluate_agree(trained, monkeypatch, capsys):
    folder, test, _ = trained
    by_args = kformer("translate", "--beam", "2", folder / "model", "three one", "seven")
    assert by_args.returncode == 0, by_args.stderr[-2000:]
    lines = by_args.stdout.splitlines()
    assert len(lines) == 2
    assert all(line == unicodedata.normalize("NFC", line) for line in lines)
    assert lines[1] == NUMBERS["seven"]
    sources = [s for s, _ in test]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(["three one", "", "seven", *sources]) + "\n"))
    capsys.readouterr()
    assert main(["translate", str(folder / "model")]) == 0
    stdin_lines = capsys.readouterr().out.splitlines()
    assert len(stdin_lines) == 3 + len(sources) and stdin_lines[1] == ""
    assert stdin_lines[2] == lines[1]

    assert main(["evaluate", str(folder / "model"), "--data", str(folder / "test.tsv"), "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["n"] == len(test)
    translated = stdin_lines[3:]
    expected = translation_scores(translated, [t for _, t in test])
    assert scores["bleu"] == pytest.approx(expected["bleu"], abs=1e-6)
    assert scores["chrf"] == pytest.approx(expected["chrf"], abs=1e-6)
    assert scores["exact_match"] == pytest.approx(expected["exact_match"])
    assert (folder / "model" / "eval" / "scores.json").is_file()
    assert main(["evaluate", str(folder / "model"), "--data", str(folder / "test.tsv"), "--limit", "5"]) == 0
    assert capsys.readouterr().out.startswith("BLEU ")


def _assert_one_line_error(capsys, argv, *fragments, code=2):
    assert main([str(a) for a in argv]) == code
    stderr = capsys.readouterr().err
    lines = stderr.strip().splitlines()
    assert lines and lines[-1].startswith("kformer: error:"), stderr[-2000:]
    assert "Traceback" not in stderr
    for fragment in fragments:
        assert fragment in lines[-1]


@pytest.mark.parametrize(
    "content, fragment",
    [(b"one\tx\ntwo without tab\n", "line 2 has no tab"), (b"one\tx\n\xff\tbad\n", "line 2 is not valid UTF-8"),
     (b"", "is empty")],
)
def test_bad_training_file_fails_cleanly(tmp_path, capsys, content, fragment):
    data = tmp_path / "bad.tsv"
    data.write_bytes(content)
    _assert_one_line_error(capsys, ["train", "translate", "--data", data, "--out", tmp_path / "out"], fragment)
    assert not (tmp_path / "out").exists()


def test_bad_settings_name_their_flags(tmp_path, capsys):
    data = write_tsv_pairs(tmp_path / "pairs.tsv", number_pairs(30, seed=3))
    out = tmp_path / "out"
    _assert_one_line_error(capsys, ["train", "translate", "--data", data, "--out", out, "--max-length", "1"],
                           "--max-length must be at least 2")
    _assert_one_line_error(capsys, ["train", "translate", "--data", data, "--out", out, "--resume"],
                           "nothing to resume", "without --resume")
    recipe = tmp_path / "bad.toml"
    recipe.write_text('task = "translate"\n[model]\ndimension = 8\n', encoding="utf-8")
    _assert_one_line_error(capsys, ["train", "translate", "--data", data, "--out", out, "--recipe", recipe],
                           "unknown setting model.dimension")
    assert not out.exists()


def test_bad_arguments_fail_cleanly(trained, tmp_path, capsys):
    folder, _, _ = trained
    _assert_one_line_error(capsys, ["translate", tmp_path, "hello"], "not a kformer model folder", code=3)
    _assert_one_line_error(capsys, ["translate", folder / "model", "one", "--beam", "0"], "--beam must be at least 1")
    _assert_one_line_error(capsys, ["translate", folder / "model", "one", "--max-repeat", "-1"],
                           "--max-repeat must be at least 0")
    bad = tmp_path / "test.tsv"
    bad.write_text("one\n", encoding="utf-8")
    _assert_one_line_error(capsys, ["evaluate", folder / "model", "--data", bad], "line 1 has no tab")


def test_attention_draws_every_map_with_subword_labels(trained, tmp_path, capsys):
    folder, _, _ = trained
    out = tmp_path / "maps"
    assert main(["translate", str(folder / "model"), "three one"]) == 0
    translation = capsys.readouterr().out.strip()
    assert main(["attention", str(folder / "model"), "three one", "--out", str(out)]) == 0
    assert f"model output: {translation}\n" in capsys.readouterr().out  # the maps explain that translation
    names = sorted(p.name for p in out.glob("*.png"))
    assert names == sorted(f"{kind}_{part}.png" for kind in ("encoder", "decoder_self", "cross")
                           for part in ("layer1", "grid"))
    assert all(p.stat().st_size > 1000 for p in out.glob("*.png"))
