"""bench.elastic's method, on faked runs (no training): an untimed 1-epoch warm-up first, then the
killed run, then the uninterrupted one; the kill's batch drawn from the warm-up's steps per epoch;
time lost = killed wall - uninterrupted wall, with both runs' start-up beside it."""

import sys
import time
from pathlib import Path

from bench import baselines, elastic, harness

LAUNCH = time.mktime(time.strptime("2026-12-05 10:00:00", elastic.LOG_TIME))


def log(*lines: tuple[float, str]) -> str:
    return "".join(f"{time.strftime(elastic.LOG_TIME, time.localtime(LAUNCH + at))}  {text}\n" for at, text in lines)


def test_warm_up_first_then_killed_then_uninterrupted(monkeypatch, tmp_path):
    calls, printed = [], {}
    runs = {  # (wall s, train.log, checkpoint state, restarts)
        "warm-up": (90.0, log((60, "training started"), (80, "  epoch 1/1")), {"iterations": 58, "epochs_done": 1}, []),
        "killed": (70.0, log((15, "training started"), (35, "  epoch 1/3"), (50, "training started"),
                             (60, "  epoch 2/3"), (65, "  epoch 3/3")), {"iterations": 174, "epochs_done": 3},
                   [{"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(LAUNCH + 40))}]),
        "uninterrupted": (50.0, log((14, "training started"), (34, "  epoch 1/3"), (39, "  epoch 2/3"),
                                    (44, "  epoch 3/3")), {"iterations": 174, "epochs_done": 3}, []),
    }

    def fake_run(command, out: Path, fault, timeout):
        calls.append((out.name, command[command.index("--epochs") + 1], fault))
        seconds, text, state, restarts = runs[out.name]
        return {"seconds": seconds, "began": LAUNCH, "log": text, "state": state,
                "metrics": {"test": {"accuracy": 0.86}, **({"restarts": restarts} if restarts else {})}}

    monkeypatch.setattr(elastic, "_run", fake_run)
    monkeypatch.setattr(harness, "require_shared_data", lambda *parts: tmp_path)
    monkeypatch.setattr(baselines, "limited_copy", lambda path, limit, folder: Path(folder) / path.name)
    monkeypatch.setattr(harness, "record_or_print",
                        lambda title, rows, notes, record: printed.update(rows=rows, notes=notes, record=record))
    monkeypatch.setattr(sys, "argv", ["bench.elastic", "--no-record"])
    elastic.main()

    batch = calls[1][2].split(":")[2].split("@")[0]
    assert calls == [("warm-up", "1", None), ("killed", "3", f"batch-die:2:{batch}@1"), ("uninterrupted", "3", None)]
    clean, killed = printed["rows"]
    assert killed["run"] == f"killed after batch {batch} of 58 in epoch 2" and not printed["record"]
    assert (clean["start-up s"], killed["start-up s"]) == (14, 15)
    assert killed["time lost s"] == 70.0 - 50.0 and killed["restart start-up s"] == 10
    assert killed["allowance s"] == clean["allowance s"] == 34 and killed["time lost ÷ allowance"] == round(20 / 34, 3)
    assert "untimed 1-epoch warm-up" in printed["notes"] and "(it took 90 s, 60 s of it" in printed["notes"]
