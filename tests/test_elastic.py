"""A job whose process is lost restarts by itself (:mod:`kformer.launcher`, ``--resume auto``).

The launcher's rules run against stand-in processes (a few lines of Python started in place of
``kformer``), so a kill, a hang, a process deaf to SIGTERM, bad input and running out of restarts
each take a second. Then one real job of ``kformer train classify --distribute --num-processes 2
--resume auto --epochs 3`` (a fresh start in an empty folder) loses its worker: process 1 pauses
halfway through writing its checkpoint of epoch 2 (the ``checkpoint-pause`` fault), after process 0
has written its own, and is SIGKILLed there. The job completes unattended, records the restart, and
both processes resume from process 0's newer checkpoint and train epoch 3 in lockstep (this is also
the test of two processes resuming a checkpoint: tests/test_distributed.py has none of its own). Every process started here is stopped: the
launcher by its PID, its processes by the launcher (or, on Linux, when it dies).
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import jax_job_env as _env
from conftest import write_tickets

from kformer import launcher
from kformer.cli import main
from kformer.errors import BadInput
from kformer.launcher import JobProcess, LaunchConfig, current_process

ROOT = Path(__file__).resolve().parents[1]

# --- the launcher's rules, on stand-in processes -----------------------------------------------------

# A stand-in for `kformer COMMAND`: ARGS are MODE FOLDER [...] --coordinator A --process-id I. It
# records its arguments and KFORMER_JOB in FOLDER, then does what MODE says in its group's first start.
STAND_IN = r"""
import json, os, pathlib, signal, sys, time
job, args = json.loads(os.environ["KFORMER_JOB"]), sys.argv[1:]
mode, folder, me = args[0], pathlib.Path(args[1]), int(args[args.index("--process-id") + 1])
start = len(job["restarts"])
(folder / f"start{start}-process{me}.json").write_text(json.dumps({"argv": args, "job": job}))
deadline = time.monotonic() + 30
while len(list(folder.glob(f"start{start}-process*.json"))) < 2 and time.monotonic() < deadline:
    time.sleep(0.01)  # both have started (and said so) before either acts
if me == 1 and (mode == "die-always" or (mode == "die-once" and start == 0)):
    os.kill(os.getpid(), signal.SIGKILL)
if mode == "hang-once" and start == 0:
    pathlib.Path(job["heartbeat"]).touch()  # training began; no batch ever ends
    if me == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # deaf to SIGTERM: SIGKILL after the grace
    time.sleep(60)
if mode == "bad-input":
    if me == 1:
        sys.exit(print("kformer: error: --batch-size 33 must divide by the 2 devices", file=sys.stderr) or 2)
    time.sleep(60)
