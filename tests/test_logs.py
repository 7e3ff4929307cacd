"""Logs a person (or a machine) can read: no redrawn bars off a terminal, train.log, curves."""

import io
import json

import pytest

from kformer.cli import main
from kformer.cli.progress import progress_printer
from kformer.training import ProgressEvent

TINY = ["--digits", "2", "--epochs", "3", "--steps-per-epoch", "4", "--batch-size", "16", "--held-out-size", "8",
        "--held-out-per-length", "4"]


@pytest.fixture
def recipe(tmp_path, monkeypatch):
    from kformer.models import generation

    monkeypatch.setattr(generation, "COMPILE", False)
    path = tmp_path / "tiny.toml"
    path.write_text('[model]\ndim = 16\nheads = 2\nff_dim = 32\nencoder_layers = 1\ndecoder_layers = 1\n'
                    '[training]\nwarmup_steps = 2\njit_compile = false\n')
    return str(path)


@pytest.mark.slow
def test_piped_training_prints_one_line_per_epoch_and_keeps_train_log_and_curves(tmp_path, recipe, capsys):
    out = tmp_path / "arith"
    assert main(["train", "arithmetic", "--recipe", recipe, "--out", str(out), *TINY]) == 0
    printed = capsys.readouterr().out
    assert "\r" not in printed  # nothing redrawn
    lines = printed.splitlines()
    assert lines[:2] == ["settings: train_digits=2 (narrowed to --digits 2)",  # the defaults train on 4 digits
                         "training started (the first step compiles the model)"]
    epochs = [line for line in lines if line.startswith("epoch ")]
    assert [line.split()[1] for line in epochs] == ["1/3", "2/3", "3/3"]
    assert all(" loss " in line and line.endswith(" s") or "left" in line for line in epochs)
    log = (out / "training" / "train.log").read_text().splitlines()
    assert log[0].endswith("training started") and "training ended after" in log[-1]
    assert [entry.split("  ")[1].split()[1] for entry in log[1:-1]] == ["1/3", "2/3", "3/3"]
    assert (out / "curves.png").stat().st_size > 1000


@pytest.mark.slow
def test_json_log_format_and_quiet(tmp_path, recipe, capsys):
    assert main(["train", "arithmetic", "--recipe", recipe, "--out", str(tmp_path / "a"), *TINY,
                 "--log-format", "json"]) == 0
    objects = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [o["epoch"] for o in objects if o["stage"] == "epoch"] == [1, 2, 3]
    assert objects[-1]["stage"] == "done" and objects[-1]["fraction"] == 1.0 and "loss" in objects[-1]
    assert main(["train", "arithmetic", "--recipe", recipe, "--out", str(tmp_path / "b"), *TINY, "--quiet"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("held-out problems: 8") and not any(p.startswith("epoch") for p in printed)


def test_lines_are_thinned_to_about_one_per_tenth_of_the_run():
    stream = io.StringIO()
    show = progress_printer(stream, interactive=False)
    for epoch in range(1, 101):
        show(ProgressEvent("epoch", epoch / 100, epoch=epoch, epochs=100, logs={"loss": 1.0 / epoch}))
    shown = [line.split()[1] for line in stream.getvalue().splitlines()]
    assert shown == [f"{e}/100" for e in range(1, 101, 10)] + ["100/100"]
