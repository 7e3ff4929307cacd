"""The benchmark harness: the CPU a table was measured on, the JSON line each run adds to
bench/results.jsonl, and BENCHMARKS.md's summary generated from that file."""

import json

import pytest

from bench import harness, headlines, summary
from bench.harness import cpu_summary

CPUINFO = """processor\t: 0
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw avx512_vnni avx512_bf16
processor\t: 1
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw avx512_vnni avx512_bf16
"""


def test_cpu_summary_names_the_model_and_the_vector_units_that_matter():
    assert cpu_summary(CPUINFO) == "AMD EPYC 9R14; avx2 avx512f avx512_vnni avx512_bf16"
    assert cpu_summary("model name : Old Xeon\nflags : sse2 avx avx2\n") == "Old Xeon; avx2"
    assert cpu_summary("flags : sse2\n") == "CPU unknown; no AVX2"


# --- record_results: the markdown section, the JSON line, the summary ---------------------------------------------

@pytest.fixture
def bench_files(tmp_path, monkeypatch):
    """record_results writing into tmp_path, on a machine with a fixed description."""
    files = {"benchmarks": tmp_path / "BENCHMARKS.md", "results": tmp_path / "bench" / "results.jsonl",
             "history": tmp_path / "docs" / "benchmarks-history.md"}
    monkeypatch.setattr(harness, "BENCHMARKS_FILE", files["benchmarks"])
    monkeypatch.setattr(harness, "RESULTS_FILE", files["results"])
    monkeypatch.setattr(harness, "HISTORY_FILE", files["history"])
    monkeypatch.setattr(harness, "machine_summary", lambda: "x86_64, 2 CPUs (Test CPU; avx2), Python 3.11")
    monkeypatch.setattr(harness, "cpu_summary", lambda: "Test CPU; avx2")
    return files


def _imdb_rows(accuracy: float) -> list[dict]:
    return [{"system": "TF-IDF 1-2 grams + LR", "accuracy": 0.9068, "train_s": 15.0},
            {"system": "kformer `imdb` recipe", "accuracy": accuracy, "train_s": 120.0, "epochs": 1}]


def test_record_results_appends_one_json_object_per_run_and_regenerates_the_summary(bench_files):
    first = harness.record_results("IMDB sentiment (issue 3)", _imdb_rows(0.8862), notes="First run.",
                                   baseline="TF-IDF 1-2 grams + LR", ratio_keys=["accuracy"],
                                   command="python -m bench.imdb")
    records = [json.loads(line) for line in bench_files["results"].read_text(encoding="utf-8").splitlines()]
    assert len(records) == 1
    record = records[0]
    assert record["title"] == "IMDB sentiment (issue 3)" and record["command"] == "python -m bench.imdb"
    assert record["machine"] == "x86_64, 2 CPUs (Test CPU; avx2), Python 3.11" and record["cpu"] == "Test CPU; avx2"
    assert record["rows"] == _imdb_rows(0.8862) and record["baseline"] == "TF-IDF 1-2 grams + LR"
    assert record["ratio_keys"] == ["accuracy"] and record["notes"] == "First run."
    assert summary.header_line(record) in first  # the markdown section names the same run

    text = bench_files["benchmarks"].read_text(encoding="utf-8")
    assert text.startswith("# Benchmarks\n") and summary.START in text and first.strip() in text
    # bench/imdb.py's declared headline: its kformer and baseline rows, its target
    assert "| IMDB sentiment, `imdb` recipe in the lesson's time | accuracy | 88.62 % (kformer `imdb` recipe) " \
           "| 90.68 % (TF-IDF 1-2 grams + LR) | ≥ 89.00 % | **missed** |" in text

    # A second run of the same benchmark: the summary shows it, the first run's section moves to the history.
    harness.record_results("IMDB sentiment (issue 3)", _imdb_rows(0.9124), baseline="TF-IDF 1-2 grams + LR",
                           command="python -m bench.imdb")
    # ... and a run of another benchmark (a different --recipe) stays beside it.
    best = [*_imdb_rows(0.9135)[:1], {"system": "kformer `imdb-best` recipe", "accuracy": 0.9135}]
    harness.record_results("IMDB sentiment (issue 3)", best, command="python -m bench.imdb --recipe imdb-best --minutes 15")
    assert len(bench_files["results"].read_text(encoding="utf-8").splitlines()) == 3
    text = bench_files["benchmarks"].read_text(encoding="utf-8")
    assert "91.24 % (kformer `imdb` recipe)" in text and "88.62 %" not in text
    assert "| IMDB sentiment, `imdb-best` recipe, 15 minutes | accuracy | 91.35 %" in text
    assert json.loads(bench_files["results"].read_text(encoding="utf-8").splitlines()[-1])["baseline"] == \
        "TF-IDF 1-2 grams + LR"  # none given: the declared headline's baseline row
    assert text.count("\n## IMDB sentiment (issue 3)\n") == 2 and "First run." not in text
    history = bench_files["history"].read_text(encoding="utf-8")
    assert history.startswith("# Benchmark history\n") and "First run." in history and "0.8862" in history


