"""Data-parallel training (`kformer train classify|translate|arithmetic --distribute`, :mod:`kformer.parallel`).

The runs are real: the CLI in subprocesses on Keras' JAX backend, two processes joined through a
coordinator on 127.0.0.1 (gloo collectives), one process with two virtual CPU devices, and a plain
one-device JAX run as the reference; translate and arithmetic through their Python API in one
subprocess with two virtual devices (each trained on one device and on both). Every subprocess has
a timeout and is killed by its PID; all are launched together, so their start-ups overlap.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import jax_job_env as _env
from conftest import write_tickets

from kformer.errors import BadInput, Unsupported
from kformer.parallel import Cluster, DistributeConfig, ProcessBatches, check_backend

TIMEOUT = 480  # seconds per launch of 4 processes (a loaded 2-core machine; a quiet one needs about 60)
TESTS = Path(__file__).resolve().parent
KFORMER = ["-m", "kformer"]
# same-width texts (max_length 8) and full batches: one compiled step shape, rows divide by 2 devices
CLASSIFY = {"epochs": 2, "batch_size": 32, "vocab_size": 200, "max_length": 8}
TRAIN_FLAGS = [*(f"--{name.replace('_', '-')}={value}" for name, value in CLASSIFY.items()), "--quiet"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch(commands: list[tuple[list[str], dict[str, str]]], cwd: Path) -> list[str]:
    """Run the Python commands (``python ARGS``) at once; all must exit 0 within TIMEOUT (else they
    are killed by PID)."""
    procs = [subprocess.Popen([sys.executable, *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
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
    from kformer.training import read_history

    return read_history(folder / "training" / "history.csv")


def _close(a: dict, b: dict, tol: float = 1e-5) -> None:
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(a[key], b[key], atol=tol, rtol=0, err_msg=key)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``{name: folder}``: ``reference`` (one JAX device), ``devices`` (one process, two virtual
    devices), ``processes`` (two processes on loopback; process 1's hidden folder beside it), and
    the translate and arithmetic runs of :func:`api_job` (``translate-reference``, ...)."""
    root = tmp_path_factory.mktemp("distributed")
    write_tickets(root / "train.csv", 160, seed=1)
    write_tickets(root / "valid.csv", 32, seed=2)
    base = [*KFORMER, "train", "classify", "--data", "train.csv", "--valid", "valid.csv", *TRAIN_FLAGS]
    job = ["--distribute", "--coordinator", f"127.0.0.1:{_free_port()}", "--num-processes", "2"]
    cache = root / "jax-cache"  # a training after another of the same shapes loads its programs
    two_devices = _env(cache, XLA_FLAGS="--xla_force_host_platform_device_count=2", KERAS_BACKEND="jax")
    api = f"import sys; sys.path[:0] = [{str(TESTS)!r}]; import test_distributed as t; t.api_job"
    outputs = _launch([
        *[([*base, "--out", "processes", *job, "--process-id", str(i)], _env(cache)) for i in (0, 1)],
        (["-c", f"{api}('classify', 'arithmetic')"], two_devices),
        (["-c", f"{api}('translate')"], two_devices),
    ], root)
    return {"root": root, "reference": root / "reference", "devices": root / "devices",
            "processes": root / "processes", "base": base, "outputs": outputs[:2]}


def test_two_virtual_devices_train_as_one_device(runs):
    _close(_history(runs["devices"]), _history(runs["reference"]))


def test_two_processes_match_one_process_and_write_one_model_folder(runs):
    from kformer import load

    root, folder = runs["root"], runs["processes"]
    scratch = root / ".processes.process-1"
    assert _history(folder) == _history(scratch)  # lockstep: identical, not just close
    _close(_history(folder), _history(runs["reference"]))
    written = [p.parent.name for p in root.rglob("kformer.json") if "process" in p.parent.name]
    assert written == ["processes"]  # process 1 wrote no model folder
    assert "process 1: done; process 0 wrote the model" in runs["outputs"][1]
    trained, reference = load(folder), load(runs["reference"])  # this process: the default backend
    assert trained.labels == reference.labels
    for mine, theirs in zip(trained.model.get_weights(), reference.model.get_weights(), strict=True):
        np.testing.assert_allclose(mine, theirs, atol=1e-5, rtol=0)
    texts = ["my laptop screen is broken", "refund my invoice please"]
    np.testing.assert_allclose(trained.probabilities(texts), reference.probabilities(texts), atol=1e-5)


# --- one device vs two virtual devices, through the Python API ---------------------------------------

# tiny models; 64 training pairs in full batches of 8 and 16 validation pairs in one batch: every
# batch divides by 2 devices, so nothing is cut and the 2-device run must equal the 1-device run
TRANSLATE = {"tokens": "words", "max_length": 8, "dim": 16, "heads": 2, "ff_dim": 32, "encoder_layers": 1,
             "decoder_layers": 1, "epochs": 2, "batch_size": 8, "learning_rate": 3e-3, "warmup_steps": 2}
