"""Data-parallel training (`kformer train classify --distribute`, :mod:`kformer.parallel`).

The runs are real: the CLI in subprocesses on Keras' JAX backend, two processes joined through a
coordinator on 127.0.0.1 (gloo collectives), one process with two virtual CPU devices, and a plain
one-device JAX run as the reference. Every subprocess has a timeout and is killed by its PID.
"""

from __future__ import annotations

import csv
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import write_tickets

from kformer.errors import BadInput, Unsupported
from kformer.parallel import Cluster, DistributeConfig, ProcessBatches, check_backend

TIMEOUT = 240  # seconds per launch (a loaded 2-core machine; a quiet one needs about 20)
# same-width texts (max_length 8) and full batches: one compiled step shape, rows divide by 2 devices
TRAIN_FLAGS = ["--epochs", "2", "--batch-size", "32", "--vocab-size", "200", "--max-length", "8", "--quiet"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "XLA_FLAGS")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def _launch(commands: list[tuple[list[str], dict[str, str]]], cwd: Path) -> list[str]:
    """Run the commands at once; all must exit 0 within TIMEOUT (else they are killed by PID)."""
    procs = [subprocess.Popen([sys.executable, "-m", "kformer", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for args, env in commands]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=TIMEOUT)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for proc, output in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, output[-3000:]
    return outputs


def _history(folder: Path) -> dict[str, list[float]]:
    with open(folder / "training" / "history.csv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return {key: [float(row[key]) for row in rows] for key in rows[0] if key != "epoch"}


def _close(a: dict, b: dict, tol: float = 1e-5) -> None:
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(a[key], b[key], atol=tol, rtol=0, err_msg=key)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``{name: folder}``: ``reference`` (one JAX device), ``devices`` (one process, two virtual
    devices), ``processes`` (two processes on loopback; process 1's hidden folder beside it)."""
    root = tmp_path_factory.mktemp("distributed")
    write_tickets(root / "train.csv", 160, seed=1)
    write_tickets(root / "valid.csv", 32, seed=2)
    base = ["train", "classify", "--data", "train.csv", "--valid", "valid.csv", *TRAIN_FLAGS]
    _launch([
        ([*base, "--out", "reference"], _env(KERAS_BACKEND="jax")),
        ([*base, "--out", "devices", "--distribute"], _env(XLA_FLAGS="--xla_force_host_platform_device_count=2")),
    ], root)
    job = ["--distribute", "--coordinator", f"127.0.0.1:{_free_port()}", "--num-processes", "2"]
    outputs = _launch([([*base, "--out", "processes", *job, "--process-id", str(i)], _env()) for i in (0, 1)], root)
    return {"root": root, "reference": root / "reference", "devices": root / "devices",
            "processes": root / "processes", "base": base, "outputs": outputs}


def test_two_virtual_devices_train_as_one_device(runs):
    _close(_history(runs["devices"]), _history(runs["reference"]))


def test_two_processes_match_one_process_and_write_one_model_folder(runs):
    from kformer import load

    root, folder = runs["root"], runs["processes"]
    scratch = root / ".processes.process-1"
    assert _history(folder) == _history(scratch)  # lockstep: identical, not just close
    _close(_history(folder), _history(runs["reference"]))
    assert sorted(p.parent.name for p in root.rglob("kformer.json")) == ["devices", "processes", "reference"]
    assert "process 1: done; process 0 wrote the model" in runs["outputs"][1]
    trained, reference = load(folder), load(runs["reference"])  # this process: the default backend
    assert trained.labels == reference.labels
    for mine, theirs in zip(trained.model.get_weights(), reference.model.get_weights(), strict=True):
        np.testing.assert_allclose(mine, theirs, atol=1e-5, rtol=0)
    texts = ["my laptop screen is broken", "refund my invoice please"]
    np.testing.assert_allclose(trained.probabilities(texts), reference.probabilities(texts), atol=1e-5)


def test_two_processes_resume(runs):
    """--resume --epochs 3 continues both processes' checkpoints from epoch 2, in lockstep."""
    root, before = runs["root"], _history(runs["processes"])
    base = [*runs["base"][:-len(TRAIN_FLAGS)], *TRAIN_FLAGS[2:], "--epochs", "3", "--resume"]
    job = ["--distribute", "--coordinator", f"127.0.0.1:{_free_port()}", "--num-processes", "2"]
    _launch([([*base, "--out", "processes", *job, "--process-id", str(i)], _env()) for i in (0, 1)], root)
    after = _history(runs["processes"])
    assert after == _history(root / ".processes.process-1")
    assert len(after["loss"]) == 3 and {k: v[:2] for k, v in after.items()} == before
    import json

    metrics = json.loads((runs["processes"] / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["epochs_run"] == 3


# --- the rules, in this process ---------------------------------------------------------------------


def test_process_batches_keep_own_rows_at_the_global_width():
    lengths = [1, 2, 3, 9, 10, 11, 12]  # 7 rows: a batch of 4 and one of 3, cut to 2
    x = np.zeros((7, 16), dtype="int32")
    for row, n in enumerate(lengths):
        x[row, :n] = row + 1
    y = np.arange(7, dtype="float32")[:, None]
    parts = [ProcessBatches(x, y, 4, cluster=Cluster(p, 2, 2), shuffle=False) for p in (0, 1)]
    assert [len(part) for part in parts] == [2, 2]
    rows = [[part[i][1][:, 0].tolist() for part in parts] for i in range(2)]
    assert rows == [[[0.0, 1.0], [2.0, 3.0]], [[4.0], [5.0]]]  # row 6 is cut (7 rows, 2 devices)
    # the first batch's widest row has 9 tokens: process 0's short rows come at width 16 too
    assert parts[0][0][0].shape == parts[1][0][0].shape == (2, 16)


def test_global_batch_must_divide_by_the_devices():
    with pytest.raises(BadInput, match="use 32 or 36") as caught:
        Cluster(0, 2, 4).check_batch_size(33)
    assert caught.value.field == "batch_size"
    Cluster(0, 2, 4).check_batch_size(32)


@pytest.mark.parametrize(("job", "field"), [
    (("127.0.0.1:1234", 2, None), "process_id"),
    ((None, 2, 0), "coordinator"),
    (("127.0.0.1", 2, 0), "coordinator"),
    (("127.0.0.1:99999", 2, 0), "coordinator"),
    (("127.0.0.1:1234", 2, 2), "process_id"),
    (("127.0.0.1:1234", 0, 0), "num_processes"),
])
def test_bad_job_settings_name_the_flag(job, field):
    with pytest.raises(BadInput) as caught:
        DistributeConfig(*job)
    assert caught.value.field == field


def test_job_from_keras_environment_variables():
    config = DistributeConfig.from_env({"KERAS_DISTRIBUTION_JOB_ADDRESSES": "10.0.0.1:1234,10.0.0.2:2345",
                                        "KERAS_DISTRIBUTION_NUM_PROCESSES": "2", "KERAS_DISTRIBUTION_PROCESS_ID": "1"})
    assert config == DistributeConfig("10.0.0.1:1234", 2, 1) and config.several_processes
    assert DistributeConfig.from_env({}) == DistributeConfig()


def test_tensorflow_backend_is_refused_with_the_reason():
    with pytest.raises(Unsupported, match="keras-team/keras#20585"):
        check_backend()


def test_flags_need_distribute():
    from kformer.cli import main

    code = main(["train", "classify", "--data", "x.csv", "--num-processes", "2"])
    assert code == 2
