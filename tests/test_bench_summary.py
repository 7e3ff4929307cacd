"""BENCHMARKS.md's summary as bench/summary.py renders it from runs and the headlines their scripts
declare (bench/headlines.py): one row per benchmark from its latest run, its target met or missed,
why kformer is below its baseline, superseded runs left out; on runs and headlines made here."""

import pytest

from bench import headlines, summary
from bench.headlines import Headline

SPEED = Headline("speed, serving and memory", "Step time", "step_s", kformer={"system": "^kformer$"},
                 baseline={"system": "^plain$"}, target="<= 1.1x baseline")
ACCURACY = Headline("classification", "Intents", "accuracy", kformer={"system": "^kformer"},
                    baseline={"system": "^TF-IDF"}, target=">= 0.9", why="trained from scratch")
DECLARED = {"bench.step": (SPEED,), "bench.intents": (ACCURACY,)}


def of(module: str) -> tuple[Headline, ...]:
    return DECLARED.get(module, ())


def run(module: str, title: str, rows: list[dict], date: str, **extra) -> dict:
    return {"title": title, "command": f"python -m {module}", "date": f"{date} 10:00 UTC",
            "machine": "x86_64, 2 CPUs", "rows": rows, "notes": "", **extra}


def intents(kformer: float, date: str, **extra) -> dict:
    return run("bench.intents", "Intents (issue 3)", [{"system": "TF-IDF + SVM", "accuracy": 0.91},
                                                     {"system": "kformer scratch", "accuracy": kformer}], date, **extra)


def steps(kformer: float, date: str) -> dict:
    return run("bench.step", "Step time: kformer vs plain", [{"system": "plain", "step_s": 0.40},
                                                              {"system": "kformer", "step_s": kformer}], date)


def row_of(table: str, name: str) -> list[str]:
    line = next(line for line in table.splitlines() if line.startswith(f"| {name} |"))
    return [cell.strip() for cell in line.strip("|").split(" | ")]


def test_one_row_per_benchmark_from_its_latest_run_superseded_runs_left_out():
    records = [intents(0.80, "2026-01-01"), intents(0.95, "2026-01-02"),
               intents(0.99, "2026-01-03", superseded="a bug in the split")]
    table = summary.summary_table(records, of)
    assert table.count("| Intents |") == 1
    assert row_of(table, "Intents")[2:] == ["95.00 % (kformer scratch)", "91.00 % (TF-IDF + SVM)", "≥ 90.00 %", "met",
                                            "", "2026-01-02"]
    assert table.index("### Classification") < table.index("| Intents |")


def test_targets_are_met_or_missed_as_the_numbers_say_in_either_direction():
    missed = summary.summary_table([intents(0.85, "2026-01-01"), steps(0.48, "2026-01-01")], of)
    assert row_of(missed, "Intents")[4:6] == ["≥ 90.00 %", "**missed**"]
    assert row_of(missed, "Step time")[4:6] == ["≤ 1.1× baseline", "**missed**"]  # 0.48 > 1.1 x 0.40
    met = summary.summary_table([steps(0.41, "2026-01-01")], of)
    assert row_of(met, "Step time")[4:6] == ["≤ 1.1× baseline", "met"]  # slower, but within its target
    assert SPEED.better_is_lower and not ACCURACY.better_is_lower
    with pytest.raises(ValueError, match="needs a baseline row"):
        Headline("arithmetic", "x", "m", kformer={"system": "k"}, target=">= baseline + 0.01")
    assert Headline("arithmetic", "x", "m", kformer={}, baseline={}, target=">= baseline + 0.01").met(0.905, 0.9) is False


def test_a_row_worse_than_its_baseline_says_why_or_that_no_reason_was_declared():
    table = summary.summary_table([intents(0.90, "2026-01-01"), steps(0.42, "2026-01-01")], of)
    assert row_of(table, "Intents")[5:7] == ["met", "trained from scratch"]
    assert row_of(table, "Step time")[6] == "*no reason declared in `bench/step.py`*"
    assert row_of(summary.summary_table([intents(0.93, "2026-01-01")], of), "Intents")[6] == ""


def test_runs_no_headline_covers_are_listed_and_a_baseline_rerun_updates_its_row():
    lesson_rerun = run("bench.intents", "Intents, baseline alone", [{"system": "TF-IDF + SVM", "accuracy": 0.92}],
                       "2026-01-05")
    other = run("bench.new_script", "Something new", [{"system": "x", "speed": 1}], "2026-01-04")
    table = summary.summary_table([intents(0.93, "2026-01-01"), other, lesson_rerun], of)
    assert row_of(table, "Intents")[3] == "92.00 % (TF-IDF + SVM)"
    assert row_of(table, "Intents")[7] == "2026-01-01 (baseline rerun 2026-01-05)"
    assert "### Runs without a declared headline" in table and "| `bench.new_script` | Something new |" in table


def test_superseded_and_earlier_runs_move_to_the_history_the_current_ones_stay():
    records = [intents(0.80, "2026-01-01"), intents(0.95, "2026-01-02"),
               intents(0.99, "2026-01-03", superseded="a bug in the split")]
    sections = "".join(f"## {r['title']}\n\n{summary.header_line(r)}\n\nrun {i}\n\n" for i, r in enumerate(records))
    benchmarks, history = summary.render(summary.BENCHMARKS_HEAD + sections, "", records, of)
    assert "run 1" in benchmarks and "run 0" not in benchmarks and "run 2" not in benchmarks
    assert history.index("run 0") < history.index("run 2")
    assert summary.render(benchmarks, history, records, of) == (benchmarks, history)  # regenerating changes nothing


def test_a_scripts_headlines_are_read_without_importing_it(tmp_path):
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "fake.py").write_text(
        "import module_that_does_not_exist\nfrom bench.headlines import Headline\n\n"
        "HEADLINES = (\n    Headline('translation', 'Fake', 'bleu', kformer={'system': 'k'}, target='>= 30'),\n)\n",
        encoding="utf-8")
    found = headlines.declared("bench.fake", tmp_path)
    assert found == (Headline("translation", "Fake", "bleu", kformer={"system": "k"}, target=">= 30"),)
    assert headlines.declared("bench.absent", tmp_path) == ()
    assert headlines.module_of("python bench/large_file.py --size-mb 16") == "bench.large_file"