# --- BENCHMARKS.md is what bench.summary generates from bench/results.jsonl ---------------------------------------


def test_benchmarks_md_is_the_generated_summary_then_the_latest_section_of_each_benchmark():
    records = summary.read_results(summary.RESULTS_FILE)
    current = summary.BENCHMARKS_FILE.read_text(encoding="utf-8")
    history = summary.HISTORY_FILE.read_text(encoding="utf-8")
    new_benchmarks, new_history = summary.render(current, history, records)
    assert new_benchmarks == current, "BENCHMARKS.md is stale: run `python -m bench.summary`"
    assert new_history == history, "docs/benchmarks-history.md is stale: run `python -m bench.summary`"
    # every section (here or in the history) is one recorded run, and every recorded run has its section
    sections = summary.split_sections(summary.without_summary(current))[1] + summary.split_sections(history)[1]
    headers = sorted(summary.section_header(section) or section[:60] for section in sections)
    assert headers == sorted(summary.header_line(record) for record in records)


def test_every_current_run_has_a_declared_headline_and_every_recording_script_declares_some():
    records = summary.read_results(summary.RESULTS_FILE)
    assert headlines.undeclared(records) == {}
    assert all(result.kformer for result in headlines.current(records))
    scripts = {f"bench.{path.stem}" for path in summary.ROOT.joinpath("bench").glob("*.py")
               if "record_results(" in path.read_text(encoding="utf-8")
               or "record_or_print(" in path.read_text(encoding="utf-8")}
    scripts -= {"bench.harness", "bench.baselines"}  # the harness itself; baselines.py reports for imdb/banking77/tickets
    assert [script for script in sorted(scripts) if not headlines.declared(script)] == []


def test_seed_tables_compare_each_row_with_the_reference_of_its_own_seed():
    rows = [{"set": "a", "seed": seed, "system": system, "score": score}
            for seed, offset in ((0, 0.0), (1, 0.1)) for system, score in (("auto", 0.5 + offset), ("x", 0.6 + offset))]
    groups = list(harness.seed_groups(rows, "set", "auto", "score"))
    assert [(value, system, len(runs)) for value, system, runs, _ in groups] == [("a", "auto", 2), ("a", "x", 2)]
    assert groups[1][3] == pytest.approx([0.1, 0.1])  # seed by seed, not against the mean
    assert harness.sd([1.0]) == 0.0 and harness.sd([1.0, 3.0]) == pytest.approx(2 ** 0.5)
    table = [{"role": "auto", "m": 9}, {"role": "alternative", "m": 1}, {"role": "alternative", "m": 3}]
    assert [row["role"] for row in harness.mark_best_alternative(table, "m")] == ["auto", "alternative",
                                                                                   "best alternative"]
