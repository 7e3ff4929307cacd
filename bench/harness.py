"""Side-by-side benchmark harness: run a baseline and kformer in one run, report medians and ratios.

These machines are noisy, so an absolute number means little; what a benchmark reports is the
ratio of kformer to the baseline measured in the same process tree, minutes apart.

    from bench.harness import Timer, median_of, record_results
    with Timer() as timer:
        train()
    record_results("IMDB", rows=[{"system": "TF-IDF+LR", "accuracy": 0.906}, {...}],
                   baseline="TF-IDF+LR", ratio_keys=["accuracy"])

``record_results`` prints the table and appends it to BENCHMARKS.md with the exact command,
the date, the machine and the library versions; it also appends the run as one JSON object to
``bench/results.jsonl`` and regenerates BENCHMARKS.md's summary from that file
(``bench/summary.py``, from the headlines each script declares: ``bench/headlines.py``).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS_FILE = ROOT / "BENCHMARKS.md"
RESULTS_FILE = ROOT / "bench" / "results.jsonl"
HISTORY_FILE = ROOT / "docs" / "benchmarks-history.md"
SHARED_DATA = ROOT.parent / "shared" / "data"


class Timer:
    """``with Timer() as t: ...`` then ``t.seconds`` (wall clock, perf_counter)."""

    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self.start


def median_of(measure: Callable[[], float], repeats: int = 3) -> tuple[float, list[float]]:
    """Call ``measure`` ``repeats`` times; return ``(median, all values)``."""
    values = [float(measure()) for _ in range(repeats)]
    return statistics.median(values), values


def interleaved_medians(measures: dict[str, Callable[[], float]], repeats: int = 3) -> dict[str, list[float]]:
    """Run each named measure ``repeats`` times, alternating between them (A B A B ...), so a slow
    minute on a shared machine hurts every system alike. Returns all values by name."""
    values: dict[str, list[float]] = {name: [] for name in measures}
    for _ in range(repeats):
        for name, measure in measures.items():
            values[name].append(float(measure()))
    return values


def require_shared_data(*relative: str) -> Path:
    """The path under ../shared/data, or exit with a one-line message when it is absent."""
    path = SHARED_DATA.joinpath(*relative)
    if not path.exists():
        sys.exit(f"benchmark data not found: {path} (see ../shared/data/README.md)")
    return path


def machine_summary() -> str:
    import keras

    versions = [f"keras {keras.__version__}", f"backend {keras.backend.backend()}"]
    try:
        import tensorflow as tf

        versions.append(f"tensorflow {tf.__version__}")
    except ImportError:
        pass
    return (f"{platform.machine()}, {os.cpu_count()} CPUs ({cpu_summary()}), Python {platform.python_version()}, "
            + ", ".join(versions))


# Vector units that decide what a 2-core CPU computes per second (bfloat16 pays only with the last three)
CPU_FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16")


def cpu_summary(cpuinfo: str | None = None) -> str:
    """The CPU's model name and which of :data:`CPU_FEATURES` it has, from ``/proc/cpuinfo``
    (benchmarks recorded on different machines differ by these, not by the core count)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return platform.processor() or "CPU unknown"
    fields = dict(line.split(":", 1) for line in cpuinfo.splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    flags = set(fields.get("flags", "").split())
    units = [name for name in CPU_FEATURES if name in flags]
    return f"{fields.get('model name', 'CPU unknown')}; {' '.join(units) or 'no AVX2'}"


def _format(value) -> str:
    if isinstance(value, float):
        if value == 0 or abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 1:
            return f"{value:.2f}"
        return f"{value:.4f}"
    return str(value)


def results_table(rows: Sequence[dict], baseline: str | None = None, ratio_keys: Sequence[str] = ()) -> str:
    """A markdown table of ``rows`` (dicts with a ``system`` key); for each of ``ratio_keys`` a
    column ``key ÷ baseline`` dividing each row's value by the baseline row's."""
    rows = [dict(row) for row in rows]
    base = next((row for row in rows if row.get("system") == baseline), None) if baseline else None
    if base is not None:
        for key in ratio_keys:
            for row in rows:
                if isinstance(row.get(key), int | float) and base.get(key):
                    row[f"{key} ÷ baseline"] = f"{row[key] / base[key]:.2f}×"
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_format(row.get(key, "")) for key in columns) + " |" for row in rows]
    return "\n".join(lines)


def record_results(
    title: str,
    rows: Sequence[dict],
    notes: str = "",
    baseline: str | None = None,
    ratio_keys: Sequence[str] = (),
    command: str | None = None,
) -> str:
    """Print the results table and append it, with the command that made it, to BENCHMARKS.md;
    append the run to ``bench/results.jsonl`` and regenerate BENCHMARKS.md's summary from it."""
    from bench import headlines, summary

    command = command or "python -m " + shlex.join([_module_name(), *sys.argv[1:]])
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = machine_summary()
    section = [
        f"## {title}",
        "",
        f"`{command}` — {stamp}; {machine}",
        "",
        results_table(rows, baseline, ratio_keys),
        "",
    ]
    if notes:
        section += [notes.strip(), ""]
    text = "\n".join(section) + "\n"
    print(text)
    if not BENCHMARKS_FILE.exists():
        BENCHMARKS_FILE.write_text(summary.BENCHMARKS_HEAD, encoding="utf-8")
    with BENCHMARKS_FILE.open("a", encoding="utf-8") as handle:
        handle.write("\n" + text)
    if baseline is None:  # the baseline row the script's declared headline picks
        baseline = headlines.baseline_label(title, command, rows)
    record = {
        "title": title, "command": command, "date": stamp, "machine": machine, "cpu": cpu_summary(),
        "rows": [dict(row) for row in rows], "baseline": baseline, "ratio_keys": list(ratio_keys),
        "notes": notes.strip(),
    }
    RESULTS_FILE.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS_FILE.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, ensure_ascii=False, default=_json_value) + "\n")
    if headlines.undeclared([record]):
        print(f"{headlines.module_of(command)} declares no headline for {title!r}: add one to its HEADLINES "
              "(see bench/headlines.py)")
    summary.update(BENCHMARKS_FILE, HISTORY_FILE, RESULTS_FILE)
    return text


