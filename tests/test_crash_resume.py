"""Crashes lose at most the running epoch: SIGKILL in an epoch and in a checkpoint write, Ctrl-C, --resume.

`kformer train classify` and `kformer train translate` run as subprocesses (five in this file,
the issue's limit) with faults injected through ``KFORMER_FAULT`` (:mod:`kformer.faults`), never
timing luck: ``batch-sleep`` prints every batch, so the kill lands at a known batch of a known
epoch; ``checkpoint-pause`` / ``checkpoint-die`` cut the temporary checkpoint file to half and
pause (for SIGKILL) or exit on the spot. Each kill loses only the epoch that was running. The
resumed runs finish in this process through the CLI's entry function, and they end with exactly
the weights and history of an uninterrupted run with the same seed (also trained here): training
on CPU is deterministic, and a checkpoint restores the weights, optimizer state with its step
counter (the learning-rate schedule), the dropout seed counters and the epoch's data order.
"""

from __future__ import annotations

import csv
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from conftest import number_pairs, write_tickets, write_tsv_pairs

from kformer.cli import main

CLASSIFY = ["train", "classify", "--epochs", "3", "--max-length", "16", "--vocab-size", "200", "--batch-size", "16",
            "--learning-rate", "0.003", "--seed", "7", "--patience", "10", "--quiet"]
CLASSIFY_STEPS = 14  # batches per epoch: 240 tickets, 10 % held out, 16 a batch
TRANSLATE_RECIPE = """\
vocab_size = 120
dim = 32
heads = 2
ff_dim = 64
encoder_layers = 1
decoder_layers = 1
dropout = 0.1
epochs = 3
batch_size = 16
learning_rate = 0.01
warmup_steps = 10
valid_size = 10
patience = 10
"""
SLOW_BATCHES = "batch-sleep:0.05"
# the process stops after that batch until it is killed: the kill lands there however loaded the machine is
def pause_at(epoch: int, batch: int) -> tuple[str, str]:
    """``(fault, text to wait for)`` that pause training after ``batch`` of ``epoch`` (1-based)."""
    return f"{SLOW_BATCHES},batch-pause:{epoch}:{batch}", f"kformer: fault: paused at epoch {epoch} batch {batch}\n"

WAIT_SECONDS = 120  # for a subprocess to reach a fault point (TensorFlow starts in ~5-10 s)


@contextmanager
def kformer_process(args, log: Path, fault: str):
    """``kformer ARGS`` in a new process with ``KFORMER_FAULT=fault``, output to ``log``; killed
    (by its PID) on the way out if it still runs."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KFORMER_DEBUG": "", "KFORMER_FAULT": fault}
    with open(log, "w", encoding="utf-8") as handle:
        process = subprocess.Popen([sys.executable, "-m", "kformer", *map(str, args)], stdout=handle,
                                   stderr=handle, env=env, start_new_session=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def wait_for(process: subprocess.Popen, log: Path, text: str) -> None:
    """Until ``text`` is in ``log`` (the process must still run)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while text not in log.read_text(encoding="utf-8"):
        assert process.poll() is None, f"exited {process.returncode} before {text!r}: {log.read_text()[-2000:]}"
        assert time.monotonic() < deadline, f"no {text!r} after {WAIT_SECONDS} s: {log.read_text()[-2000:]}"
        time.sleep(0.05)


def kill_at(args, log: Path, fault: str, text: str, sig: int = signal.SIGKILL) -> int:
    """Run ``kformer ARGS`` until ``text`` is in its output, then send it ``sig``; its exit status."""
    with kformer_process(args, log, fault) as process:
        wait_for(process, log, text)
        os.kill(process.pid, sig)
        return process.wait(timeout=60)


@contextmanager
def in_background(function, *args):
    """Run ``function(*args)`` in a thread while the block runs (a subprocess starts TensorFlow
    while this process trains); yields a list that receives its result at the end."""
    result: list = []
    thread = threading.Thread(target=lambda: result.append(function(*args)), daemon=True)
    thread.start()
    try:
        yield result
    finally:
        thread.join(timeout=WAIT_SECONDS + 60)
    assert result, f"{function.__name__}{args} failed (see the captured thread exception)"


def died(args, log: Path) -> int:
    """Exit status of ``kformer ARGS`` with the fault ``checkpoint-die:2``."""
    with kformer_process(args, log, "checkpoint-die:2") as process:
        return process.wait(timeout=WAIT_SECONDS)


