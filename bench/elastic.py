"""Elastic restarts: a two-process job with one process SIGKILLed at a random batch of epoch 2.

    flock /tmp/kformer-bench.lock python -m bench.elastic                  # tickets recipe, 4,096 tickets, 3 epochs
    python -m bench.elastic --smoke                                        # 400 tickets, a tiny model, not recorded

The job: `kformer train classify --recipe tickets --distribute --num-processes 2 --resume auto`
(the launcher, :mod:`kformer.launcher`), with the same seed in every run. Three runs, one after the
other, each into its own folder:

1. warm-up, not timed or compared: the same command for 1 epoch, which pays the first job's cold
   start (libraries not yet in the page cache, caches filled on first use). In the first
   recording (2026-12-04) there was none: the uninterrupted run went first and took 196 s from
   launch to its first step against 17 s for the killed run's restart, which made the time lost
   -72 s, not a measurement. The warm-up also gives the steps per epoch, from which the kill's
   batch is drawn.
2. killed: process 1 SIGKILLed after a batch of epoch 2 drawn at random from ``--seed``
   (``KFORMER_FAULT=batch-die:2:<batch>@1``: the kill lands on that batch however loaded the
   machine is). The launcher notices, stops process 0 and starts both again from the checkpoint of
   epoch 1; nobody touches the job.
3. uninterrupted.

The killed run goes first so that whatever warming the warm-up left undone counts against it:
the time lost errs high, not low. Each timed run's start-up -- from its launch to its first step
(train.log's first "training started", written as the first step starts compiling) -- is reported
beside the time lost, so that two starts that differ show.

Reported for each run: held-out (test split) accuracy, wall seconds from the command's start to
its end, restarts and the start-up. For the killed run, the time lost = its wall time minus the
uninterrupted run's, against the allowance of one epoch plus a restart, measured on the
uninterrupted run: from its launch to the end of its first epoch (train.log), i.e. its start-up,
the compilation of every batch shape (a restarted process compiles them again) and one epoch.
Also measured in the killed run: the restart's start-up (from the launcher's restart, as
``metrics.json["restarts"]`` dates it, to the second "training started"). train.log dates its
lines to the second. Targets: the killed job completes by itself, its accuracy within noise of
the uninterrupted run's (the same, in fact: training on CPU is deterministic and a resumed run
repeats the lost batches exactly), time lost <= the allowance.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.headlines import Headline

# This benchmark's rows in BENCHMARKS.md's summary (bench/headlines.py says how they are read)
HEADLINES = (
    Headline("speed, serving and memory", "Elastic restarts", "time lost ÷ allowance",
             name="Elastic restarts: time a killed process costs ÷ (one epoch + restart)",
             kformer={"run": "^killed"}, target="<= 1"),
    Headline("speed, serving and memory", "Elastic restarts", "test accuracy",
             name="Elastic restarts: accuracy after a kill vs uninterrupted",
             kformer={"run": "^killed"}, baseline={"run": "^uninterrupted"}),
)
TITLE = "Elastic restarts (issue 36): a 2-process job, one process SIGKILLed in epoch 2"
TINY = ["--vocab-size", "300", "--max-length", "32", "--dim", "32", "--heads", "2", "--ff-dim", "64", "--blocks", "1",
        "--batch-size", "32", "--no-wide"]
LOG_TIME = "%Y-%m-%d %H:%M:%S"  # kformer.training.progress.append_log's


def _command(args: argparse.Namespace, train: Path, test: Path, epochs: int | None = None) -> list[str]:
    """The job's ``kformer`` arguments (``--out`` comes per run), for ``epochs`` (default ``--epochs``)."""
    epochs = args.epochs if epochs is None else epochs
    command = ["train", "classify", "--data", str(train), "--test", str(test), "--recipe", "tickets",
               "--epochs", str(epochs), "--patience", str(epochs), "--max-minutes", "120",
               "--seed", str(args.seed), "--quiet", "--distribute", "--num-processes", "2", "--resume", "auto"]
    return [*command, *(TINY if args.tiny else [])]


def _run(command: list[str], out: Path, fault: str | None, timeout: float) -> dict:
    """One job; ``seconds`` (wall), ``began`` (epoch time), its ``metrics``, ``log`` and checkpoint ``state``."""
    env = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "XLA_FLAGS", "KFORMER_FAULT")}
    if fault:
        env["KFORMER_FAULT"] = fault
    began, start = time.time(), time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kformer", *command, "--out", str(out)], env=env, text=True,
                          capture_output=True, timeout=timeout)  # on a timeout the launcher dies, and its processes with it
    seconds = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"the job ({fault or 'uninterrupted'}) failed with status {done.returncode}: {done.stderr[-2000:]}")
    training = out / "training"
    return {"seconds": seconds, "began": began, "metrics": json.loads((out / "metrics.json").read_text()),
            "log": (training / "train.log").read_text(encoding="utf-8"),
            "state": json.loads((training / "checkpoint.json").read_text())}


def _times(log: str, text: str) -> list[float]:
    """Epoch times of the train.log lines that contain ``text``."""
    return [time.mktime(time.strptime(line[:19], LOG_TIME)) for line in log.splitlines() if text in line]