"""


@pytest.fixture
def stand_in(monkeypatch, tmp_path):
    """``run(mode, max_restarts=3, heartbeat_timeout=30) -> (exit status, launcher's stderr, starts)``:
    the launcher on two stand-in processes; ``starts`` maps ``(start, process)`` to what it got."""
    monkeypatch.setattr(launcher, "PROGRAM", ("-c", STAND_IN))
    monkeypatch.setattr(launcher, "STOP_GRACE_S", 1.0)
    monkeypatch.setattr(launcher, "POLL_S", 0.05)

    def run(mode: str, **settings):
        err = io.StringIO()
        code = launcher.launch([mode, str(tmp_path)], 2, LaunchConfig(**settings), err=err)
        starts = {}
        for path in tmp_path.glob("start*-process*.json"):
            start, process = path.stem[len("start"):].split("-process")
            starts[int(start), int(process)] = json.loads(path.read_text())
        return code, err.getvalue(), starts

    return run


def test_a_killed_process_restarts_the_group_with_resume_auto(stand_in):
    code, err, starts = stand_in("die-once", max_restarts=2)
    assert code == 0 and sorted(starts) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert "kformer: restart 1 of at most 2: process 1 was killed by SIGKILL after" in err
    first, second = starts[0, 0]["argv"], starts[1, 0]["argv"]
    assert first[:2] == second[:2] and "--resume" not in first
    assert second[2:4] == ["--resume", "auto"] and second[-1] == "0" and second[-4] == "--coordinator"
    restart = starts[1, 1]["job"]["restarts"]
    assert [(r["restart"], r["process"], r["cause"]) for r in restart] == [(1, 1, "was killed by SIGKILL")]
    assert starts[1, 1]["job"]["command"] == ["kformer", "die-once", starts[1, 1]["argv"][1]]


def test_a_hung_process_is_lost_when_its_heartbeat_stops_and_one_deaf_to_sigterm_is_killed(stand_in):
    began = time.monotonic()
    code, err, starts = stand_in("hang-once", heartbeat_timeout=0.5)
    assert code == 0 and (1, 0) in starts and (1, 1) in starts
    assert re.search(r"restart 1 of at most 3: process [01] finished no batch for \d+ s \(hung; "
                     r"--heartbeat-timeout 0\.5\)", err), err
    assert time.monotonic() - began < 30  # not the stand-ins' 60 s sleep: both were stopped


def test_the_launcher_gives_up_after_max_restarts_with_one_line(stand_in):
    code, err, starts = stand_in("die-always", max_restarts=1)
    assert code == 1 and sorted(starts) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    last = err.strip().splitlines()[-1]
    assert last.startswith("kformer: error: process 1 was killed by SIGKILL; no restart left (--max-restarts 1)")
    assert "--resume auto" in last


def test_bad_input_in_a_worker_is_not_restarted_and_its_error_is_said(stand_in):
    code, err, starts = stand_in("bad-input")
    assert code == 2 and sorted(starts) == [(0, 0), (0, 1)]
    assert err.strip() == "kformer: error: --batch-size 33 must divide by the 2 devices"


@pytest.mark.parametrize(("flags", "said"), [
    (["--distribute", "--num-processes", "2", "--max-restarts", "-1"], "--max-restarts must be a whole number of at least 0"),
    (["--distribute", "--num-processes", "2", "--heartbeat-timeout", "0"], "--heartbeat-timeout must be a number"),
    (["--max-restarts", "2"], "--max-restarts is for a job this command starts on this machine"),
    (["--distribute", "--coordinator", "127.0.0.1:7777", "--num-processes", "2", "--process-id", "0",
      "--max-restarts", "2"], "on a cluster its orchestrator restarts the job"),
])
def test_bad_launcher_settings_are_one_line_before_anything_starts(capsys, flags, said):
    assert main(["train", "classify", "--data", "tickets.csv", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err and "Traceback" not in err


def test_resume_auto_refuses_a_folder_of_another_task(tmp_path, capsys):
    folder = tmp_path / "tickets"
    (folder / "training").mkdir(parents=True)
    (folder / "kformer.json").write_text(json.dumps({"task": "classify", "format_version": 1}))
    assert main(["train", "arithmetic", "--out", str(folder), "--resume", "auto"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"kformer: error: {folder} holds a model or run of the classify task, not arithmetic; pass " \
                  "another folder as --out"
    assert sorted(p.name for p in folder.rglob("*")) == ["kformer.json", "training"]  # nothing written


def test_a_process_learns_its_part_from_the_launcher_and_faults_aim_at_one_process(monkeypatch, tmp_path):
    from kformer import faults

    job = {"process": 1, "heartbeat": str(tmp_path / "beat"), "restarts": [], "command": ["kformer", "x"]}
    assert current_process({launcher.ENV: json.dumps(job)}) == JobProcess(1, tmp_path / "beat", (), ("kformer", "x"))
    assert current_process({}) is None
    with pytest.raises(BadInput, match="KFORMER_JOB"):
        current_process({launcher.ENV: "{not json"})
    monkeypatch.setenv("KFORMER_FAULT", "batch-die:2:3@1,batch-pause:1:1@0")
    monkeypatch.setenv(launcher.ENV, json.dumps(job))
    assert faults.batch_die() == (2, 3) and faults.batch_pause() is None  # process 1's fault only
    monkeypatch.setenv(launcher.ENV, json.dumps({**job, "restarts": [{"restart": 1}]}))
    assert faults.batch_die() is None  # a restarted group runs clean
    monkeypatch.delenv(launcher.ENV)
    assert faults.batch_die() is None  # no launcher: no process to aim at


def test_every_launcher_setting_is_documented_with_its_default():
    import dataclasses

    guide = (ROOT / "docs" / "distributed.md").read_text(encoding="utf-8")
    for spec in dataclasses.fields(LaunchConfig):
        assert f"`{spec.metadata['flag']} {spec.metadata['metavar']}`" in guide, spec.name
        assert f"default {spec.default:g}" in guide, spec.name


# --- the Kubernetes manifest in docs/distributed.md ----------------------------------------------------


def manifests() -> list[dict]:
    """The objects of every ```yaml block of docs/distributed.md."""
    import yaml
    from test_docs import blocks

    found = []
    for block in blocks(ROOT / "docs" / "distributed.md"):
        if block.language == "yaml":
            found += [item for item in yaml.safe_load_all(block.code) if item]
    return found


def test_the_kubernetes_manifest_parses_and_runs_the_documented_command():
    from kformer.cli import build_parser

    kinds = {item["kind"]: item for item in manifests()}
    job, service = kinds["Job"], kinds["Service"]
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 2
    assert spec["backoffLimit"] >= 3 and pod["restartPolicy"] in ("Never", "OnFailure")
    assert service["spec"]["clusterIP"] == "None" and pod["subdomain"] == service["metadata"]["name"]
    (container,) = pod["containers"]
    env = {item["name"]: item for item in container["env"]}
    coordinator = env["KERAS_DISTRIBUTION_JOB_ADDRESSES"]["value"]
    assert coordinator == f"{job['metadata']['name']}-0.{service['metadata']['name']}:7777"
    assert int(env["KERAS_DISTRIBUTION_NUM_PROCESSES"]["value"]) == spec["completions"]
    index = env["KERAS_DISTRIBUTION_PROCESS_ID"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert index == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert {port["containerPort"] for port in container["ports"]} == {7777}
    command = [*container["command"], *container.get("args", [])]
    assert command[0] == "kformer" and command[1:3] == ["train", "classify"]
    args = build_parser().parse_args(command[1:])
    assert args.distribute and args.resume == "auto" and args.coordinator is None  # the job comes from env
    mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
    assert Path(args.out).parent.as_posix() in mounts and Path(args.data).parent.as_posix() in mounts


# --- a real job whose worker is killed halfway through a checkpoint --------------------------------------

TIMEOUT = 480  # seconds for the job on a loaded 2-core machine (a quiet one needs about a minute)
COMMAND = ["-m", "kformer", "train", "classify", "--data", "train.csv", "--valid", "valid.csv", "--epochs=3",
           "--batch-size=32", "--vocab-size=200", "--max-length=8", "--dim=16", "--heads=2", "--ff-dim=32",
           "--blocks=1", "--no-wide", "--quiet", "--distribute", "--num-processes", "2", "--resume", "auto",
           "--out", "job"]  # 96 training rows: 3 batches an epoch
WORKER = Path(".job.process-1")  # process 1's folder beside --out


def _epochs_done(folder: Path) -> int:
    try:
        return json.loads((folder / "training" / "checkpoint.json").read_text(encoding="utf-8"))["epochs_done"]
    except (OSError, ValueError, KeyError):
        return 0


def _kill_worker_mid_write(root: Path, job: subprocess.Popen) -> None:
    """Once process 0 has written its checkpoint of epoch 2 and process 1 holds its own half
    written (paused there), SIGKILL process 1 (its PID is in the lock of the folder it writes)."""
    deadline, log = time.monotonic() + TIMEOUT, root / "job.log"
    while not (_epochs_done(root / "job") == 2 and (root / WORKER / "training" / ".checkpoint.tmp.keras").is_file()):
        assert job.poll() is None, log.read_text(encoding="utf-8")[-3000:]
        assert time.monotonic() < deadline, log.read_text(encoding="utf-8")[-3000:]
        time.sleep(0.1)
    assert _epochs_done(root / WORKER) == 1
    os.kill(int((root / WORKER / "training" / ".lock").read_text().strip()), signal.SIGKILL)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """``(root, exit status)`` of the job of :data:`COMMAND` with ``checkpoint-pause:2@1``: process 1
    pauses halfway through writing its checkpoint of epoch 2 and is SIGKILLed there."""
    root = tmp_path_factory.mktemp("elastic")
    write_tickets(root / "train.csv", 96, seed=1)
    write_tickets(root / "valid.csv", 32, seed=2)
    with open(root / "job.log", "w", encoding="utf-8") as log:
        launched = subprocess.Popen([sys.executable, *COMMAND], cwd=root, stdout=log, stderr=log,
                                    env=_env(root / "jax-cache", KFORMER_FAULT="checkpoint-pause:2@1"))
    try:
        _kill_worker_mid_write(root, launched)
        code = launched.wait(timeout=TIMEOUT)
    finally:
        if launched.poll() is None:
            launched.kill()
            launched.wait()
    return root, code


@pytest.mark.slow
def test_a_job_whose_worker_is_killed_mid_checkpoint_completes_by_itself_from_the_newest_checkpoint(job):
    root, code = job
    output = (root / "job.log").read_text(encoding="utf-8")
    assert code == 0, output[-3000:]
    assert "kformer: restart 1 of at most 3: process 1 was killed by SIGKILL after" in output
    folder = root / "job"
    metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    assert [(r["restart"], r["process"], r["cause"]) for r in metrics["restarts"]] == [(1, 1, "was killed by SIGKILL")]
    assert metrics["command"] == ["kformer", *COMMAND[2:]]  # the user's, not a process's
    log = (folder / "training" / "train.log").read_text(encoding="utf-8")
    assert "restart 1 of at most 3: process 1 was killed by SIGKILL" in log
    # process 1's own checkpoint was epoch 1's (epoch 2's half written): it resumed from process 0's
    worker_log = (root / WORKER / "training" / "train.log").read_text(encoding="utf-8")
    assert "resumed from the checkpoint after epoch 2" in log and "resumed from the checkpoint after epoch 2" in worker_log
    history = (folder / "training" / "history.csv").read_text(encoding="utf-8")
    # epochs 1-2 as process 0 wrote them, epoch 3 after the restart: the same in both processes (lockstep)
    assert len(history.splitlines()) == 4 and (root / WORKER / "training" / "history.csv").read_text() == history
    assert metrics["epochs_run"] == 3 and 0 < metrics["valid"]["accuracy"] <= 1
    assert not [p for p in root.rglob("*") if ".tmp" in p.name]  # the half-written checkpoint is gone


def test_the_batch_die_fault_kills_after_its_batch(monkeypatch):
    from kformer import faults
    from kformer.training.callbacks import BatchFaults

    killed = []
    monkeypatch.setattr(faults, "die", lambda: killed.append(True))
    fault = BatchFaults(0.0, die_at=(2, 3))
    fault.on_epoch_begin(0)
    fault.on_train_batch_end(2)  # epoch 1, batch 3
    fault.on_epoch_begin(1)
    fault.on_train_batch_end(1)
    assert killed == []
    fault.on_train_batch_end(2)  # epoch 2, batch 3
    assert killed == [True]
