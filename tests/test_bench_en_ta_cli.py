"""bench/en_ta_cli.py's --recorded: the mean of seeds scored one by one, read from the runs that
scored each folder alone (on a results file made here)."""

import json

import pytest

from bench import en_ta_cli


def scored(folders: list[str], rows: list[dict], title: str = en_ta_cli.TITLE) -> dict:
    command = "python -m bench.en_ta_cli --folder " + " ".join(folders) + " --wall-seconds " + " ".join(["1500"] * len(folders))
    return {"title": title, "command": command, "rows": rows}


def row(system: str, chrf: float) -> dict:
    return {"system": system, "seed": 0, "epochs": 5, "wall_s": 1500.0, "tico_chrf": chrf, "tico_bleu": 1.0,
            "ipc_chrf": chrf, "ipc_bleu": 2.0}


def test_recorded_rows_are_the_latest_run_that_scored_the_folder_alone(tmp_path):
    a, b = tmp_path / "seed0", tmp_path / "seed1"
    memory = row("memory", 8.0)
    runs = [scored([str(a)], [row("kformer greedy + kNN-MT", 24.0), memory]),
            scored([str(a), str(b)], [row("kformer greedy + kNN-MT, mean of 2 seeds", 99.0)]),  # not alone
            scored([str(b)], [row("kformer greedy + kNN-MT", 25.0), memory]),
            scored([str(a)], [row("kformer greedy + kNN-MT", 26.0), memory]),  # a rescore: the latest counts
            {"title": "another benchmark", "command": f"python -m bench.x --folder {a}", "rows": [row("kformer", 0.0)]}]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in runs), encoding="utf-8")
    assert en_ta_cli.recorded_rows(a, results) == [row("kformer greedy + kNN-MT", 26.0)]  # the baselines left out
    assert en_ta_cli.recorded_rows(b, results) == [row("kformer greedy + kNN-MT", 25.0)]
    means = en_ta_cli.seeds_rows([en_ta_cli.recorded_rows(f, results) for f in (a, b)])
    assert means[0]["system"] == "kformer greedy + kNN-MT, mean of 2 seeds"
    assert means[0]["tico_chrf"] == pytest.approx(25.5)
    with pytest.raises(SystemExit, match="no run of bench.en_ta_cli scored"):
        en_ta_cli.recorded_rows(tmp_path / "never", results)