ARITHMETIC = {"digits": 2, "dim": 16, "heads": 2, "ff_dim": 32, "encoder_layers": 1, "decoder_layers": 1,
              "batch_size": 16, "steps_per_epoch": 4, "epochs": 2, "held_out_size": 20, "learning_rate": 1e-2,
              "warmup_steps": 2, "held_out_per_length": 0}


def api_job(*tasks: str) -> None:
    """Run in a subprocess with two virtual devices (cwd: the runs' root): each task on one device
    (classify: ``reference``, the others ``TASK-reference``) and data-parallel on both
    (``devices``, ``TASK-devices``); translate's data-parallel run is then resumed to epoch 3 and scores 4 test pairs."""
    from conftest import number_pairs

    from kformer.parallel import DistributeConfig
    from kformer.tasks import arithmetic, classify, translate

    pairs, valid = number_pairs(64, seed=1), number_pairs(16, seed=2)
    for job in (None, DistributeConfig()):
        name = "reference" if job is None else "devices"
        if "classify" in tasks:
            classify.train(CLASSIFY, "train.csv", name, valid="valid.csv", distribute=job)
        if "arithmetic" in tasks:
            arithmetic.train(ARITHMETIC, None, f"arithmetic-{name}", distribute=job)
        if "translate" in tasks:
            for epochs in [2] if job is None else [2, 3]:
                translate.train({**TRANSLATE, "epochs": epochs}, pairs, f"translate-{name}", valid=valid,
                                test=valid[:4] if epochs == 3 else None, resume=epochs == 3, distribute=job)


@pytest.mark.parametrize("task", ["translate", "arithmetic"])
def test_seq2seq_tasks_on_two_virtual_devices_train_as_one_device(runs, task):
    root = runs["root"]
    devices = {key: values[:2] for key, values in _history(root / f"{task}-devices").items()}  # translate: + resumed
    _close(devices, _history(root / f"{task}-reference"))
    assert devices["loss"][1] < devices["loss"][0]  # it learns: the comparison is not of two idle runs
    if task == "arithmetic":
        from kformer import load

        trained, reference = load(root / f"{task}-devices").model, load(root / f"{task}-reference").model
        for mine, theirs in zip(trained.weights, reference.weights, strict=True):
            # an attention key bias cannot change the softmax, so its gradient is rounding noise, which
            # Adam scales up to full steps: it differs between any two summation orders, harmlessly
            if not mine.path.endswith("key/bias"):
                np.testing.assert_allclose(np.asarray(mine), np.asarray(theirs), atol=1e-5, rtol=0, err_msg=mine.path)


def test_translate_resumed_on_two_devices_continues_the_schedule(runs):
    """Resumed from epoch 2 to 3 on two devices: the optimizer step continues (3 epochs x 8 batches)
    and so the learning rate of the last step is the schedule's at step 23 of 24, near its floor."""
    import json
    import math

    folder = runs["root"] / "translate-devices"
    assert len(_history(folder)["loss"]) == 3
    state = json.loads((folder / "training" / "checkpoint.json").read_text(encoding="utf-8"))
    assert state["epochs_done"] == 3 and state["iterations"] == 24
    peak, floor, warmup = TRANSLATE["learning_rate"], TRANSLATE["learning_rate"] * 0.02, TRANSLATE["warmup_steps"]
    expected = floor + (peak - floor) * 0.5 * (1 + math.cos(math.pi * (23 - warmup) / (24 - warmup)))
    assert state["learning_rate"] == pytest.approx(expected, rel=1e-4)
    assert json.loads((folder / "metrics.json").read_text(encoding="utf-8"))["resumed_from_epoch"] == 2


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


def test_global_batches_are_cut_to_the_devices_or_repeat_rows_below_them():
    """tf.data pipelines (translate) and generated batches (arithmetic) follow one rule: 7 rows on
    2 devices -> rows 0-2 and 3-5 (row 6 cut); 3 rows on 4 devices -> rows 0 1 | 2 0 (repeated)."""
    import tensorflow as tf

    assert [Cluster(p, 2, 2).rows_of(7).tolist() for p in (0, 1)] == [[0, 1, 2], [3, 4, 5]]
    assert [Cluster(p, 2, 4).rows_of(3).tolist() for p in (0, 1)] == [[0, 1], [2, 0]]
    batch = ({"source": np.arange(7)[:, None] * np.ones((1, 4), "int32")}, np.arange(7, dtype="float32"))
    local = Cluster(1, 2, 2).local(batch)
    assert local[0]["source"][:, 0].tolist() == local[1].tolist() == [3.0, 4.0, 5.0]
    data = tf.data.Dataset.from_tensors(batch).repeat(2)
    sharded = list(Cluster(1, 2, 2).shard(data).as_numpy_iterator())
    assert len(sharded) == 2 and sharded[0][0]["source"].shape == (3, 4) and sharded[0][1].tolist() == [3, 4, 5]


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
