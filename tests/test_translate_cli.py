"""The translate CLI end to end in new processes, on tiny generated English->Tamil data.

train translate -> translate (arguments and stdin) -> evaluate --json, and one-line errors with
exit status 2 and no half-written folder for bad input.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import unicodedata

import pytest

from kformer.metrics import translation_scores

NUMBERS = {"one": "ஒன்று", "two": "இரண்டு", "three": "மூன்று", "four": "நான்கு", "five": "ஐந்து",
           "six": "ஆறு", "seven": "ஏழு", "eight": "எட்டு", "nine": "ஒன்பது", "ten": "பத்து"}
TINY_RECIPE = """\
vocab_size = 300
dim = 32
heads = 2
ff_dim = 64
encoder_layers = 1
decoder_layers = 1
dropout = 0.0
epochs = 8
batch_size = 16
learning_rate = 0.01
warmup_steps = 20
label_smoothing = 0.0
valid_size = 20
"""
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


def kformer(*args, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kformer", *map(str, args)], input=stdin, capture_output=True,
                          text=True, env=ENV, timeout=300)


def _pairs(count: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    words = list(NUMBERS)
    pairs = []
    for _ in range(count):
        chosen = [rng.choice(words) for _ in range(rng.randint(1, 2))]
        pairs.append((" ".join(chosen), " ".join(NUMBERS[w] for w in chosen)))
    return pairs


def _write(path, pairs) -> None:
    path.write_text("".join(f"{s}\t{t}\tattribution\n" for s, t in pairs), encoding="utf-8")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("translate")
    _write(folder / "train.tsv", _pairs(400, seed=1))
    test = _pairs(30, seed=2)
    _write(folder / "test.tsv", test)
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
    assert metrics["splits"]["test"] == len(test) and metrics["splits"]["train"] == 400 - 20
    assert metrics["command"][:3] == ["kformer", "train", "translate"] and metrics["recipe"]["dim"] == 32
    assert metrics["recipe"]["curriculum"] is True
    assert metrics["train_seconds"] > 0 and metrics["test"]["n"] == len(test)
    # a word-for-word mapping of ten words is learned well in 8 tiny epochs (short pairs first)
    assert metrics["test"]["exact_match"] >= 0.6, metrics["test"]
    assert "test BLEU" in done.stdout


def test_translate_arguments_stdin_and_evaluate_agree(trained, monkeypatch, capsys):
    folder, test, _ = trained
    by_args = kformer("translate", "--beam", "2", folder / "model", "three one", "seven")
    assert by_args.returncode == 0, by_args.stderr[-2000:]
    lines = by_args.stdout.splitlines()
    assert len(lines) == 2
    assert all(line == unicodedata.normalize("NFC", line) for line in lines)
    assert lines[1] == NUMBERS["seven"]
    sources = [s for s, _ in test]
    # stdin in this process (the new-process path is covered above; this saves a TensorFlow start)
    import io

    from kformer.cli import main

    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(["three one", "", "seven", *sources]) + "\n"))
    capsys.readouterr()
    assert main(["translate", str(folder / "model")]) == 0
    stdin_lines = capsys.readouterr().out.splitlines()
    assert len(stdin_lines) == 3 + len(sources) and stdin_lines[1] == ""
    assert stdin_lines[2] == lines[1]

    done = kformer("evaluate", folder / "model", "--data", folder / "test.tsv", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    scores = json.loads(done.stdout)
    assert scores["n"] == len(test)
    translated = stdin_lines[3:]
    expected = translation_scores(translated, [t for _, t in test])
    assert scores["bleu"] == pytest.approx(expected["bleu"], abs=1e-6)
    assert scores["chrf"] == pytest.approx(expected["chrf"], abs=1e-6)
    assert scores["exact_match"] == pytest.approx(expected["exact_match"])
    assert (folder / "model" / "eval" / "scores.json").is_file()


def _assert_one_line_error(done, *fragments):
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("kformer: error:"), done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    for fragment in fragments:
        assert fragment in lines[-1]


@pytest.mark.parametrize(
    "content, fragment",
    [(b"one\tx\ntwo without tab\n", "line 2 has no tab"), (b"one\tx\n\xff\tbad\n", "line 2 is not valid UTF-8"),
     (b"", "is empty")],
)
def test_bad_training_file_fails_cleanly(tmp_path, content, fragment):
    data = tmp_path / "bad.tsv"
    data.write_bytes(content)
    done = kformer("train", "translate", "--data", data, "--out", tmp_path / "out")
    _assert_one_line_error(done, fragment)
    assert not (tmp_path / "out").exists()


def test_bad_arguments_fail_cleanly(trained, tmp_path):
    folder, _, _ = trained
    _assert_one_line_error(kformer("translate", tmp_path, "hello"), "not a kformer model folder")
    _assert_one_line_error(kformer("translate", folder / "model", "one", "--beam", "0"), "--beam must be at least 1")
    bad = tmp_path / "test.tsv"
    bad.write_text("one\n", encoding="utf-8")
    _assert_one_line_error(kformer("evaluate", folder / "model", "--data", bad), "line 1 has no tab")


def test_attention_draws_every_map_with_subword_labels(trained, tmp_path):
    import argparse

    from kformer.commands.translate import attention

    folder, _, _ = trained
    out = tmp_path / "maps"
    args = argparse.Namespace(model_dir=str(folder / "model"), input="three one", out=str(out))
    assert attention(args, {"task": "translate"}) == 0
    names = sorted(p.name for p in out.glob("*.png"))
    assert names == sorted(f"{kind}_{part}.png" for kind in ("encoder", "decoder_self", "cross")
                           for part in ("layer1", "grid"))
    assert all(p.stat().st_size > 1000 for p in out.glob("*.png"))