def _json_value(value):
    """numpy scalars and paths in a row, as JSON."""
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def record_or_print(title: str, rows: Sequence[dict], notes: str = "", *, record: bool = True) -> str:
    """:func:`record_results`, or with ``record=False`` (a script's ``--no-record``) only print the
    table and notes."""
    if record:
        return record_results(title, rows, notes)
    text = results_table(rows) + "\n\n" + notes
    print(text)
    return text


def read_rows(path: Path | None) -> list[dict]:
    """The rows a ``--rows`` JSONL file holds (none when it is not given or not there yet)."""
    if path is None or not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def append_rows(path: Path | None, rows: Sequence[dict]) -> None:
    """Append finished runs' rows to a ``--rows`` JSONL file, so that a stopped run loses nothing."""
    if path is not None:
        with path.open("a", encoding="utf-8") as handle:
            handle.writelines(json.dumps(row, default=_json_value) + "\n" for row in rows)


def add_rule_check_args(parser, group_flag: str, groups: Sequence[str], alternatives: Sequence[str],
                        minutes: float) -> None:
    """The flags every rule check shares (``bench.auto_rules``, ``bench.translate_rules``): which
    ``groups`` (data sets or corpora) and ``alternatives``, the seeds, the budget, and the ``--rows``
    file that lets several runs make one table."""
    parser.add_argument(f"--{group_flag}", default=",".join(groups), help=f"comma-separated, of {', '.join(groups)}")
    parser.add_argument("--alternatives", default=",".join(alternatives),
                        help=f"comma-separated, of {', '.join(alternatives)}")
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1 (or --seed-list)")
    parser.add_argument("--seed-list", default=None, help="comma-separated seeds, instead of --seeds")
    parser.add_argument("--minutes", type=float, default=minutes, help="max_minutes of every run")
    parser.add_argument("--rows", type=Path, default=None, metavar="JSONL",
                        help="append each run's row to this file; rows already in it join the table (several runs, "
                        "e.g. more seeds for some alternatives, make one table; an auto run already there is not "
                        "repeated)")
    parser.add_argument("--table-only", action="store_true",
                        help="train nothing: make the table of the rows already in --rows (runs made separately)")
    parser.add_argument("--note", default="", help="a sentence added to the table's notes (e.g. the runs it joins)")
    parser.add_argument("--no-record", action="store_true", help="print the table, do not append to BENCHMARKS.md")


def rule_check_plan(parser, args, group_flag: str, groups: Sequence[str],
                    alternatives: Sequence[str]) -> tuple[list[str], list[str], list[int]]:
    """``(groups, alternatives, seeds)`` that :func:`add_rule_check_args`' flags ask for (no groups
    and no seeds with ``--table-only``); an unknown name is the parser's one-line error."""
    chosen = [] if args.table_only else [n.strip() for n in getattr(args, group_flag).split(",") if n.strip()]
    picked = [a.strip() for a in args.alternatives.split(",") if a.strip()]
    unknown = sorted((set(chosen) - set(groups)) | (set(picked) - set(alternatives)))
    if unknown:
        parser.error(f"unknown {group_flag} or alternatives: {', '.join(unknown)}")
    if args.table_only:
        return chosen, picked, []
    seeds = [int(s) for s in args.seed_list.split(",")] if args.seed_list else list(range(args.seeds))
    return chosen, picked, seeds


def seed_groups(rows: Sequence[dict], group: str, reference: str, metric: str):
    """For each value of ``group`` and each ``system`` (first-seen order): ``(value, system, its
    rows, per-seed difference of ``metric`` from the ``reference`` system's row of the same seed)``.
    How every multi-seed table compares its rows."""
    for value in dict.fromkeys(row[group] for row in rows):
        of = [row for row in rows if row[group] == value]
        base = {row["seed"]: row[metric] for row in of if row["system"] == reference}
        for system in dict.fromkeys(row["system"] for row in of):
            runs = [row for row in of if row["system"] == system]
            yield value, system, runs, [row[metric] - base[row["seed"]] for row in runs]


def sd(values: Sequence[float]) -> float:
    """The sample standard deviation, 0 for fewer than two values."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def mark_best_alternative(table: list[dict], metric: str) -> list[dict]:
    """``table`` (rows with ``role`` "auto" or "alternative", of one group) with the alternative of
    the highest ``metric`` (its paired difference from auto, so that alternatives run on fewer
    seeds compare fairly) marked "best alternative": a rule bench's strongest challenger, which
    the summary sets beside auto whichever it is."""
    alternatives = [row for row in table if row["role"] == "alternative"]
    if alternatives:
        max(alternatives, key=lambda row: row[metric])["role"] = "best alternative"
    return table


def _module_name() -> str:
    main = Path(sys.argv[0]).resolve()
    try:
        return ".".join(main.relative_to(ROOT).with_suffix("").parts)
    except ValueError:
        return str(main)