def checkpoint(out: Path) -> dict:
    return json.loads((out / "training" / "checkpoint.json").read_text(encoding="utf-8"))


def history(out: Path) -> list[dict[str, str]]:
    with open(out / "training" / "history.csv", encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def debris(root: Path) -> list[Path]:
    """Temporary files or staging folders left anywhere under ``root``."""
    return [p for p in root.rglob("*") if ".tmp" in p.name or (p.is_dir() and p.name.startswith("."))]


def assert_checkpoint_loads(out: Path) -> None:
    import kformer.models.seq2seq  # noqa: F401  registers the translation model's class
    from kformer.folders import load_keras_model

    model = load_keras_model(out / "training" / "checkpoint.keras")  # safe mode; a damaged zip would raise
    assert model.optimizer is not None and int(model.optimizer.iterations.numpy()) == checkpoint(out)["iterations"]


def assert_same_run(resumed: Path, uninterrupted: Path, epochs: int, steps: int) -> None:
    """The resumed run ended exactly where the uninterrupted one did: one history row per epoch
    (the same numbers), the same optimizer step, the same weights."""
    import kformer

    rows = history(resumed)
    assert [int(r["epoch"]) for r in rows] == list(range(epochs))
    assert rows == history(uninterrupted)
    assert checkpoint(resumed)["iterations"] == checkpoint(uninterrupted)["iterations"] == epochs * steps
    assert checkpoint(resumed)["learning_rate"] == checkpoint(uninterrupted)["learning_rate"]
    a, b = kformer.load(resumed).model.get_weights(), kformer.load(uninterrupted).model.get_weights()
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def sigint_reaches_children():
    """SIGINT left at its default in the subprocesses. A suite started in the background by a
    non-interactive shell (``make test &``) runs with SIGINT ignored, and an ignored signal is
    inherited through exec: the Ctrl-C subprocess would then never see its interrupt. A Python
    handler here is reset to the default in every child."""
    before = signal.getsignal(signal.SIGINT)
    if before == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.fixture(scope="module")
def tickets(tmp_path_factory, sigint_reaches_children):
    """Two runs killed at batch 3 of epoch 2, one by SIGKILL and one by SIGINT (their exit
    statuses), while this process trains the same run uninterrupted."""
    root = tmp_path_factory.mktemp("crash_classify")
    data = write_tickets(root / "train.csv", 240, seed=1)
    uninterrupted = root / "uninterrupted"
    fault, at = pause_at(2, 3)
    killed = [*CLASSIFY, "--data", data, "--out", root / "killed"]
    interrupted = [*CLASSIFY, "--data", data, "--out", root / "interrupted"]
    with in_background(kill_at, killed, root / "kill-epoch.log", fault, at) as kill_status, \
            in_background(kill_at, interrupted, root / "sigint.log", fault, at, signal.SIGINT) as int_status:
        assert main([*CLASSIFY, "--data", str(data), "--out", str(uninterrupted)]) == 0
    return root, data, uninterrupted, {"kill": kill_status[0], "int": int_status[0]}


def test_classify_killed_in_an_epoch_and_in_a_checkpoint_write_resumes_to_the_same_model(tickets, capsys):
    root, data, uninterrupted, status = tickets
    out = root / "killed"
    args = [*CLASSIFY, "--data", data, "--out", out]

    # SIGKILL at batch 3 of epoch 2: the checkpoint of epoch 1 stands; epoch 2 is lost
    assert status["kill"] == -signal.SIGKILL
    assert checkpoint(out)["epochs_done"] == 1 and checkpoint(out)["iterations"] == CLASSIFY_STEPS
    assert_checkpoint_loads(out)
    assert not (out / "kformer.json").exists()  # no model folder claims to be finished

    # resumed, then SIGKILL halfway through writing the checkpoint of epoch 3 (the last): epoch 2's stands
    assert kill_at([*args, "--resume"], root / "kill-write.log", "checkpoint-pause:3",
                   "kformer: fault: paused writing") == -signal.SIGKILL
    half = out / "training" / ".checkpoint.tmp.keras"
    assert half.is_file() and half.stat().st_size < (out / "training" / "checkpoint.keras").stat().st_size
    assert checkpoint(out)["epochs_done"] == 2 and checkpoint(out)["iterations"] == 2 * CLASSIFY_STEPS
    assert_checkpoint_loads(out)

    assert main([*map(str, args), "--resume"]) == 0
    assert "valid accuracy" in capsys.readouterr().out
    assert debris(root) == []
    assert_same_run(out, uninterrupted, 3, CLASSIFY_STEPS)
    resumed, first = (json.loads((f / "metrics.json").read_text()) for f in (out, uninterrupted))
    assert resumed["valid"] == first["valid"] and resumed["epochs_run"] == 3


def test_ctrl_c_keeps_the_last_epoch_and_says_how_to_resume(tickets, capsys):
    root, data, uninterrupted, status = tickets
    out, log = root / "interrupted", root / "sigint.log"
    assert status["int"] == 130
    said = [line for line in log.read_text(encoding="utf-8").splitlines() if not line.startswith("kformer: fault:")]
    assert "Traceback" not in log.read_text(encoding="utf-8")
    assert len(said) == 1, said
    assert said[0].startswith("kformer: interrupted during epoch 2 (")
    assert "the checkpoint after epoch 1 is kept; resume with: kformer train classify " in said[0]
    assert checkpoint(out)["epochs_done"] == 1 and debris(root) == []
    assert_checkpoint_loads(out)

    command = shlex.split(said[0].split("resume with: ", 1)[1])
    assert command[0] == "kformer" and command[-1] == "--resume"
    assert main(command[1:]) == 0
    capsys.readouterr()
    assert_same_run(out, uninterrupted, 3, CLASSIFY_STEPS)


@pytest.mark.slow
@pytest.mark.usefixtures("eager_decoding")  # the in-process runs score 10 test pairs: no decode compile
def test_translate_killed_in_a_checkpoint_write_and_in_an_epoch_resumes_to_the_same_model(tmp_path, capsys):
    write_tsv_pairs(tmp_path / "train.tsv", number_pairs(180, seed=1))
    write_tsv_pairs(tmp_path / "test.tsv", number_pairs(10, seed=2))
    (tmp_path / "tiny.toml").write_text(TRANSLATE_RECIPE, encoding="utf-8")
    common = ["train", "translate", "--data", tmp_path / "train.tsv", "--test", tmp_path / "test.tsv",
              "--recipe", tmp_path / "tiny.toml", "--quiet"]
    out, uninterrupted = tmp_path / "killed", tmp_path / "uninterrupted"
    args = [*common, "--out", out]
    steps = 11  # 180 pairs - 9 held out for validation, 16 a batch

    # dies halfway through writing the checkpoint of epoch 2 (os._exit: no cleanup runs), while
    # this process trains the same run uninterrupted
    log = tmp_path / "die.log"
    with in_background(died, args, log) as status:
        assert main([*map(str, common), "--out", str(uninterrupted)]) == 0
    assert status == [86], log.read_text()[-2000:]
    assert "kformer: fault: died writing" in log.read_text(encoding="utf-8")
    assert checkpoint(out)["epochs_done"] == 1 and (out / "training" / ".checkpoint.tmp.keras").is_file()
    assert_checkpoint_loads(out)

    # resumed (it repeats epoch 2), then SIGKILL at batch 2 of epoch 3
    kill_at([*args, "--resume"], tmp_path / "kill-epoch.log", *pause_at(3, 2))
    assert checkpoint(out)["epochs_done"] == 2 and checkpoint(out)["iterations"] == 2 * steps
    assert_checkpoint_loads(out)

    assert main([*map(str, args), "--resume"]) == 0
    capsys.readouterr()
    assert debris(tmp_path) == []
    assert_same_run(out, uninterrupted, 3, steps)
    resumed, first = (json.loads((f / "metrics.json").read_text()) for f in (out, uninterrupted))
    timing = ("decode_seconds",)
    assert {k: v for k, v in resumed["test"].items() if k not in timing} == {
        k: v for k, v in first["test"].items() if k not in timing}


def test_resume_auto_resumes_a_finished_runs_checkpoint(tickets, tmp_path, capsys):
    """``--resume auto`` in a folder with a complete checkpoint resumes it (one more epoch here); in
    an empty folder it starts afresh (tests/test_elastic.py's jobs start so)."""
    import shutil

    root, data, uninterrupted, status = tickets
    out = tmp_path / "more"
    shutil.copytree(uninterrupted, out)
    assert main([*CLASSIFY, "--data", str(data), "--out", str(out), "--resume", "auto", "--epochs", "4"]) == 0
    capsys.readouterr()
    assert "resumed from the checkpoint after epoch 3" in (out / "training" / "train.log").read_text(encoding="utf-8")
    assert [int(row["epoch"]) for row in history(out)] == [0, 1, 2, 3] and history(out)[:3] == history(uninterrupted)