def start_up(run: dict) -> float:
    """Seconds from a run's launch to its first step (its train.log's first "training started")."""
    return _times(run["log"], "training started")[0] - run["began"]


def _rows(clean: dict, killed: dict, batch: int, steps: int) -> list[dict]:
    """The two timed runs' rows. Time lost = the killed run's wall time - the uninterrupted run's.
    Allowance = the uninterrupted run's launch to the end of its first epoch: start-up, compiling
    every batch shape, and one epoch -- what a restart costs beside the lost part of the epoch
    that was running."""
    started, ends = _times(clean["log"], "training started")[0], _times(clean["log"], "  epoch ")
    allowance = ends[0] - clean["began"]
    later = [b - a for a, b in zip(ends[:-1], ends[1:], strict=True)]
    restarted = datetime.strptime(killed["metrics"]["restarts"][0]["at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    restart = _times(killed["log"], "training started")[-1] - restarted.timestamp()
    lost = killed["seconds"] - clean["seconds"]
    return [{"run": "uninterrupted", "test accuracy": clean["metrics"]["test"]["accuracy"],
             "wall s": round(clean["seconds"], 1), "restarts": 0, "start-up s": round(started - clean["began"], 1),
             "epoch 1 s": round(ends[0] - started, 1),
             "later epochs s": round(sum(later) / len(later), 1) if later else "", "allowance s": round(allowance, 1)},
            {"run": f"killed after batch {batch} of {steps} in epoch 2", "test accuracy": killed["metrics"]["test"]["accuracy"],
             "wall s": round(killed["seconds"], 1), "restarts": len(killed["metrics"].get("restarts", [])),
             "start-up s": round(start_up(killed), 1), "restart start-up s": round(restart, 1),
             "time lost s": round(lost, 1), "allowance s": round(allowance, 1),
             "time lost ÷ allowance": round(lost / allowance, 3)}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096, help="training tickets (taken from each queue in turn)")
    parser.add_argument("--test-rows", type=int, default=2000, help="test tickets scored after training")
    parser.add_argument("--epochs", type=int, default=3, help="epochs of each run (the kill is in epoch 2)")
    parser.add_argument("--seed", type=int, default=0, help="the runs' seed, and the kill's batch")
    parser.add_argument("--tiny", action="store_true", help="a tiny network instead of the recipe's (smoke runs)")
    parser.add_argument("--smoke", action="store_true", help="--rows 400 --test-rows 200 --tiny --no-record")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per run before it is stopped")
    parser.add_argument("--no-record", action="store_true", help="print only; do not append to BENCHMARKS.md")
    args = parser.parse_args()
    if args.smoke:
        args.rows, args.test_rows, args.tiny, args.no_record = 400, 200, True, True
    from bench.baselines import limited_copy
    from bench.harness import record_or_print, require_shared_data

    folder = require_shared_data("it-service-tickets")
    with tempfile.TemporaryDirectory(prefix="kformer-elastic-") as scratch:
        root = Path(scratch)
        (root / "train").mkdir()
        train = limited_copy(folder / "train.csv.gz", args.rows, root / "train")
        test = limited_copy(folder / "test.csv.gz", args.test_rows, root)
        command = _command(args, train, test)
        # not timed: pays the machine's cold start, so that both timed runs start warm (module docstring)
        warm = _run(_command(args, train, test, epochs=1), root / "warm-up", None, args.timeout)
        steps = warm["state"]["iterations"] // warm["state"]["epochs_done"]
        batch = random.Random(args.seed).randint(1, steps)
        killed = _run(command, root / "killed", f"batch-die:2:{batch}@1", args.timeout)  # first: errs high
        clean = _run(command, root / "uninterrupted", None, args.timeout)
    rows = _rows(clean, killed, batch, steps)
    shown = re.sub(r"/\S*kformer-elastic-\w+/", "", " ".join(command))
    notes = (f"`kformer {shown}` on 2 processes of this machine, {args.rows} training tickets ({args.test_rows} test), "
             f"seed {args.seed}. Order: an untimed 1-epoch warm-up of the same command (it took "
             f"{warm['seconds']:.0f} s, {start_up(warm):.0f} s of it from launch to its first step), then the killed "
             "run, then the uninterrupted one, so that both timed runs start warm. Killed: process 1 SIGKILLed itself "
             f"after batch {batch} of epoch 2 "
             f"(`KFORMER_FAULT=batch-die:2:{batch}@1`); the launcher stopped process 0 and restarted both from the "
             "checkpoint of epoch 1. Allowance (one epoch + a restart) = the uninterrupted run's launch to the end of its "
             "first epoch (train.log): start-up, compiling every batch shape, one epoch. Time lost = the killed run's "
             "wall time - the uninterrupted run's. Start-up = from a run's launch to its first step (train.log's first "
             "'training started'); restart start-up = from the restart (metrics.json) to the second 'training started'. "
             "Wall times include start-up, scoring and writing the model folder.")
    record_or_print(TITLE, rows, notes, record=not args.no_record)


if __name__ == "__main__":
    main()
